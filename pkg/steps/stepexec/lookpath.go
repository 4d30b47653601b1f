package stepexec

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// ErrNotFound is wrapped by LookPath when no executable of the name is on the PATH.
var ErrNotFound = errors.New("executable file not found in PATH")

// Getenv returns the value of k in an environ list.
func Getenv(environ []string, k string) string {
	for i := len(environ) - 1; i >= 0; i-- {
		if key, v, ok := strings.Cut(environ[i], "="); ok && key == k {
			return v
		}
	}
	return ""
}

// LookPath finds an executable named file in the PATH of environ (not the process's own,
// which may differ when the recipe sets PATH). A name with a slash is returned as it is,
// resolved against dir when relative.
func LookPath(file, dir string, environ []string) (string, error) {
	if strings.Contains(file, "/") {
		p := file
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		if err := IsExecutable(p); err != nil {
			return "", err
		}
		return p, nil
	}
	for _, d := range filepath.SplitList(Getenv(environ, "PATH")) {
		if d == "" || !filepath.IsAbs(d) {
			// Relative PATH entries would depend on the build directory; skip them.
			continue
		}
		p := filepath.Join(d, file)
		if IsExecutable(p) == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: %w", file, ErrNotFound)
}

// IsExecutable returns nil when p is a regular file with an execute bit, else why not.
func IsExecutable(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("%s: not an executable file", p)
	}
	return nil
}
