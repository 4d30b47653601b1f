// Package packages is the packages step kind: operating-system packages the later steps
// need (python3-venv, python3-dev, a C++ toolchain, git), installed through the host's
// package manager when they are missing. The step is intact while every package is
// installed; under --root it plans but installs nothing.
package packages

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/hostcmd"
	"github.com/sglprov/sglprov/pkg/pkgmgr"
	"github.com/sglprov/sglprov/pkg/recipe"
	"github.com/sglprov/sglprov/pkg/steps/stepexec"
)

// DefaultLockTimeout is how long the step waits for another apt (cloud-init,
// unattended-upgrades) to release the dpkg lock.
const DefaultLockTimeout = 15 * time.Minute

// Spec is a packages step's recipe body.
type Spec struct {
	// Apt lists Debian/Ubuntu packages ("name", "name:arch", "name=version"); one pinned
	// to a version or architecture is missing while another is installed.
	Apt []string `yaml:"apt"`
	// Provides lists commands these packages put on the PATH beyond those sglprov knows
	// (git from git, gcc from build-essential, nvcc from cuda-toolkit-*): a
	// requires.commands entry for one of them is not required before the run.
	Provides []string `yaml:"provides"`
	// LockTimeout bounds the wait for the dpkg lock, e.g. "30m" (default 15m).
	LockTimeout string `yaml:"lock_timeout"`
}

// Kind returns the packages step kind.
func Kind() engine.Kind {
	return engine.KindOf(func(name string, s Spec) (*Step, error) { return New(name, s) })
}

var aptNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9+.-]+(:[a-z0-9-]+)?(=[A-Za-z0-9.+~:-]+)?$`)

// New checks spec and builds the step.
func New(name string, spec Spec) (*Step, error) {
	var problems []string
	if len(spec.Apt) == 0 {
		problems = append(problems, "apt lists no package")
	}
	for _, p := range spec.Apt {
		switch {
		case !aptNameRE.MatchString(p):
			problems = append(problems, fmt.Sprintf("%q is not a Debian package name", p))
		case strings.HasSuffix(p, "-"):
			// apt-get install NAME- removes NAME (and NAME=VERSION- that version).
			problems = append(problems, fmt.Sprintf("%q ends with \"-\", which tells apt-get to remove the package", p))
		}
	}
	for _, c := range spec.Provides {
		if !recipe.ValidCommandName(c) {
			problems = append(problems, fmt.Sprintf("provides: %q is not a command name", c))
		}
	}
	timeout := DefaultLockTimeout
	if spec.LockTimeout != "" {
		d, err := time.ParseDuration(spec.LockTimeout)
		if err != nil || d <= 0 {
			problems = append(problems, fmt.Sprintf("lock_timeout %q is not a positive duration like 15m", spec.LockTimeout))
		}
		timeout = d
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("packages: %s: %w", strings.Join(problems, "; "), exitcode.ErrUsage)
	}
	return &Step{spec: spec, lockTimeout: timeout}, nil
}

// Step is a packages step.
type Step struct {
	spec        Spec
	lockTimeout time.Duration
	// manager replaces the apt manager (tests).
	manager func(env *engine.Env) pkgmgr.Manager
	// required and look are set by CheckCommands: what the recipe asks of the commands and
	// how to find them.
	required recipe.CommandRequirements
	look     hostcmd.Looker
}

// CheckCommands gives the step what the recipe asks of the host's commands
// (requires.commands) and how to look them up. Before the run those the step would install
// are excused; after it installs its packages, Run checks them: a command the packages put
// on the PATH in a version out of range fails the step as a host problem (exit 4), instead
// of the build that needs it failing an hour later.
func (s *Step) CheckCommands(required recipe.CommandRequirements, look hostcmd.Looker) {
	s.required, s.look = required, look
}

// Provides returns the commands the step's packages install, sorted: those sglprov knows
// for each package and the spec's provides.
func (s *Step) Provides() []string {
	return s.commandsOf(s.spec.Apt)
}

// commandsOf returns the commands that installing pkgs puts on the PATH, sorted: those
// sglprov knows for each package, and the spec's provides.
func (s *Step) commandsOf(pkgs []string) []string {
	seen := map[string]bool{}
	for _, p := range pkgs {
		for _, c := range hostcmd.CommandsOf(p) {
			seen[c] = true
		}
	}
	for _, c := range s.spec.Provides {
		seen[c] = true
	}
	out := make([]string, 0, len(seen))
	for c := range seen {
		out = append(out, c)
	}
	sort.Strings(out)
	return out
}

// Installs returns the commands that running the step now would put on the PATH, sorted:
// those sglprov knows for the packages that are missing, and the spec's provides when any
// package is missing. A command whose package is installed already is not among them: the
// step leaves that package as it is, however old its command.
func (s *Step) Installs(ctx context.Context, env *engine.Env) ([]string, error) {
	missing, err := s.mgr(env).Missing(ctx, s.spec.Apt)
	if err != nil {
		return nil, err
	}
	if len(missing) == 0 {
		return nil, nil
	}
	return s.commandsOf(missing), nil
}

// mgr returns the package manager for env: apt on the host, its database under --root.
func (s *Step) mgr(env *engine.Env) pkgmgr.Manager {
	if s.manager != nil {
		return s.manager(env)
	}
	return &pkgmgr.Apt{
		Runner:      stepRunner{env: env},
		AdminDir:    env.HostPath("/var/lib/dpkg"),
		ListsDir:    env.HostPath("/var/lib/apt/lists"),
		ArchivesDir: env.HostPath("/var/cache/apt/archives"),
		LockTimeout: s.lockTimeout,
		Logf:        func(format string, args ...any) { env.Log.Info(fmt.Sprintf(format, args...)) },
	}
}

// Fingerprint adds nothing beyond the recipe text: what is installed is the outputs.
func (s *Step) Fingerprint(ctx context.Context, env *engine.Env) (map[string]string, error) {
	return nil, nil
}

// Converges says that installing the packages again changes nothing the steps that need
// this one read: they do not run again for its sake (engine.Converger). A toolchain that a
// reinstall did change still reruns a build, through the build's own fingerprint.
func (s *Step) Converges() bool { return true }

// Intact reports whether every package is installed.
func (s *Step) Intact(ctx context.Context, env *engine.Env) (bool, string, error) {
	missing, err := s.mgr(env).Missing(ctx, s.spec.Apt)
	if err != nil {
		return false, "", err
	}
	if len(missing) > 0 {
		return false, "not installed: " + strings.Join(missing, ", "), nil
	}
	return true, "", nil
}

// Run installs the missing packages (none under --root, where it only says what it would
// install) and checks that they are installed afterwards, and that the required commands
// they installed are in the recipe's ranges (see CheckCommands).
func (s *Step) Run(ctx context.Context, env *engine.Env) error {
	m := s.mgr(env)
	missing, err := m.Missing(ctx, s.spec.Apt)
	if err != nil {
		return err
	}
	env.Detail("missing", missing)
	if len(missing) == 0 {
		env.Log.Info("every package is installed", "packages", len(s.spec.Apt))
		return nil
	}
	if env.Offline {
		env.Log.Info("under --root: would install with "+m.Name()+"; installing nothing", "packages", strings.Join(missing, " "))
		return nil
	}
	if err := m.Install(ctx, missing); err != nil {
		return err
	}
	still, err := m.Missing(ctx, missing)
	if err != nil {
		return err
	}
	if len(still) > 0 {
		return fmt.Errorf("%s install ran but %s is still not installed", m.Name(), strings.Join(still, ", "))
	}
	env.Detail("installed", missing)
	if s.look != nil && len(s.required) > 0 {
		if problems := hostcmd.CheckInstalled(ctx, s.required, s.commandsOf(missing), s.look); len(problems) > 0 {
			return fmt.Errorf("checking the commands the packages installed: %w:\n  %s", exitcode.ErrHost, strings.Join(problems, "\n  "))
		}
	}
	return nil
}

// stepRunner runs apt's commands as the build and command steps run theirs (stepexec.Exec):
// output to the step log, the process group ended on cancel, the last lines in the error.
type stepRunner struct {
	env *engine.Env
}

func (r stepRunner) Run(ctx context.Context, argv []string, extra []string) error {
	err := stepexec.Exec(ctx, r.env, r.env.StepName, argv, "/", append(os.Environ(), extra...))
	var f *stepexec.Failure
	if errors.As(err, &f) {
		return &aptFailure{f: f}
	}
	return err
}

// aptFailure is an apt command that failed: its first line says how it ended and apt's
// last error ("E: ..."), which is what the run's summary shows of an error; the lines
// that follow give its last lines of output and the log.
type aptFailure struct {
	f *stepexec.Failure
}

// Error says how the command ended with apt's last error line, then its last lines of
// output and where the log is.
func (e *aptFailure) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "running %s: %s", e.f.Argv0, e.f.Status)
	if key := keyLine(e.f.Tail); key != "" {
		b.WriteString(": ")
		b.WriteString(key)
	}
	if len(e.f.Tail) > 0 {
		fmt.Fprintf(&b, "\nlast %d lines of output:", len(e.f.Tail))
		for _, l := range e.f.Tail {
			b.WriteString("\n  ")
			b.WriteString(strings.TrimRight(l, " \t"))
		}
	} else {
		b.WriteString("; it printed nothing")
	}
	if e.f.LogPath != "" {
		b.WriteString("\nfull log: " + e.f.LogPath)
	}
	return b.String()
}

// Unwrap returns the *stepexec.Failure.
func (e *aptFailure) Unwrap() error { return e.f }

// keyLine returns the last error line of apt's output ("E: ..."), else its last line.
func keyLine(tail []string) string {
	for i := len(tail) - 1; i >= 0; i-- {
		if l := strings.TrimSpace(tail[i]); strings.HasPrefix(l, "E: ") {
			return l
		}
	}
	for i := len(tail) - 1; i >= 0; i-- {
		if l := strings.TrimSpace(tail[i]); l != "" {
			return l
		}
	}
	return ""
}

func (stepRunner) Output(ctx context.Context, argv []string) ([]byte, []byte, error) {
	return pkgmgr.ExecRunner{}.Output(ctx, argv)
}
