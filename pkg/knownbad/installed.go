package knownbad

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// maxMetadataHead is how much of a METADATA file is read: its headers come first.
const maxMetadataHead = 64 << 10

// maxDistInfos bounds how many *.dist-info folders one site-packages may hold for a read.
const maxDistInfos = 20000

// SitePackages returns the site-packages folders of the virtual environment whose
// interpreter is python (e.g. /opt/sglang/.venv/bin/python), under root ("" or "/" for
// the host's own). None when the environment does not exist (yet).
func SitePackages(root, python string) ([]string, error) {
	venv := filepath.Dir(filepath.Dir(python))
	var out []string
	for _, lib := range []string{"lib", "lib64"} {
		m, err := filepath.Glob(filepath.Join(root, venv, lib, "python3*", "site-packages"))
		if err != nil {
			return nil, fmt.Errorf("listing %s: %w", filepath.Join(venv, lib), err)
		}
		for _, d := range m {
			if fi, err := os.Stat(d); err == nil && fi.IsDir() && !contains(out, d) {
				out = append(out, d)
			}
		}
	}
	return out, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// Dist is one installed distribution, as Python's importlib.metadata finds it.
type Dist struct {
	// Name and Version are the METADATA (or PKG-INFO) headers'; Name as written there.
	Name, Version string
	// Path is the .dist-info or .egg-info it was read from.
	Path string
}

// InstalledDists reads every distribution in the site-packages folders dirs, in the order
// importlib.metadata searches them (folder by folder, names sorted): *.dist-info folders
// (METADATA), *.egg-info folders (PKG-INFO) and *.egg-info files (the file itself), a
// symbolic link to either followed. The name is the metadata's Name header, not the
// folder's; with only set, distributions the table does not name are left out. A project
// installed twice is listed twice (Duplicates). Metadata files are opened without blocking
// and read only when regular (a FIFO is an error naming it), each read bounded.
func InstalledDists(dirs []string, only bool) ([]Dist, error) {
	want := map[string]bool{}
	for _, n := range Names() {
		want[n] = true
	}
	var out []Dist
	for _, dir := range dirs {
		entries, err := os.ReadDir(dir)
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", dir, err)
		}
		if len(entries) > maxDistInfos*4 {
			return nil, fmt.Errorf("reading %s: %d entries, more than a site-packages folder holds", dir, len(entries))
		}
		for _, e := range entries {
			name := e.Name()
			if !strings.HasSuffix(name, ".dist-info") && !strings.HasSuffix(name, ".egg-info") {
				continue
			}
			p := filepath.Join(dir, name)
			fi, err := os.Stat(p) // follows a link, as Python's path walk does
			if err != nil {
				continue // a dangling link: nothing Python could read either
			}
			meta := p
			switch {
			case fi.IsDir() && strings.HasSuffix(name, ".dist-info"):
				meta = filepath.Join(p, "METADATA")
			case fi.IsDir():
				meta = filepath.Join(p, "PKG-INFO")
			case !strings.HasSuffix(name, ".egg-info"):
				continue
			}
			n, v, err := readMetadata(meta)
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err != nil {
				return nil, err
			}
			if n == "" || v == "" || (only && !want[Normalize(n)]) {
				continue
			}
			out = append(out, Dist{Name: n, Version: v, Path: p})
		}
	}
	return out, nil
}

// Installed is InstalledDists by normalized name: the version importlib.metadata.version
// returns, the first found.
func Installed(dirs []string, only bool) (map[string]string, error) {
	ds, err := InstalledDists(dirs, only)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, d := range ds {
		if _, ok := out[Normalize(d.Name)]; !ok {
			out[Normalize(d.Name)] = d.Version
		}
	}
	return out, nil
}

// Duplicates returns the projects ds holds more than once, by normalized name: an
// environment where what importlib.metadata reports depends on listing order.
func Duplicates(ds []Dist) map[string][]Dist {
	by := map[string][]Dist{}
	for _, d := range ds {
		by[Normalize(d.Name)] = append(by[Normalize(d.Name)], d)
	}
	for n, l := range by {
		if len(l) < 2 {
			delete(by, n)
		}
	}
	return by
}

// FactsOf returns the package facts of ds: every version of each project, so that a bad
// one among duplicates is found.
func FactsOf(ds []Dist) (first map[string]string, also map[string][]string) {
	first, also = map[string]string{}, map[string][]string{}
	for _, d := range ds {
		n := Normalize(d.Name)
		if _, ok := first[n]; !ok {
			first[n] = d.Version
		} else {
			also[n] = append(also[n], d.Version)
		}
	}
	return first, also
}

// readMetadata reads the Name and Version headers of a METADATA or PKG-INFO file, opened
// without blocking and read only when it is a regular file.
func readMetadata(path string) (name, version string, err error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return "", "", fmt.Errorf("reading %s: %w", path, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", "", fmt.Errorf("reading %s: %w", path, err)
	}
	if !fi.Mode().IsRegular() {
		return "", "", fmt.Errorf("reading %s: not a regular file (%s); a package's metadata is a file", path, fi.Mode().Type())
	}
	sc := bufio.NewScanner(io.LimitReader(f, maxMetadataHead))
	sc.Buffer(make([]byte, 0, 4096), maxMetadataHead)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			break // the headers end at the first empty line
		}
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch strings.ToLower(strings.TrimSpace(k)) {
		case "name":
			if name == "" {
				name = strings.TrimSpace(v)
			}
		case "version":
			if version == "" {
				version = strings.TrimSpace(v)
			}
		}
		if name != "" && version != "" {
			break
		}
	}
	if err := sc.Err(); err != nil {
		return "", "", fmt.Errorf("reading %s: %w", path, err)
	}
	return name, version, nil
}
