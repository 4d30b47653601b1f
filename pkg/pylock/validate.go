package pylock

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"path"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"
)

// A lock is data: every field of every entry is checked here before anything is made of
// it (a requirements line, a file name, a download), so that no field can carry a second
// requirement, an option or an environment marker into pip.

// projectRE is a project name as PEP 508 allows it (ASCII letters and digits, with ".", "-"
// and "_" inside); normalRE is one after PEP 503's normalization (lower case, one "-"
// between runs of letters and digits), which is how a lock names a project.
var (
	projectRE = regexp.MustCompile(`^[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?$`)
	normalRE  = regexp.MustCompile(`^[a-z0-9]+(?:-[a-z0-9]+)*$`)
)

// ValidName reports whether name is a project name by PEP 508.
func ValidName(name string) bool { return projectRE.MatchString(name) }

// pep440RE is a version by PEP 440 (its grammar: epoch, release, pre-, post-, dev-release
// and local label), case-insensitive, without surrounding space.
var pep440RE = regexp.MustCompile(`(?i)^v?` +
	`(?:([0-9]+)!)?` + // 1 epoch
	`([0-9]+(?:\.[0-9]+)*)` + // 2 release
	`(?:[-_.]?(a|b|c|rc|alpha|beta|pre|preview)[-_.]?([0-9]+)?)?` + // 3, 4 pre-release
	`(?:-([0-9]+)|[-_.]?(post|rev|r)[-_.]?([0-9]+)?)?` + // 5 | 6, 7 post-release
	`(?:[-_.]?(dev)[-_.]?([0-9]+)?)?` + // 8, 9 dev release
	`(?:\+([a-z0-9]+(?:[-_.][a-z0-9]+)*))?$`) // 10 local label

// CanonicalVersion is version in PEP 440's normal form, with the release's trailing zeros
// dropped (1.0 and 1.0.0 are one version), and whether version is a PEP 440 version at all.
func CanonicalVersion(version string) (string, bool) {
	m := pep440RE.FindStringSubmatch(version)
	if m == nil {
		return "", false
	}
	num := func(s string) string {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return strings.TrimLeft(s, "0") // beyond uint64: digits without leading zeros
		}
		return strconv.FormatUint(n, 10)
	}
	var b strings.Builder
	if m[1] != "" && num(m[1]) != "0" {
		b.WriteString(num(m[1]) + "!")
	}
	rel := strings.Split(m[2], ".")
	for i := range rel {
		rel[i] = num(rel[i])
	}
	for len(rel) > 1 && rel[len(rel)-1] == "0" {
		rel = rel[:len(rel)-1]
	}
	b.WriteString(strings.Join(rel, "."))
	if m[3] != "" {
		l := strings.ToLower(m[3])
		switch l {
		case "alpha":
			l = "a"
		case "beta":
			l = "b"
		case "c", "pre", "preview":
			l = "rc"
		}
		b.WriteString(l + num("0"+m[4]))
	}
	switch {
	case m[5] != "":
		b.WriteString(".post" + num(m[5]))
	case m[6] != "":
		b.WriteString(".post" + num("0"+m[7]))
	}
	if m[8] != "" {
		b.WriteString(".dev" + num("0"+m[9]))
	}
	if m[10] != "" {
		b.WriteString("+" + strings.ToLower(nameSep.ReplaceAllString(m[10], ".")))
	}
	return b.String(), true
}

// SameVersion reports whether a and b are one PEP 440 version (both valid).
func SameVersion(a, b string) bool {
	ca, oka := CanonicalVersion(a)
	cb, okb := CanonicalVersion(b)
	return oka && okb && ca == cb
}

// Wheel file names (the binary distribution format): NAME-VERSION[-BUILD]-PY-ABI-PLATFORM.whl,
// NAME with "_" for each run of "-", "_" and ".", tags of letters, digits, "_" and ".".
var (
	wheelDistRE  = regexp.MustCompile(`^[A-Za-z0-9](?:[A-Za-z0-9._]*[A-Za-z0-9])?$`)
	wheelBuildRE = regexp.MustCompile(`^[0-9][A-Za-z0-9_.]*$`)
	wheelTagRE   = regexp.MustCompile(`^[A-Za-z0-9_.]+$`)
)

