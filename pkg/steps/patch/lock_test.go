package patch

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/exitcode"
)

// A run that finds another holding the tree's lock (an apply with another state folder on
// the same tree) stops with exit 5, naming the holder's pid, and touches nothing; once the
// holder is done, the run patches the tree.
func TestSecondWriterRefusedNamingTheHolder(t *testing.T) {
	f := newFixture(t, map[string]string{"a.txt": baseA}, [2]string{"a.patch", patchA})
	// Another process's hold, as another sglprov takes it: flock locks are per open file,
	// so this open conflicts with the step's as one in another process would.
	const otherPid = 4242
	held, err := holdAsAnotherProcess(t, f.tree, otherPid)
	if err != nil {
		t.Fatal(err)
	}
	err = f.run(t)
	lockPath := filepath.Join(f.tree, stageDir, lockName)
	if !errors.Is(err, exitcode.ErrLocked) || !strings.Contains(err.Error(), fmt.Sprintf("another sglprov (pid %d) is writing the patched files of %s", otherPid, f.tree)) || !strings.Contains(err.Error(), lockPath) {
		t.Fatalf("Run while the tree is locked = %v; want exit 5 naming pid %d and %s", err, otherPid, lockPath)
	}
	if exitcode.Of(err) != 5 {
		t.Errorf("exit code %d, want 5", exitcode.Of(err))
	}
	if got := f.read(t, "a.txt"); got != baseA {
		t.Errorf("a.txt = %q while another run holds the tree", got)
	}
	os.Remove(lockPath) // as the holder does before it lets go
	held.Close()
	if err := f.run(t); err != nil {
		t.Fatalf("Run after the holder let go: %v", err)
	}
	if got := f.read(t, "a.txt"); !strings.Contains(got, "THREE") {
		t.Errorf("a.txt = %q, want patched", got)
	}
	if _, err := os.Lstat(filepath.Join(f.tree, stageDir)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the stage folder is left: %v", err)
	}
}

// Applies with different state folders race on one tree: each either patches it or is
// refused as locked, and a later run finds a sound tree (no journal naming staged files
// another run removed).
func TestConcurrentWritersLeaveASoundTree(t *testing.T) {
	for round := range 20 {
		f := newFixture(t, map[string]string{"a.txt": baseA, "b.txt": baseB}, [2]string{"a.patch", patchA}, [2]string{"b.patch", patchB})
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for i := range errs {
			env := engine.NewTestEnv(t.TempDir(), &bytes.Buffer{})
			env.RecipeDir = f.recipe
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = f.step.Run(t.Context(), env)
			}()
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil && !errors.Is(err, exitcode.ErrLocked) {
				t.Fatalf("round %d: a concurrent run failed: %v", round, err)
			}
		}
		if err := f.run(t); err != nil {
			t.Fatalf("round %d: the run after them: %v", round, err)
		}
		if got := f.read(t, "a.txt"); got != "one\ntwo\nTHREE\nfour\nfive\n" {
			t.Fatalf("round %d: a.txt = %q", round, got)
		}
	}
}

// What recovery finds is said: a journal whose staged copies are gone before any change
// was made (another run removed them) is dropped and the series applied afresh; one with a
// change made and a staged copy gone cannot be finished, and the error names the copy and
// the way out; one that can be finished is.
func TestRecoverSaysWhatItFound(t *testing.T) {
	const patchedA, patchedB = "one\ntwo\nTHREE\nfour\nfive\n", "alpha\nBETA\ngamma\n"
	journalOf := func(f *fixture) string {
		stage := filepath.Join(f.tree, stageDir)
		j := `{"version":1,"changes":[` +
			`{"op":"write","path":"a.txt","staged":"0","mode":420,"pre":"` + digest([]byte(baseA)) + `","post":"` + digest([]byte(patchedA)) + `"},` +
			`{"op":"write","path":"b.txt","staged":"1","mode":420,"pre":"` + digest([]byte(baseB)) + `","post":"` + digest([]byte(patchedB)) + `"}]}`
		writeFile(t, filepath.Join(stage, journalName), j, 0o600)
		return stage
	}

	// Nothing made, the staged copies gone.
	f := newFixture(t, map[string]string{"a.txt": baseA, "b.txt": baseB}, [2]string{"a.patch", patchA}, [2]string{"b.patch", patchB})
	stage := journalOf(f)
	if err := f.run(t); err != nil {
		t.Fatalf("Run over a journal with nothing made and its copies gone: %v", err)
	}
	if !strings.Contains(f.log.String(), "found what an earlier run left: the journal of an unfinished patch write in "+stage+": 2 change(s) (a.txt, b.txt), 0 already made; 2 staged cop(ies) gone, so dropped it") {
		t.Errorf("log:\n%s", f.log)
	}
	if a, b := f.read(t, "a.txt"), f.read(t, "b.txt"); a != patchedA || b != patchedB {
		t.Errorf("a.txt = %q, b.txt = %q; want the series applied", a, b)
	}

	// a.txt made, b.txt's staged copy gone.
	f = newFixture(t, map[string]string{"a.txt": patchedA, "b.txt": baseB}, [2]string{"a.patch", patchA}, [2]string{"b.patch", patchB})
	stage = journalOf(f)
	err := f.run(t)
	for _, want := range []string{
		"the journal of an unfinished patch write in " + stage + ": 2 change(s) (a.txt, b.txt), 1 already made",
		"its staged copy " + filepath.Join(stage, "1") + ", which is gone",
		"sglprov apply --force sm120-patches",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Run error = %v\nwant it to say %q", err, want)
		}
	}
	if got := f.read(t, "b.txt"); got != baseB {
		t.Errorf("b.txt = %q", got)
	}

	// The copy back: the journal is finished, and the log says what was found.
	writeFile(t, filepath.Join(stage, "1"), patchedB, 0o644)
	f.log.Reset()
	if err := f.run(t); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(f.log.String(), "1 already made; finished the rest") {
		t.Errorf("log:\n%s", f.log)
	}
	if got := f.read(t, "b.txt"); got != patchedB {
		t.Errorf("b.txt = %q", got)
	}
}

