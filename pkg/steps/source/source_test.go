package source

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/exitcode"
)

func needGit(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
}

func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com",
		"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com", "GIT_CONFIG_GLOBAL=/dev/null")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// newRepo makes a git repository with two commits and returns it with both commits.
func newRepo(t *testing.T) (repo, first, second string) {
	t.Helper()
	repo = filepath.Join(t.TempDir(), "upstream")
	if err := os.MkdirAll(repo, 0o755); err != nil {
		t.Fatal(err)
	}
	git(t, repo, "init", "-q", "-b", "main")
	write(t, filepath.Join(repo, "README"), "first\n")
	git(t, repo, "add", ".")
	git(t, repo, "commit", "-q", "-m", "first")
	first = git(t, repo, "rev-parse", "HEAD")
	write(t, filepath.Join(repo, "README"), "second\n")
	git(t, repo, "commit", "-q", "-am", "second")
	second = git(t, repo, "rev-parse", "HEAD")
	return repo, first, second
}

func write(t *testing.T, p, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func read(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func newEnv(t *testing.T) *engine.Env {
	t.Helper()
	return engine.NewTestEnv(t.TempDir(), nil)
}

func mustNew(t *testing.T, spec Spec) *Step {
	t.Helper()
	s, err := New("sglang-src", spec)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// leftovers lists what is in dir besides the names given.
func leftovers(t *testing.T, dir string, keep ...string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if !contains(keep, e.Name()) {
			out = append(out, e.Name())
		}
	}
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func TestGitFetchAndIntact(t *testing.T) {
	needGit(t)
	repo, first, _ := newRepo(t)
	ctx := context.Background()
	env := newEnv(t)
	dest := filepath.Join(t.TempDir(), "opt", "sglang")
	step := mustNew(t, Spec{URL: "git::file://" + repo + "?ref=" + first, Dest: dest})

	ok, reason, err := step.Intact(ctx, env)
	if err != nil || ok || !strings.Contains(reason, "does not exist") {
		t.Errorf("Intact before fetch = %v, %q, %v", ok, reason, err)
	}
	if err := step.Run(ctx, env); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if got := read(t, filepath.Join(dest, "README")); got != "first\n" {
		t.Errorf("README = %q, want the first commit's", got)
	}
	if head := git(t, dest, "rev-parse", "HEAD"); head != first {
		t.Errorf("HEAD = %s, want %s", head, first)
	}
	if ok, reason, err := step.Intact(ctx, env); err != nil || !ok {
		t.Errorf("Intact after fetch = %v, %q, %v", ok, reason, err)
	}
	if extra := leftovers(t, filepath.Dir(dest), "sglang"); len(extra) > 0 {
		t.Errorf("left behind next to dest: %v", extra)
	}

	// A local edit is not the source step's business.
	write(t, filepath.Join(dest, "README"), "edited\n")
	if ok, _, err := step.Intact(ctx, env); err != nil || !ok {
		t.Errorf("Intact with a local edit = %v, %v; want true", ok, err)
	}

	// The ref given as ref: instead of in the url.
	step2 := mustNew(t, Spec{URL: "git::file://" + repo, Ref: strings.ToUpper(first), Dest: dest})
	if ok, _, err := step2.Intact(ctx, env); err != nil || !ok {
		t.Errorf("Intact with ref: = %v, %v; want true", ok, err)
	}
}

func TestGitRefChangeReplacesDest(t *testing.T) {
	needGit(t)
	repo, first, second := newRepo(t)
	ctx := context.Background()
	env := newEnv(t)
	parent := t.TempDir()
	dest := filepath.Join(parent, "sglang")
	if err := mustNew(t, Spec{URL: "git::file://" + repo + "?ref=" + first, Dest: dest}).Run(ctx, env); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dest, "build", "stale.o"), "old build output\n")

	step := mustNew(t, Spec{URL: "git::file://" + repo + "?ref=" + second, Dest: dest})
	ok, reason, err := step.Intact(ctx, env)
	if err != nil || ok || !strings.Contains(reason, "outputs changed: "+dest+" is at "+first) {
		t.Errorf("Intact with the old commit = %v, %q, %v", ok, reason, err)
	}
	if err := step.Run(ctx, env); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if head := git(t, dest, "rev-parse", "HEAD"); head != second {
		t.Errorf("HEAD = %s, want %s", head, second)
	}
	if got := read(t, filepath.Join(dest, "README")); got != "second\n" {
		t.Errorf("README = %q", got)
	}
	if _, err := os.Stat(filepath.Join(dest, "build", "stale.o")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the old tree's files survived the replacement: %v", err)
	}
	if extra := leftovers(t, parent, "sglang"); len(extra) > 0 {
		t.Errorf("left behind next to dest: %v", extra)
	}
}

func TestGitFetchFailureKeepsDest(t *testing.T) {
	needGit(t)
	repo, first, _ := newRepo(t)
	ctx := context.Background()
	env := newEnv(t)
	parent := t.TempDir()
	dest := filepath.Join(parent, "sglang")
	if err := mustNew(t, Spec{URL: "git::file://" + repo + "?ref=" + first, Dest: dest}).Run(ctx, env); err != nil {
		t.Fatal(err)
	}
	missing := strings.Repeat("ab", 20)
	err := mustNew(t, Spec{URL: "git::file://" + repo + "?ref=" + missing, Dest: dest}).Run(ctx, env)
	if err == nil {
		t.Fatal("Run with a commit the repository lacks succeeded")
	}
	if head := git(t, dest, "rev-parse", "HEAD"); head != first {
		t.Errorf("dest HEAD = %s after a failed fetch, want it untouched at %s", head, first)
	}
	if extra := leftovers(t, parent, "sglang"); len(extra) > 0 {
		t.Errorf("left behind next to dest: %v", extra)
	}
}

func TestForeignDestRefused(t *testing.T) {
	needGit(t)
	repo, first, _ := newRepo(t)
	dest := filepath.Join(t.TempDir(), "data")
	write(t, filepath.Join(dest, "precious.txt"), "keep me\n")
	err := mustNew(t, Spec{URL: "git::file://" + repo + "?ref=" + first, Dest: dest}).Run(context.Background(), newEnv(t))
	if err == nil || !strings.Contains(err.Error(), "does not hold a source tree") {
		t.Fatalf("Run error = %v; want a refusal to replace the folder", err)
	}
	if got := read(t, filepath.Join(dest, "precious.txt")); got != "keep me\n" {
		t.Errorf("precious.txt = %q", got)
	}
}

func TestRefRefused(t *testing.T) {
	tests := []struct {
		name string
		spec Spec
		want string
	}{
		{"branch", Spec{URL: "git::https://github.com/sgl-project/sglang?ref=main"}, `"main" is not a commit`},
		{"tag", Spec{URL: "git::https://github.com/sgl-project/sglang?ref=v0.5.9"}, `"v0.5.9" is not a commit`},
		{"short commit", Spec{URL: "git::https://github.com/sgl-project/sglang", Ref: "5a7255c6fb57"}, `"5a7255c6fb57" is not a commit`},
		{"no ref", Spec{URL: "git::https://github.com/sgl-project/sglang"}, "has no ref"},
		{"refs differ", Spec{URL: "git::https://example.com/x.git?ref=" + strings.Repeat("a", 40), Ref: strings.Repeat("b", 40)}, "differ"},
		{"archive without sha256", Spec{URL: "https://example.com/x.tar.gz"}, "needs sha256"},
		{"archive bad sha256", Spec{URL: "https://example.com/x.tar.gz", SHA256: "abc"}, "not 64 hex"},
		{"other getter", Spec{URL: "hg::https://example.com/x"}, "not supported"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.spec.Dest = filepath.Join(t.TempDir(), "dest")
			step := mustNew(t, tc.spec)
			_, err := step.Fingerprint(context.Background(), newEnv(t))
			if !errors.Is(err, exitcode.ErrUsage) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Fingerprint error = %v; want a usage error with %q", err, tc.want)
			}
			if err := step.Run(context.Background(), newEnv(t)); !errors.Is(err, exitcode.ErrUsage) {
				t.Errorf("Run error = %v; want a usage error", err)
			}
			if _, err := os.Stat(tc.spec.Dest); !errors.Is(err, os.ErrNotExist) {
				t.Error("dest was created")
			}
		})
	}
}

