package build

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/gitrepo"
	"github.com/sglprov/sglprov/pkg/procgroup"
	"github.com/sglprov/sglprov/pkg/steps/stepexec"
)

// Fingerprint returns the named inputs that decide the build's result. Probes that fail
// are recorded as values ("absent", "error: ..."), not returned as errors. The parts:
//
//	argv              the command, as JSON
//	env               the variables the step sets (defaults and the recipe's env), as
//	                  sorted KEY=VALUE lines, without MAX_JOBS, CMAKE_BUILD_PARALLEL_LEVEL and
//	                  the ccache variables (see notFingerprinted)
//	tree              the source tree (see treeDigest)
//	toolchain.nvcc    `nvcc --version` of the nvcc findNVCC finds, or "absent"
//	toolchain.python  `PYTHON --version`, when the spec names a python
//	toolchain.torch   torch.__version__ and torch.version.cuda, when the spec names a python
//	toolchain.NAME    each custom probe
//	inputs            "PATH SHA256" of each file the inputs globs match, when there are any
//
// The driver version is deliberately not a part: kernels built for an arch run on any
// newer driver, and a driver upgrade alone must not rebuild them.
func (s *Step) Fingerprint(ctx context.Context, env *engine.Env) (map[string]string, error) {
	dir := s.dir(env)
	parts := map[string]string{}

	argv, err := json.Marshal(s.spec.Argv)
	if err != nil {
		return nil, fmt.Errorf("encoding argv: %w", err)
	}
	parts["argv"] = string(argv)

	vars := s.buildEnv(env, 0, false)
	var lines []string
	for k, v := range vars {
		if !notFingerprinted(k) {
			lines = append(lines, k+"="+v)
		}
	}
	sort.Strings(lines)
	parts["env"] = strings.Join(lines, "\n")

	tree, err := s.treeDigest(ctx, dir)
	if err != nil {
		return nil, err
	}
	parts["tree"] = tree

	if len(s.spec.Inputs) > 0 {
		inputs, err := s.inputsDigest(env, dir)
		if err != nil {
			return nil, err
		}
		parts["inputs"] = inputs
	}

	environ := environ(vars)
	for _, p := range s.probes() {
		argv := p.argv
		if p.name == "toolchain.nvcc" && argv[0] == "nvcc" {
			// The nvcc the build compiles with, on its PATH or off it (findNVCC).
			if _, a, ok := findNVCC(dir, environ); ok {
				argv = a
			}
		}
		parts[p.name] = s.probe(ctx, dir, environ, argv)
		s.cache.put(argv, parts[p.name])
	}
	return parts, nil
}

// NodeLocalFields are the recipe fields that size the build to the host, not its result:
// left out of the fingerprint, so that identical nodes with other job counts share one
// artifact in the fleet cache (and a changed job count rebuilds nothing).
func (s *Step) NodeLocalFields() []string {
	return []string{"jobs", "mem_per_job_gib", "env." + envMaxJobs, "env." + envCMakeParallel}
}

// probeSpec is one toolchain probe.
type probeSpec struct {
	name string
	argv []string
}

// probes returns the probes to run: the defaults, with the custom ones replacing those of
// the same name and added after them.
func (s *Step) probes() []probeSpec {
	list := []probeSpec{{"toolchain.nvcc", []string{"nvcc", "--version"}}}
	if s.spec.Python != "" {
		list = append(list,
			probeSpec{"toolchain.python", []string{s.spec.Python, "--version"}},
			probeSpec{"toolchain.torch", []string{s.spec.Python, "-c", torchProbe}},
		)
	}
	seen := map[string]int{}
	for _, argv := range s.spec.Probes {
		base := "toolchain." + filepath.Base(argv[0])
		seen[base]++
		name := base
		if n := seen[base]; n > 1 {
			name = fmt.Sprintf("%s#%d", base, n)
		}
		replaced := false
		for i := range list {
			if list[i].name == name {
				list[i].argv, replaced = argv, true
			}
		}
		if !replaced {
			list = append(list, probeSpec{name, argv})
		}
	}
	return list
}

// probeOutputLimit bounds what is kept of a probe's standard output (its first bytes) and
// standard error (its last).
const probeOutputLimit = 1 << 20

