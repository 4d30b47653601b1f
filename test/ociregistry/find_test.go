package ociregistry

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
)

// htpasswd is fleet:bcrypt("s3cret-Pa55") at cost 4.
const htpasswd = "fleet:$2b$04$ZexirK4s5AZWsEOjEx0YuOUGqcX2LPLjaRPekIXlNJYwOWvTcmlr6\n"

// TestParseVersion: the release is read from both registries' --version lines, and a line
// that is not distribution's is an error.
func TestParseVersion(t *testing.T) {
	for _, c := range []struct{ line, want string }{
		{"registry github.com/distribution/distribution/v3 v3.0.0+unknown\n", "3.0.0"},
		{"docker-registry github.com/docker/distribution 2.8.2+ds1\n", "2.8.2"},
		{"/x/bin/registry github.com/distribution/distribution/v3 v3.1.2\n", "3.1.2"},
	} {
		got, err := ParseVersion(c.line)
		if err != nil || got != c.want {
			t.Errorf("ParseVersion(%q) = %q, %v; want %q", c.line, got, err, c.want)
		}
	}
	for _, line := range []string{"", "zot v2.1.0", "registry github.com/distribution/distribution/v3 unknown"} {
		if got, err := ParseVersion(line); err == nil {
			t.Errorf("ParseVersion(%q) = %q, want an error", line, got)
		}
	}
}

// fakeExecutable writes an executable script at path that prints line for --version.
func fakeExecutable(t *testing.T, path, line string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("#!/bin/sh\necho '"+line+"'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
}

// TestCandidatesPreferTheBuiltRegistry: from anywhere in a checkout, the checkout's
// bin/registry (distribution 3, as make deps builds it) comes before Debian's
// docker-registry on PATH; without it Debian's is the one; SGLPROV_OCI_REGISTRY picks one
// alone; with neither there is ErrMissing. A go.mod of another module is not a checkout.
func TestCandidatesPreferTheBuiltRegistry(t *testing.T) {
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "go.mod"), []byte("module github.com/sglprov/sglprov\n\ngo 1.26\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(root, "pkg", "x")
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	pathDir := t.TempDir()
	debian := filepath.Join(pathDir, Binary)
	fakeExecutable(t, debian, "docker-registry github.com/docker/distribution 2.8.2+ds1")
	t.Setenv("PATH", pathDir)
	t.Setenv(EnvExecutable, "")
	t.Chdir(sub)

	names := func() []string {
		t.Helper()
		c, err := Candidates()
		if err != nil {
			t.Fatal(err)
		}
		var s []string
		for _, e := range c {
			s = append(s, e.String())
		}
		return s
	}
	if got, want := fmt.Sprint(names()), fmt.Sprint([]string{debian + " (distribution 2.8.2)"}); got != want {
		t.Errorf("without bin/registry: candidates %s, want %s", got, want)
	}
	built := filepath.Join(root, Built)
	fakeExecutable(t, built, "registry github.com/distribution/distribution/v3 v3.0.0+unknown")
	if got, want := fmt.Sprint(names()), fmt.Sprint([]string{built + " (distribution 3.0.0)", debian + " (distribution 2.8.2)"}); got != want {
		t.Errorf("with bin/registry: candidates %s, want %s", got, want)
	}
	if e, err := Find(); err != nil || e.Path != built || e.Major() != 3 {
		t.Errorf("Find() = %v, %v; want %s, major 3", e, err, built)
	}
	t.Setenv(EnvExecutable, Binary)
	if got, want := fmt.Sprint(names()), fmt.Sprint([]string{debian + " (distribution 2.8.2)"}); got != want {
		t.Errorf("with %s=%s: candidates %s, want %s", EnvExecutable, Binary, got, want)
	}
	t.Setenv(EnvExecutable, "")

	// The same tree under a go.mod of another module: not a checkout, only PATH counts.
	if err := os.WriteFile(filepath.Join(root, "go.mod"), []byte("module example.com/other\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, want := fmt.Sprint(names()), fmt.Sprint([]string{debian + " (distribution 2.8.2)"}); got != want {
		t.Errorf("in another module: candidates %s, want %s", got, want)
	}
	t.Setenv("PATH", t.TempDir())
	if e, err := Find(); err != ErrMissing {
		t.Errorf("with no registry: Find() = %v, %v; want ErrMissing", e, err)
	}
}

// TestEachRegistryServes: every registry installed (distribution 3 from make deps, Debian's
// 2.8) starts with the generated config and takes and serves a blob, behind htpasswd auth
// that refuses a request without credentials. Distribution 3, when built, is the one Start
// prefers; with none installed the test is skipped, saying how to get one.
func TestEachRegistryServes(t *testing.T) {
	t.Setenv(EnvExecutable, "")
	cands, err := Candidates()
	if err != nil {
		t.Fatal(err)
	}
	if len(cands) == 0 {
		t.Skipf("skipping: %v", ErrMissing)
	}
	for i, e := range cands {
		if e.Major() == 3 && i != 0 {
			t.Fatalf("registries installed: %v; want distribution 3 (make deps builds it) first", cands)
		}
	}
	blob := bytes.Repeat([]byte("sglprov "), 1<<17)
	digest := fmt.Sprintf("sha256:%x", sha256.Sum256(blob))
	for _, e := range cands {
		t.Run(fmt.Sprintf("distribution %s", e.Version), func(t *testing.T) {
			r := StartWithT(t, Options{Htpasswd: htpasswd, Executable: &e})
			if r.Executable != e {
				t.Errorf("running %v, want %v", r.Executable, e)
			}
			do := func(method, url string, body []byte, auth bool) *http.Response {
				t.Helper()
				req, err := http.NewRequest(method, url, bytes.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				if auth {
					req.SetBasicAuth("fleet", "s3cret-Pa55")
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { resp.Body.Close() })
				return resp
			}
			base := "http://" + r.Addr + "/v2/t/blobs/"
			if resp := do(http.MethodPost, base+"uploads/", nil, false); resp.StatusCode != http.StatusUnauthorized {
				t.Fatalf("POST without credentials: %s, want 401", resp.Status)
			}
			resp := do(http.MethodPost, base+"uploads/", nil, true)
			if resp.StatusCode != http.StatusAccepted {
				t.Fatalf("POST of an upload: %s", resp.Status)
			}
			loc, err := resp.Location()
			if err != nil {
				t.Fatal(err)
			}
			q := loc.Query()
			q.Set("digest", digest)
			loc.RawQuery = q.Encode()
			if resp := do(http.MethodPut, loc.String(), blob, true); resp.StatusCode != http.StatusCreated {
				t.Fatalf("PUT of the blob: %s", resp.Status)
			}
			resp = do(http.MethodGet, base+digest, nil, true)
			got, err := io.ReadAll(resp.Body)
			if err != nil || resp.StatusCode != http.StatusOK || !bytes.Equal(got, blob) {
				t.Fatalf("GET of the blob: %s, %d bytes, %v; want the %d bytes put", resp.Status, len(got), err, len(blob))
			}
		})
	}
}
