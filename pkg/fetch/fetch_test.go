package fetch

import (
	"bytes"
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sglprov/sglprov/pkg/redact"
)

// testOptions returns options for fast tests: short waits, small chunks.
func testOptions(dest string) Options {
	return Options{
		Dest:         dest,
		RetryWait:    time.Millisecond,
		NoProgress:   time.Second,
		StallTimeout: 5 * time.Second,
		MinChunk:     1 << 20,
		ChunkSize:    256 << 10,
		Conns:        4,
		MaxBuffer:    1 << 20,
	}
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// partFile returns the part file of rel in dest, creating its folder.
func partFile(t testing.TB, dest, rel string) string {
	t.Helper()
	p, _ := partPaths(dest, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// partSide returns the resume record of rel in dest.
func partSide(dest, rel string) string {
	_, s := partPaths(dest, rel)
	return s
}

// assertOnly fails if dir holds anything but the named files.
func assertOnly(t *testing.T, dir string, names ...string) {
	t.Helper()
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	_ = filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() {
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		if !want[filepath.ToSlash(rel)] {
			t.Errorf("unexpected file left in destination: %s", rel)
		}
		return nil
	})
}

func TestFetchFaults(t *testing.T) {
	small := 600 << 10 // one connection
	large := 3 << 20   // parallel ranges with testOptions
	tests := []struct {
		name string
		size int
		plan func(n int, r *http.Request) action
		// stall sets a short stall timeout.
		stall time.Duration
		// check inspects the requests the server saw.
		check func(t *testing.T, reqs []reqLog, res Result)
	}{
		{
			name: "plain single connection",
			size: small,
			check: func(t *testing.T, reqs []reqLog, res Result) {
				if len(reqs) != 1 || reqs[0].rng != "" {
					t.Errorf("requests = %+v, want one without Range", reqs)
				}
			},
		},
		{
			name: "parallel ranges on a multi-chunk file",
			size: large,
			check: func(t *testing.T, reqs []reqLog, res Result) {
				if len(reqs) != 12 {
					t.Errorf("got %d requests, want 12 chunks of 256 KiB", len(reqs))
				}
				for _, r := range reqs {
					if r.status != http.StatusPartialContent {
						t.Errorf("request %+v: want a 206 range answer", r)
					}
				}
			},
		},
		{
			name: "drop mid-file resumes from what arrived",
			size: small,
			plan: func(n int, r *http.Request) action {
				if n == 0 {
					return action{dropAfter: 200 << 10}
				}
				return action{}
			},
			check: func(t *testing.T, reqs []reqLog, res Result) {
				if len(reqs) != 2 || reqs[1].rng != fmt.Sprintf("bytes=%d-%d", 200<<10, small-1) {
					t.Errorf("requests = %+v, want a second one from byte %d", reqs, 200<<10)
				}
				if res.Bytes != int64(small) {
					t.Errorf("transferred %d bytes, want %d (nothing twice)", res.Bytes, small)
				}
			},
		},
		{
			name: "drop mid-range on parallel file",
			size: large,
			plan: func(n int, r *http.Request) action {
				if n == 3 {
					return action{dropAfter: 100 << 10}
				}
				return action{}
			},
			check: func(t *testing.T, reqs []reqLog, res Result) {
				if len(reqs) != 13 {
					t.Errorf("got %d requests, want 12 chunks and one retry", len(reqs))
				}
				if res.Bytes != int64(large) {
					t.Errorf("transferred %d bytes, want %d", res.Bytes, large)
				}
			},
		},
		{
			name: "server ignores Range: start over on one connection, never append",
			size: large,
			plan: func(n int, r *http.Request) action { return action{ignoreRange: true} },
			check: func(t *testing.T, reqs []reqLog, res Result) {
				var plain int
				for _, r := range reqs {
					if r.rng == "" && r.status == http.StatusOK {
						plain++
					}
				}
				if plain != 1 {
					t.Errorf("requests %+v: want one plain GET of the whole file after the ignored Range", reqs)
				}
			},
		},
		{
			name: "503 then 200",
			size: small,
			plan: func(n int, r *http.Request) action {
				if n < 2 {
					return action{status: http.StatusServiceUnavailable}
				}
				return action{}
			},
			check: func(t *testing.T, reqs []reqLog, res Result) {
				if len(reqs) != 3 {
					t.Errorf("got %d requests, want 3", len(reqs))
				}
			},
		},
		{
			name:  "stall is cancelled and retried",
			size:  small,
			stall: 150 * time.Millisecond,
			plan: func(n int, r *http.Request) action {
				if n == 0 {
					return action{stallAfter: 100 << 10}
				}
				return action{}
			},
			check: func(t *testing.T, reqs []reqLog, res Result) {
				if len(reqs) != 2 || !strings.HasPrefix(reqs[1].rng, fmt.Sprintf("bytes=%d-", 100<<10)) {
					t.Errorf("requests = %+v, want a retry from byte %d", reqs, 100<<10)
				}
			},
		},
		{
			name: "wrong bytes once: digest mismatch, then success",
			size: small,
			plan: func(n int, r *http.Request) action { return action{corrupt: n == 0} },
			check: func(t *testing.T, reqs []reqLog, res Result) {
				if len(reqs) != 2 || reqs[1].rng != "" {
					t.Errorf("requests = %+v, want the whole file twice", reqs)
				}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			data := randomBytes(t, tc.size)
			fs := newFaultServer(t, map[string][]byte{"m/model.bin": data})
			fs.configure(func() { fs.plan = tc.plan })
			dest := t.TempDir()
			opt := testOptions(dest)
			if tc.stall > 0 {
				opt.StallTimeout = tc.stall
			}
			f := File{URL: fs.url("m/model.bin"), Path: "sub/model.bin", Size: int64(len(data)), SHA256: sha256Hex(data)}
			res, err := Fetch(context.Background(), []File{f}, opt)
			if err != nil {
				t.Fatalf("Fetch: %v", err)
			}
			if got := readFile(t, filepath.Join(dest, "sub/model.bin")); !bytes.Equal(got, data) {
				t.Fatalf("downloaded file differs (len %d, want %d)", len(got), len(data))
			}
			if len(res) != 1 || res[0].SHA256 != f.SHA256 || res[0].Size != f.Size || res[0].Present {
				t.Errorf("result = %+v", res)
			}
			assertOnly(t, dest, "sub/model.bin")
			if tc.check != nil {
				tc.check(t, fs.requests(), res[0])
			}
		})
	}
}

func TestFetchFailures(t *testing.T) {
	data := randomBytes(t, 300<<10)
	tests := []struct {
		name    string
		file    func(url string) File
		plan    func(n int, r *http.Request) action
		wantErr []string
		check   func(t *testing.T, err error)
	}{
		{
			name: "persistent digest mismatch names the file and both digests",
			file: func(url string) File {
				return File{URL: url, Path: "w.bin", Size: int64(len(data)), SHA256: strings.Repeat("ab", 32)}
			},
			wantErr: []string{"w.bin", "sha256 mismatch", strings.Repeat("ab", 32), sha256Hex(data)},
			check: func(t *testing.T, err error) {
				var mm *MismatchError
				if !errors.As(err, &mm) || mm.What != "sha256" {
					t.Errorf("error %v is not a sha256 *MismatchError", err)
				}
			},
		},
		{
			name: "size mismatch",
			file: func(url string) File {
				return File{URL: url, Path: "w.bin", Size: int64(len(data)) + 1, SHA256: sha256Hex(data)}
			},
			wantErr: []string{"w.bin", "size mismatch", fmt.Sprint(len(data) + 1), fmt.Sprint(len(data))},
		},
		{
			name: "404 is not retried",
			file: func(url string) File {
				return File{URL: url + "-missing?sig=SECRETSIG", Path: "w.bin", Size: int64(len(data)), SHA256: sha256Hex(data)}
			},
			wantErr: []string{"w.bin", "404"},
		},
		{
			name: "503 forever gives up",
			file: func(url string) File {
				return File{URL: url + "?sig=SECRETSIG", Path: "w.bin", Size: int64(len(data)), SHA256: sha256Hex(data)}
			},
			plan:    func(int, *http.Request) action { return action{status: http.StatusServiceUnavailable} },
			wantErr: []string{"w.bin", "503", "no byte for", "no-progress budget"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fs := newFaultServer(t, map[string][]byte{"w": data})
			fs.configure(func() { fs.plan = tc.plan })
			dest := t.TempDir()
			_, err := Fetch(context.Background(), []File{tc.file(fs.url("w"))}, testOptions(dest))
			if err == nil {
				t.Fatal("Fetch succeeded, want an error")
			}
			for _, s := range tc.wantErr {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not contain %q", err, s)
				}
			}
			if strings.Contains(err.Error(), "SECRETSIG") {
				t.Errorf("error %q shows the URL's query string", err)
			}
			if tc.check != nil {
				tc.check(t, err)
			}
			assertOnly(t, dest)
		})
	}
}

func TestFetchManyFilesAndPresent(t *testing.T) {
	files := map[string][]byte{}
	var list []File
	fs := newFaultServer(t, files)
	for i := range 6 {
		name := fmt.Sprintf("f%d.bin", i)
		files[name] = randomBytes(t, 100<<10+i*1000)
		list = append(list, File{URL: fs.url(name), Path: "d/" + name, Size: int64(len(files[name])), SHA256: sha256Hex(files[name])})
	}
	// A small git-stored file known only by its git blob sha1.
	cfg := []byte(`{"architectures": ["X"]}`)
	files["config.json"] = cfg
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00", len(cfg))
	h.Write(cfg)
	list = append(list, File{URL: fs.url("config.json"), Path: "config.json", Size: int64(len(cfg)), GitSHA1: hex.EncodeToString(h.Sum(nil))})

	dest := t.TempDir()
	opt := testOptions(dest)
	opt.Files = 3
	res, err := Fetch(context.Background(), list, opt)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != len(list) {
		t.Fatalf("got %d results, want %d", len(res), len(list))
	}
	for i, f := range list {
		if got := readFile(t, filepath.Join(dest, f.Path)); !bytes.Equal(got, files[strings.TrimPrefix(f.URL, fs.URL+"/")]) {
			t.Errorf("%s differs", f.Path)
		}
		if res[i].Path != f.Path || res[i].Present {
			t.Errorf("result %d = %+v", i, res[i])
		}
	}
	// Second run: everything present, nothing requested.
	before := len(fs.requests())
	res, err = Fetch(context.Background(), list, opt)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if !r.Present || r.Bytes != 0 {
			t.Errorf("second run result %+v: want present, nothing transferred", r)
		}
	}
	if n := len(fs.requests()) - before; n != 0 {
		t.Errorf("second run made %d requests, want 0", n)
	}
}

