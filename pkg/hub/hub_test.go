package hub_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/fstest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sglprov/sglprov/pkg/hub"
	"github.com/sglprov/sglprov/test/fakehub"
)

const repo = "org/model"

func testFS() fstest.MapFS {
	big := bytes.Repeat([]byte("0123456789abcdef"), 256) // 4096 bytes: LFS at threshold 1024
	return fstest.MapFS{
		"config.json":                      {Data: []byte(`{"model_type":"x"}`)},
		"tokenizer.json":                   {Data: []byte(`{"version":"1.0"}`)},
		"tokenizer_config.json":            {Data: []byte(`{}`)},
		"model-00001-of-00002.safetensors": {Data: big},
		"model-00002-of-00002.safetensors": {Data: big[:2048]},
		"README.md":                        {Data: []byte("# model\n")},
		"sub/extra.json":                   {Data: []byte(`[]`)},
		"sub/deep/tokenizer.model":         {Data: []byte("tok")},
	}
}

func startHub(t *testing.T, opt fakehub.Options) *fakehub.Hub {
	t.Helper()
	opt.Repo = repo
	if opt.FS == nil {
		opt.FS = testFS()
	}
	if opt.LFSThreshold == 0 {
		opt.LFSThreshold = 1024
	}
	h, err := fakehub.New(opt)
	if err != nil {
		t.Fatal(err)
	}
	h.Start()
	t.Cleanup(h.Close)
	return h
}

func noEnv(string) string { return "" }

