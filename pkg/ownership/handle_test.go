package ownership

import (
	"bytes"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
)

// victim writes a folder of files sglprov never wrote, with the names a record lists, and
// returns a check that they are byte-identical.
func victim(t *testing.T, dir string, names ...string) func(when string) {
	t.Helper()
	want := map[string][]byte{}
	for _, n := range names {
		p := filepath.Join(dir, filepath.FromSlash(n))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		b := []byte("not sglprov's: " + n + "\n")
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		want[p] = b
	}
	return func(when string) {
		t.Helper()
		for p, b := range want {
			if got, err := os.ReadFile(p); err != nil || !bytes.Equal(got, b) {
				t.Fatalf("%s: %s is not as it was: %q %v", when, p, got, err)
			}
		}
	}
}

// Remove deletes relative to the folder it checked: a link to another folder swapped in
// at the record's path between the identity check and the first deletion (afterCheck)
// is never followed; the victim's files, of the same names, stay byte-identical, and the
// files of the folder sglprov wrote into (moved aside) go.
func TestRemoveDeletesByHandleAfterASwap(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "data/m")
	files := []string{"model.safetensors", "sub/config.json"}
	victim(t, dir, files...)
	dev, ino := Identify(dir)
	o := Owned{Kind: KindWeights, Path: dir, Files: files, Dirs: []string{".", "sub"}, Listed: true, Dev: dev, Ino: ino}
	other := filepath.Join(root, "home/u")
	intact := victim(t, other, files...)
	moved := filepath.Join(root, "data/moved")
	afterCheck = func() {
		if err := os.Rename(dir, moved); err != nil {
			t.Error(err)
		}
		if err := os.Symlink(other, dir); err != nil {
			t.Error(err)
		}
	}
	t.Cleanup(func() { afterCheck = nil })
	res, err := o.Remove(root)
	if err != nil {
		t.Fatal(err)
	}
	intact("after a link was swapped in")
	if res.Files != 2 {
		t.Errorf("Removed = %+v, want the 2 files of the checked folder", res)
	}
	for _, f := range files {
		if _, err := os.Lstat(filepath.Join(moved, f)); err == nil {
			t.Errorf("%s of the checked folder is still there", f)
		}
	}
	if fi, err := os.Lstat(dir); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("the link swapped in went: %v", err)
	}
}

// The same race run for real: while a loop swaps the record's path between the folder
// sglprov wrote into and a link to a victim, Remove (run again and again, its files
// written back each round) never deletes a victim's file.
func TestRemoveNeverReachesASwappedInLink(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "data/m")
	aside := filepath.Join(root, "data/aside")
	files := []string{"model.safetensors", "sub/config.json"}
	victim(t, dir, files...)
	dev, ino := Identify(dir)
	o := Owned{Kind: KindWeights, Path: dir, Files: files, Listed: true, Dev: dev, Ino: ino}
	other := filepath.Join(root, "home/u")
	intact := victim(t, other, files...)
	var stop atomic.Bool
	var mu sync.Mutex // held while a round writes the files back
	done := make(chan struct{})
	go func() {
		defer close(done)
		for !stop.Load() {
			mu.Lock()
			// The folder moves aside and a link takes its place, then back.
			if os.Rename(dir, aside) == nil {
				_ = os.Symlink(other, dir)
				_ = os.Remove(dir)
				_ = os.Rename(aside, dir)
			}
			mu.Unlock()
		}
	}()
	deleted := 0
	for i := 0; i < 400; i++ {
		if _, err := o.Remove(root); err == nil {
			deleted++
		}
		intact("round")
		mu.Lock()
		for _, f := range files {
			base := dir
			if _, err := os.Lstat(dir); err != nil {
				base = aside
			}
			p := filepath.Join(base, filepath.FromSlash(f))
			_ = os.MkdirAll(filepath.Dir(p), 0o755)
			_ = os.WriteFile(p, []byte("sglprov's\n"), 0o644)
		}
		mu.Unlock()
	}
	stop.Store(true)
	<-done
	intact("after 400 rounds")
	t.Logf("%d of 400 rounds found the folder and deleted from it", deleted)
}
