package packages

import (
	"bytes"
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/pkgmgr"
)

// fakeManager holds a set of installed packages; Install adds to it.
type fakeManager struct {
	installed map[string]bool
	installs  [][]string
	fail      error
}

func (f *fakeManager) Name() string { return "apt" }

func (f *fakeManager) Missing(ctx context.Context, pkgs []string) ([]string, error) {
	var out []string
	for _, p := range pkgs {
		if !f.installed[p] {
			out = append(out, p)
		}
	}
	return out, nil
}

func (f *fakeManager) Install(ctx context.Context, pkgs []string) error {
	f.installs = append(f.installs, pkgs)
	if f.fail != nil {
		return f.fail
	}
	for _, p := range pkgs {
		f.installed[p] = true
	}
	return nil
}

func newTestStep(t *testing.T, spec Spec, m *fakeManager) *Step {
	t.Helper()
	s, err := New("host-packages", spec)
	if err != nil {
		t.Fatal(err)
	}
	s.manager = func(*engine.Env) pkgmgr.Manager { return m }
	return s
}

func TestIntactAndRunInstallOnlyWhatIsMissing(t *testing.T) {
	m := &fakeManager{installed: map[string]bool{"git": true}}
	s := newTestStep(t, Spec{Apt: []string{"git", "python3-venv", "libnuma-dev"}}, m)
	var out bytes.Buffer
	env := engine.NewTestEnv(t.TempDir(), &out)
	ok, why, err := s.Intact(context.Background(), env)
	if err != nil || ok || why != "not installed: python3-venv, libnuma-dev" {
		t.Fatalf("Intact = %v, %q, %v", ok, why, err)
	}
	if err := s.Run(context.Background(), env); err != nil {
		t.Fatal(err)
	}
	if want := [][]string{{"python3-venv", "libnuma-dev"}}; !reflect.DeepEqual(m.installs, want) {
		t.Errorf("installs = %q, want %q", m.installs, want)
	}
	if ok, why, _ := s.Intact(context.Background(), env); !ok {
		t.Errorf("not intact after the run: %s", why)
	}
	// A second run installs nothing.
	if err := s.Run(context.Background(), env); err != nil || len(m.installs) != 1 {
		t.Errorf("second run: %v, installs %q", err, m.installs)
	}
}

func TestRunUnderRootInstallsNothing(t *testing.T) {
	m := &fakeManager{installed: map[string]bool{}}
	s := newTestStep(t, Spec{Apt: []string{"hello"}}, m)
	var out bytes.Buffer
	env := engine.NewTestEnv(t.TempDir(), &out)
	env.Offline = true
	if err := s.Run(context.Background(), env); err != nil {
		t.Fatal(err)
	}
	if len(m.installs) != 0 {
		t.Errorf("installed under --root: %q", m.installs)
	}
	if !strings.Contains(out.String(), "under --root: would install with apt; installing nothing") {
		t.Errorf("log: %s", out.String())
	}
}

func TestRunFailsWithTheManagersError(t *testing.T) {
	m := &fakeManager{installed: map[string]bool{}, fail: &pkgmgr.UnknownError{Manager: "apt", Packages: []string{"no-such"}}}
	s := newTestStep(t, Spec{Apt: []string{"no-such"}}, m)
	err := s.Run(context.Background(), engine.NewTestEnv(t.TempDir(), nil))
	var ue *pkgmgr.UnknownError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "no-such") {
		t.Errorf("err = %v", err)
	}
}

func TestNewRejects(t *testing.T) {
	for _, tc := range []struct {
		spec Spec
		want string
	}{
		{Spec{}, "apt lists no package"},
		{Spec{Apt: []string{"Bad Name"}}, `"Bad Name" is not a Debian package name`},
		{Spec{Apt: []string{"git"}, Provides: []string{"/usr/bin/x"}}, `provides: "/usr/bin/x" is not a command name`},
		{Spec{Apt: []string{"git"}, LockTimeout: "soon"}, `lock_timeout "soon"`},
		// apt-get install NAME- removes NAME, without asking under -y.
		{Spec{Apt: []string{"git-"}}, `"git-" ends with "-", which tells apt-get to remove the package`},
		{Spec{Apt: []string{"git=1:2.39.5-"}}, `"git=1:2.39.5-" ends with "-", which tells apt-get to remove the package`},
	} {
		_, err := New("p", tc.spec)
		if !errors.Is(err, engine.ErrUsage) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v, want %q", tc.spec, err, tc.want)
		}
	}
	if _, err := New("p", Spec{Apt: []string{"python3-dev", "git=1:2.39.5-0+deb12u3", "libc6:amd64", "g++"}}); err != nil {
		t.Errorf("good names refused: %v", err)
	}
}

func TestProvides(t *testing.T) {
	s, _ := New("p", Spec{Apt: []string{"build-essential", "git", "cuda-toolkit-13-0", "libnuma-dev"}, Provides: []string{"hello"}})
	if got, want := strings.Join(s.Provides(), " "), "c++ cc g++ gcc git hello make nvcc"; got != want {
		t.Errorf("Provides = %q, want %q", got, want)
	}
}

// TestInstalls: the commands the step would install now are those of its missing packages
// (and its provides while any is missing), not those of packages installed already.
func TestInstalls(t *testing.T) {
	m := &fakeManager{installed: map[string]bool{"cmake": true}}
	s := newTestStep(t, Spec{Apt: []string{"cmake", "git"}, Provides: []string{"hello"}}, m)
	env := engine.NewTestEnv(t.TempDir(), nil)
	got, err := s.Installs(context.Background(), env)
	if err != nil || strings.Join(got, " ") != "git hello" {
		t.Errorf("Installs = %q, %v; want git hello", got, err)
	}
	m.installed["git"] = true
	if got, err := s.Installs(context.Background(), env); err != nil || len(got) != 0 {
		t.Errorf("Installs with everything installed = %q, %v", got, err)
	}
}