func TestFetchTokenOnlyToItsHost(t *testing.T) {
	data := randomBytes(t, 64<<10)
	const token = "hf_SECRETTOKEN"
	cdn := newFaultServer(t, map[string][]byte{"blob": data})
	hub := newFaultServer(t, nil)
	hub.configure(func() {
		hub.plan = func(int, *http.Request) action { return action{redirect: cdn.url("blob") + "?X-Signature=SIGSECRET"} }
	})
	hubHost := strings.TrimPrefix(hub.URL, "http://")

	t.Run("redirect to another port of the same address", func(t *testing.T) {
		dest := t.TempDir()
		opt := testOptions(dest)
		opt.Token, opt.TokenHost = token, hubHost
		f := File{URL: hub.url("resolve/w.bin"), Path: "w.bin", Size: int64(len(data)), SHA256: sha256Hex(data)}
		if _, err := Fetch(context.Background(), []File{f}, opt); err != nil {
			t.Fatal(err)
		}
		hubReqs, cdnReqs := hub.requests(), cdn.requests()
		if len(hubReqs) == 0 || hubReqs[0].auth != "Bearer "+token {
			t.Errorf("hub requests %+v: want the token", hubReqs)
		}
		for _, r := range cdnReqs {
			if r.auth != "" {
				t.Errorf("the redirect target got Authorization %q", r.auth)
			}
		}
	})
	t.Run("error after a redirect shows neither token nor signature", func(t *testing.T) {
		dest := t.TempDir()
		opt := testOptions(dest)
		opt.Token, opt.TokenHost = token, hubHost
		var logs strings.Builder
		var mu sync.Mutex
		opt.Logf = func(format string, args ...any) {
			mu.Lock()
			fmt.Fprintf(&logs, format+"\n", args...)
			mu.Unlock()
		}
		cdn.configure(func() {
			cdn.plan = func(int, *http.Request) action { return action{status: http.StatusForbidden} }
		})
		defer cdn.configure(func() { cdn.plan = nil })
		f := File{URL: hub.url("resolve/w.bin") + "?token=" + token, Path: "w.bin", Size: int64(len(data)), SHA256: sha256Hex(data)}
		_, err := Fetch(context.Background(), []File{f}, opt)
		if err == nil {
			t.Fatal("want an error")
		}
		for _, secret := range []string{token, "SIGSECRET"} {
			if strings.Contains(err.Error(), secret) || strings.Contains(logs.String(), secret) {
				t.Errorf("error %q or logs %q show a secret", err, logs.String())
			}
		}
	})
	t.Run("later ranges go straight to the redirect target, and back when it expires", func(t *testing.T) {
		big := randomBytes(t, 3<<20)
		cdn2 := newFaultServer(t, map[string][]byte{"blob": big})
		var expired atomic.Bool
		cdn2.configure(func() {
			cdn2.plan = func(n int, r *http.Request) action {
				// The first request that comes straight (net/http sets Referer on a
				// redirect) finds the signature expired.
				if r.Header.Get("Referer") == "" && !expired.Swap(true) {
					return action{status: http.StatusForbidden}
				}
				return action{}
			}
		})
		hub2 := newFaultServer(t, nil)
		hub2.configure(func() {
			hub2.plan = func(int, *http.Request) action { return action{redirect: cdn2.url("blob") + "?X-Signature=SIGSECRET"} }
		})
		opt := testOptions(t.TempDir())
		f := File{URL: hub2.url("resolve/big.bin"), Path: "big.bin", Size: int64(len(big)), SHA256: sha256Hex(big)}
		if _, err := Fetch(context.Background(), []File{f}, opt); err != nil {
			t.Fatal(err)
		}
		// 12 ranges: about one hub request per connection before the target is known, and
		// again after the 403; not one per range.
		if n := len(hub2.requests()); n < 2 || n > 2*opt.Conns {
			t.Errorf("hub got %d requests, want 2..%d", n, 2*opt.Conns)
		}
		if n := len(cdn2.requests()); n != 13 {
			t.Errorf("redirect target got %d requests, want 12 ranges and the refused one", n)
		}
	})
	t.Run("no token to a host that is not TokenHost", func(t *testing.T) {
		dest := t.TempDir()
		opt := testOptions(dest)
		opt.Token, opt.TokenHost = token, "huggingface.co"
		before := len(cdn.requests())
		f := File{URL: cdn.url("blob"), Path: "w.bin", Size: int64(len(data)), SHA256: sha256Hex(data)}
		if _, err := Fetch(context.Background(), []File{f}, opt); err != nil {
			t.Fatal(err)
		}
		for _, r := range cdn.requests()[before:] {
			if r.auth != "" {
				t.Errorf("got Authorization %q", r.auth)
			}
		}
	})
}