// holdAsAnotherProcess takes the flock of the tree's lock file through an open of its own
// and writes pid in it, as another sglprov process holding the tree does.
func holdAsAnotherProcess(t *testing.T, tree string, pid int) (*os.File, error) {
	t.Helper()
	stage := filepath.Join(tree, stageDir)
	if err := os.MkdirAll(stage, 0o700); err != nil {
		return nil, err
	}
	fh, err := os.OpenFile(filepath.Join(stage, lockName), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(fh.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		fh.Close()
		return nil, err
	}
	if _, err := fmt.Fprintf(fh, "pid %d\n", pid); err != nil {
		fh.Close()
		return nil, err
	}
	return fh, nil
}

// Two patch steps of one run that write one tree (the engine runs independent steps at
// once) take turns: both apply their series.
func TestStepsOfOneRunOnOneTreeTakeTurns(t *testing.T) {
	f := newFixture(t, map[string]string{"a.txt": baseA, "b.txt": baseB}, [2]string{"a.patch", patchA})
	writeFile(t, filepath.Join(f.recipe, "other", "b.patch"), patchB, 0o644)
	writeFile(t, filepath.Join(f.recipe, "other", "series"), "b.patch\n", 0o644)
	other, err := New("other-patches", Spec{Dir: f.tree, Series: "other/series"})
	if err != nil {
		t.Fatal(err)
	}
	for round := range 10 {
		writeFile(t, filepath.Join(f.tree, "a.txt"), baseA, 0o644)
		writeFile(t, filepath.Join(f.tree, "b.txt"), baseB, 0o644)
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for i, step := range []*Step{f.step, other} {
			env := engine.NewTestEnv(t.TempDir(), &bytes.Buffer{})
			env.RecipeDir = f.recipe
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = step.Run(t.Context(), env)
			}()
		}
		wg.Wait()
		if errs[0] != nil || errs[1] != nil {
			t.Fatalf("round %d: %v; %v", round, errs[0], errs[1])
		}
		if a, b := f.read(t, "a.txt"), f.read(t, "b.txt"); !strings.Contains(a, "THREE") || !strings.Contains(b, "BETA") {
			t.Fatalf("round %d: a.txt = %q, b.txt = %q", round, a, b)
		}
	}
}

// A lock file that is a link (symbolic or hard) to another file is refused, never written
// through.
func TestTreeLockNeverWritesThroughALink(t *testing.T) {
	for _, kind := range []string{"symbolic", "hard"} {
		t.Run(kind, func(t *testing.T) {
			f := newFixture(t, map[string]string{"a.txt": baseA}, [2]string{"a.patch", patchA})
			victim := filepath.Join(t.TempDir(), "victim")
			writeFile(t, victim, "keep me\n", 0o644)
			lockPath := filepath.Join(f.tree, stageDir, lockName)
			if err := os.MkdirAll(filepath.Dir(lockPath), 0o700); err != nil {
				t.Fatal(err)
			}
			link := os.Symlink
			if kind == "hard" {
				link = os.Link
			}
			if err := link(victim, lockPath); err != nil {
				t.Skip(err)
			}
			if err := f.run(t); err == nil {
				t.Fatal("Run with a linked lock file succeeded")
			}
			if b, _ := os.ReadFile(victim); string(b) != "keep me\n" {
				t.Errorf("the linked file was written: %q", b)
			}
			if got := f.read(t, "a.txt"); got != baseA {
				t.Errorf("a.txt = %q", got)
			}
		})
	}
}
