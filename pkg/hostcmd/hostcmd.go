// Package hostcmd checks the commands a recipe needs the host to have already (the recipe's
// `requires.commands`): whether each is on the PATH and, for the commands it knows, whether
// the version its own `--version` prints is in the wanted range.
//
// It knows how to read the version of nvcc, python3 (and python), git, cmake, gcc, g++ and
// cc; any other command is checked for presence only. It also knows, for a few commands,
// the Debian packages that install them, so that a command the recipe's own packages step
// installs is not required up front.
package hostcmd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/sglprov/sglprov/pkg/procgroup"
	"github.com/sglprov/sglprov/pkg/recipe"
	"github.com/sglprov/sglprov/pkg/versions"
)

// Found is what the host has of one command.
type Found struct {
	// Name is the command as asked for; Path where it is ("" when it is not on the PATH).
	Name string `json:"name"`
	Path string `json:"path,omitempty"`
	// Version is the version read from its --version output ("" when the command is
	// unknown here or its output could not be read).
	Version string `json:"version,omitempty"`
	// Err says why the version could not be read (the command failed or printed
	// something else).
	Err string `json:"error,omitempty"`
	// OffPath is set when the command is not on the PATH but was found where builds look
	// for it (nvcc in /usr/local/cuda/bin).
	OffPath bool `json:"off_path,omitempty"`
}

// Looker finds commands and reads their versions; Lookup is the real one.
type Looker interface {
	// Lookup finds the command name and reads its version.
	Lookup(ctx context.Context, name string) Found
}

// PathLooker looks commands up in a PATH list and runs `NAME --version` to read their
// version, with a time limit. nvcc not on the PATH is looked for where CUDA builds find it
// too (see CUDADirs): NVIDIA's packages install it in /usr/local/cuda/bin without putting
// that on the PATH.
type PathLooker struct {
	// Path is the PATH list to search (the process's when empty).
	Path string
	// Getenv reads CUDA_HOME and CUDA_PATH (os.Getenv when nil).
	Getenv func(string) string
	// Timeout bounds each --version run (10 s when zero).
	Timeout time.Duration
}

// versionOutputLimit bounds what is read of a --version output (its first bytes, where
// the version is).
const versionOutputLimit = 64 << 10

// CUDADirs are the folders searched for nvcc when it is not on the PATH, in order:
// $CUDA_HOME/bin, $CUDA_PATH/bin (torch's cpp_extension reads both) and /usr/local/cuda/bin
// (where CMake and torch look last).
func CUDADirs(getenv func(string) string) []string {
	if getenv == nil {
		getenv = os.Getenv
	}
	var out []string
	for _, k := range []string{"CUDA_HOME", "CUDA_PATH"} {
		if v := getenv(k); v != "" {
			out = append(out, filepath.Join(v, "bin"))
		}
	}
	return append(out, "/usr/local/cuda/bin")
}

// Lookup finds name on the PATH and reads its version when a parser for it is known.
func (l PathLooker) Lookup(ctx context.Context, name string) Found {
	f := Found{Name: name}
	p, err := l.lookPath(name, l.Path)
	if err != nil && name == "nvcc" {
		p, err = l.lookPath(name, strings.Join(CUDADirs(l.Getenv), string(os.PathListSeparator)))
		f.OffPath = err == nil
	}
	if err != nil {
		return f
	}
	f.Path = p
	if !Known(name) {
		return f
	}
	timeout := l.Timeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.Command(p, "--version")
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	if l.Path != "" {
		cmd.Env = append(cmd.Env, "PATH="+l.Path)
	}
	out := &procgroup.Head{Max: versionOutputLimit}
	cmd.Stdout, cmd.Stderr = out, out
	// In its own process group, ended whole at the limit: a wrapper script's children go
	// with it.
	if err := procgroup.Run(ctx, cmd, procgroup.Options{}); err != nil {
		if ctx.Err() == context.DeadlineExceeded {
			f.Err = fmt.Sprintf("%s --version did not finish within %s", p, timeout)
			return f
		}
		f.Err = fmt.Sprintf("running %s --version: %v", p, err)
		return f
	}
	v, err := ParseVersion(name, out.String())
	if err != nil {
		f.Err = err.Error()
		return f
	}
	f.Version = v
	return f
}

// Searched returns the folders Lookup searches for name, in order: the PATH's and, for
// nvcc, CUDADirs after them. A "not found" says where it looked.
func (l PathLooker) Searched(name string) []string {
	path := l.Path
	if path == "" {
		path = os.Getenv("PATH")
	}
	dirs := filepath.SplitList(path)
	if name == "nvcc" {
		dirs = append(dirs, CUDADirs(l.Getenv)...)
	}
	var out []string
	seen := map[string]bool{}
	for _, dir := range dirs {
		if dir == "" {
			dir = "."
		}
		if !seen[dir] {
			seen[dir] = true
			out = append(out, dir)
		}
	}
	return out
}