func newClient(t *testing.T, h *fakehub.Hub, token string) *hub.Client {
	t.Helper()
	c, err := hub.New(hub.Options{Endpoint: h.URL(), Token: token, Getenv: noEnv})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestResolveRevision(t *testing.T) {
	tag := strings.Repeat("ab", 20)
	h := startHub(t, fakehub.Options{Refs: map[string]string{"v1.0": tag}})
	c := newClient(t, h, "")
	tests := []struct {
		name, rev, want, wantErr string
	}{
		{name: "main", rev: "main", want: fakehub.DefaultCommit},
		{name: "empty means main", rev: "", want: fakehub.DefaultCommit},
		{name: "tag", rev: "v1.0", want: tag},
		{name: "commit", rev: fakehub.DefaultCommit, want: fakehub.DefaultCommit},
		{name: "unknown", rev: "nope", wantErr: `check the revision "nope"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := c.ResolveRevision(context.Background(), repo, tt.rev)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("commit = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestFilesPaginationAndExpand(t *testing.T) {
	// 8 files and 2 folders at 4 per page: 3 pages.
	h := startHub(t, fakehub.Options{PageSize: 4})
	c := newClient(t, h, "")
	entries, err := c.ListTree(context.Background(), repo, fakehub.DefaultCommit)
	if err != nil {
		t.Fatal(err)
	}
	if got := h.APIRequests(); got != 3 {
		t.Errorf("API requests = %d, want 3 pages", got)
	}
	if len(entries) != 10 {
		t.Fatalf("entries = %d, want 10 (8 files, 2 folders)", len(entries))
	}
	files, err := c.Files(context.Background(), repo, fakehub.DefaultCommit, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	fsys := testFS()
	if len(files) != len(fsys) {
		t.Fatalf("files = %d, want %d", len(files), len(fsys))
	}
	for _, f := range files {
		data := fsys[f.Path].Data
		if f.Size != int64(len(data)) {
			t.Errorf("%s: size %d, want %d", f.Path, f.Size, len(data))
		}
		if len(data) >= 1024 {
			sum := sha256.Sum256(data)
			if f.SHA256 != hex.EncodeToString(sum[:]) || f.GitSHA1 != "" {
				t.Errorf("%s: sha256 %q gitsha1 %q, want the LFS sha256 only", f.Path, f.SHA256, f.GitSHA1)
			}
		} else if f.GitSHA1 != fakehub.GitBlobSHA1(data) || f.SHA256 != "" {
			t.Errorf("%s: gitsha1 %q sha256 %q, want the blob sha1 only", f.Path, f.GitSHA1, f.SHA256)
		}
		if want := h.URL() + "/" + repo + "/resolve/" + fakehub.DefaultCommit + "/" + f.Path; f.URL != want {
			t.Errorf("URL = %q, want %q", f.URL, want)
		}
	}
}

func TestGitBlobSHA1(t *testing.T) {
	// `printf 'hello\n' | git hash-object --stdin`
	if got, want := fakehub.GitBlobSHA1([]byte("hello\n")), "ce013625030ba8dba906f756967f9e9ca394464a"; got != want {
		t.Errorf("GitBlobSHA1 = %s, want %s", got, want)
	}
	if got, want := fakehub.GitBlobSHA1(nil), "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391"; got != want {
		t.Errorf("GitBlobSHA1(empty) = %s, want %s", got, want)
	}
}

func TestFilesIncludeExclude(t *testing.T) {
	h := startHub(t, fakehub.Options{})
	c := newClient(t, h, "")
	tests := []struct {
		name             string
		include, exclude []string
		want             []string
	}{
		{name: "recipe globs", include: []string{"*.safetensors", "*.json", "tokenizer*"}, want: []string{
			"config.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
			"sub/deep/tokenizer.model", "sub/extra.json", "tokenizer.json", "tokenizer_config.json"}},
		{name: "exclude a folder", include: []string{"*.json"}, exclude: []string{"sub/*"}, want: []string{
			"config.json", "tokenizer.json", "tokenizer_config.json"}},
		{name: "double star", include: []string{"sub/**"}, want: []string{"sub/deep/tokenizer.model", "sub/extra.json"}},
		{name: "full path", include: []string{"sub/extra.json"}, want: []string{"sub/extra.json"}},
		{name: "exclude only", exclude: []string{"*.safetensors", "*.md", "sub/**"}, want: []string{
			"config.json", "tokenizer.json", "tokenizer_config.json"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			files, err := c.Files(context.Background(), repo, fakehub.DefaultCommit, tt.include, tt.exclude)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, f := range files {
				got = append(got, f.Path)
			}
			sort.Strings(got)
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("files (-want +got):\n%s", d)
			}
		})
	}
	if _, err := c.Files(context.Background(), repo, fakehub.DefaultCommit, []string{"[x"}, nil); err == nil {
		t.Error("malformed pattern accepted")
	}
}

func TestUnsafeNamesRefused(t *testing.T) {
	tests := []struct {
		name  string
		entry string
	}{
		{name: "dotdot", entry: "../x"},
		{name: "inner dotdot", entry: "a/../../x"},
		{name: "absolute", entry: "/etc/passwd"},
		{name: "empty", entry: ""},
		{name: "backslash", entry: `..\x`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := startHub(t, fakehub.Options{ExtraListing: []fakehub.Entry{{
				Type: "file", Path: tt.entry, Size: 3, OID: fakehub.GitBlobSHA1([]byte("bad")),
			}}})
			c := newClient(t, h, "")
			_, err := c.Files(context.Background(), repo, fakehub.DefaultCommit, nil, nil)
			if err == nil {
				t.Fatalf("listing with %q accepted", tt.entry)
			}
			if tt.entry != "" && !strings.Contains(err.Error(), strconv.Quote(tt.entry)) {
				t.Errorf("error %q does not name %q", err, tt.entry)
			}
		})
	}
}

func TestPrivateRepoErrors(t *testing.T) {
	const secret = "hf_SECRETtoken123"
	h := startHub(t, fakehub.Options{Token: secret, Private: true})
	tests := []struct {
		name, token, repo string
		wantErr           []string
	}{
		{name: "no token", repo: repo, wantErr: []string{"401", "RepoNotFound", "private or gated", "HF_TOKEN"}},
		{name: "wrong token", token: "hf_wrongWRONGwrong", repo: repo, wantErr: []string{"401", "Invalid credentials", "does not know this token"}},
		{name: "wrong repo", token: secret, repo: "org/other", wantErr: []string{"401", "RepoNotFound", `"org/other"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newClient(t, h, tt.token)
			_, err := c.ResolveRevision(context.Background(), tt.repo, "main")
			if err == nil {
				t.Fatal("no error")
			}
			var apiErr *hub.APIError
			if !errors.As(err, &apiErr) || apiErr.Status != http.StatusUnauthorized {
				t.Errorf("err = %v, want a 401 APIError", err)
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if tt.token != "" && strings.Contains(err.Error(), tt.token) {
				t.Errorf("error %q contains the token", err)
			}
		})
	}
	c := newClient(t, h, secret)
	if _, err := c.ResolveRevision(context.Background(), repo, "main"); err != nil {
		t.Fatalf("with the token: %v", err)
	}
}

func TestTokenNotSentToCDN(t *testing.T) {
	const secret = "hf_SECRETtoken123"
	h := startHub(t, fakehub.Options{Token: secret, CDNHost: "localhost"})
	c := newClient(t, h, secret)
	files, err := c.Files(context.Background(), repo, fakehub.DefaultCommit, []string{"*.safetensors"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		resp, err := c.HTTPClient().Get(f.URL)
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d %v", f.URL, resp.StatusCode, err)
		}
		if sum := sha256.Sum256(data); hex.EncodeToString(sum[:]) != f.SHA256 {
			t.Errorf("%s: wrong content", f.Path)
		}
		if resp.Request.URL.Host == strings.TrimPrefix(h.URL(), "http://") {
			t.Errorf("%s was not redirected to the CDN", f.Path)
		}
	}
	if got := h.CDNAuthorizations(); len(got) != 0 {
		t.Errorf("the CDN received Authorization headers: %d", len(got))
	}
	if c.TokenHost() != strings.TrimPrefix(h.URL(), "http://") {
		t.Errorf("TokenHost = %q", c.TokenHost())
	}
}

func TestRangeRequests(t *testing.T) {
	h := startHub(t, fakehub.Options{})
	c := newClient(t, h, "")
	url := c.ResolveURL(repo, fakehub.DefaultCommit, "model-00001-of-00002.safetensors")
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("Range", "bytes=16-31")
	resp, err := c.HTTPClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusPartialContent || string(body) != "0123456789abcdef" {
		t.Errorf("range answer %d %q", resp.StatusCode, body)
	}
	if h.BytesServed() != 16 {
		t.Errorf("BytesServed = %d, want 16", h.BytesServed())
	}
}

func TestEndpointAndToken(t *testing.T) {
	dir := t.TempDir()
	tokFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokFile, []byte("  hf_fromfile\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	home := filepath.Join(dir, "home")
	if err := os.MkdirAll(filepath.Join(home, ".cache", "huggingface"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, ".cache", "huggingface", "token"), []byte("hf_home\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	tests := []struct {
		name         string
		opt          hub.Options
		wantEndpoint string
		wantToken    string
		wantErr      bool
	}{
		{name: "defaults", opt: hub.Options{Getenv: noEnv}, wantEndpoint: hub.DefaultEndpoint},
		{name: "HF_ENDPOINT", opt: hub.Options{Getenv: env(map[string]string{"HF_ENDPOINT": "http://mirror:8080/"})}, wantEndpoint: "http://mirror:8080"},
		{name: "explicit endpoint wins", opt: hub.Options{Endpoint: "https://a.example", Getenv: env(map[string]string{"HF_ENDPOINT": "http://b"})}, wantEndpoint: "https://a.example"},
		{name: "HF_TOKEN", opt: hub.Options{Getenv: env(map[string]string{"HF_TOKEN": " hf_env "})}, wantEndpoint: hub.DefaultEndpoint, wantToken: "hf_env"},
		{name: "token file wins", opt: hub.Options{TokenFile: tokFile, Getenv: env(map[string]string{"HF_TOKEN": "hf_env"})}, wantEndpoint: hub.DefaultEndpoint, wantToken: "hf_fromfile"},
		{name: "home token file", opt: hub.Options{Getenv: env(map[string]string{"HOME": home})}, wantEndpoint: hub.DefaultEndpoint, wantToken: "hf_home"},
		{name: "missing token file", opt: hub.Options{TokenFile: filepath.Join(dir, "nope"), Getenv: noEnv}, wantErr: true},
		{name: "bad endpoint", opt: hub.Options{Endpoint: "ftp://x", Getenv: noEnv}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := hub.New(tt.opt)
			if tt.wantErr {
				if err == nil {
					t.Fatal("no error")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.Endpoint() != tt.wantEndpoint || c.Token() != tt.wantToken {
				t.Errorf("endpoint %q token %q, want %q %q", c.Endpoint(), c.Token(), tt.wantEndpoint, tt.wantToken)
			}
		})
	}
}

func TestCheckName(t *testing.T) {
	tests := []struct {
		name string
		ok   bool
	}{
		{"model.safetensors", true},
		{"sub/dir/file.json", true},
		{"..hidden", true},
		{"", false},
		{"../x", false},
		{"a/..", false},
		{"/abs", false},
		{"a//b", false},
		{"./a", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := hub.CheckName(tt.name)
			if (err == nil) != tt.ok {
				t.Errorf("CheckName(%q) = %v, want ok=%v", tt.name, err, tt.ok)
			}
		})
	}
}

func TestRetries(t *testing.T) {
	h := startHub(t, fakehub.Options{})
	tests := []struct {
		name     string
		fail     int // answers of 503 before the hub answers
		status   int
		retries  int
		wantErr  string
		wantHits int
	}{
		{name: "recovers after two 503", fail: 2, status: http.StatusServiceUnavailable, wantHits: 3},
		{name: "429 is retried", fail: 1, status: http.StatusTooManyRequests, wantHits: 2},
		{name: "gives up", fail: 10, status: http.StatusBadGateway, retries: 2, wantErr: "502", wantHits: 3},
		{name: "no retries", fail: 1, status: http.StatusInternalServerError, retries: -1, wantErr: "500", wantHits: 1},
		{name: "404 is not retried", fail: 5, status: http.StatusNotFound, wantErr: "404", wantHits: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hits := 0
			flaky := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				hits++
				if hits <= tt.fail {
					http.Error(w, "try later", tt.status)
					return
				}
				h.Handler().ServeHTTP(w, r)
			}))
			defer flaky.Close()
			c, err := hub.New(hub.Options{Endpoint: flaky.URL, Getenv: noEnv, Retries: tt.retries, RetryWait: time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			commit, err := c.ResolveRevision(context.Background(), repo, "main")
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("err = %v, want %q", err, tt.wantErr)
				}
			} else if err != nil || commit != fakehub.DefaultCommit {
				t.Errorf("ResolveRevision = %q, %v", commit, err)
			}
			if hits != tt.wantHits {
				t.Errorf("requests = %d, want %d", hits, tt.wantHits)
			}
		})
	}
}

