package atomicfile

import (
	"os"
	"path/filepath"
	"testing"
)

func TestWriteAndWriteIfChanged(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "sub", "f.json")
	if err := Write(p, []byte("one"), 0o600); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(p)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("stat: %v %v", st, err)
	}
	wrote, err := WriteIfChanged(p, []byte("one"), 0o600)
	if err != nil || wrote {
		t.Errorf("same content: wrote=%v err=%v", wrote, err)
	}
	wrote, err = WriteIfChanged(p, []byte("two"), 0o644)
	if err != nil || !wrote {
		t.Errorf("new content: wrote=%v err=%v", wrote, err)
	}
	if b, _ := os.ReadFile(p); string(b) != "two" {
		t.Errorf("content %q", b)
	}
	entries, _ := os.ReadDir(filepath.Dir(p))
	if len(entries) != 1 {
		t.Errorf("temporary files left: %v", entries)
	}
	if err := Write(filepath.Join(p, "under-a-file"), []byte("x"), 0o600); err == nil {
		t.Error("writing under a file succeeded")
	}
}

func TestStageAbortLeavesTargetAlone(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	if err := os.WriteFile(p, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	st, err := Stage(p, []byte("new"), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(p); string(b) != "old" {
		t.Errorf("staging changed the target: %q", b)
	}
	st.Abort()
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("abort left %v", entries)
	}
	st, _ = Stage(p, []byte("new"), 0o644)
	if err := st.Commit(); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(p); string(b) != "new" {
		t.Errorf("after commit: %q", b)
	}
}