func TestFetchNoSpace(t *testing.T) {
	data := randomBytes(t, 128<<10)
	fs := newFaultServer(t, map[string][]byte{"w": data})
	root := t.TempDir()
	dest := filepath.Join(root, "models", "m")
	opt := testOptions(dest)
	var asked string
	opt.FreeSpace = func(dir string) (uint64, error) { asked = dir; return 1000, nil }
	f := File{URL: fs.url("w"), Path: "w.bin", Size: int64(len(data)), SHA256: sha256Hex(data)}
	_, err := Fetch(context.Background(), []File{f, {URL: fs.url("w"), Path: "x.bin", Size: int64(len(data)), SHA256: sha256Hex(data)}}, opt)
	var se *SpaceError
	if !errors.As(err, &se) {
		t.Fatalf("err = %v, want a *SpaceError", err)
	}
	if se.Need != uint64(2*len(data)) || se.Free != 1000 || asked != root {
		t.Errorf("SpaceError = %+v (asked %s), want need %d free 1000 in %s", se, asked, 2*len(data), root)
	}
	if !strings.Contains(err.Error(), "need 256.0 KiB") || !strings.Contains(err.Error(), "1000 B free") {
		t.Errorf("error %q does not say what is needed and free", err)
	}
	if len(fs.requests()) != 0 {
		t.Errorf("server got %d requests before the space check failed", len(fs.requests()))
	}
	if _, err := os.Stat(filepath.Join(root, "models")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("destination was created: %v", err)
	}
}