func TestRevisionWithSlash(t *testing.T) {
	pr := strings.Repeat("cd", 20)
	h := startHub(t, fakehub.Options{Refs: map[string]string{"refs/pr/1": pr}})
	c := newClient(t, h, "")
	got, err := c.ResolveRevision(context.Background(), repo, "refs/pr/1")
	if err != nil || got != pr {
		t.Fatalf("ResolveRevision(refs/pr/1) = %q, %v", got, err)
	}
	u := c.ResolveURL(repo, "refs/pr/1", "config.json")
	if !strings.Contains(u, "/resolve/refs%2Fpr%2F1/config.json") {
		t.Errorf("ResolveURL = %s", u)
	}
	resp, err := c.HTTPClient().Get(u)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET %s: %d", u, resp.StatusCode)
	}
}

// A token file that is a FIFO is refused at once, naming it: reading one waited for a
// writer forever.
func TestReadTokenRefusesFIFO(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "token")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skip("mkfifo:", err)
	}
	for _, c := range []struct {
		name      string
		env       map[string]string
		tokenFile string
	}{
		{"token_file", nil, fifo},
		{"HF_TOKEN_PATH", map[string]string{"HF_TOKEN_PATH": fifo}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			done := make(chan error, 1)
			go func() {
				_, err := hub.ReadToken(func(k string) string { return c.env[k] }, c.tokenFile)
				done <- err
			}()
			select {
			case err := <-done:
				if err == nil || !strings.Contains(err.Error(), fifo+" is a FIFO") {
					t.Fatalf("ReadToken = %v, want the FIFO named", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("ReadToken waited on a FIFO")
			}
		})
	}
}

