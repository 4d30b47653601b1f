// Package pylock is a lock of a Python environment: every distribution a recipe's Python
// steps installed, with its exact version and the sha256 of the wheel it came from, read
// from the environment (each *.dist-info's METADATA and direct_url.json) and from the
// reports pip wrote while it installed (pip install --report, which sglprov asks for with
// PIP_REPORT), never by resolving again. A lock is written as reviewable JSON next to the
// recipe; installing it is pip install --require-hashes --no-deps -r of its requirements,
// from a folder of wheels (taken from the fleet cache) or from the package index. A lock is
// data: every field is checked before a requirements line is written from it (Validate),
// and after pip the environment is compared with the lock (Verify).
package pylock

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"

	"github.com/sglprov/sglprov/pkg/safefile"
)

// Version is the lock format's version.
const Version = 1

// MaxLock bounds a lock file or a pip report read from disk.
const MaxLock = 64 << 20

const maxLock = MaxLock

// Lock is a locked Python environment.
type Lock struct {
	// Version is the format's version (Version).
	Version int `json:"version"`
	// Packages are the distributions installed from wheels, by normalized name.
	Packages []Package `json:"packages"`
	// Local are the distributions that came from no wheel the lock can name: an editable
	// install of a source tree (SGLang's python folder), or what the venv itself brought
	// (pip, setuptools). They are listed for review; the steps that made them make them
	// again, and installing the lock leaves them alone.
	Local []Local `json:"local,omitempty"`
}

// Package is one distribution installed from a wheel.
type Package struct {
	// Name is the normalized project name (PEP 503); Version the installed version.
	Name    string `json:"name"`
	Version string `json:"version"`
	// Wheel is the wheel's file name.
	Wheel string `json:"wheel"`
	// SHA256 is the wheel file's sha256, hex.
	SHA256 string `json:"sha256"`
	// URL is where the wheel was downloaded from (no credentials, no query), for review
	// and for collecting the wheels on the node that resolved them.
	URL string `json:"url,omitempty"`
}

// Local is a distribution that no wheel in the lock stands for.
type Local struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	// Source says where it came from: "editable" (URL names the folder) or "unrecorded"
	// (installed without a report of its wheel: by the venv, or before sglprov recorded
	// pip's reports).
	Source string `json:"source"`
	URL    string `json:"url,omitempty"`
}

var nameSep = regexp.MustCompile(`[-_.]+`)

// Normalize is a project name as PEP 503 compares names.
func Normalize(name string) string {
	return nameSep.ReplaceAllString(strings.ToLower(strings.TrimSpace(name)), "-")
}

var (
	hexRE = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

// Encode is the lock as written: indented JSON, packages sorted by name, a final newline.
func (l *Lock) Encode() ([]byte, error) {
	c := *l
	c.Version = Version
	c.Packages = slices.Clone(l.Packages)
	c.Local = slices.Clone(l.Local)
	slices.SortFunc(c.Packages, func(a, b Package) int { return strings.Compare(a.Name, b.Name) })
	slices.SortFunc(c.Local, func(a, b Local) int { return strings.Compare(a.Name, b.Name) })
	b, err := json.MarshalIndent(&c, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encoding the lock: %w", err)
	}
	return append(b, '\n'), nil
}

// Digest is the sha256 of the lock as Encode writes it: a locked step's fingerprint.
func (l *Lock) Digest() (string, error) {
	b, err := l.Encode()
	if err != nil {
		return "", err
	}
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:]), nil
}

// Parse reads a lock and checks it whole (Validate): one JSON document, no key twice, no
// unknown key, and every entry's fields. what names the lock in errors (its file).
func Parse(b []byte, what string) (*Lock, error) {
	if len(b) > maxLock {
		return nil, fmt.Errorf("the lock %s is %d bytes, more than %d", what, len(b), maxLock)
	}
	if err := checkJSON(b); err != nil {
		return nil, fmt.Errorf("reading the lock %s: %w (write it with `sglprov pylock -f RECIPE`)", what, err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var l Lock
	if err := dec.Decode(&l); err != nil {
		return nil, fmt.Errorf("reading the lock %s: %w (write it with `sglprov pylock -f RECIPE`)", what, err)
	}
	if err := l.Validate(what); err != nil {
		return nil, fmt.Errorf("%w (fix the entry, or write the lock again with `sglprov pylock -f RECIPE`)", err)
	}
	return &l, nil
}

// Read reads and parses the lock file at p: a regular file of at most 64 MiB, opened
// without waiting (a FIFO is refused at once, never read).
func Read(p string) (*Lock, error) {
	b, err := readBounded(p, maxLock)
	if err != nil {
		return nil, fmt.Errorf("reading the lock: %w", err)
	}
	return Parse(b, p)
}

// Requirements is the lock as a pip requirements file for --require-hashes --no-deps:
// one "name==version --hash=sha256:HEX" line per package.
// With byURL, a package whose URL the lock records is "name @ URL --hash=sha256:HEX"
// instead: pip fetches that very file, from no index. Each line is written from fields
// Validate accepts only; a lock it refuses writes nothing.
func (l *Lock) Requirements(byURL bool) ([]byte, error) {
	if err := l.Validate("to install"); err != nil {
		return nil, err
	}
	var b bytes.Buffer
	b.WriteString("# Written by sglprov from a Python lock; install with --require-hashes --no-deps.\n")
	ps := slices.Clone(l.Packages)
	slices.SortFunc(ps, func(a, b Package) int { return strings.Compare(a.Name, b.Name) })
	for _, p := range ps {
		if byURL && p.URL != "" {
			fmt.Fprintf(&b, "%s @ %s --hash=sha256:%s\n", p.Name, p.URL, p.SHA256)
			continue
		}
		fmt.Fprintf(&b, "%s==%s --hash=sha256:%s\n", p.Name, p.Version, p.SHA256)
	}
	return b.Bytes(), nil
}

// cleanURL drops credentials, query and fragment from a download URL.
func cleanURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return ""
	}
	u.User, u.RawQuery, u.Fragment, u.RawFragment = nil, "", "", ""
	return u.String()
}

// readBounded reads the regular file at p, refusing one larger than limit and anything
// that is not a regular file without waiting on it (a FIFO).
func readBounded(p string, limit int64) ([]byte, error) {
	return safefile.ReadRegular(p, limit)
}