// probe runs argv and returns its trimmed standard output (standard error when that is
// all it printed), "absent" when the program is not there, or "error: ..." when it fails.
func (s *Step) probe(ctx context.Context, dir string, environ []string, argv []string) string {
	path, err := stepexec.LookPath(argv[0], dir, environ)
	if err != nil {
		return "absent"
	}
	ctx, cancel := context.WithTimeout(ctx, s.probeTimeout)
	defer cancel()
	cmd := exec.Command(path, argv[1:]...)
	cmd.Args[0] = argv[0]
	cmd.Env = environ
	if fi, err := os.Stat(dir); err == nil && fi.IsDir() {
		cmd.Dir = dir
	}
	stdout, stderr := &procgroup.Head{Max: probeOutputLimit}, &procgroup.Tail{Max: probeOutputLimit}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	// In its own process group, ended whole at the limit, and not waited for past it:
	// a child that keeps the output open does not hold the plan.
	if err := procgroup.Run(ctx, cmd, procgroup.Options{}); err != nil {
		msg := strings.TrimSpace(string(stderr.Bytes()))
		if i := strings.LastIndexByte(msg, '\n'); i >= 0 {
			msg = msg[i+1:]
		}
		if msg != "" {
			return fmt.Sprintf("error: %v: %s", err, msg)
		}
		return fmt.Sprintf("error: %v", err)
	}
	if out := strings.TrimSpace(string(stdout.Bytes())); out != "" {
		return out
	}
	// Some tools print their version to standard error.
	return strings.TrimSpace(string(stderr.Bytes()))
}

// treeDigest digests the source tree in dir.
//
// In a git work tree it is the HEAD commit, the sha256 of `git diff HEAD` limited to dir
// (what the patch step changed) and the sha256 of the names and contents of the untracked,
// non-ignored files under dir (what patches added); git already knows the rest. Elsewhere it
// is the sha256 of every file's relative path, mode and content under dir. Either way the
// outputs, the usual build folders and the spec's exclude globs are left out, so that a
// build does not change its own fingerprint. A dir that does not exist yet (its source step
// has not run) digests as "absent".
func (s *Step) treeDigest(ctx context.Context, dir string) (string, error) {
	fi, err := os.Stat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return "absent", nil
	}
	if err != nil {
		return "", fmt.Errorf("reading build dir: %w", err)
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("build dir %s is not a directory", dir)
	}
	if head, ok := gitOutput(ctx, dir, "rev-parse", "--verify", "HEAD"); ok {
		return s.gitTreeDigest(ctx, dir, strings.TrimSpace(string(head)))
	}
	sum, err := s.walkDigest(dir)
	if err != nil {
		return "", err
	}
	return "files " + sum, nil
}