func TestFingerprint(t *testing.T) {
	sum := strings.Repeat("c", 64)
	commit := strings.Repeat("d", 40)
	tests := []struct {
		name string
		spec Spec
		want map[string]string
	}{
		{"git url ref", Spec{URL: "git::https://github.com/sgl-project/sglang?ref=" + strings.ToUpper(commit)}, map[string]string{"ref": commit}},
		{"git spec ref", Spec{URL: "https://github.com/sgl-project/sglang", Ref: commit}, map[string]string{"ref": commit}},
		{"archive", Spec{URL: "https://example.com/sglang.tar.gz", SHA256: sum}, map[string]string{"ref": "", "sha256": sum}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.spec.Dest = "/opt/sglang"
			got, err := mustNew(t, tc.spec).Fingerprint(context.Background(), newEnv(t))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestNewNeedsURLAndDest(t *testing.T) {
	for _, spec := range []Spec{{Dest: "/x"}, {URL: "git::https://example.com/x.git"}} {
		if _, err := New("s", spec); !errors.Is(err, exitcode.ErrUsage) {
			t.Errorf("New(%+v) error = %v; want a usage error", spec, err)
		}
	}
}

// tarGz returns a .tar.gz with the files under one top folder, as GitHub's archives have.
func tarGz(t *testing.T, top string, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	if err := tw.WriteHeader(&tar.Header{Name: top + "/", Typeflag: tar.TypeDir, Mode: 0o755}); err != nil {
		t.Fatal(err)
	}
	for name, content := range files {
		if err := tw.WriteHeader(&tar.Header{Name: top + "/" + name, Mode: 0o644, Size: int64(len(content)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(content)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestArchive(t *testing.T) {
	archive := tarGz(t, "sglang-abc", map[string]string{"README": "from the archive\n"})
	sum := sha256.Sum256(archive)
	good := hex.EncodeToString(sum[:])
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/sglang.tar.gz" {
			http.NotFound(w, r)
			return
		}
		w.Write(archive)
	}))
	defer srv.Close()
	ctx := context.Background()

	t.Run("checksum matches", func(t *testing.T) {
		env := newEnv(t)
		parent := t.TempDir()
		dest := filepath.Join(parent, "sglang")
		step := mustNew(t, Spec{URL: srv.URL + "/sglang.tar.gz", SHA256: strings.ToUpper(good), Dest: dest})
		if err := step.Run(ctx, env); err != nil {
			t.Fatalf("Run: %v", err)
		}
		if got := read(t, filepath.Join(dest, "README")); got != "from the archive\n" {
			t.Errorf("README = %q", got)
		}
		if ok, reason, err := step.Intact(ctx, env); err != nil || !ok {
			t.Errorf("Intact = %v, %q, %v", ok, reason, err)
		}
		other := mustNew(t, Spec{URL: srv.URL + "/sglang.tar.gz", SHA256: strings.Repeat("0", 64), Dest: dest})
		if ok, reason, _ := other.Intact(ctx, env); ok || !strings.Contains(reason, "outputs changed") {
			t.Errorf("Intact with another sha256 = %v, %q", ok, reason)
		}
		if extra := leftovers(t, parent, "sglang"); len(extra) > 0 {
			t.Errorf("left behind next to dest: %v", extra)
		}
	})
	t.Run("checksum mismatch", func(t *testing.T) {
		env := newEnv(t)
		parent := t.TempDir()
		dest := filepath.Join(parent, "sglang")
		step := mustNew(t, Spec{URL: srv.URL + "/sglang.tar.gz", SHA256: strings.Repeat("0", 64), Dest: dest})
		err := step.Run(ctx, env)
		if err == nil || !strings.Contains(strings.ToLower(err.Error()), "checksums did not match") {
			t.Fatalf("Run error = %v; want a checksum mismatch", err)
		}
		if _, err := os.Stat(dest); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("dest exists after a checksum mismatch: %v", err)
		}
		if extra := leftovers(t, parent); len(extra) > 0 {
			t.Errorf("left behind: %v", extra)
		}
	})
}

func TestRedact(t *testing.T) {
	tests := map[string]string{
		"git::https://user:secret@example.com/x.git?ref=abc": "git::https://user:xxxxx@example.com/x.git?ref=abc",
		"https://example.com/x.tar.gz":                       "https://example.com/x.tar.gz",
	}
	for in, want := range tests {
		if got := redact(in); got != want {
			t.Errorf("redact(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestScrub(t *testing.T) {
	err := scrub(errors.New("error downloading 'https://u:hunter2@example.com/x.tar.gz'"), "https://u:hunter2@example.com/x.tar.gz")
	if strings.Contains(err.Error(), "hunter2") {
		t.Errorf("password left in %q", err)
	}
	plain := errors.New("no route")
	if got := scrub(plain, "https://example.com/x.tar.gz"); got != plain {
		t.Errorf("scrub changed an error without a password: %v", got)
	}
}

func TestKind(t *testing.T) {
	k := Kind()
	spec, ok := k.NewSpec().(*Spec)
	if !ok {
		t.Fatalf("NewSpec returned %T", k.NewSpec())
	}
	spec.URL, spec.Dest = "git::https://github.com/sgl-project/sglang?ref="+strings.Repeat("a", 40), "/opt/sglang"
	if _, err := k.New("sglang-src", spec); err != nil {
		t.Errorf("New: %v", err)
	}
	if _, err := k.New("sglang-src", Spec{}); err == nil {
		t.Error("New accepted a spec of the wrong type")
	}
}

func TestSymlinkDestRefused(t *testing.T) {
	needGit(t)
	repo, first, second := newRepo(t)
	ctx := context.Background()
	parent := t.TempDir()
	target := filepath.Join(parent, "sglang-real")
	if err := mustNew(t, Spec{URL: "git::file://" + repo + "?ref=" + first, Dest: target}).Run(ctx, newEnv(t)); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(parent, "sglang")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	step := mustNew(t, Spec{URL: "git::file://" + repo + "?ref=" + second, Dest: link})
	for name, call := range map[string]func() error{
		"Run":    func() error { return step.Run(ctx, newEnv(t)) },
		"Intact": func() error { _, _, err := step.Intact(ctx, newEnv(t)); return err },
		"Preflight": func() error {
			_, _, err := step.Preflight(ctx, newEnv(t), engine.CacheSlot{})
			return err
		},
	} {
		err := call()
		if !errors.Is(err, exitcode.ErrUsage) || !strings.Contains(err.Error(), link+" is a symbolic link (to "+target+")") ||
			!strings.Contains(err.Error(), "set dest to the folder the link points to") {
			t.Errorf("%s error = %v; want a usage error naming the link and the fix", name, err)
		}
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("the link was replaced: %v, %v", fi, err)
	}
	if head := git(t, target, "rev-parse", "HEAD"); head != first {
		t.Errorf("the link's target is at %s, want it untouched at %s", head, first)
	}
	if extra := leftovers(t, parent, "sglang", "sglang-real"); len(extra) > 0 {
		t.Errorf("left behind next to dest: %v", extra)
	}
}

func TestOptionLikeURLAndRefRefused(t *testing.T) {
	commit := strings.Repeat("a", 40)
	for _, spec := range []Spec{
		{URL: "git::--upload-pack=touch /tmp/pwned?ref=" + commit},
		{URL: "git::-uexploit?ref=" + commit},
		{URL: "--config=core.sshCommand=x"},
		{URL: "git::https://github.com/sgl-project/sglang", Ref: "--orphan"},
	} {
		spec.Dest = filepath.Join(t.TempDir(), "dest")
		_, err := New("sglang-src", spec)
		if !errors.Is(err, exitcode.ErrUsage) || !strings.Contains(err.Error(), "which git would read as an option") {
			t.Errorf("New(%+v) error = %v; want a usage error", spec, err)
		}
	}
	for _, u := range []string{"git::ssh://-oProxyCommand=x/repo?ref=" + commit, "git::ssh://-oProxyCommand=x@example.com/repo?ref=" + commit} {
		_, err := New("sglang-src", Spec{URL: u, Dest: filepath.Join(t.TempDir(), "dest")})
		if !errors.Is(err, exitcode.ErrUsage) || !strings.Contains(err.Error(), "which ssh would read as an option") {
			t.Errorf("New(%q) error = %v; want a usage error", u, err)
		}
	}
}

func TestGetterParametersRefused(t *testing.T) {
	commit := strings.Repeat("a", 40)
	for _, k := range []string{"depth=1", "sshkey=AAAA", "subfolder"} {
		u := "git::https://example.com/x.git?ref=" + commit + "&" + k
		if k == "subfolder" {
			u = "git::https://example.com/x.git//python?ref=" + commit
		}
		step := mustNew(t, Spec{URL: u, Dest: filepath.Join(t.TempDir(), "dest")})
		if _, err := step.Fingerprint(context.Background(), newEnv(t)); !errors.Is(err, exitcode.ErrUsage) || !strings.Contains(err.Error(), "is not supported") {
			t.Errorf("%s: error = %v; want a usage error", k, err)
		}
	}
}

// TestTransportHelperRefusedAtValidate: git's TRANSPORT::ADDRESS syntax after git::
// (fd::3 waits on a file descriptor for ever, ext:: runs a command) and transports other
// than http(s), ssh, git and file are refused when the recipe is validated (Check), with
// the fix, before anything runs.
func TestTransportHelperRefusedAtValidate(t *testing.T) {
	commit := strings.Repeat("a", 40)
	for _, tc := range []struct{ url, want string }{
		{"git::fd::3?ref=" + commit, `"fd::" is git's transport-helper syntax`},
		{"git::ext::sh -c touch%20/tmp/x?ref=" + commit, `"ext::" is git's transport-helper syntax`},
		{"git::ftp://example.com/x.git?ref=" + commit, `git transport "ftp" is not one a recipe may use`},
	} {
		step := mustNew(t, Spec{URL: tc.url, Dest: filepath.Join(t.TempDir(), "dest")})
		err := step.Check(newEnv(t))
		if !errors.Is(err, exitcode.ErrUsage) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "give git:: followed by") && !strings.Contains(err.Error(), "give an https") {
			t.Errorf("Check(%q) = %v; want a usage error with %q and the fix", tc.url, err, tc.want)
		}
	}
}