// A 429 with Retry-After (or the hub's RateLimit header) is retried no sooner than it asks.
func TestRetryAfterHonoured(t *testing.T) {
	h := startHub(t, fakehub.Options{})
	for name, hdr := range map[string][2]string{
		"Retry-After": {"Retry-After", "1"},
		"RateLimit":   {"RateLimit", `"api";r=0;t=1`},
	} {
		t.Run(name, func(t *testing.T) {
			var first time.Time
			var again time.Duration
			hits := 0
			limited := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				hits++
				if hits == 1 {
					first = time.Now()
					w.Header().Set(hdr[0], hdr[1])
					http.Error(w, "rate limited", http.StatusTooManyRequests)
					return
				}
				if hits == 2 {
					again = time.Since(first)
				}
				h.Handler().ServeHTTP(w, r)
			}))
			defer limited.Close()
			c, err := hub.New(hub.Options{Endpoint: limited.URL, Getenv: noEnv, RetryWait: time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.ResolveRevision(context.Background(), repo, "main"); err != nil {
				t.Fatal(err)
			}
			if again < 900*time.Millisecond {
				t.Errorf("asked again after %s, before the second the 429 asked for", again)
			}
		})
	}
}

// TestGatedRepoProbe: as on the real hub, a gated repository's API answers anyone and only
// resolve refuses; Probe (a HEAD of one file's resolve URL) tells the cause and the fix.
func TestGatedRepoProbe(t *testing.T) {
	const secret, denied = "hf_SECRETtoken123", "hf_DENIEDtoken456"
	h := startHub(t, fakehub.Options{Token: secret, DeniedTokens: []string{denied}})
	anon := newClient(t, h, "")
	commit, err := anon.ResolveRevision(context.Background(), repo, "main")
	if err != nil {
		t.Fatalf("the API of a gated repository refused an anonymous client: %v", err)
	}
	files, err := anon.Files(context.Background(), repo, commit, nil, nil)
	if err != nil || len(files) == 0 {
		t.Fatalf("listing a gated repository anonymously: %d files, %v", len(files), err)
	}
	for _, tc := range []struct {
		token  string
		status int
		want   []string
	}{
		{"", http.StatusUnauthorized, []string{"GatedRepo", "is restricted", "accept its licence", "hf.token_file (or HF_TOKEN)"}},
		{denied, http.StatusForbidden, []string{"GatedRepo", "not in the authorized list", "no access", "accept the licence"}},
		{"hf_madeUPmadeUP", http.StatusUnauthorized, []string{"Invalid credentials", "does not know this token"}},
		{secret, 0, nil},
	} {
		c := newClient(t, h, tc.token)
		err := c.Probe(context.Background(), repo, commit, files[0].URL)
		if tc.status == 0 {
			if err != nil {
				t.Errorf("token with access: %v", err)
			}
			continue
		}
		var api *hub.APIError
		if !errors.As(err, &api) || api.Status != tc.status || !hub.Refused(api.Status, api.Code) {
			t.Fatalf("token %q: Probe = %v, want a refusal %d", tc.token, err, tc.status)
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("token %q: error %q does not say %q", tc.token, err, w)
			}
		}
		if tc.token != "" && strings.Contains(err.Error(), tc.token) {
			t.Errorf("error shows the token: %q", err)
		}
	}
	// The probe does not follow the redirect to the CDN: one request, to the hub.
	before := h.FileRequests()
	if err := newClient(t, h, secret).Probe(context.Background(), repo, commit, files[len(files)-1].URL); err != nil {
		t.Fatal(err)
	}
	if n := h.FileRequests() - before; n != 1 {
		t.Errorf("Probe made %d file requests, want 1", n)
	}
}

