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

// Installed reads the name and version of every distribution in the site-packages
// folders dirs from its *.dist-info/METADATA headers (no Python runs), by normalized name.
// A distribution of names only (Names()) is read when only is set.
func Installed(dirs []string, only bool) (map[string]string, error) {
	want := map[string]bool{}
	for _, n := range Names() {
		want[n] = true
	}
	out := map[string]string{}
	for _, dir := range dirs {
		entries, err := os.ReadDir(dir)
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", dir, err)
		}
		if len(entries) > maxDistInfos*4 {
			return nil, fmt.Errorf("reading %s: %d entries, more than a site-packages folder holds", dir, len(entries))
		}
		for _, e := range entries {
			if !e.IsDir() || !strings.HasSuffix(e.Name(), ".dist-info") {
				continue
			}
			// The folder's name is NAME-VERSION.dist-info; METADATA says the same, and is
			// what pip itself reads.
			base := strings.TrimSuffix(e.Name(), ".dist-info")
			if i := strings.LastIndexByte(base, '-'); only && i > 0 && !want[Normalize(base[:i])] {
				continue
			}
			name, version, err := readMetadata(filepath.Join(dir, e.Name(), "METADATA"))
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err != nil {
				return nil, err
			}
			if name != "" && version != "" {
				out[Normalize(name)] = version
			}
		}
	}
	return out, nil
}

// readMetadata reads the Name and Version headers of a METADATA file.
func readMetadata(path string) (name, version string, err error) {
	f, err := os.Open(path)
	if err != nil {
		return "", "", fmt.Errorf("reading %s: %w", path, err)
	}
	defer f.Close()
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
			name = strings.TrimSpace(v)
		case "version":
			version = strings.TrimSpace(v)
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
