package systemd

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/knownbad"
)

// KnownBad checks what the server's virtual environment holds (its installed
// distributions, read from their METADATA), the GPUs and the launch line of each candidate
// profile against the known-bad table. A combination in it is an error wrapping
// exitcode.ErrHost that names the row, its reason and its fix; an environment that does not
// exist yet passes (plan before the first apply; validate checks the recipe's pins).
func (s *Step) KnownBad(env *engine.Env) error {
	profiles := s.spec.Profiles
	if len(profiles) == 0 {
		profiles = []string{""}
	}
	for _, p := range profiles {
		if err := s.checkKnownBad(env, p); err != nil {
			return err
		}
	}
	return nil
}

// checkKnownBad is KnownBad for one profile's launch line.
func (s *Step) checkKnownBad(env *engine.Env, profile string) error {
	d, err := s.data(env, profile)
	if err != nil {
		return err
	}
	dirs, err := knownbad.SitePackages(env.Root, d.Python)
	if err != nil || len(dirs) == 0 {
		return err
	}
	dists, err := knownbad.InstalledDists(dirs, true)
	if err != nil {
		return fmt.Errorf("%w: reading the packages of %s: %w", exitcode.ErrHost, d.Python, err)
	}
	for name, ds := range knownbad.Duplicates(dists) {
		var at []string
		for _, x := range ds {
			at = append(at, x.Version+" at "+x.Path)
		}
		env.Log.Warn("a package is installed more than once; Python reports the first it finds, and every version is checked",
			"package", name, "installed", strings.Join(at, "; "))
	}
	pkgs, also := knownbad.FactsOf(dists)
	f := knownbad.Facts{Packages: pkgs, Also: also, LaunchLines: [][]string{d.Args}}
	if env.Facts != nil {
		for _, g := range env.Facts.GPUs {
			f.ComputeCapabilities = append(f.ComputeCapabilities, g.ComputeCapability)
		}
	}
	m, err := knownbad.Check(f)
	if err != nil || len(m) == 0 {
		return err
	}
	where := "the packages installed in " + filepath.Dir(filepath.Dir(d.Python))
	if profile != "" {
		where += " with profile " + profile
	}
	return fmt.Errorf("%w: unit %s: %w", exitcode.ErrHost, s.spec.Unit, &knownbad.Error{Where: where, Matches: m})
}
