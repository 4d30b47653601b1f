package generation

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sglprov/sglprov/pkg/exitcode"
)

// Keys of the form Key returns, named for the tests.
const (
	g1     = "1111111111111111"
	g2     = "2222222222222222"
	g3     = "3333333333333333"
	broken = "bbbbbbbbbbbbbbbb"
)

func fill(t *testing.T, s *Store, key string, size int) {
	t.Helper()
	dir := filepath.Join(s.Path(key), "venv")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "lib.so"), make([]byte, size), 0o644); err != nil {
		t.Fatal(err)
	}
}

func openAt(t *testing.T, root string, keep int, clock *time.Time) *Store {
	t.Helper()
	s, err := Open(filepath.Join(root, "gens", "r"), filepath.Join(root, "state", "generations", "r.json"), keep)
	if err != nil {
		t.Fatal(err)
	}
	s.now = func() time.Time { *clock = clock.Add(time.Minute); return *clock }
	return s
}

// Generations that passed are kept up to keep, the serving one always; the link names the
// last that passed; older ones and ones that never passed are removed with their size said.
func TestPassedFlipsCurrentAndPrunes(t *testing.T) {
	root := t.TempDir()
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s := openAt(t, root, 2, &clock)
	for i, key := range []string{g1, g2, broken, g3} {
		if err := s.Begin(key); err != nil {
			t.Fatal(err)
		}
		fill(t, s, key, 1000*(i+1))
		if key == broken {
			continue // its build failed: it never passes
		}
		if _, err := s.Passed(key, nil); err != nil {
			t.Fatal(err)
		}
		if got, _ := os.Readlink(filepath.Join(s.Dir(), CurrentLink)); got != key {
			t.Errorf("after %s passed, current -> %q", key, got)
		}
	}
	// g3 passed last: g1 went when g3 passed (keep 2: g3, g2), broken too.
	if s.Serving() != g3 {
		t.Errorf("serving %q, want g3", s.Serving())
	}
	for key, want := range map[string]bool{g1: false, g2: true, broken: false, g3: true} {
		if _, err := os.Stat(s.Path(key)); (err == nil) != want {
			t.Errorf("generation %s on disk = %v, want %v", key, err == nil, want)
		}
	}
	// The record survives a reopen.
	again := openAt(t, root, 2, &clock)
	if again.Serving() != g3 || len(again.Generations()) != 2 {
		t.Errorf("reopened: serving %q, %d generations", again.Serving(), len(again.Generations()))
	}
}

func TestPruneSaysWhatItFrees(t *testing.T) {
	root := t.TempDir()
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s := openAt(t, root, 3, &clock)
	for i, key := range []string{g1, g2, g3} {
		_ = s.Begin(key)
		fill(t, s, key, 1000*(i+1))
		if _, err := s.Passed(key, nil); err != nil {
			t.Fatal(err)
		}
	}
	s.keep = 1
	p, err := s.Prune(true)
	if err != nil {
		t.Fatal(err)
	}
	if p.Bytes != 3000 || len(p.Freed) != 2 || strings.Join(p.Kept, ",") != g3 {
		t.Errorf("dry run = %+v, want g1 and g2 freed (3000 bytes), g3 kept", p)
	}
	if _, err := os.Stat(s.Path(g1)); err != nil {
		t.Errorf("a dry run removed g1: %v", err)
	}
	p, err = s.Prune(false)
	if err != nil || p.Bytes != 3000 {
		t.Fatalf("prune = %+v, %v", p, err)
	}
	if _, err := os.Stat(s.Path(g1)); err == nil {
		t.Errorf("g1 is still there after the prune")
	}
	if d := p.Describe(func(n int64) string { return "N" }); !strings.Contains(d, "kept "+Short(g3)) || !strings.Contains(d, "freed "+Short(g1)+", "+Short(g2)) {
		t.Errorf("Describe = %q", d)
	}
	all, err := s.RemoveAll(false)
	if err != nil || all.Bytes != 3000 {
		t.Fatalf("RemoveAll = %+v, %v", all, err)
	}
	if _, err := os.Stat(s.Dir()); err == nil {
		t.Errorf("the recipe's generations folder is still there")
	}
}