// TestListingWithoutExpand: the listing is asked without expand=true (which cuts the real
// hub's pages from 1000 entries to 50 and adds nothing the download uses: lfs is there
// without it), so 120 files come in one page, each LFS file with its sha256.
func TestListingWithoutExpand(t *testing.T) {
	fsys := fstest.MapFS{}
	for i := range 120 {
		fsys[fmt.Sprintf("shard-%03d.bin", i)] = &fstest.MapFile{Data: bytes.Repeat([]byte{byte(i)}, 2048)}
	}
	h, err := fakehub.New(fakehub.Options{Repo: repo, FS: fsys, LFSThreshold: 1024})
	if err != nil {
		t.Fatal(err)
	}
	h.Start()
	t.Cleanup(h.Close)
	files, err := newClient(t, h, "").Files(context.Background(), repo, fakehub.DefaultCommit, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 120 {
		t.Fatalf("%d files listed, want 120", len(files))
	}
	for _, f := range files {
		if len(f.SHA256) != 64 {
			t.Fatalf("%s listed without its LFS sha256", f.Path)
		}
	}
	if n := h.TreePages(); n != 1 {
		t.Errorf("the listing took %d pages, want 1 (expand=true pages by 50)", n)
	}
}

// TestMirrorWithoutTree: a mirror that does not serve the tree API (Artifactory, Nexus):
// the files come from the revision's siblings and a HEAD of each resolve URL, with the same
// sizes and digests as the tree listing gives.
func TestMirrorWithoutTree(t *testing.T) {
	want, err := newClient(t, startHub(t, fakehub.Options{}), "").Files(context.Background(), repo, fakehub.DefaultCommit, nil, []string{"README.md"})
	if err != nil {
		t.Fatal(err)
	}
	mirror := startHub(t, fakehub.Options{NoTree: true})
	c := newClient(t, mirror, "")
	got, err := c.Files(context.Background(), repo, fakehub.DefaultCommit, nil, []string{"README.md"})
	if err != nil {
		t.Fatalf("listing through a mirror without /tree: %v", err)
	}
	strip := func(fs []hub.File) []hub.File {
		out := append([]hub.File(nil), fs...)
		for i := range out {
			out[i].URL = ""
		}
		sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
		return out
	}
	if d := cmp.Diff(strip(want), strip(got)); d != "" {
		t.Errorf("files from the siblings differ from the tree listing (-tree +siblings):\n%s", d)
	}
	for _, f := range got {
		if !strings.HasPrefix(f.URL, mirror.URL()+"/") {
			t.Errorf("%s: URL %s is not on the mirror", f.Path, f.URL)
		}
	}
	// A repository the mirror does not know is still an error, not a fallback.
	if _, err := c.Files(context.Background(), "org/other", fakehub.DefaultCommit, nil, nil); err == nil || !strings.Contains(err.Error(), "RepoNotFound") {
		t.Errorf("unknown repository through the mirror: %v", err)
	}
}

// TestNextLinkStaysOnEndpoint: a Link: rel="next" that names another host is followed on
// the configured endpoint, never on that host.
func TestNextLinkStaysOnEndpoint(t *testing.T) {
	var elsewhere atomic.Int64
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		elsewhere.Add(1)
		w.Write([]byte("[]"))
	}))
	t.Cleanup(other.Close)
	h := startHub(t, fakehub.Options{PageSize: 2, NextHost: strings.TrimPrefix(other.URL, "http://"), Token: "hf_tok"})
	c := newClient(t, h, "hf_tok")
	files, err := c.Files(context.Background(), repo, fakehub.DefaultCommit, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != len(testFS()) {
		t.Errorf("%d files listed, want %d", len(files), len(testFS()))
	}
	if n := elsewhere.Load(); n != 0 {
		t.Errorf("%d requests went to the host the next link named", n)
	}
	if h.TreePages() < 3 {
		t.Errorf("%d pages: the listing was not paged", h.TreePages())
	}
}