// Searcher is a Looker that can say which folders it searched for a command.
type Searcher interface {
	Searched(name string) []string
}

func (l PathLooker) lookPath(name, path string) (string, error) {
	if path == "" {
		path = os.Getenv("PATH")
	}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, name)
		fi, err := os.Stat(p)
		if err != nil || fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
			continue
		}
		return p, nil
	}
	return "", exec.ErrNotFound
}

// parser reads a version out of one command's --version output.
type parser struct {
	re *regexp.Regexp
	// group is the submatch holding the version.
	group int
}

// gccRE reads "gcc (Debian 12.2.0-14+deb12u1) 12.2.0", "gcc (GCC) 11.4.1 20231218 (Red Hat
// 11.4.1-3)" and "cc (Ubuntu 13.2.0-23ubuntu4) 13.2.0": the version after the closing
// parenthesis of the first line.
var gccRE = regexp.MustCompile(`(?m)^\S+ \(.*?\) (\d+\.\d+(?:\.\d+)?)`)

// parsers are the commands whose versions are read, by name.
var parsers = map[string]parser{
	// "Cuda compilation tools, release 12.8, V12.8.93": the full version after "V".
	"nvcc":    {regexp.MustCompile(`release \d+\.\d+, V(\d+\.\d+(?:\.\d+)?)`), 1},
	"python3": {regexp.MustCompile(`(?m)^Python (\d+\.\d+(?:\.\d+)?)`), 1},
	"python":  {regexp.MustCompile(`(?m)^Python (\d+\.\d+(?:\.\d+)?)`), 1},
	"git":     {regexp.MustCompile(`(?m)^git version (\d+\.\d+(?:\.\d+)?)`), 1},
	"cmake":   {regexp.MustCompile(`(?m)^cmake version (\d+\.\d+(?:\.\d+)?)`), 1},
	"gcc":     {gccRE, 1},
	"g++":     {gccRE, 1},
	"cc":      {gccRE, 1},
	"c++":     {gccRE, 1},
}

// nvccReleaseRE reads an nvcc output that has the release but no V number.
var nvccReleaseRE = regexp.MustCompile(`release (\d+\.\d+)`)

// Known reports whether the version of the command name can be read.
func Known(name string) bool {
	_, ok := parsers[name]
	return ok
}