func (s *Step) gitTreeDigest(ctx context.Context, dir, head string) (string, error) {
	diff, ok := gitOutput(ctx, dir, "-c", "core.quotepath=off", "diff", "--no-color", "--no-ext-diff",
		"--no-textconv", "--binary", "HEAD", "--", ".")
	if !ok {
		return "", fmt.Errorf("running git diff HEAD in %s failed", dir)
	}
	untracked, ok := gitOutput(ctx, dir, "ls-files", "-z", "--others", "--exclude-standard", "--", ".")
	if !ok {
		return "", fmt.Errorf("listing untracked files in %s failed", dir)
	}
	var names []string
	for _, n := range strings.Split(string(untracked), "\x00") {
		if n != "" && !s.excluded(dir, n) {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	h := sha256.New()
	for _, n := range names {
		if err := hashEntry(h, dir, n); err != nil {
			return "", err
		}
	}
	d := sha256.Sum256(diff)
	return fmt.Sprintf("git %s diff %s untracked %s", head, hex.EncodeToString(d[:]), hex.EncodeToString(h.Sum(nil))), nil
}

// gitOutput runs git in dir and returns its standard output; ok is false when git is
// missing, dir is not in a work tree, or the command fails.
func gitOutput(ctx context.Context, dir string, args ...string) ([]byte, bool) {
	out, err := gitrepo.Output(ctx, dir, args...)
	return out, err == nil
}

// walkDigest digests every file under dir that is not excluded.
func (s *Step) walkDigest(dir string) (string, error) {
	var names []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == dir {
			return nil
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if s.excluded(dir, rel) || (d.IsDir() && d.Name() == ".git") {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.IsDir() {
			names = append(names, rel)
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("digesting source tree %s: %w", dir, err)
	}
	sort.Strings(names)
	h := sha256.New()
	for _, n := range names {
		if err := hashEntry(h, dir, n); err != nil {
			return "", err
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// hashEntry writes the name, kind, executable bit and content (a symlink's target) of the
// file rel under dir into h.
func hashEntry(h io.Writer, dir, rel string) error {
	p := filepath.Join(dir, filepath.FromSlash(rel))
	fi, err := os.Lstat(p)
	if err != nil {
		return fmt.Errorf("digesting source tree: %w", err)
	}
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		target, err := os.Readlink(p)
		if err != nil {
			return fmt.Errorf("digesting source tree: %w", err)
		}
		fmt.Fprintf(h, "link %q %q\n", rel, target)
	case fi.Mode().IsRegular():
		fmt.Fprintf(h, "file %q %t %d\n", rel, fi.Mode().Perm()&0o111 != 0, fi.Size())
		f, err := os.Open(p)
		if err != nil {
			return fmt.Errorf("digesting source tree: %w", err)
		}
		_, err = io.Copy(h, f)
		f.Close()
		if err != nil {
			return fmt.Errorf("digesting source tree: reading %s: %w", p, err)
		}
	default:
		fmt.Fprintf(h, "other %q %s\n", rel, fi.Mode().Type())
	}
	return nil
}

// buildDirs are folder names that builds write into their source tree; they are never
// part of the tree's digest.
var buildDirs = map[string]bool{
	"build": true, "_skbuild": true, "__pycache__": true, ".pytest_cache": true, ".eggs": true,
	".venv": true,
}

// excluded reports whether rel (slash-separated, relative to dir) is left out of the
// tree's digest: it or a folder above it is a build folder, an output or input or the
// folder of one, or matches an exclude glob. Inputs have their own fingerprint part.
func (s *Step) excluded(dir, rel string) bool {
	parts := strings.Split(rel, "/")
	for i, part := range parts {
		if buildDirs[part] || strings.HasSuffix(part, ".egg-info") {
			return true
		}
		prefix := strings.Join(parts[:i+1], "/")
		for _, g := range s.spec.Exclude {
			if ok, _ := filepath.Match(g, prefix); ok {
				return true
			}
		}
		for _, g := range s.outputsAndInputs() {
			if filepath.IsAbs(g) {
				if rg, err := filepath.Rel(dir, g); err == nil && !strings.HasPrefix(rg, "..") {
					g = filepath.ToSlash(rg)
				} else {
					continue
				}
			}
			if ok, _ := filepath.Match(g, prefix); ok {
				return true
			}
			// The output's folder ("dist" of "dist/*.whl") is the build's too.
			if od := path2dir(g); od != "" && od == prefix {
				return true
			}
		}
	}
	return false
}

func (s *Step) outputsAndInputs() []string {
	return append(append([]string(nil), s.spec.Outputs...), s.spec.Inputs...)
}

// path2dir returns the slash-separated folder of an output glob, "" for a top-level one.
func path2dir(g string) string {
	g = filepath.ToSlash(filepath.Clean(g))
	if i := strings.LastIndexByte(g, '/'); i > 0 {
		return g[:i]
	}
	return ""
}

// inputsDigest lists each file the inputs globs match with its sha256; a glob that matches
// nothing is listed as such (a wheel not built yet).
func (s *Step) inputsDigest(env *engine.Env, dir string) (string, error) {
	var lines []string
	for _, g := range s.spec.Inputs {
		matches, err := filepath.Glob(s.outputPath(env, dir, g))
		if err != nil {
			return "", fmt.Errorf("matching input %q: %w", g, err)
		}
		found := false
		for _, m := range matches {
			fi, err := os.Stat(m)
			if err != nil || !fi.Mode().IsRegular() {
				continue
			}
			sum, err := fileSHA256(m)
			if err != nil {
				return "", err
			}
			lines = append(lines, m+" "+sum)
			found = true
		}
		if !found {
			lines = append(lines, g+" none")
		}
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n"), nil
}