// ParseWheelName splits a wheel's file name into its project name (normalized) and its
// version, refusing a name that is not a wheel's.
func ParseWheelName(file string) (name, version string, err error) {
	base, ok := strings.CutSuffix(file, ".whl")
	if !ok || path.Base(file) != file {
		return "", "", fmt.Errorf("%q is not a wheel's file name (NAME-VERSION-PY-ABI-PLATFORM.whl)", file)
	}
	parts := strings.Split(base, "-")
	if len(parts) != 5 && len(parts) != 6 {
		return "", "", fmt.Errorf("%q is not a wheel's file name: it has %d parts between \"-\", a wheel 5 or 6 (NAME-VERSION[-BUILD]-PY-ABI-PLATFORM.whl)", file, len(parts))
	}
	if !wheelDistRE.MatchString(parts[0]) {
		return "", "", fmt.Errorf("%q is not a wheel's file name: %q is no project name", file, parts[0])
	}
	if _, ok := CanonicalVersion(parts[1]); !ok {
		return "", "", fmt.Errorf("%q is not a wheel's file name: %q is no PEP 440 version", file, parts[1])
	}
	if len(parts) == 6 && !wheelBuildRE.MatchString(parts[2]) {
		return "", "", fmt.Errorf("%q is not a wheel's file name: the build tag %q does not start with a digit", file, parts[2])
	}
	for _, tag := range parts[len(parts)-3:] {
		if !wheelTagRE.MatchString(tag) {
			return "", "", fmt.Errorf("%q is not a wheel's file name: %q is no compatibility tag", file, tag)
		}
	}
	return Normalize(parts[0]), parts[1], nil
}

// urlRE is the characters a lock's URL may hold: RFC 3986's, less the ones pip's
// requirements files give a meaning of their own (";" starts an environment marker, "#" a
// comment, "$" a variable, "\" joins lines) and every space or control character.
var urlRE = regexp.MustCompile(`^[A-Za-z0-9\-._~:/?\[\]@!&'()*+,=%]+$`)

// checkURL checks a package's URL: http, https or file, nothing pip's requirements files
// would read as more than a URL, no credentials and no fragment, and a path whose last
// element is the package's wheel.
func checkURL(raw, wheel string) error {
	if !urlRE.MatchString(raw) {
		bad := strings.IndexFunc(raw, func(r rune) bool { return !urlRE.MatchString(string(r)) })
		r, _ := utf8.DecodeRuneInString(raw[max(bad, 0):])
		return fmt.Errorf("the url %q holds %q at byte %d: a lock's url is one URL, with no space, newline, environment marker (;), comment (#) or pip option", raw, r, bad)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("the url %q: %w", raw, err)
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https" && u.Scheme != "file":
		return fmt.Errorf("the url %q: want an http, https or file URL", raw)
	case u.Scheme != "file" && u.Host == "":
		return fmt.Errorf("the url %q names no host", raw)
	case u.User != nil:
		return fmt.Errorf("the url %q holds credentials: a lock is reviewed and committed; give pip the credentials from netrc or a keyring instead", raw)
	case u.Opaque != "":
		return fmt.Errorf("the url %q: want SCHEME://HOST/PATH", raw)
	case path.Base(u.Path) != wheel:
		return fmt.Errorf("the url %q is not of the wheel %s: its file is %q", raw, wheel, path.Base(u.Path))
	}
	return nil
}

// check checks one package entry: a normalized project name, a PEP 440 version, a wheel
// file name of that project and version, a sha256 of 64 lower-case hex digits, and a URL
// (if any) of that very wheel file.
func (p Package) check() error {
	if !normalRE.MatchString(p.Name) {
		return fmt.Errorf("the name %q is not a normalized project name (PEP 503: lower case, letters, digits and single \"-\")", p.Name)
	}
	if _, ok := CanonicalVersion(p.Version); !ok {
		return fmt.Errorf("%s: the version %q is not a PEP 440 version", p.Name, p.Version)
	}
	wn, wv, err := ParseWheelName(p.Wheel)
	if err != nil {
		return fmt.Errorf("%s: %w", p.Name, err)
	}
	if wn != p.Name || !SameVersion(wv, p.Version) {
		return fmt.Errorf("%s %s: the wheel %s is of %s %s", p.Name, p.Version, p.Wheel, wn, wv)
	}
	if !hexRE.MatchString(p.SHA256) {
		return fmt.Errorf("%s: the sha256 %q is not 64 lower-case hex digits", p.Name, p.SHA256)
	}
	if p.URL != "" {
		if err := checkURL(p.URL, p.Wheel); err != nil {
			return fmt.Errorf("%s: %w", p.Name, err)
		}
	}
	return nil
}

