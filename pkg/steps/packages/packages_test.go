package packages

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/hostcmd"
	"github.com/sglprov/sglprov/pkg/pkgmgr"
	"github.com/sglprov/sglprov/pkg/recipe"
)

// fakeManager holds a set of installed packages; Install adds to it.
type fakeManager struct {
	installed map[string]bool
	installs  [][]string
	fail      error
	// onInstall, when set, runs after a successful Install (puts the packages' commands
	// on the PATH).
	onInstall func(pkgs []string)
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
	if f.onInstall != nil {
		f.onInstall(pkgs)
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
		if !errors.Is(err, exitcode.ErrUsage) || !strings.Contains(err.Error(), tc.want) {
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

// installCmake returns an onInstall that writes, on installing cmake, a cmake into bin that
// prints version as Ubuntu's does.
func installCmake(t *testing.T, bin, version string) func([]string) {
	return func(pkgs []string) {
		for _, p := range pkgs {
			if p != "cmake" {
				continue
			}
			script := "#!/bin/sh\necho \"cmake version " + version + "\"\necho\necho \"CMake suite maintained and supported by Kitware (kitware.com/cmake).\"\n"
			if err := os.WriteFile(filepath.Join(bin, "cmake"), []byte(script), 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestRunChecksTheVersionItInstalled: a required command that the step installs is excused
// before the run, so the step itself checks it once installed: Ubuntu 22.04's cmake 3.22
// for a recipe that wants >=3.26 fails the step as a host problem (exit 4), naming the
// command, the version installed, the range and a newer package source; a cmake in range
// passes.
func TestRunChecksTheVersionItInstalled(t *testing.T) {
	reqs := recipe.CommandRequirements{"cmake": {Version: ">=3.26"}, "git": {}, "nvcc": {Version: ">=12.8"}}
	for _, tc := range []struct {
		version string
		wantErr bool
	}{{"3.22.1", true}, {"3.28.3", false}} {
		bin := t.TempDir()
		m := &fakeManager{installed: map[string]bool{"git": true}, onInstall: installCmake(t, bin, tc.version)}
		s := newTestStep(t, Spec{Apt: []string{"git", "cmake"}}, m)
		s.CheckCommands(reqs, hostcmd.PathLooker{Path: bin})
		err := s.Run(context.Background(), engine.NewTestEnv(t.TempDir(), nil))
		if !tc.wantErr {
			if err != nil {
				t.Errorf("cmake %s: %v", tc.version, err)
			}
			continue
		}
		if !errors.Is(err, exitcode.ErrHost) || exitcode.Of(err) != exitcode.ExitHost {
			t.Fatalf("cmake %s: err = %v, want ErrHost (exit 4)", tc.version, err)
		}
		for _, want := range []string{"cmake: the packages installed 3.22.1 at " + filepath.Join(bin, "cmake"), "does not satisfy >=3.26", "add a newer package source", "Kitware's apt repository"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("err = %v\nwant it to say %q", err, want)
			}
		}
		// git was installed already (not by this run), nvcc is not among its packages.
		if strings.Contains(err.Error(), "git:") || strings.Contains(err.Error(), "nvcc") {
			t.Errorf("err names a command the step did not install: %v", err)
		}
		// The step is intact now (the packages are installed): the next run's preflight,
		// not this step, reports the old cmake.
		if ok, _, _ := s.Intact(context.Background(), engine.NewTestEnv(t.TempDir(), nil)); !ok {
			t.Errorf("not intact after installing")
		}
	}
}

// TestRunChecksACommandStillMissing: a required command that the packages were to install
// but that is not on the PATH afterwards fails the step too.
func TestRunChecksACommandStillMissing(t *testing.T) {
	m := &fakeManager{installed: map[string]bool{}}
	s := newTestStep(t, Spec{Apt: []string{"hello"}, Provides: []string{"hello"}}, m)
	s.CheckCommands(recipe.CommandRequirements{"hello": {}}, hostcmd.PathLooker{Path: t.TempDir()})
	err := s.Run(context.Background(), engine.NewTestEnv(t.TempDir(), nil))
	if !errors.Is(err, exitcode.ErrHost) || !strings.Contains(err.Error(), "hello: still not found on the PATH after installing its packages") {
		t.Errorf("err = %v", err)
	}
}

// fakeApt puts apt-cache and apt-get scripts first on the PATH. apt-cache policy says
// every package has a candidate; apt-get update does nothing; apt-get install does what
// apt does when the dpkg it runs is killed half way: dpkg's journal is left in
// ADMINDIR/updates, apt prints its lines and exits 100. Unlike the real ones they read no
// configuration, lists or archives, take no lock, and write only that journal and a line
// per call to calls.
func fakeApt(t *testing.T, admin string) (calls string) {
	t.Helper()
	bin := t.TempDir()
	calls = filepath.Join(bin, "calls")
	scripts := map[string]string{
		"apt-cache": "#!/bin/sh\nfor p in \"$@\"; do [ \"$p\" = policy ] || printf '%s:\\n  Installed: (none)\\n  Candidate: 1.0-1\\n' \"$p\"; done\n",
		"apt-get": "#!/bin/sh\necho \"apt-get $*\" >> " + calls + "\ncase \" $* \" in *\" install \"*)\n" +
			"  echo 'Reading package lists...'\n  mkdir -p " + admin + "/updates && echo 'Package: hello' > " + admin + "/updates/0001\n" +
			"  echo 'E: Sub-process /usr/bin/dpkg received a segmentation fault.' >&2\n  exit 100;;\nesac\n",
	}
	for name, body := range scripts {
		if err := os.WriteFile(filepath.Join(bin, name), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	return calls
}

// dpkg killed during the step's install: the error's first line (what the run's summary
// shows) says dpkg was interrupted, the fix and apt's error; the lines follow. The next
// run refuses before it runs apt-get, naming dpkg's journal and the fix.
func TestInterruptedDpkgNamesTheFixOnTheFirstLine(t *testing.T) {
	dir := t.TempDir()
	admin, lists, archives := filepath.Join(dir, "dpkg"), filepath.Join(dir, "lists"), filepath.Join(dir, "archives")
	for _, d := range []string{admin, lists, archives} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(lists, "deb.debian.org_debian_dists_bookworm_InRelease"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	calls := fakeApt(t, admin)
	s, err := New("host-packages", Spec{Apt: []string{"hello"}})
	if err != nil {
		t.Fatal(err)
	}
	s.manager = func(env *engine.Env) pkgmgr.Manager {
		return &pkgmgr.Apt{Runner: stepRunner{env: env}, AdminDir: admin, ListsDir: lists, ArchivesDir: archives, LockTimeout: 5 * time.Second}
	}
	env := engine.NewTestEnv(t.TempDir(), &bytes.Buffer{})

	err = s.Run(context.Background(), env)
	if err == nil {
		t.Fatal("Run succeeded")
	}
	lines := strings.Split(err.Error(), "\n")
	if want := "installing hello: dpkg was interrupted; run `dpkg --configure -a` as root to finish it, then apply again: running apt-get: exit status 100: E: Sub-process /usr/bin/dpkg received a segmentation fault."; lines[0] != want {
		t.Errorf("first line:\n%s\nwant\n%s", lines[0], want)
	}
	if !strings.Contains(err.Error(), "\nlast 2 lines of output:\n  Reading package lists...\n  E: Sub-process /usr/bin/dpkg received a segmentation fault.") {
		t.Errorf("the lines of output are not shown:\n%s", err)
	}
	if !errors.Is(err, pkgmgr.ErrDpkgInterrupted) {
		t.Errorf("err does not wrap ErrDpkgInterrupted: %v", err)
	}

	before, _ := os.ReadFile(calls)
	err = s.Run(context.Background(), env)
	if err == nil || !strings.Contains(strings.Split(err.Error(), "\n")[0], filepath.Join(admin, "updates")+" holds the journal of a dpkg run that did not finish") ||
		!strings.Contains(err.Error(), "run `dpkg --configure -a` as root") {
		t.Errorf("second Run = %v; want the interrupted dpkg named with its fix", err)
	}
	if after, _ := os.ReadFile(calls); string(after) != string(before) {
		t.Errorf("apt-get ran again: %s", after)
	}
}
