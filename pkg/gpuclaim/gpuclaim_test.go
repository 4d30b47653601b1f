package gpuclaim_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/gpuclaim"
)

// ledger is the records of state dirs, by state dir and recipe; broken state dirs cannot
// be read.
type ledger struct {
	gpus   map[string]map[string][]string
	broken map[string]bool
}

func (l ledger) RecordedGPUs(stateDir string) (map[string][]string, error) {
	if l.broken[stateDir] {
		return nil, fmt.Errorf("reading %s: broken", stateDir)
	}
	return l.gpus[stateDir], nil
}

// A recipe of the same state dir whose records name one of the GPUs is a conflict (exit
// 4, naming the recipe and the GPU), unless this recipe replaces it and stops its server.
func TestConflictsInOneStateDir(t *testing.T) {
	l := ledger{gpus: map[string]map[string][]string{"/s": {"a": {"GPU-0", "GPU-1"}, "b": {"GPU-1"}, "c": {"GPU-7"}}}}
	req := gpuclaim.Request{StateDir: "/s", Recipe: "a", GPUs: []string{"GPU-0", "GPU-1"}}
	err := gpuclaim.Conflicts(req, l)
	if !errors.Is(err, exitcode.ErrHost) || !strings.Contains(err.Error(), "recipe b serves on GPU-1") || strings.Contains(err.Error(), "recipe c") {
		t.Errorf("conflict with b: %v", err)
	}
	req.Replaces = []string{"b"}
	if err := gpuclaim.Conflicts(req, l); err == nil || !strings.Contains(err.Error(), "this recipe replaces it, but its service manager cannot stop") {
		t.Errorf("replacing b without stopping it: %v", err)
	}
	req.Replacing = true
	if err := gpuclaim.Conflicts(req, l); err != nil {
		t.Errorf("replacing b and stopping it: %v", err)
	}
}

// A claim of another state dir counts as that state dir's records say now: a recipe
// removed there claims nothing, one whose records cannot be read claims what its claim
// says, and the claims of the recipe's own state dir are read from its records only.
func TestConflictsAcrossStateDirs(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct{ stateDir, recipe string }{{"/other", "b"}, {"/gone", "c"}, {"/broken", "d"}, {"/s", "a"}} {
		if err := gpuclaim.Record(dir, c.stateDir, c.recipe, []string{"GPU-0"}); err != nil {
			t.Fatal(err)
		}
	}
	l := ledger{
		gpus:   map[string]map[string][]string{"/other": {"b": {"GPU-0"}}, "/gone": {}, "/s": {"a": {"GPU-0"}}},
		broken: map[string]bool{"/broken": true},
	}
	err := gpuclaim.Conflicts(gpuclaim.Request{Dir: dir, StateDir: "/s", Recipe: "a", GPUs: []string{"GPU-0"}}, l)
	msg := fmt.Sprint(err)
	for _, want := range []string{"recipe b, applied with state dir /other, serves on GPU-0", "recipe d, applied with state dir /broken (its state cannot be read), serves on GPU-0"} {
		if !strings.Contains(msg, want) {
			t.Errorf("missing %q in %v", want, err)
		}
	}
	if strings.Contains(msg, "recipe c") {
		t.Errorf("a recipe removed from its state dir still claims its GPUs: %v", err)
	}
	dirs, err := gpuclaim.StateDirs(dir)
	if err != nil || strings.Join(dirs, " ") == "" || len(dirs) != 4 {
		t.Errorf("StateDirs: %v, %v", dirs, err)
	}
	if err := gpuclaim.Record(dir, "/other", "b", nil); err != nil {
		t.Fatal(err)
	}
	if dirs, _ := gpuclaim.StateDirs(dir); len(dirs) != 3 || strings.Contains(strings.Join(dirs, " "), "/other") {
		t.Errorf("a claim of no GPU is still there: %v", dirs)
	}
}

// A run's pending claim refuses another state dir's run on its GPUs while it is held, and
// claims nothing once released.
func TestPendingClaim(t *testing.T) {
	dir := t.TempDir()
	l := ledger{gpus: map[string]map[string][]string{}}
	p, err := gpuclaim.Hold(gpuclaim.Request{Dir: dir, StateDir: "/one", Recipe: "a", GPUs: []string{"GPU-0"}}, l, func(string, error) {})
	if err != nil || p == nil {
		t.Fatalf("Hold: %v, %v", p, err)
	}
	other := gpuclaim.Request{Dir: dir, StateDir: "/two", Recipe: "b", GPUs: []string{"GPU-0"}}
	if _, err := gpuclaim.Hold(other, l, func(string, error) {}); err == nil || !strings.Contains(err.Error(), "(a run of it in progress)") {
		t.Errorf("a second run on the pending claim's GPUs: %v", err)
	}
	p.Release()
	if matches, _ := filepath.Glob(filepath.Join(dir, "*.pending")); len(matches) != 0 {
		t.Errorf("the pending claim is still there: %v", matches)
	}
	if err := gpuclaim.Conflicts(other, l); err != nil {
		t.Errorf("after the release: %v", err)
	}
}

// A claims folder of more entries than are read is refused (exit 4), naming what sglprov
// did not write there, never read in part.
func TestReadDirInFull(t *testing.T) {
	dir := t.TempDir()
	for i := range 8193 {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("junk-%05d", i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	_, err := gpuclaim.ReadDir(dir)
	if !errors.Is(err, exitcode.ErrHost) || !strings.Contains(err.Error(), "junk-") {
		t.Errorf("ReadDir of a folder of junk: %v", err)
	}
	if names, err := gpuclaim.ReadDir(filepath.Join(dir, "none")); err != nil || names != nil {
		t.Errorf("a folder that is not there: %v, %v", names, err)
	}
}