// check checks one local entry: a normalized name, a PEP 440 version, a known source, and
// a URL without space or control characters (a local entry's URL is for review: it is
// never given to pip).
func (x Local) check() error {
	if !normalRE.MatchString(x.Name) {
		return fmt.Errorf("the local name %q is not a normalized project name", x.Name)
	}
	if _, ok := CanonicalVersion(x.Version); !ok {
		return fmt.Errorf("local %s: the version %q is not a PEP 440 version", x.Name, x.Version)
	}
	if x.Source != "editable" && x.Source != "unrecorded" {
		return fmt.Errorf("local %s: the source %q is neither editable nor unrecorded", x.Name, x.Source)
	}
	if strings.ContainsFunc(x.URL, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		return fmt.Errorf("local %s: the url %q holds a space or control character", x.Name, x.URL)
	}
	return nil
}

// Validate checks every entry of l (see Package and Local) and refuses a project named
// twice and a wheel file two packages name. what names the lock in errors.
func (l *Lock) Validate(what string) error {
	if l.Version != Version {
		return fmt.Errorf("the lock %s has version %d; this sglprov reads version %d (write it again with `sglprov pylock -f RECIPE`)", what, l.Version, Version)
	}
	names, wheels := map[string]bool{}, map[string]string{}
	for i, p := range l.Packages {
		if err := p.check(); err != nil {
			return fmt.Errorf("the lock %s, package %d: %w", what, i+1, err)
		}
		if names[p.Name] {
			return fmt.Errorf("the lock %s names %s twice", what, p.Name)
		}
		names[p.Name] = true
		w := strings.ToLower(p.Wheel)
		if other, ok := wheels[w]; ok {
			return fmt.Errorf("the lock %s: %s and %s both name the wheel %s; each package is its own wheel", what, other, p.Name, p.Wheel)
		}
		wheels[w] = p.Name
	}
	for i, x := range l.Local {
		if err := x.check(); err != nil {
			return fmt.Errorf("the lock %s, local %d: %w", what, i+1, err)
		}
		if names[x.Name] {
			return fmt.Errorf("the lock %s names %s twice", what, x.Name)
		}
		names[x.Name] = true
	}
	return nil
}

// checkJSON refuses what a JSON decoder would read past: text after the first document,
// a key given twice in one object (the decoder keeps the last, a reader sees the first),
// and a key not in lower case (the decoder matches keys without regard to case).
func checkJSON(b []byte) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	type frame struct {
		object bool
		keys   map[string]bool
		key    bool // the next token of an object is a key
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		top := (*frame)(nil)
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if top != nil && top.object && top.key {
			if d, ok := tok.(json.Delim); ok && d == '}' {
				stack = stack[:len(stack)-1]
			} else {
				k, _ := tok.(string)
				if k != strings.ToLower(k) {
					return fmt.Errorf("the key %q is not in lower case", k)
				}
				if top.keys[k] {
					return fmt.Errorf("the key %q is given twice in one object", k)
				}
				top.keys[k] = true
				top.key = false
				continue
			}
		} else if d, ok := tok.(json.Delim); ok {
			switch d {
			case '{':
				stack = append(stack, &frame{object: true, keys: map[string]bool{}, key: true})
				continue
			case '[':
				stack = append(stack, &frame{})
				continue
			default: // ']'
				stack = stack[:len(stack)-1]
			}
		}
		// A value ended: its object's next token is a key.
		if len(stack) > 0 {
			if f := stack[len(stack)-1]; f.object {
				f.key = true
			}
			continue
		}
		// The document ended: nothing but space may follow.
		if _, err := dec.Token(); !errors.Is(err, io.EOF) {
			return fmt.Errorf("text follows the JSON document at byte %d", dec.InputOffset())
		}
		return nil
	}
}