// TestHubConventions: the environment as huggingface_hub reads it: HUGGING_FACE_HUB_TOKEN
// after HF_TOKEN, the token file under XDG_CACHE_HOME, the cache folder, HF_HUB_OFFLINE.
func TestHubConventions(t *testing.T) {
	xdg := t.TempDir()
	if err := os.MkdirAll(filepath.Join(xdg, "huggingface"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(xdg, "huggingface", "token"), []byte("hf_xdg\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	for _, c := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"HUGGING_FACE_HUB_TOKEN": "hf_old"}, "hf_old"},
		{map[string]string{"HF_TOKEN": "hf_new", "HUGGING_FACE_HUB_TOKEN": "hf_old"}, "hf_new"},
		{map[string]string{"XDG_CACHE_HOME": xdg, "HOME": "/nonexistent"}, "hf_xdg"},
		{map[string]string{"XDG_CACHE_HOME": xdg, "HF_HOME": "/nonexistent"}, ""},
	} {
		got, err := hub.ReadToken(env(c.env), "")
		if err != nil || got != c.want {
			t.Errorf("ReadToken with %v = %q, %v; want %q", c.env, got, err, c.want)
		}
	}
	for _, c := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"HOME": "/root"}, "/root/.cache/huggingface/hub"},
		{map[string]string{"HOME": "/root", "XDG_CACHE_HOME": "/xdg"}, "/xdg/huggingface/hub"},
		{map[string]string{"HF_HOME": "/hf", "XDG_CACHE_HOME": "/xdg"}, "/hf/hub"},
		{map[string]string{"HF_HOME": "/hf", "HUGGINGFACE_HUB_CACHE": "/old"}, "/old"},
		{map[string]string{"HF_HUB_CACHE": "/new", "HUGGINGFACE_HUB_CACHE": "/old"}, "/new"},
	} {
		if got := hub.CacheDir(env(c.env)); got != c.want {
			t.Errorf("CacheDir with %v = %q, want %q", c.env, got, c.want)
		}
	}
	for v, want := range map[string]bool{"1": true, "on": true, "YES": true, "True": true, "0": false, "": false, "offline": false} {
		if got := hub.Offline(env(map[string]string{"HF_HUB_OFFLINE": v})); got != want {
			t.Errorf("Offline(HF_HUB_OFFLINE=%q) = %v, want %v", v, got, want)
		}
	}
}

