package systemd

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/hostpath"
	"github.com/sglprov/sglprov/pkg/service"
)

// DefaultNeedsCommands are the programs an SGLang server execs itself when a step's
// needs_commands is not set: FlashInfer's run-time kernel compiles run `ninja` from PATH
// and find `nvcc` through CUDA_HOME or PATH.
var DefaultNeedsCommands = []string{"ninja", "nvcc"}

// BasePath is the PATH a rendered unit ends with, after the server's own folders: the
// folders systemd's default PATH has, with /sbin and /bin for hosts whose /usr is not merged.
const BasePath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// systemdDefaultPath is what systemd gives a service whose unit sets no PATH (systemd's
// DEFAULT_PATH on a merged-/usr host), and so what the check uses for such a unit.
const systemdDefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin"

// needs returns the programs the step's server execs: needs_commands, or the defaults
// when the step does not set it (an empty list names none).
func (s *Step) needs() []string {
	if s.spec.NeedsCommands == nil {
		return DefaultNeedsCommands
	}
	return *s.spec.NeedsCommands
}

// unitPath returns the PATH the unit carries for the server: the step's or profile's own
// PATH when one sets it, otherwise the folder of the server's interpreter (a virtual
// environment's bin, where pip puts ninja), the CUDA toolkit's bin when CUDA_HOME is set,
// then BasePath. A folder BasePath has already, and a relative one, is not added.
func unitPath(command []string, env map[string]string) string {
	if p, ok := env["PATH"]; ok {
		return p
	}
	base := filepath.SplitList(BasePath)
	seen := map[string]bool{}
	for _, d := range base {
		seen[d] = true
	}
	var out []string
	add := func(d string) {
		d = filepath.Clean(d)
		if !seen[d] {
			seen[d] = true
			out = append(out, d)
		}
	}
	if len(command) > 0 && filepath.IsAbs(command[0]) {
		add(filepath.Dir(command[0]))
	}
	if home := env["CUDA_HOME"]; filepath.IsAbs(home) {
		add(filepath.Join(home, "bin"))
	}
	return strings.Join(append(out, base...), string(filepath.ListSeparator))
}

// lookPath finds name on path as the service would, with every folder mapped under root:
// the first regular file with an execute bit. A name with a slash is checked as it is.
func lookPath(root, path, name string) (string, bool) {
	if strings.Contains(name, "/") {
		return name, executable(hostpath.Under(root, name))
	}
	for _, dir := range filepath.SplitList(path) {
		if !filepath.IsAbs(dir) {
			continue
		}
		p := filepath.Join(dir, name)
		if executable(hostpath.Under(root, p)) {
			return p, true
		}
	}
	return "", false
}

// executable reports whether p is a regular file (after symbolic links) with an execute
// bit.
func executable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}

// checkNeeds resolves every program the server will exec under the rendered unit's own
// environment: the PATH its Environment= lines set, or, for a unit that sets none, the
// PATH its manager gives it (systemd's default; this process's for the exec manager).
// Folders are looked up under --root. A program that does not resolve refuses the start,
// before anything is installed, with an error wrapping exitcode.ErrHost that names the unit,
// each missing program, the PATH searched and the fix.
func (s *Step) checkNeeds(env *engine.Env, managerKind string, unit []byte) error {
	needs := s.needs()
	if len(needs) == 0 {
		return nil
	}
	svc, err := service.ReadService(s.spec.Unit, unit, "/var/cache")
	if err != nil {
		return fmt.Errorf("reading the rendered unit's environment: %w", err)
	}
	path, set := svc.Env["PATH"]
	origin := "the unit's PATH"
	if !set {
		path, origin = systemdDefaultPath, "systemd's default PATH (the unit sets none)"
		if managerKind == service.KindExec {
			path, origin = os.Getenv("PATH"), "sglprov's own PATH (the unit sets none)"
		}
	}
	var missing []string
	for _, name := range needs {
		if _, ok := lookPath(env.Root, path, name); !ok {
			missing = append(missing, name)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	verb := "is"
	if len(missing) > 1 {
		verb = "are"
	}
	return fmt.Errorf("%w: unit %s: the server runs %s, which %s not found on %s %q; "+
		"install it (ninja: pip install ninja into the server's virtual environment; nvcc: the CUDA toolkit "+
		"named by CUDA_HOME), or put its folder on the unit's PATH (the step's env PATH, or the default: "+
		"the interpreter's folder and $CUDA_HOME/bin), or remove it from the step's needs_commands "+
		"if the server does not run it",
		exitcode.ErrHost, s.spec.Unit, strings.Join(missing, " and "), verb, origin, path)
}
