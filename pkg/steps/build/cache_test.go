package build

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sglprov/sglprov/pkg/cache"
	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/test/ociregistry"
)

// TestRestoreFromCache: outputs pulled from the registry land where the outputs globs
// say, with their mode, and are recorded as intact; an artifact that names a file outside
// the outputs (or outside the build folder) is refused, and nothing is written.
func TestRestoreFromCache(t *testing.T) {
	reg := ociregistry.StartT(t)
	ctx := context.Background()
	c, err := cache.New(cache.Config{Repository: reg.Addr + "/fleet/build", Push: true}, cache.Options{})
	if err != nil {
		t.Fatal(err)
	}
	src := t.TempDir()
	file := func(name, content string) cache.File {
		p := filepath.Join(src, strings.ReplaceAll(name, "/", "_"))
		if err := os.WriteFile(p, []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256([]byte(content))
		return cache.File{Name: name, Path: p, Size: int64(len(content)), SHA256: hex.EncodeToString(sum[:]), Mode: 0o755}
	}
	dir := t.TempDir()
	s := newStep(t, Spec{Dir: dir, Argv: []string{"false"}, Outputs: []string{"dist/*.whl"}})

	t.Run("outputs", func(t *testing.T) {
		env, _, _ := testEnv(t)
		slot := engine.CacheSlot{Cache: c, Tag: strings.Repeat("a1", 32)}
		pushed, err := c.Push(ctx, slot.Tag, cache.KindBuild, []byte(`{}`), []cache.File{file("dist/k-1.0.whl", "wheel")})
		if err != nil {
			t.Fatal(err)
		}
		digest, ok, err := s.Restore(ctx, env, slot)
		if err != nil || !ok || digest != pushed.Digest {
			t.Fatalf("Restore = %q, %v, %v; want %s", digest, ok, err, pushed.Digest)
		}
		p := filepath.Join(dir, "dist", "k-1.0.whl")
		b, err := os.ReadFile(p)
		fi, _ := os.Stat(p)
		if err != nil || string(b) != "wheel" || fi.Mode().Perm() != 0o755 {
			t.Fatalf("restored %q (%v), mode %v", b, err, fi.Mode())
		}
		if ok, why, err := s.Intact(ctx, env); !ok || err != nil {
			t.Errorf("Intact after a restore = %v %q %v", ok, why, err)
		}
		if ents, _ := os.ReadDir(env.StateDir); len(ents) != 0 {
			t.Errorf("the pull left %d entries in the state dir", len(ents))
		}
	})
	for i, tc := range []struct{ name, file, want string }{
		{"not an output", "dist/k.so", "not one of the step's outputs"},
		{"outside the folder", "../dist/x.whl", "leaves the build folder"},
		{"absolute elsewhere", "/etc/x.whl", "not one of the step's outputs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env, _, _ := testEnv(t)
			slot := engine.CacheSlot{Cache: c, Tag: strings.Repeat("b", 63) + string(rune('0'+i))}
			if _, err := c.Push(ctx, slot.Tag, cache.KindBuild, []byte(`{}`), []cache.File{file(tc.file, "evil")}); err != nil {
				t.Fatal(err)
			}
			_, ok, err := s.Restore(ctx, env, slot)
			if ok || err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Restore = %v, %v; want a refusal (%s)", ok, err, tc.want)
			}
			if _, err := os.Stat(filepath.Join(dir, filepath.FromSlash(tc.file))); err == nil && tc.file != "dist/k-1.0.whl" {
				t.Errorf("%s was written", tc.file)
			}
		})
	}
}