func TestFetchUnsafePath(t *testing.T) {
	for _, p := range []string{"../x", "/etc/passwd", "a/../../x", "", "a//b", "./a"} {
		_, err := Fetch(context.Background(), []File{{URL: "http://127.0.0.1:1/x", Path: p, Size: 1, SHA256: "00"}}, Options{Dest: t.TempDir()})
		if err == nil || !strings.Contains(err.Error(), "unsafe file path") {
			t.Errorf("path %q: err = %v, want unsafe file path", p, err)
		}
	}
}

func TestVerifyFile(t *testing.T) {
	data := []byte("hello weights\n")
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00", len(data))
	h.Write(data)
	git := hex.EncodeToString(h.Sum(nil))
	tests := []struct {
		name string
		f    File
		what string // "" means no error
	}{
		{"sha256 matches", File{Size: int64(len(data)), SHA256: sha256Hex(data)}, ""},
		{"sha256 upper case matches", File{Size: -1, SHA256: strings.ToUpper(sha256Hex(data))}, ""},
		{"git sha1 matches", File{Size: int64(len(data)), GitSHA1: git}, ""},
		{"size differs", File{Size: 3, SHA256: sha256Hex(data)}, "size"},
		{"sha256 differs", File{Size: int64(len(data)), SHA256: sha256Hex([]byte("x"))}, "sha256"},
		{"git sha1 differs", File{Size: -1, GitSHA1: strings.Repeat("0", 40)}, "git-sha1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := VerifyFile(path, tc.f)
			var mm *MismatchError
			switch {
			case tc.what == "" && err != nil:
				t.Errorf("VerifyFile: %v", err)
			case tc.what != "" && (!errors.As(err, &mm) || mm.What != tc.what):
				t.Errorf("VerifyFile = %v, want a %s mismatch", err, tc.what)
			}
		})
	}
}