// TestRetryForOutlastsAnOutage: with RetryFor, an API request is retried past Retries for
// as long as RetryFor allows, so an outage of the hub's API (here 600 ms of 503, scaled
// from a minute) does not end the run; past RetryFor it gives up.
func TestRetryForOutlastsAnOutage(t *testing.T) {
	h := startHub(t, fakehub.Options{})
	for _, tc := range []struct {
		retryFor time.Duration
		wantErr  bool
	}{{3 * time.Second, false}, {100 * time.Millisecond, true}} {
		downUntil := time.Now().Add(600 * time.Millisecond)
		flaky := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if time.Now().Before(downUntil) {
				http.Error(w, "upstream down", http.StatusServiceUnavailable)
				return
			}
			h.Handler().ServeHTTP(w, r)
		}))
		c, err := hub.New(hub.Options{Endpoint: flaky.URL, Getenv: noEnv, Retries: 1, RetryWait: 20 * time.Millisecond, RetryFor: tc.retryFor})
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.ResolveRevision(context.Background(), repo, "main")
		flaky.Close()
		if (err != nil) != tc.wantErr {
			t.Errorf("RetryFor %s through 600ms of 503: err = %v, want error %v", tc.retryFor, err, tc.wantErr)
		}
	}
}

// TestMirrorHeadRetried: a HEAD of a file's resolve that fails with a 5xx is retried as
// the API requests are, so one flaky answer of the mirror does not fail the listing.
func TestMirrorHeadRetried(t *testing.T) {
	mirror := startHub(t, fakehub.Options{NoTree: true})
	var mu sync.Mutex
	seen := map[string]bool{}
	flaky := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		first := r.Method == http.MethodHead && !seen[r.URL.Path]
		seen[r.URL.Path] = true
		mu.Unlock()
		if first {
			http.Error(w, "bad gateway", http.StatusBadGateway)
			return
		}
		mirror.Handler().ServeHTTP(w, r)
	}))
	t.Cleanup(flaky.Close)
	c, err := hub.New(hub.Options{Endpoint: flaky.URL, Getenv: noEnv, RetryWait: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	files, err := c.Files(context.Background(), repo, fakehub.DefaultCommit, nil, nil)
	if err != nil || len(files) != len(testFS()) {
		t.Fatalf("listing through a flaky mirror without /tree: %d files, %v", len(files), err)
	}
}
