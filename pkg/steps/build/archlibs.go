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
// a library that carries no SASS or PTX the host's GPUs run. Every library an entry
// matches is judged on its own, except variants: libraries of one file name in different
// folders (sgl_kernel's sm90/common_ops and sm100/common_ops, of which its loader picks one
// per GPU) are one library, and one of them must run. Libraries without GPU code (CPU
// helpers) are not judged; an entry that matches no library with GPU code is refused too,
// as the check would check nothing.
func (s *Step) checkArchLibs(env *engine.Env) error {
	if len(s.spec.ArchLibs) == 0 {
		return nil
	}
	ccs := hostCCs(env)
	if len(ccs) == 0 {
		env.Detail("arch_libs", "not checked: no GPU facts")
		return nil
	}
	var problems, checked []string
	for _, g := range s.spec.ArchLibs {
		p, c, err := s.checkArchEntry(env, g, ccs)
		if err != nil {
			return err
		}
		problems, checked = append(problems, p...), append(checked, c...)
	}
	env.Detail("arch_libs", checked)
	if len(problems) > 0 {
		return fmt.Errorf("%w: step %s: the installed kernels do not run on this host's GPUs: %s; build them for this host (TORCH_CUDA_ARCH_LIST from its GPUs, the step's default) or install a wheel built for it, or name in arch_libs only the libraries the server loads on this GPU",
			exitcode.ErrHost, s.name, strings.Join(problems, "; "))
	}
	return nil
}

// hostCCs returns the compute capabilities of the host's GPUs, each once, sorted.
func hostCCs(env *engine.Env) []string {
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
	sort.Strings(ccs)
	return ccs
}

// archLib is one library of an arch_libs entry, by file name: what each variant
// carries, and whether any runs on each GPU.
type archLib struct {
	carries []string
	runs    map[string]bool
}

// checkArchEntry judges the libraries one arch_libs entry g matches on the GPUs ccs. It
// returns the problems found and what was checked.
func (s *Step) checkArchEntry(env *engine.Env, g string, ccs []string) (problems, checked []string, err error) {
	pattern := g
	if !filepath.IsAbs(pattern) {
		pattern = filepath.Join(s.spec.Dir, pattern)
	}
	matches, err := libMatches(env.Path(pattern), strings.HasSuffix(g, "/"))
	if err != nil {
		return nil, nil, fmt.Errorf("%w: arch_libs %q: %w", exitcode.ErrUsage, g, err)
	}
	sort.Strings(matches)
	libs, names, checked, err := readArchLibs(matches, ccs)
	if err != nil {
		return nil, nil, err
	}
	if len(names) == 0 {
		return []string{fmt.Sprintf("arch_libs %q matches no library with GPU code", g)}, checked, nil
	}
	sort.Strings(names)
	for _, name := range names {
		l := libs[name]
		for _, cc := range ccs {
			if !l.runs[cc] {
				arch, _ := fatbin.ArchOf(cc)
				problems = append(problems, fmt.Sprintf("%s, and the GPUs (compute capability %s) need SASS for sm_%d (plain, a or f; or plain or f of an older minor of major %d) or PTX of compute_%d or older (plain, or f of major %d)",
					strings.Join(l.carries, "; "), cc, arch, arch/10, arch, arch/10))
			}
		}
	}
	return problems, checked, nil
}

// readArchLibs reads the GPU code of each of matches, grouped by file name (the names in
// the order first met), and whether it runs on each of ccs; files without GPU code are
// left out.
func readArchLibs(matches, ccs []string) (libs map[string]*archLib, names, checked []string, err error) {
	libs = map[string]*archLib{}
	for _, path := range matches {
		entries, err := fatbin.ReadFile(path)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("%w: checking the architectures of %s: %w", exitcode.ErrHost, path, err)
		}
		if len(entries) == 0 {
			continue
		}
		name := filepath.Base(path)
		l := libs[name]
		if l == nil {
			l = &archLib{runs: map[string]bool{}}
			libs[name] = l
			names = append(names, name)
		}
		l.carries = append(l.carries, fmt.Sprintf("%s carries %s", path, fatbin.Summary(entries)))
		checked = append(checked, filepath.Base(filepath.Dir(path))+"/"+name+": "+fatbin.Summary(entries))
		for _, cc := range ccs {
			ok, err := fatbin.Runs(entries, cc)
			if err != nil {
				return nil, nil, nil, fmt.Errorf("%w: checking the architectures of %s: %w", exitcode.ErrHost, path, err)
			}
			l.runs[cc] = l.runs[cc] || ok
		}
	}
	return libs, names, checked, nil
}

// maxLibs bounds how many libraries one arch_libs folder entry may name.
const maxLibs = 10000

// libMatches returns the files pattern matches. With folder set, every shared library
// (name ending in .so or holding ".so.") under the folders it matches; a pattern
// "DIR/**/NAME" names every file whose name matches NAME under the folders DIR matches.
// Only regular files are taken from folders (a FIFO there is never opened).
func libMatches(pattern string, folder bool) ([]string, error) {
	nameGlob := ""
	if dir, name, ok := strings.Cut(pattern, string(filepath.Separator)+"**"+string(filepath.Separator)); ok {
		pattern, nameGlob, folder = dir, name, true
		if strings.ContainsRune(name, filepath.Separator) {
			return nil, fmt.Errorf("%q after **/ must be a file name pattern", name)
		}
	}
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
			want := strings.HasSuffix(name, ".so") || strings.Contains(name, ".so.")
			if nameGlob != "" {
				want, _ = filepath.Match(nameGlob, name)
			}
			if d.Type().IsRegular() && want {
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
