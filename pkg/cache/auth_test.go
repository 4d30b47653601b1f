package cache_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/sglprov/sglprov/pkg/cache"
	"github.com/sglprov/sglprov/test/ociregistry"
)

const (
	user     = "fleet"
	password = "s3cret-Pa55"
	// htpasswd is user:bcrypt(password) at cost 4 (the registry checks it on every request).
	htpasswd = "fleet:$2b$04$ZexirK4s5AZWsEOjEx0YuOUGqcX2LPLjaRPekIXlNJYwOWvTcmlr6\n"
)

// TestDockerConfigCredentials: a registry that wants credentials gets them from
// DOCKER_CONFIG/config.json; without them the push fails with an error that names the
// registry; the password and its base64 form are in no log line and no error.
func TestDockerConfigCredentials(t *testing.T) {
	reg := ociregistry.StartWithT(t, ociregistry.Options{Htpasswd: htpasswd})
	ctx := context.Background()
	src := t.TempDir()
	f := writeRandom(t, filepath.Join(src, "out.bin"), 3<<20)

	var mu sync.Mutex
	var logs strings.Builder
	logf := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(&logs, format+"\n", args...)
	}
	secretForms := []string{password, base64.StdEncoding.EncodeToString([]byte(user + ":" + password))}
	noSecret := func(what, s string) {
		t.Helper()
		for _, sec := range secretForms {
			if strings.Contains(s, sec) {
				t.Errorf("%s holds the credentials: %s", what, s)
			}
		}
	}

	// No credentials: refused.
	empty := t.TempDir()
	anon, err := cache.New(cache.Config{Repository: reg.Addr + "/fleet/sglprov", Push: true},
		cache.Options{Getenv: env(map[string]string{"DOCKER_CONFIG": empty}), Logf: logf, ChunkSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	_, err = anon.Push(ctx, strings.Repeat("1", 64), cache.KindBuild, []byte(`{}`), []cache.File{f})
	if err == nil || !strings.Contains(err.Error(), "docker login "+reg.Addr) {
		t.Fatalf("push without credentials: %v, want the fix named", err)
	}

	// Credentials in DOCKER_CONFIG/config.json.
	cfgDir := t.TempDir()
	auth := base64.StdEncoding.EncodeToString([]byte(user + ":" + password))
	cfg := fmt.Sprintf(`{"auths": {%q: {"auth": %q}}}`, reg.Addr, auth)
	if err := os.WriteFile(filepath.Join(cfgDir, "config.json"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := cache.New(cache.Config{Repository: reg.Addr + "/fleet/sglprov", Push: true},
		cache.Options{Getenv: env(map[string]string{"DOCKER_CONFIG": cfgDir}), Logf: logf, ChunkSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	tag := strings.Repeat("2", 64)
	if _, err := c.Push(ctx, tag, cache.KindBuild, []byte(`{}`), []cache.File{f}); err != nil {
		t.Fatalf("push with credentials: %v", err)
	}
	a, err := c.Lookup(ctx, tag)
	if err != nil || a == nil {
		t.Fatalf("lookup with credentials: %v, %v", a, err)
	}
	if err := c.Pull(ctx, a, t.TempDir()); err != nil {
		t.Fatalf("pull with credentials: %v", err)
	}
	// The same through HOME/.docker/config.json.
	home := t.TempDir()
	if err := os.MkdirAll(filepath.Join(home, ".docker"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, ".docker", "config.json"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	h, err := cache.New(cache.Config{Repository: reg.Addr + "/fleet/sglprov"}, cache.Options{Getenv: env(map[string]string{"HOME": home})})
	if err != nil {
		t.Fatal(err)
	}
	if a, err := h.Lookup(ctx, tag); err != nil || a == nil {
		t.Fatalf("lookup with ~/.docker/config.json: %v, %v", a, err)
	}

	// A failure with credentials configured says nothing of them.
	_, err = c.Push(ctx, "bad tag!", cache.KindBuild, []byte(`{}`), []cache.File{f})
	if err == nil {
		t.Fatal("a push with a bad tag succeeded")
	}
	noSecret("an error", err.Error())
	noSecret("the log", logs.String())
	if logs.Len() == 0 {
		t.Error("nothing was logged: the check above checked nothing")
	}
}

func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

// TestWrongCredentialsNamed: credentials the registry refuses are said to be refused, with
// the config file they came from, not said to be missing; the password is in no error.
func TestWrongCredentialsNamed(t *testing.T) {
	reg := ociregistry.StartWithT(t, ociregistry.Options{Htpasswd: htpasswd})
	cfgDir := t.TempDir()
	auth := base64.StdEncoding.EncodeToString([]byte(user + ":wrong-" + password))
	cfg := fmt.Sprintf(`{"auths": {%q: {"auth": %q}}}`, reg.Addr, auth)
	if err := os.WriteFile(filepath.Join(cfgDir, "config.json"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := cache.New(cache.Config{Repository: reg.Addr + "/fleet/sglprov"}, cache.Options{Getenv: env(map[string]string{"DOCKER_CONFIG": cfgDir})})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Lookup(context.Background(), strings.Repeat("3", 64))
	if err == nil || !strings.Contains(err.Error(), "refused the credentials for "+reg.Addr+" in "+filepath.Join(cfgDir, "config.json")) {
		t.Fatalf("lookup with a wrong password: %v, want the credentials said refused, with their file", err)
	}
	for _, sec := range []string{password, auth} {
		if strings.Contains(err.Error(), sec) {
			t.Errorf("the error holds the credentials: %v", err)
		}
	}
}