// KnownNames returns the commands whose version can be read, sorted.
func KnownNames() []string {
	out := make([]string, 0, len(parsers))
	for k := range parsers {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// ErrUnknownCommand is returned by ParseVersion for a command it cannot read.
var ErrUnknownCommand = errors.New("no version parser for this command")

// ParseVersion reads the version out of the --version output of the command name:
// "12.8.93" from nvcc's "Cuda compilation tools, release 12.8, V12.8.93", "3.11.2" from
// "Python 3.11.2", "12.2.0" from "gcc (Debian 12.2.0-14+deb12u1) 12.2.0".
func ParseVersion(name, output string) (string, error) {
	p, ok := parsers[name]
	if !ok {
		return "", fmt.Errorf("reading the version of %s: %w", name, ErrUnknownCommand)
	}
	if m := p.re.FindStringSubmatch(output); m != nil {
		return m[p.group], nil
	}
	if name == "nvcc" {
		if m := nvccReleaseRE.FindStringSubmatch(output); m != nil {
			return m[1], nil
		}
	}
	first, _, _ := strings.Cut(strings.TrimSpace(output), "\n")
	return "", fmt.Errorf("reading the version of %s: no version in its --version output %q", name, first)
}

// Major returns the first number of a version ("12" of "12.8.93").
func Major(version string) string {
	m, _, _ := strings.Cut(strings.TrimSpace(version), ".")
	return m
}

// Result is the verdict on one required command.
type Result struct {
	// Name is the command; Want the version range asked for ("" for presence only).
	Name string `json:"name"`
	Want string `json:"want,omitempty"`
	// Path and Version are what the host has ("" when absent or unread).
	Path    string `json:"path,omitempty"`
	Version string `json:"version,omitempty"`
	// OffPath is set when the command was found off the PATH (see PathLooker).
	OffPath bool `json:"off_path,omitempty"`
	// InstalledBy names the recipe step whose packages install the command, when the
	// command is missing now and that step provides it.
	InstalledBy string `json:"installed_by,omitempty"`
	// Problem says how the host falls short, with the fix ("" when it does not).
	Problem string `json:"problem,omitempty"`
	// Unchecked says why the verdict does not count (--root renders for another node,
	// whose own PATH decides): the rest is this host's, for information; "" when it counts.
	Unchecked string `json:"unchecked,omitempty"`
}

// OK reports whether the command does not stop the run.
func (r Result) OK() bool { return r.Problem == "" || r.Unchecked != "" }

// MarkUnchecked returns results with each one's verdict marked as not counting, and why.
func MarkUnchecked(results []Result, why string) []Result {
	out := append([]Result(nil), results...)
	for i := range out {
		out[i].Unchecked = why
	}
	return out
}

// String is the line plan prints for the command.
func (r Result) String() string {
	want := r.Name
	if r.Want != "" {
		want += " " + r.Want
	}
	if r.Unchecked != "" {
		here := r
		here.Unchecked = ""
		return want + ": unchecked (" + r.Unchecked + "); here: " + strings.TrimPrefix(here.String(), want+": ")
	}
	switch {
	case r.Problem != "":
		return want + ": " + r.Problem
	case r.InstalledBy != "" && r.Path == "":
		return want + ": not on the PATH yet; step " + r.InstalledBy + " installs it"
	case r.InstalledBy != "":
		return want + ": " + r.Version + " at " + r.Path + " now; step " + r.InstalledBy + " installs it"
	}
	where := r.Path
	if r.OffPath {
		where += " (not on the PATH)"
	}
	if r.Version != "" {
		return want + ": " + r.Version + " at " + where
	}
	return want + ": " + where
}

// Check checks every required command with look. provided maps commands that a step of
// the recipe installs to that step's name: such a command, when missing or too old now,
// is not a problem (the step runs before anything that uses it). Results are in name order.
func Check(ctx context.Context, reqs recipe.CommandRequirements, provided map[string]string, look Looker) []Result {
	var out []Result
	for _, name := range reqs.Names() {
		want := strings.TrimSpace(reqs[name].Version)
		r := Result{Name: name, Want: want}
		f := look.Lookup(ctx, name)
		r.Path, r.Version, r.OffPath = f.Path, f.Version, f.OffPath
		step := provided[name]
		switch {
		case f.Path == "":
			if step != "" {
				r.InstalledBy = step
				break
			}
			r.Problem = notFound(look, name) + "; " + Fix(name, want)
		case want == "":
		case !Known(name):
			r.Problem = fmt.Sprintf("found at %s, but sglprov cannot read its version (it reads nvcc, python3, git, cmake, gcc); drop the version range or check it in a command step", f.Path)
		case f.Version == "":
			r.Problem = fmt.Sprintf("found at %s, but its version could not be read (%s); %s", f.Path, f.Err, Fix(name, want))
		default:
			rng, err := versions.ParseRange(want)
			if err != nil {
				r.Problem = fmt.Sprintf("requires.commands.%s.version: %v", name, err)
				break
			}
			if !rng.Match(f.Version) {
				if step != "" {
					r.InstalledBy = step
					break
				}
				r.Problem = fmt.Sprintf("%s at %s does not satisfy %s; %s", f.Version, f.Path, want, Fix(name, want))
			}
		}
		out = append(out, r)
	}
	return out
}

// Problems returns the problems of results, one line each: "nvcc: 12.4.131 at
// /usr/local/cuda/bin/nvcc does not satisfy >=12.8; install ...".
func Problems(results []Result) []string {
	var out []string
	for _, r := range results {
		if !r.OK() {
			out = append(out, r.Name+": "+r.Problem)
		}
	}
	return out
}

// notFound says that name was not found and, for nvcc (looked for off the PATH too) when
// look can tell, every folder it was looked for in.
func notFound(look Looker, name string) string {
	s, ok := look.(Searcher)
	if !ok || name != "nvcc" {
		return "not found on the PATH"
	}
	dirs := s.Searched(name)
	if len(dirs) == 0 {
		return "not found on the PATH"
	}
	return "not found; sglprov looked in " + strings.Join(dirs, ", ")
}

// Fix says how to get a command: the Debian packages that have it, or, for nvcc, the CUDA
// toolkit from NVIDIA's apt repository with its bin folder on the PATH.
func Fix(name, want string) string {
	if name == "nvcc" {
		v := "a CUDA toolkit"
		if want != "" {
			v = "a CUDA toolkit " + want
		}
		return "install " + v + " from NVIDIA's apt repository (e.g. apt-get install cuda-toolkit-13-0), whose nvcc is in /usr/local/cuda/bin, where sglprov and the builds look; a toolkit elsewhere: set CUDA_HOME to its folder (see docs/cloud-init.md)"
	}
	if pkgs := debianPackages[name]; len(pkgs) > 0 {
		return "install it (apt-get install " + pkgs[0] + ") or add a packages step that does"
	}
	return "install it, or put the folder that has it on the PATH"
}

// debianPackages are the Debian/Ubuntu packages that install each known command, the
// usual one first. A package name ending in "*" is a prefix (NVIDIA's versioned toolkit
// packages).
var debianPackages = map[string][]string{
	"nvcc":    {"cuda-toolkit-*", "cuda-nvcc-*", "nvidia-cuda-toolkit"},
	"python3": {"python3", "python3-minimal", "python3-venv", "python3-dev"},
	"git":     {"git"},
	"cmake":   {"cmake"},
	"gcc":     {"gcc", "build-essential"},
	"g++":     {"g++", "build-essential"},
	"cc":      {"gcc", "build-essential"},
	"c++":     {"g++", "build-essential"},
	"make":    {"make", "build-essential"},
	"ninja":   {"ninja-build"},
	"curl":    {"curl"},
	"ccache":  {"ccache"},
}

// CommandsOf returns the commands, among those known here, that installing the Debian
// package pkg puts on the PATH, sorted: "git" for git, "g++", "gcc", "make" ... for
// build-essential, "nvcc" for cuda-toolkit-13-0.
func CommandsOf(pkg string) []string {
	name, _, _ := strings.Cut(pkg, "=")
	name, _, _ = strings.Cut(name, ":")
	var out []string
	for cmd, pkgs := range debianPackages {
		for _, p := range pkgs {
			if p == name || strings.HasSuffix(p, "*") && strings.HasPrefix(name, strings.TrimSuffix(p, "*")) {
				out = append(out, cmd)
				break
			}
		}
	}
	sort.Strings(out)
	return out
}

// CheckInstalled checks the commands names, which a step has just installed, against what
// reqs asks of them (names that reqs does not list are skipped): each must now be on the
// PATH and, when reqs gives a version range, have a version in it. It returns one line per
// command that falls short, in name order, naming the version installed, the range and the
// fix: the host's package sources have only that version, so the fix is a newer source.
func CheckInstalled(ctx context.Context, reqs recipe.CommandRequirements, names []string, look Looker) []string {
	sorted := append([]string(nil), names...)
	sort.Strings(sorted)
	var out []string
	for i, name := range sorted {
		req, ok := reqs[name]
		if !ok || i > 0 && sorted[i-1] == name {
			continue
		}
		want := strings.TrimSpace(req.Version)
		f := look.Lookup(ctx, name)
		switch {
		case f.Path == "":
			out = append(out, fmt.Sprintf("%s: still not found on the PATH after installing its packages; put the folder that has it on the PATH, or list the package that installs it", name))
		case want == "" || !Known(name):
		case f.Version == "":
			out = append(out, fmt.Sprintf("%s: installed at %s, but its version could not be read (%s)", name, f.Path, f.Err))
		default:
			rng, err := versions.ParseRange(want)
			if err != nil {
				out = append(out, fmt.Sprintf("%s: requires.commands.%s.version: %v", name, name, err))
				break
			}
			if !rng.Match(f.Version) {
				out = append(out, fmt.Sprintf("%s: the packages installed %s at %s, which does not satisfy %s; %s", name, f.Version, f.Path, want, NewerSource(name, want)))
			}
		}
	}
	return out
}

// newerSources names, for a few commands, a package source with newer versions than a
// distribution's own.
var newerSources = map[string]string{
	"cmake":   "Kitware's apt repository",
	"python3": "the deadsnakes PPA",
	"python":  "the deadsnakes PPA",
	"git":     "the git-core PPA",
	"gcc":     "the ubuntu-toolchain-r/test PPA",
	"g++":     "the ubuntu-toolchain-r/test PPA",
	"cc":      "the ubuntu-toolchain-r/test PPA",
	"c++":     "the ubuntu-toolchain-r/test PPA",
}

// NewerSource says how to get a version of name in the range want when the host's package
// sources have only an older one: add a newer source (a PPA or the vendor's apt repository)
// and run again.
func NewerSource(name, want string) string {
	if name == "nvcc" {
		return "the host's package sources have no CUDA toolkit " + want + ": add NVIDIA's apt repository, list a toolkit in range in apt: (e.g. cuda-toolkit-13-0) and put /usr/local/cuda/bin first on the PATH (see docs/cloud-init.md)"
	}
	src := "a PPA or the vendor's apt repository"
	if s := newerSources[name]; s != "" {
		src += ", e.g. " + s
	}
	return "the host's package sources have no " + name + " " + want + ": add a newer package source (" + src + ") in the host's image or cloud-init, then run again"
}