func TestRedactAndHosts(t *testing.T) {
	redactions := map[string]string{
		"https://huggingface.co/a/b?token=x":            "https://huggingface.co/a/b",
		"https://user:pass@mirror.example/x.bin#frag":   "https://mirror.example/x.bin",
		"http://127.0.0.1:8080/blob":                    "http://127.0.0.1:8080/blob",
		"https://cdn.example/x?X-Amz-Signature=abc&b=c": "https://cdn.example/x",
	}
	for in, want := range redactions {
		if got := redact.URL(in); got != want {
			t.Errorf("redact(%q) = %q, want %q", in, got, want)
		}
	}
	hosts := []struct {
		scheme, host, tokenHost string
		same                    bool
	}{
		{"https", "huggingface.co", "huggingface.co", true},
		{"https", "huggingface.co:443", "huggingface.co", true},
		{"https", "HuggingFace.co", "huggingface.co:443", true},
		{"http", "127.0.0.1:8080", "127.0.0.1:8080", true},
		{"http", "127.0.0.1:8081", "127.0.0.1:8080", false},
		{"https", "cdn-lfs.huggingface.co", "huggingface.co", false},
		{"http", "huggingface.co", "huggingface.co:443", false},
	}
	for _, h := range hosts {
		if got := canonicalHost(h.scheme, h.host) == canonicalHost(h.scheme, h.tokenHost); got != h.same {
			t.Errorf("%s://%s against token host %s: same = %v, want %v", h.scheme, h.host, h.tokenHost, got, h.same)
		}
	}
}

func TestParseContentRange(t *testing.T) {
	tests := []struct {
		in                string
		start, end, total int64
		bad               bool
	}{
		{in: "bytes 0-99/1000", start: 0, end: 99, total: 1000},
		{in: "bytes 100-199/*", start: 100, end: 199, total: -1},
		{in: "bytes */1000", bad: true},
		{in: "bytes 5-1/10", bad: true},
		{in: "items 0-1/2", bad: true},
		{in: "", bad: true},
	}
	for _, tc := range tests {
		s, e, total, err := parseContentRange(tc.in)
		if (err != nil) != tc.bad || (!tc.bad && (s != tc.start || e != tc.end || total != tc.total)) {
			t.Errorf("parseContentRange(%q) = %d, %d, %d, %v", tc.in, s, e, total, err)
		}
	}
}
