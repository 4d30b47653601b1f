// Package pyindex is a real PEP 503 package index for tests: pure-Python wheels built in
// Go (a zip with the package, METADATA, WHEEL and RECORD, as a build backend writes them),
// served over HTTP on 127.0.0.1 with their sha256 in each link, for real pip to resolve
// and install from. See README.md for how it differs from PyPI.
package pyindex

import (
	"archive/zip"
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"html"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// BuildWheel returns a pure-Python wheel of project name at version: a zip with the
// package's __init__.py (V = the version, and marker) and the dist-info's METADATA,
// WHEEL and RECORD, as a build backend writes them. deps are Requires-Dist lines.
func BuildWheel(t testing.TB, name, version, marker string, deps ...string) (file string, data []byte) {
	t.Helper()
	dist := strings.ReplaceAll(name, "-", "_") + "-" + version
	var md strings.Builder
	fmt.Fprintf(&md, "Metadata-Version: 2.1\nName: %s\nVersion: %s\n", name, version)
	for _, d := range deps {
		fmt.Fprintf(&md, "Requires-Dist: %s\n", d)
	}
	files := [][2]string{
		{strings.ReplaceAll(name, "-", "_") + "/__init__.py", fmt.Sprintf("V = %q\nMARK = %q\n", version, marker)},
		{dist + ".dist-info/METADATA", md.String()},
		{dist + ".dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: sglprov-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"},
	}
	var rec strings.Builder
	for _, f := range files {
		s := sha256.Sum256([]byte(f[1]))
		fmt.Fprintf(&rec, "%s,sha256=%s,%d\n", f[0], base64.RawURLEncoding.EncodeToString(s[:]), len(f[1]))
	}
	fmt.Fprintf(&rec, "%s.dist-info/RECORD,,\n", dist)
	files = append(files, [2]string{dist + ".dist-info/RECORD", rec.String()})
	var buf bytes.Buffer
	z := zip.NewWriter(&buf)
	for _, f := range files {
		w, err := z.Create(f[0])
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write([]byte(f[1])); err != nil {
			t.Fatal(err)
		}
	}
	if err := z.Close(); err != nil {
		t.Fatal(err)
	}
	return dist + "-py3-none-any.whl", buf.Bytes()
}

// SHA256 is the hex sha256 of b.
func SHA256(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// Index is a PEP 503 simple package index served over HTTP on 127.0.0.1: /simple/NAME/
// lists the project's wheels with their sha256 in the link's fragment, /files/FILE serves
// them. Wheels can be published while it runs, and it can be stopped.
type Index struct {
	// Srv is the server: Srv.Close stops the index.
	Srv   *httptest.Server
	mu    sync.Mutex
	files map[string][]byte   // file name -> bytes
	proj  map[string][]string // normalized name -> file names
}

// Start serves an empty index until the test ends.
func Start(t testing.TB) *Index {
	ix := &Index{files: map[string][]byte{}, proj: map[string][]string{}}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ix.Srv = &httptest.Server{Listener: l, Config: &http.Server{Handler: ix}}
	ix.Srv.Start()
	t.Cleanup(ix.Srv.Close)
	return ix
}

// URL is the index URL for pip's --index-url.
func (ix *Index) URL() string { return ix.Srv.URL + "/simple/" }

// Publish adds a wheel of project name.
func (ix *Index) Publish(name, file string, data []byte) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	n := normalize(name)
	if _, ok := ix.files[file]; !ok {
		ix.proj[n] = append(ix.proj[n], file)
	}
	ix.files[file] = data
}

// ServeHTTP serves /simple/, /simple/NAME/ and /files/FILE.
func (ix *Index) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	switch {
	case r.URL.Path == "/simple/":
		var names []string
		for n := range ix.proj {
			names = append(names, n)
		}
		sort.Strings(names)
		fmt.Fprint(w, "<!DOCTYPE html><html><body>\n")
		for _, n := range names {
			fmt.Fprintf(w, "<a href=\"%s/\">%s</a>\n", n, n)
		}
		fmt.Fprint(w, "</body></html>\n")
	case strings.HasPrefix(r.URL.Path, "/simple/"):
		n := strings.Trim(strings.TrimPrefix(r.URL.Path, "/simple/"), "/")
		if n != normalize(n) {
			http.Redirect(w, r, "/simple/"+normalize(n)+"/", http.StatusMovedPermanently)
			return
		}
		files, ok := ix.proj[n]
		if !ok {
			http.NotFound(w, r)
			return
		}
		fmt.Fprint(w, "<!DOCTYPE html><html><body>\n")
		for _, f := range files {
			fmt.Fprintf(w, "<a href=\"/files/%s#sha256=%s\">%s</a>\n", html.EscapeString(f), SHA256(ix.files[f]), html.EscapeString(f))
		}
		fmt.Fprint(w, "</body></html>\n")
	case strings.HasPrefix(r.URL.Path, "/files/"):
		b, ok := ix.files[strings.TrimPrefix(r.URL.Path, "/files/")]
		if !ok {
			http.NotFound(w, r)
			return
		}
		// With its length, as PyPI's file host sends it.
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Length", strconv.Itoa(len(b)))
		_, _ = w.Write(b)
	default:
		http.NotFound(w, r)
	}
}

// NeedPip skips the test, saying why, when python3 has no pip or venv; it returns python3.
func NeedPip(t testing.TB) string {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 is not installed (Debian: apt-get install python3 python3-pip python3-venv, or `make deps` as root)")
	}
	if out, err := exec.Command(py, "-m", "pip", "--version").CombinedOutput(); err != nil {
		t.Skipf("python3 -m pip is not there (%v: %s; Debian: apt-get install python3-pip python3-venv, or `make deps` as root)", err, bytes.TrimSpace(out))
	}
	if out, err := exec.Command(py, "-c", "import venv, ensurepip").CombinedOutput(); err != nil {
		t.Skipf("python3 has no venv with pip (%v: %s; Debian: apt-get install python3-venv)", err, bytes.TrimSpace(out))
	}
	return py
}

// Venv makes a virtual environment in dir and returns its python and site-packages.
func Venv(t testing.TB, py, dir string) (python, site string) {
	t.Helper()
	if out, err := exec.Command(py, "-m", "venv", dir).CombinedOutput(); err != nil {
		t.Fatalf("python3 -m venv: %v: %s", err, out)
	}
	m, _ := filepath.Glob(filepath.Join(dir, "lib", "python3*", "site-packages"))
	if len(m) != 1 {
		t.Fatalf("no site-packages in the venv %s: %v", dir, m)
	}
	return filepath.Join(dir, "bin", "python"), m[0]
}

// PipEnv is the environment pip runs with in the tests: no cache (a wheel pip cached
// from an earlier run must not stand in for the index), no config of the host's.
func PipEnv(extra ...string) []string {
	return append([]string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/nonexistent", "PIP_NO_CACHE_DIR=1",
		"PIP_CONFIG_FILE=/dev/null", "PIP_DISABLE_PIP_VERSION_CHECK=1", "PIP_NO_INPUT=1"}, extra...)
}

var nameSep = regexp.MustCompile(`[-_.]+`)

// normalize is a project name as PEP 503 compares names.
func normalize(name string) string {
	return nameSep.ReplaceAllString(strings.ToLower(name), "-")
}
