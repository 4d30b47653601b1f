package patch

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A run killed while staging left temporary files beside the patched files (the old
// ".NAME.tmp-NNN" names) and a stage folder without a journal: the next run removes both,
// keeps what is not its own, and patches the tree.
func TestRunRemovesWhatAKilledRunLeft(t *testing.T) {
	f := newFixture(t, map[string]string{"a.txt": baseA, "b.txt": baseB}, [2]string{"a.patch", patchA}, [2]string{"b.patch", patchB})
	litter := []string{".a.txt.tmp-123456789", ".a.txt.tmp-1", ".b.txt.tmp-42"}
	for _, name := range litter {
		writeFile(t, filepath.Join(f.tree, name), "half", 0o600)
	}
	writeFile(t, filepath.Join(f.tree, ".keep.tmp-1"), "not ours", 0o644)
	writeFile(t, filepath.Join(f.tree, "a.txt.tmp-1"), "not ours", 0o644)
	writeFile(t, filepath.Join(f.tree, stageDir, "0"), "staged, never journalled", 0o600)

	if err := f.run(t); err != nil {
		t.Fatal(err)
	}
	if got := f.read(t, "a.txt"); !strings.Contains(got, "THREE") {
		t.Errorf("a.txt = %q, want patched", got)
	}
	var names []string
	entries, _ := os.ReadDir(f.tree)
	for _, e := range entries {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	want := []string{".keep.tmp-1", "a.txt", "a.txt.tmp-1", "b.txt"}
	if strings.Join(names, " ") != strings.Join(want, " ") {
		t.Errorf("the tree holds %v, want %v", names, want)
	}
	if !strings.Contains(f.log.String(), "files=3") {
		t.Errorf("the log does not say what was removed:\n%s", f.log)
	}
}

// A journalled write whose target changed since (someone edited it after the kill) is not
// finished over the edit: the run stops and names the file.
func TestRecoverRefusesChangedTarget(t *testing.T) {
	f := newFixture(t, map[string]string{"a.txt": baseA, "b.txt": baseB}, [2]string{"a.patch", patchA})
	// Stage a journal by hand: a.txt to be written, from baseA.
	stage := filepath.Join(f.tree, stageDir)
	writeFile(t, filepath.Join(stage, "0"), "new\n", 0o644)
	j := `{"version":1,"changes":[{"op":"write","path":"a.txt","staged":"0","mode":420,"pre":"` + digest([]byte(baseA)) + `","post":"` + digest([]byte("new\n")) + `"}]}`
	writeFile(t, filepath.Join(stage, journalName), j, 0o600)
	writeFile(t, filepath.Join(f.tree, "a.txt"), "edited after the kill\n", 0o644)
	err := f.run(t)
	if err == nil || !strings.Contains(err.Error(), filepath.Join(f.tree, "a.txt")+" changed since it was journalled") {
		t.Fatalf("run = %v, want the changed file named", err)
	}
	if got := f.read(t, "a.txt"); got != "edited after the kill\n" {
		t.Errorf("a.txt = %q, want the edit kept", got)
	}
}

// Staging writes nothing beside the tree's files: every staged content is in the one
// stage folder, which is gone after the run.
func TestWriteStagesInOneFolder(t *testing.T) {
	f := newFixture(t, map[string]string{"a.txt": baseA, "b.txt": baseB}, [2]string{"a.patch", patchA})
	if err := f.run(t); err != nil {
		t.Fatal(err)
	}
	err := filepath.WalkDir(f.tree, func(p string, d os.DirEntry, err error) error {
		if strings.Contains(d.Name(), ".tmp-") || d.Name() == stageDir {
			t.Errorf("left behind: %s", p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// A journalled write that cannot be finished (its target was edited after the kill) is
// what `apply --force STEP` is for, as the error says: the forced run drops the journal,
// restores the series' files from git and patches them, leaving no stage folder.
func TestForceDropsJournalItCannotFinish(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	f := newFixture(t, map[string]string{"a.txt": baseA, "b.txt": baseB}, [2]string{"a.patch", patchA})
	git(t, f.tree, "init", "-q")
	git(t, f.tree, "add", ".")
	git(t, f.tree, "commit", "-q", "-m", "base")
	stage := filepath.Join(f.tree, stageDir)
	writeFile(t, filepath.Join(stage, "0"), "new\n", 0o644)
	j := `{"version":1,"changes":[{"op":"write","path":"a.txt","staged":"0","mode":420,"pre":"` + digest([]byte(baseA)) + `","post":"` + digest([]byte("new\n")) + `"}]}`
	writeFile(t, filepath.Join(stage, journalName), j, 0o600)
	writeFile(t, filepath.Join(f.tree, "a.txt"), "edited after the kill\n", 0o644)

	err := f.run(t)
	if err == nil || !strings.Contains(err.Error(), "sglprov apply --force sm120-patches") {
		t.Fatalf("run = %v, want the step's --force named", err)
	}
	f.env.Force = true
	if err := f.run(t); err != nil {
		t.Fatalf("forced run: %v", err)
	}
	if got := f.read(t, "a.txt"); got != "one\ntwo\nTHREE\nfour\nfive\n" {
		t.Errorf("a.txt = %q, want the series applied to git's a.txt", got)
	}
	if _, err := os.Lstat(stage); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the stage folder is still there: %v", err)
	}
	if !strings.Contains(f.log.String(), "dropped what an earlier run left, the journal of an unfinished patch write in "+stage+": 1 change(s) (a.txt); the files are restored from git") {
		t.Errorf("the log does not say what was dropped:\n%s", f.log)
	}
}

// A patched file replaced by a FIFO is an output that changed, found without opening it:
// Intact (and so plan) waited for a writer. The run then stops, naming it.
func TestPatchedFileReplacedByFIFO(t *testing.T) {
	f := newFixture(t, map[string]string{"a.txt": baseA}, [2]string{"a.patch", patchA})
	if err := f.run(t); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(f.tree, "a.txt")
	os.Remove(p)
	if err := syscall.Mkfifo(p, 0o644); err != nil {
		t.Skip("mkfifo:", err)
	}
	done := make(chan error, 1)
	go func() {
		ok, why, err := f.step.Intact(context.Background(), f.env)
		if err == nil && (ok || why != "outputs changed: "+p) {
			err = fmt.Errorf("Intact = %v, %q; want outputs changed: %s", ok, why, p)
		}
		if err == nil {
			if err = f.run(t); err == nil || !strings.Contains(err.Error(), p+" was changed by hand") {
				err = fmt.Errorf("Run = %v, want the FIFO named", err)
			} else {
				err = nil
			}
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the step waited on the FIFO")
	}
}

// Killed after its last rename, before the journal was removed: every target already has
// its journalled content (the staged files are gone). The next run removes the journal
// and the stage folder and records the series as applied, without --force.
func TestRecoverAfterLastRename(t *testing.T) {
	const patchedA = "one\ntwo\nTHREE\nfour\nfive\n"
	f := newFixture(t, map[string]string{"a.txt": patchedA, "b.txt": baseB}, [2]string{"a.patch", patchA})
	stage := filepath.Join(f.tree, stageDir)
	j := `{"version":1,"changes":[{"op":"write","path":"a.txt","staged":"0","mode":420,"pre":"` + digest([]byte(baseA)) + `","post":"` + digest([]byte(patchedA)) + `"}]}`
	writeFile(t, filepath.Join(stage, journalName), j, 0o600)
	if err := f.run(t); err != nil {
		t.Fatalf("run after a kill past the last rename: %v", err)
	}
	if got := f.read(t, "a.txt"); got != patchedA {
		t.Errorf("a.txt = %q, want it patched once", got)
	}
	if _, err := os.Lstat(stage); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the stage folder is still there: %v", err)
	}
	if ok, why, err := f.step.Intact(context.Background(), f.env); !ok || err != nil {
		t.Errorf("Intact = %v, %q, %v; want the series recorded as applied", ok, why, err)
	}
}