func TestKeyIsStable(t *testing.T) {
	a := Key(map[string]string{"src.spec": "1", "build.spec": "2"})
	b := Key(map[string]string{"build.spec": "2", "src.spec": "1"})
	c := Key(map[string]string{"build.spec": "2", "src.spec": "3"})
	if a != b || a == c || len(a) != 16 {
		t.Errorf("keys %s %s %s", a, b, c)
	}
}

// A "current" that is a folder sglprov did not make is reported, left as it is, and does
// not stop the prune; the summary line stays one readable line.
func TestCurrentFolderReportedPruneGoesOn(t *testing.T) {
	root := t.TempDir()
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s := openAt(t, root, 1, &clock)
	user := filepath.Join(s.Dir(), CurrentLink, "keep.txt")
	if err := os.MkdirAll(filepath.Dir(user), 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(user, []byte("mine"), 0o644)
	for _, key := range []string{g1, g2} {
		if err := s.Begin(key); err != nil {
			t.Fatal(err)
		}
		fill(t, s, key, 100)
		p, err := s.Passed(key, nil)
		if err == nil || !strings.Contains(err.Error(), "is not the link sglprov writes") {
			t.Errorf("Passed with a current folder: %v", err)
		}
		if p == nil {
			t.Fatalf("Passed with a current folder pruned nothing")
		}
	}
	if _, err := os.Stat(s.Path(g1)); err == nil {
		t.Errorf("g1 was not pruned: a current folder stopped the prune")
	}
	if b, err := os.ReadFile(user); err != nil || string(b) != "mine" {
		t.Errorf("the folder named current changed: %q, %v", b, err)
	}
	if d := (&Pruned{Kept: []string{g2}, Freed: []Freed{{Key: g1}}}).Describe(func(int64) string { return "N" }); strings.Contains(d, "\n") {
		t.Errorf("Describe spans lines: %q", d)
	}
}

// Keys are checked on read: a record with an empty key, a key with a path in it, or a
// current that is not a key is refused, and nothing it names is deleted.
func TestRecordKeysCheckedOnRead(t *testing.T) {
	for _, rec := range []string{
		`{"generations": [{"key": ""}]}`,
		`{"generations": [{"key": "../../x"}]}`,
		`{"current": "..", "generations": []}`,
		`{"generations": [null]}`,
	} {
		root := t.TempDir()
		p := filepath.Join(root, "r.json")
		os.WriteFile(p, []byte(rec), 0o600)
		if _, err := Open(filepath.Join(root, "gens"), p, 1); err == nil || !strings.Contains(err.Error(), "move it away") {
			t.Errorf("Open(%s) = %v, want refused", rec, err)
		}
	}
}

// Another sglprov changing the generations folder holds its lock: Begin, a prune and a
// remove refuse at once (exit 5) and change nothing.
func TestGenerationsFolderLocked(t *testing.T) {
	root := t.TempDir()
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s := openAt(t, root, 1, &clock)
	if err := s.Begin(g1); err != nil {
		t.Fatal(err)
	}
	fill(t, s, g1, 10)
	// A second process holds the lock: flock from a child.
	lockFile := filepath.Join(s.Dir(), LockDir, "lock")
	// The child waits for the lock (the probe below holds it for a moment): with -n it
	// could lose that race and exit, and nobody would hold the lock.
	cmd := exec.Command("flock", "-w", "30", lockFile, "sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Skip("no flock here:", err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	// On a loaded machine the child may take a while to start: wait up to 30 s.
	for deadline := time.Now().Add(30 * time.Second); ; {
		if err := exec.Command("flock", "-n", lockFile, "true").Run(); err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the child did not take the lock")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := s.Begin(g2); !errors.Is(err, exitcode.ErrLocked) {
		t.Errorf("Begin while another holds the lock: %v", err)
	}
	if _, err := s.RemoveAll(false); !errors.Is(err, exitcode.ErrLocked) {
		t.Errorf("RemoveAll while another holds the lock: %v", err)
	}
	if _, err := os.Stat(s.Path(g1)); err != nil {
		t.Errorf("a refused RemoveAll deleted %s", g1)
	}
}

// A root's link: the folder an in-place run left there serves until a generation passes,
// then it is moved aside (kept byte-identical) and the link put there; each generation
// that passes flips it; a remove deletes the link sglprov wrote and never the moved-aside
// tree.
func TestRootLinkMovesInPlaceTreeAside(t *testing.T) {
	root := t.TempDir()
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s := openAt(t, root, 2, &clock)
	link := filepath.Join(root, "opt", "sglang")
	if err := os.MkdirAll(link, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(link, "in-place"), []byte("served\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s.SetRoots("/node/gens/r", []Root{{Link: link, Sub: "sglang"}})
	if err := s.Begin(g1); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(link); err != nil || !fi.IsDir() {
		t.Fatalf("before a generation passed the in-place tree is %v, %v", fi, err)
	}
	fill(t, s, g1, 10)
	if _, err := s.Passed(g1, nil); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.Readlink(link); got != "/node/gens/r/"+g1+"/sglang" {
		t.Fatalf("link = %q after %s passed", got, g1)
	}
	aside := link + ".sglprov-inplace"
	if b, err := os.ReadFile(filepath.Join(aside, "in-place")); err != nil || string(b) != "served\n" {
		t.Fatalf("the in-place tree was not kept aside: %q, %v", b, err)
	}
	if m := s.MovedAside(); len(m) != 1 || m[0].Path != aside || m[0].Root != link {
		t.Errorf("moved aside = %+v", m)
	}
	fill(t, s, g2, 10)
	if _, err := s.Passed(g2, nil); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.Readlink(link); got != "/node/gens/r/"+g2+"/sglang" {
		t.Fatalf("link = %q after %s passed", got, g2)
	}
	// The record read back knows the link.
	s2 := openAt(t, root, 2, &clock)
	if _, err := s2.RemoveAll(false); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(link); err == nil {
		t.Error("remove left the link sglprov wrote")
	}
	if b, err := os.ReadFile(filepath.Join(aside, "in-place")); err != nil || string(b) != "served\n" {
		t.Errorf("remove touched the moved-aside tree: %q, %v", b, err)
	}
}

// A link someone else pointed elsewhere is not sglprov's to delete.
func TestRemoveLeavesRepointedRootLink(t *testing.T) {
	root := t.TempDir()
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s := openAt(t, root, 2, &clock)
	link := filepath.Join(root, "opt", "sglang")
	s.SetRoots("/node/gens/r", []Root{{Link: link, Sub: "sglang"}})
	fill(t, s, g1, 10)
	if _, err := s.Passed(g1, nil); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(link); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/elsewhere", link); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RemoveAll(false); err != nil {
		t.Fatal(err)
	}
	if got, err := os.Readlink(link); err != nil || got != "/elsewhere" {
		t.Errorf("remove changed a link sglprov did not write last: %q, %v", got, err)
	}
}

// A generation whose folder cannot be removed stays recorded: the next remove finds it and
// frees it, rather than forgetting a folder of many GiB.
func TestRemoveAllKeepsWhatItCouldNotRemove(t *testing.T) {
	root := t.TempDir()
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s := openAt(t, root, 2, &clock)
	for _, key := range []string{g1, g2} {
		if err := s.Begin(key); err != nil {
			t.Fatal(err)
		}
		fill(t, s, key, 10)
	}
	removeTree = func(p string) error {
		if filepath.Base(p) == g2 {
			return errors.New("device busy")
		}
		return os.RemoveAll(p)
	}
	t.Cleanup(func() { removeTree = os.RemoveAll })
	if _, err := s.RemoveAll(false); err == nil || !strings.Contains(err.Error(), "device busy") {
		t.Fatalf("RemoveAll with a folder that cannot go: %v", err)
	}
	again := openAt(t, root, 2, &clock)
	if gens := again.Generations(); len(gens) != 1 || gens[0].Key != g2 {
		t.Fatalf("recorded after the failed remove: %+v, want only %s", gens, g2)
	}
	removeTree = os.RemoveAll
	p, err := again.RemoveAll(false)
	if err != nil || len(p.Freed) != 1 || p.Freed[0].Key != g2 {
		t.Fatalf("second remove: %+v, %v", p, err)
	}
	if _, err := os.Stat(again.Path(g2)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("%s is still there: %v", g2, err)
	}
}

// Going back to the trees a migration moved aside: Relink points each root's link at its
// tree (all or none: a link someone else changed is refused and the ones already changed
// are put back), InPlaceServes records that no generation serves (the current link goes,
// the generation stays kept and is where a roll back goes next), and a generation that
// passes again links the roots to it; the trees stay byte-identical throughout.
func TestRelinkToInPlaceTreesAndBack(t *testing.T) {
	root := t.TempDir()
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s := openAt(t, root, 2, &clock)
	src, venv := filepath.Join(root, "opt", "sglang"), filepath.Join(root, "opt", "venv")
	for _, d := range []string{src, venv} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "in-place"), []byte(d+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s.SetRoots("/node/gens/r", []Root{{Link: src, Sub: "sglang"}, {Link: venv, Sub: "venv"}})
	fill(t, s, g1, 10)
	steps := map[string]json.RawMessage{"build": json.RawMessage(`{}`)}
	if _, err := s.Passed(g1, steps); err != nil {
		t.Fatal(err)
	}
	kept := func() {
		t.Helper()
		for _, d := range []string{src, venv} {
			if b, err := os.ReadFile(filepath.Join(d+".sglprov-inplace", "in-place")); err != nil || string(b) != d+"\n" {
				t.Errorf("the tree moved aside from %s: %q, %v", d, b, err)
			}
		}
	}
	kept()
	if s.Previous() != "" {
		t.Fatalf("previous = %q with one generation", s.Previous())
	}
	a, ok := s.Aside(src)
	if !ok || a.Path != src+".sglprov-inplace" {
		t.Fatalf("Aside(%s) = %+v, %v", src, a, ok)
	}
	want := []Link{{Path: src, Target: "/opt/sglang.sglprov-inplace"}, {Path: venv, Target: "/opt/venv.sglprov-inplace"}}

	// Someone pointed the second link elsewhere: nothing is changed.
	if err := os.Remove(venv); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/elsewhere", venv); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Relink(want); err == nil || !strings.Contains(err.Error(), "left as it is") {
		t.Fatalf("Relink over a changed link: %v", err)
	}
	if got, _ := os.Readlink(src); got != "/node/gens/r/"+g1+"/sglang" {
		t.Errorf("after a refused relink %s links to %q", src, got)
	}
	if got, _ := os.Readlink(venv); got != "/elsewhere" {
		t.Errorf("the changed link was touched: %q", got)
	}
	if err := os.Remove(venv); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/node/gens/r/"+g1+"/venv", venv); err != nil {
		t.Fatal(err)
	}

	undo, err := s.Relink(want)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range want {
		if got, _ := os.Readlink(l.Path); got != l.Target {
			t.Errorf("%s links to %q, want %s", l.Path, got, l.Target)
		}
	}
	// A failed gate: undo puts them back.
	if _, err := s.Relink(undo); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.Readlink(venv); got != "/node/gens/r/"+g1+"/venv" {
		t.Errorf("after the undo %s links to %q", venv, got)
	}
	if _, err := s.Relink(want); err != nil {
		t.Fatal(err)
	}
	if err := s.InPlaceServes(); err != nil {
		t.Fatal(err)
	}
	s = openAt(t, root, 2, &clock)
	s.SetRoots("/node/gens/r", []Root{{Link: src, Sub: "sglang"}, {Link: venv, Sub: "venv"}})
	if s.Serving() != "" || s.InPlaceServing() == nil || s.InPlaceServing().From != g1 {
		t.Errorf("read back: serving %q, in place %+v", s.Serving(), s.InPlaceServing())
	}
	if _, err := os.Lstat(filepath.Join(s.Dir(), CurrentLink)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the current link is there while the in-place trees serve: %v", err)
	}
	if s.Previous() != g1 {
		t.Errorf("previous = %q while the in-place trees serve, want %s", s.Previous(), g1)
	}
	if p, err := s.Prune(false); err != nil || len(p.Freed) != 0 {
		t.Errorf("prune while the in-place trees serve: %+v, %v", p, err)
	}
	kept()

	// The generation passes again: the links go to it, the record forgets the in-place
	// serving and keeps the trees moved aside as they were.
	if _, err := s.Passed(g1, steps); err != nil {
		t.Fatal(err)
	}
	if s.InPlaceServing() != nil || s.Serving() != g1 || len(s.MovedAside()) != 2 {
		t.Errorf("after a pass: in place %+v, serving %q, moved aside %+v", s.InPlaceServing(), s.Serving(), s.MovedAside())
	}
	if got, _ := os.Readlink(src); got != "/node/gens/r/"+g1+"/sglang" {
		t.Errorf("after a pass %s links to %q", src, got)
	}
	kept()
}

// A switch killed after its promotion leaves the unit in /etc running a generation the
// record does not name as serving: the generation the unit runs serves, no prune frees it
// (nor the one the record names), and Repair records it as serving, deleting nothing.
func TestInstalledUnitsGenerationServesWhateverTheRecordSays(t *testing.T) {
	root := t.TempDir()
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s := openAt(t, root, 1, &clock)
	if err := s.Begin(g1); err != nil {
		t.Fatal(err)
	}
	fill(t, s, g1, 1000)
	if _, err := s.Passed(g1, nil); err != nil {
		t.Fatal(err)
	}
	// g2 was promoted, and the run was killed before it recorded it.
	if err := s.Begin(g2); err != nil {
		t.Fatal(err)
	}
	fill(t, s, g2, 2000)
	unitFile := filepath.Join(root, "etc", "sglang.service")
	if err := os.MkdirAll(filepath.Dir(unitFile), 0o755); err != nil {
		t.Fatal(err)
	}
	unit := "[Service]\nExecStart=/opt/sglprov/generations/r/" + g2 + "/app/bin/server --port 30000\n"
	if err := os.WriteFile(unitFile, []byte(unit), 0o644); err != nil {
		t.Fatal(err)
	}
	s = openAt(t, root, 1, &clock)
	if got := s.Observe(filepath.Join(root, "etc", "missing.service"), unitFile); got != g2 {
		t.Fatalf("Observe = %q, want %s", got, g2)
	}
	if s.Serving() != g2 || s.Recorded() != g1 || !s.Served(g2) {
		t.Errorf("serving %q, recorded %q, served(g2) %v; want g2 serving, g1 recorded", s.Serving(), s.Recorded(), s.Served(g2))
	}
	// A build of a third generation, and gc: neither g2 nor g1 goes.
	_ = s.Begin(g3)
	fill(t, s, g3, 3000)
	for _, p := range []func() (*Pruned, error){
		func() (*Pruned, error) { return s.PruneKeeping(g3, false) },
		func() (*Pruned, error) { return s.Prune(false) },
	} {
		if _, err := p(); err != nil {
			t.Fatal(err)
		}
		for _, key := range []string{g1, g2} {
			if _, err := os.Stat(s.Path(key)); err != nil {
				t.Fatalf("a prune freed generation %s while the unit runs g2 and the record names g1: %v", key, err)
			}
		}
	}
	if _, err := os.Stat(s.Path(g3)); err == nil {
		t.Errorf("gc kept the never-passed g3")
	}
	msg, err := s.Repair()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(msg, "named generation "+Short(g1)) || !strings.Contains(msg, "runs generation "+Short(g2)) {
		t.Errorf("Repair says %q; want it to name both generations", msg)
	}
	again := openAt(t, root, 1, &clock)
	if again.Serving() != g2 || again.Recorded() != g2 {
		t.Errorf("after the repair the record names %q serving, want g2", again.Recorded())
	}
	if got, _ := os.Readlink(filepath.Join(s.Dir(), CurrentLink)); got != g2 {
		t.Errorf("after the repair current -> %q, want g2", got)
	}
	if msg, err := again.Repair(); msg != "" || err != nil {
		t.Errorf("a second Repair = %q, %v; want nothing to repair", msg, err)
	}
	// A unit naming another recipe's folder or no generation changes nothing.
	for _, u := range []string{"ExecStart=/opt/sglprov/generations/other/" + g3 + "/bin/server\n", "ExecStart=/opt/sglang/bin/server\n"} {
		if got := KeyIn([]byte(u), s.Dir()); got != "" {
			t.Errorf("KeyIn(%q) = %q, want none", u, got)
		}
	}
}
