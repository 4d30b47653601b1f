package build

import (
	"fmt"
	"io/fs"
	"path/filepath"
	"sort"
	"strings"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/fatbin"
)

// checkArchLibs reads the GPU code of the libraries arch_libs names and refuses (exit 4)
// an entry none of whose libraries carries SASS or PTX the host's GPUs run. An entry names
// one library, or the variants of one library of which a loader picks one for the GPU
// (sgl_kernel's per-architecture common_ops): one of its matches must run. Libraries
// without GPU code (CPU helpers) are not judged; an entry that matches no library with
// GPU code is refused too, as the check would check nothing.
func (s *Step) checkArchLibs(env *engine.Env) error {
	if len(s.spec.ArchLibs) == 0 {
		return nil
	}
	var ccs []string
	seen := map[string]bool{}
	if env.Facts != nil {
		for _, g := range env.Facts.GPUs {
			if g.ComputeCapability != "" && !seen[g.ComputeCapability] {
				seen[g.ComputeCapability] = true
				ccs = append(ccs, g.ComputeCapability)
			}
		}
	}
	if len(ccs) == 0 {
		env.Detail("arch_libs", "not checked: no GPU facts")
		return nil
	}
	sort.Strings(ccs)
	var problems, checked []string
	for _, g := range s.spec.ArchLibs {
		pattern := g
		if !filepath.IsAbs(pattern) {
			pattern = filepath.Join(s.spec.Dir, pattern)
		}
		matches, err := libMatches(env.Path(pattern), strings.HasSuffix(g, "/"))
		if err != nil {
			return fmt.Errorf("%w: arch_libs %q: %w", exitcode.ErrUsage, g, err)
		}
		sort.Strings(matches)
		var libs []string
		runs := map[string]bool{}
		for _, lib := range matches {
			entries, err := fatbin.ReadFile(lib)
			if err != nil {
				return fmt.Errorf("%w: checking the architectures of %s: %w", exitcode.ErrHost, lib, err)
			}
			if len(entries) == 0 {
				continue
			}
			libs = append(libs, fmt.Sprintf("%s carries %s", lib, fatbin.Summary(entries)))
			checked = append(checked, filepath.Base(lib)+": "+fatbin.Summary(entries))
			for _, cc := range ccs {
				ok, err := fatbin.Runs(entries, cc)
				if err != nil {
					return fmt.Errorf("checking %s: %w", lib, err)
				}
				runs[cc] = runs[cc] || ok
			}
		}
		if len(libs) == 0 {
			problems = append(problems, fmt.Sprintf("arch_libs %q matches no library with GPU code", g))
			continue
		}
		for _, cc := range ccs {
			if !runs[cc] {
				arch, _ := fatbin.ArchOf(cc)
				problems = append(problems, fmt.Sprintf("%s, and the GPUs (compute capability %s) need sm_%d or PTX of compute_%d or older",
					strings.Join(libs, "; "), cc, arch, arch))
			}
		}
	}
	env.Detail("arch_libs", checked)
	if len(problems) > 0 {
		return fmt.Errorf("%w: step %s: the installed kernels do not run on this host's GPUs: %s; build them for this host (TORCH_CUDA_ARCH_LIST from its GPUs, the step's default) or install a wheel built for it",
			exitcode.ErrHost, s.name, strings.Join(problems, "; "))
	}
	return nil
}

// maxLibs bounds how many libraries one arch_libs folder entry may name.
const maxLibs = 10000

// libMatches returns the files pattern matches; with folder set, every shared library
// (name ending in .so or holding ".so.") under the folders it matches.
func libMatches(pattern string, folder bool) ([]string, error) {
	matches, err := filepath.Glob(pattern)
	if err != nil || !folder {
		return matches, err
	}
	var out []string
	for _, m := range matches {
		err := filepath.WalkDir(m, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			name := d.Name()
			if d.Type().IsRegular() && (strings.HasSuffix(name, ".so") || strings.Contains(name, ".so.")) {
				if len(out) >= maxLibs {
					return fmt.Errorf("more than %d libraries under %s", maxLibs, m)
				}
				out = append(out, p)
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("listing %s: %w", m, err)
		}
	}
	return out, nil
}
