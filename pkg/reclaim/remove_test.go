package reclaim_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/sglprov/sglprov/internal/foreign"
	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/generation"
	"github.com/sglprov/sglprov/pkg/ownership"
	"github.com/sglprov/sglprov/pkg/reclaim"
	"github.com/sglprov/sglprov/pkg/service"
)

// node is a --root tree for remove and gc: files sglprov never wrote (internal/foreign)
// beside what the records say sglprov wrote.
type node struct {
	t     *testing.T
	root  string // "" for a test without --root: paths are under base
	base  string
	state string
	tree  *foreign.Tree
}

// userNote is a file a user dropped inside the weights dest data/models/tiny.
const userNote = "data/models/tiny/USER-NOTE.txt"

func newNode(t *testing.T, withRoot bool) *node {
	t.Helper()
	base := t.TempDir()
	n := &node{t: t, base: base, state: filepath.Join(base, "var/lib/sglprov")}
	if withRoot {
		n.root = base
	}
	tree, err := foreign.Build(base, userNote)
	if err != nil {
		t.Fatal(err)
	}
	n.tree = tree
	if err := os.MkdirAll(n.state, 0o700); err != nil {
		t.Fatal(err)
	}
	return n
}

// path is the host path of rel under the node.
func (n *node) path(rel string) string { return filepath.Join(n.base, filepath.FromSlash(rel)) }

// weights writes files sglprov downloaded into the folder rel (made when it is not there)
// and returns the record a download keeps of them.
func (n *node) weights(rel string, files ...string) engine.Owned {
	n.t.Helper()
	dir := n.path(rel)
	var made []string
	if _, err := os.Stat(dir); err != nil {
		made = append(made, ".")
	}
	for _, f := range files {
		p := filepath.Join(dir, filepath.FromSlash(f))
		if _, err := os.Stat(filepath.Dir(p)); err != nil && filepath.Dir(f) != "." {
			made = append(made, filepath.ToSlash(filepath.Dir(f)))
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			n.t.Fatal(err)
		}
		if err := os.WriteFile(p, bytes.Repeat([]byte("w"), 1000), 0o644); err != nil {
			n.t.Fatal(err)
		}
	}
	dev, ino := ownership.Identify(dir)
	return engine.Owned{Kind: engine.OwnedWeights, Path: dir, Step: "weights", Files: files, Dirs: made, Listed: true, Dev: dev, Ino: ino}
}

// save writes the records: recipes by name, and orphans.
func (n *node) save(recipes map[string][]engine.Owned, orphans ...engine.Owned) {
	n.t.Helper()
	f := &engine.StateFile{Recipes: map[string]*engine.State{}, Orphans: orphans}
	for name, owns := range recipes {
		f.Recipes[name] = &engine.State{Recipe: name, Steps: map[string]*engine.StepRecord{}, Owns: owns}
	}
	if err := engine.SaveStates(n.state, f); err != nil {
		n.t.Fatal(err)
	}
}

func (n *node) states() *engine.StateFile {
	n.t.Helper()
	f, err := engine.LoadStates(n.state)
	if err != nil {
		n.t.Fatal(err)
	}
	return f
}

func (n *node) remove(recipe string, weights bool) (string, error) {
	var out bytes.Buffer
	err := reclaim.Remove(context.Background(), reclaim.RemoveOptions{StateDir: n.state, Root: n.root, Recipe: recipe, Weights: weights, Out: &out,
		NewManager: func(ctx context.Context, kind string) (service.Manager, error) {
			return service.New(ctx, service.Options{Kind: service.KindExec, Root: n.root, StateDir: n.state})
		}})
	return out.String(), err
}

func (n *node) gc() (string, error) {
	var out bytes.Buffer
	err := reclaim.GC(context.Background(), reclaim.GCOptions{StateDir: n.state, Root: n.root, Out: &out})
	return out.String(), err
}

// intact fails the test unless every file sglprov never wrote is byte-identical.
func (n *node) intact(when string) {
	n.t.Helper()
	if changed := n.tree.Changed(); len(changed) > 0 {
		n.t.Errorf("%s: files sglprov never wrote changed:\n%s", when, strings.Join(changed, "\n"))
	}
}

func exists(p string) bool { _, err := os.Lstat(p); return err == nil }

// Every remove and gc path leaves the files sglprov never wrote byte-identical, with and
// without --root, and deletes what it wrote.
func TestRemoveAndGCLeaveForeignFiles(t *testing.T) {
	for _, withRoot := range []bool{true, false} {
		name := "no root"
		if withRoot {
			name = "root"
		}
		t.Run(name+"/remove --weights", func(t *testing.T) {
			n := newNode(t, withRoot)
			w := n.weights("data/models/tiny", "model.safetensors", "sub/config.json")
			n.save(map[string][]engine.Owned{"a": {w}})
			if out, err := n.remove("a", true); err != nil {
				t.Fatalf("remove --weights: %v\n%s", err, out)
			}
			n.intact("remove --weights")
			if exists(n.path("data/models/tiny/model.safetensors")) || exists(n.path("data/models/tiny/sub")) {
				t.Errorf("remove --weights left what sglprov wrote")
			}
		})
		t.Run(name+"/remove then gc", func(t *testing.T) {
			n := newNode(t, withRoot)
			w := n.weights("data/models/tiny", "model.safetensors")
			n.save(map[string][]engine.Owned{"a": {w}})
			if out, err := n.remove("a", false); err != nil || !exists(n.path("data/models/tiny/model.safetensors")) {
				t.Fatalf("remove: %v (the weights stay without --weights)\n%s", err, out)
			}
			if got := n.states().Orphans; len(got) != 1 || len(got[0].Files) != 1 {
				t.Fatalf("orphans after remove: %+v", got)
			}
			if out, err := n.gc(); err != nil || !strings.Contains(out, "weights no recipe uses") {
				t.Fatalf("gc: %v\n%s", err, out)
			}
			n.intact("remove then gc")
			if exists(n.path("data/models/tiny/model.safetensors")) {
				t.Errorf("gc left the orphaned weights")
			}
		})
		t.Run(name+"/dest is the root or a system folder", func(t *testing.T) {
			for _, dest := range []string{"", "etc", "home", "usr", "var"} {
				n := newNode(t, withRoot)
				p := n.path(dest)
				if !withRoot && dest == "" {
					continue // the test's folder is not the host's root
				}
				if !withRoot {
					p = "/" + dest
				}
				bad := engine.Owned{Kind: engine.OwnedWeights, Path: filepath.Clean(p), Files: []string{"passwd", "u/notes.txt"}, Dirs: []string{"."}, Listed: true}
				n.save(map[string][]engine.Owned{"a": {bad}}, bad)
				if _, err := n.remove("a", true); !errors.Is(err, exitcode.ErrUsage) {
					t.Errorf("remove --weights of %s: %v, want exit 2", p, err)
				}
				if _, err := n.gc(); !errors.Is(err, exitcode.ErrUsage) {
					t.Errorf("gc of an orphan %s: %v, want exit 2", p, err)
				}
				n.intact("dest " + p)
			}
		})
		t.Run(name+"/gc with hostile generation keys", func(t *testing.T) {
			for _, key := range []string{"", "../../../etc", "../other", "."} {
				n := newNode(t, withRoot)
				gens := n.path(foreign.OtherGenerations)
				rec := filepath.Join(n.state, "generations", "a.json")
				os.MkdirAll(filepath.Dir(rec), 0o700)
				b, _ := json.Marshal(generation.Record{Generations: []*generation.Generation{{Key: key}}})
				os.WriteFile(rec, b, 0o600)
				n.save(map[string][]engine.Owned{"a": {{Kind: engine.OwnedGenerations, Path: gens, Keep: 1}}})
				if _, err := n.gc(); err == nil || !strings.Contains(err.Error(), "not a generation key") {
					t.Errorf("gc with key %q: %v, want the key refused", key, err)
				}
				if _, err := n.remove("a", true); err == nil {
					t.Errorf("remove with key %q: no error", key)
				}
				n.intact("key " + key)
			}
		})
		t.Run(name+"/orphan naming etc", func(t *testing.T) {
			n := newNode(t, withRoot)
			etc := n.path("etc")
			if !withRoot {
				etc = "/etc"
			}
			n.save(nil, engine.Owned{Kind: engine.OwnedWeights, Path: etc, Files: []string{"passwd"}, Listed: true},
				engine.Owned{Kind: engine.OwnedWeights, Path: n.path("home/u"), Files: []string{"../u/notes.txt"}, Listed: true})
			out, err := n.gc()
			if !errors.Is(err, exitcode.ErrUsage) || !strings.Contains(err.Error(), "system folder") || !strings.Contains(err.Error(), "leaves the folder") {
				t.Errorf("gc with hostile orphans: %v\n%s", err, out)
			}
			n.intact("orphans naming etc and ../")
			if got := n.states().Orphans; len(got) != 2 {
				t.Errorf("the refused orphans left the records: %+v", got)
			}
		})
		t.Run(name+"/symlinked dest", func(t *testing.T) {
			// B's weights folder is a link to A's: removing A's weights keeps them.
			n := newNode(t, withRoot)
			a := n.weights("data/models/a", "model.safetensors")
			os.MkdirAll(n.path("data/models"), 0o755)
			if err := os.Symlink(n.path("data/models/a"), n.path("data/models/b")); err != nil {
				t.Fatal(err)
			}
			b := engine.Owned{Kind: engine.OwnedWeights, Path: n.path("data/models/b"), Files: []string{"model.safetensors"}, Listed: true, Dev: a.Dev, Ino: a.Ino}
			n.save(map[string][]engine.Owned{"a": {a}, "b": {b}})
			out, err := n.remove("a", true)
			if err != nil || !strings.Contains(out, "also used by recipe b") {
				t.Fatalf("remove a --weights: %v\n%s", err, out)
			}
			if !exists(n.path("data/models/a/model.safetensors")) {
				t.Errorf("B's weights, reached through a link to A's folder, went with A's")
			}
			n.intact("symlinked dest")
		})
		t.Run(name+"/dest holds another recipe's generations", func(t *testing.T) {
			// A's dest is opt/sglprov; the other recipe's generations folder is inside it.
			n := newNode(t, withRoot)
			a := n.weights("opt/sglprov", "model.safetensors")
			a.Dirs = nil
			n.save(map[string][]engine.Owned{"a": {a}, "other": {{Kind: engine.OwnedGenerations, Path: n.path(foreign.OtherGenerations), Keep: 1}}})
			out, err := n.remove("a", true)
			if err != nil || !strings.Contains(out, "keep: weights "+n.path("opt/sglprov")+": also used by recipe other") {
				t.Fatalf("remove a --weights: %v\n%s", err, out)
			}
			n.intact("a dest that holds another recipe's generations")
		})
		t.Run(name+"/two state dirs", func(t *testing.T) {
			// One recipe applied from two state dirs shares one generations folder:
			// removing it from one leaves the generation the other serves.
			n := newNode(t, withRoot)
			gens := n.path("opt/sglprov/generations/r")
			other := filepath.Join(n.base, "other-state")
			const k1, k2 = "aaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbb"
			s1, err := generation.Open(gens, filepath.Join(other, "generations", "r.json"), 2)
			if err != nil {
				t.Fatal(err)
			}
			s2, err := generation.Open(gens, filepath.Join(n.state, "generations", "r.json"), 2)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range []*generation.Store{s1, s2} {
				if err := s.Begin(k1); err != nil {
					t.Fatal(err)
				}
			}
			served, err := foreign.Build(filepath.Join(gens, k1), "bin/server")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s1.Passed(k1, nil); err != nil {
				t.Fatal(err)
			}
			if err := s2.Begin(k2); err != nil {
				t.Fatal(err)
			}
			os.MkdirAll(filepath.Join(gens, k2), 0o755)
			os.WriteFile(filepath.Join(gens, k2, "mine"), []byte("built here"), 0o644)
			n.save(map[string][]engine.Owned{"r": {{Kind: engine.OwnedGenerations, Path: gens, Keep: 2}}})
			out, err := n.remove("r", false)
			if err != nil || !strings.Contains(out, "leave 1 that the state dir of") {
				t.Fatalf("remove from the second state dir: %v\n%s", err, out)
			}
			if changed := served.Changed(); len(changed) > 0 {
				t.Errorf("the generation the other state dir serves changed:\n%s", strings.Join(changed, "\n"))
			}
			if exists(filepath.Join(gens, k2)) {
				t.Errorf("the generation only this state dir listed is still there")
			}
			if got, _ := os.Readlink(filepath.Join(gens, generation.CurrentLink)); got != k1 {
				t.Errorf("current -> %q after the remove, want %s (the other state dir serves it)", got, k1)
			}
			n.intact("two state dirs")
		})
	}
}

// A user's file dropped inside a folder sglprov made keeps the folder; a folder on the
// way to a listed file that became a link is not followed.
func TestRemoveWeightsNeverFollowsALink(t *testing.T) {
	n := newNode(t, true)
	w := n.weights("data/models/tiny", "model.safetensors", "sub/passwd")
	// The listed folder sub is replaced by a link to etc.
	os.RemoveAll(n.path("data/models/tiny/sub"))
	if err := os.Symlink(n.path("etc"), n.path("data/models/tiny/sub")); err != nil {
		t.Fatal(err)
	}
	n.save(map[string][]engine.Owned{"a": {w}})
	if out, err := n.remove("a", true); err != nil {
		t.Fatalf("remove --weights: %v\n%s", err, out)
	}
	n.intact("a listed folder replaced by a link to etc")
	if exists(n.path("data/models/tiny/model.safetensors")) {
		t.Errorf("the listed file is still there")
	}
	if !exists(n.path("data/models/tiny")) {
		t.Errorf("the folder that holds a user's file went")
	}

	// A folder put in the place of the one sglprov wrote into is not deleted from.
	n = newNode(t, true)
	w = n.weights("data/models/x", "model.safetensors")
	os.Rename(n.path("data/models/x"), n.path("data/models/old"))
	os.Symlink(n.path("home/u"), n.path("data/models/x"))
	w.Files = append(w.Files, "notes.txt")
	n.save(map[string][]engine.Owned{"a": {w}})
	if _, err := n.remove("a", true); err == nil || !strings.Contains(err.Error(), "not the folder sglprov wrote into") {
		t.Errorf("remove --weights of a replaced folder: %v", err)
	}
	n.intact("a dest replaced by a link to a user's home")
}

// Weights in a folder three recipes share (one holds the others' folders) are never left
// without an owner or an orphan record, whatever order the recipes go in; gc frees them
// once the last is gone.
func TestThreeRecipesShareAFolder(t *testing.T) {
	n := newNode(t, true)
	a := n.weights("data/w", "a.safetensors")
	b := n.weights("data/w/b", "b.safetensors")
	c := n.weights("data/w/c", "c.safetensors")
	n.save(map[string][]engine.Owned{"a": {a}, "b": {b}, "c": {c}})
	for _, r := range []string{"b", "a", "c"} {
		if out, err := n.remove(r, false); err != nil {
			t.Fatalf("remove %s: %v\n%s", r, err, out)
		}
	}
	orphans := map[string]bool{}
	for _, o := range n.states().Orphans {
		orphans[o.Path] = true
	}
	for _, o := range []engine.Owned{a, b, c} {
		if !orphans[o.Path] {
			t.Errorf("%s has no owner and no orphan record", o.Path)
		}
	}
	if out, err := n.gc(); err != nil {
		t.Fatalf("gc: %v\n%s", err, out)
	}
	for _, f := range []string{"data/w/a.safetensors", "data/w/b/b.safetensors", "data/w/c/c.safetensors"} {
		if exists(n.path(f)) {
			t.Errorf("gc left %s", f)
		}
	}
	n.intact("three recipes")
}

// A recipe whose server the exec manager ran is removed on a host without systemd: its
// unit file in the state dir goes, with the recipe's manager.
func TestRemoveExecUnitWithoutSystemd(t *testing.T) {
	if _, err := os.Stat("/run/systemd/system"); err == nil {
		t.Skip("systemd runs here")
	}
	n := newNode(t, false)
	unit := filepath.Join(n.state, "units", "sglang-x.service")
	os.MkdirAll(filepath.Dir(unit), 0o755)
	os.WriteFile(unit, []byte("# Managed by sglprov. Recipe: x. Profile: . Fingerprint: f. Do not edit: changes are replaced on the next apply.\n[Service]\nExecStart=/bin/true\n"), 0o644)
	gens := n.path("opt/sglprov/generations/x")
	s, _ := generation.Open(gens, filepath.Join(n.state, "generations", "x.json"), 1)
	const k = "cccccccccccccccc"
	s.Begin(k)
	os.WriteFile(filepath.Join(gens, k), nil, 0o644)
	n.save(map[string][]engine.Owned{"x": {{Kind: engine.OwnedUnit, Path: "sglang-x.service", Manager: service.KindExec, Step: "svc"}, {Kind: engine.OwnedGenerations, Path: gens, Keep: 1}}})
	var out bytes.Buffer
	// No NewManager: the one remove picks for the record.
	if err := reclaim.Remove(context.Background(), reclaim.RemoveOptions{StateDir: n.state, Recipe: "x", Out: &out}); err != nil {
		t.Fatalf("remove: %v\n%s", err, out.String())
	}
	if exists(unit) {
		t.Errorf("the exec unit is still there")
	}
	n.intact("exec remove")
}

// failingManager is the exec manager whose unit removal fails (a unit that cannot be
// stopped), as the systemd manager's does when systemd does not answer.
type failingManager struct{ service.Manager }

func (failingManager) Remove(context.Context, string) error { return errors.New("unit will not stop") }

// A unit that cannot be removed stops the remove before anything else is deleted, and a
// second remove, once it can, finishes the job.
func TestRemoveUnitFailureDeletesNothingElse(t *testing.T) {
	n := newNode(t, true)
	gens := n.path("opt/sglprov/generations/x")
	s, _ := generation.Open(gens, filepath.Join(n.state, "generations", "x.json"), 1)
	const k = "dddddddddddddddd"
	s.Begin(k)
	os.WriteFile(filepath.Join(gens, k), []byte("gen"), 0o644)
	w := n.weights("data/models/x", "model.safetensors")
	n.save(map[string][]engine.Owned{"x": {{Kind: engine.OwnedUnit, Path: "x.service", Step: "svc"}, {Kind: engine.OwnedGenerations, Path: gens, Keep: 1}, w}})
	var out bytes.Buffer
	err := reclaim.Remove(context.Background(), reclaim.RemoveOptions{StateDir: n.state, Root: n.root, Recipe: "x", Weights: true, Out: &out,
		NewManager: func(ctx context.Context, kind string) (service.Manager, error) {
			m, err := service.New(ctx, service.Options{Kind: service.KindExec, StateDir: n.state})
			return failingManager{m}, err
		}})
	if err == nil || !strings.Contains(err.Error(), "unit will not stop") {
		t.Fatalf("remove with a unit that will not stop: %v", err)
	}
	if !exists(filepath.Join(gens, k)) || !exists(n.path("data/models/x/model.safetensors")) {
		t.Errorf("a failed unit removal deleted the generations or the weights")
	}
	if st := n.states().Recipes["x"]; st == nil || len(st.Owns) != 3 {
		t.Errorf("the records after a failed remove: %+v", st)
	}
	if out, err := n.remove("x", true); err != nil {
		t.Fatalf("the second remove: %v\n%s", err, out)
	}
	if exists(filepath.Join(gens, k)) || n.states().Recipes["x"] != nil {
		t.Errorf("the second remove left the generation or the records")
	}
	n.intact("unit failure")
}

// remove and gc on a node where nothing ran say so, exit 0, and create no state dir.
func TestRemoveAndGCOnAFreshNode(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "var/lib/sglprov")
	for _, dry := range []bool{true, false} {
		var out bytes.Buffer
		if err := reclaim.Remove(context.Background(), reclaim.RemoveOptions{StateDir: dir, Recipe: "x", DryRun: dry, Out: &out}); err != nil || !strings.Contains(out.String(), "nothing is recorded in "+dir) {
			t.Errorf("remove (dry run %v) on a fresh node: %v, %q", dry, err, out.String())
		}
		out.Reset()
		if err := reclaim.GC(context.Background(), reclaim.GCOptions{StateDir: dir, DryRun: dry, Out: &out}); err != nil || !strings.Contains(out.String(), "nothing is recorded in "+dir) {
			t.Errorf("gc (dry run %v) on a fresh node: %v, %q", dry, err, out.String())
		}
	}
	if exists(dir) {
		t.Errorf("remove or gc created the state dir")
	}
}

// Weights one recipe downloaded and another only verified: removing the first with
// --weights keeps them (the second uses the folder) as an orphan, and removing the second
// with --weights deletes them, the folder too, and nothing else.
func TestSharedWeightsGoWithTheLastUser(t *testing.T) {
	n := newNode(t, true)
	a := n.weights("data/models/shared", "model.safetensors", "config.json")
	b := engine.Owned{Kind: engine.OwnedWeights, Path: a.Path, Step: "weights", Listed: true, Dev: a.Dev, Ino: a.Ino}
	n.save(map[string][]engine.Owned{"a": {a}, "b": {b}})
	if out, err := n.remove("a", true); err != nil || !strings.Contains(out, "keep: weights "+a.Path+": also used by recipe b") {
		t.Fatalf("remove a --weights: %v\n%s", err, out)
	}
	if !exists(n.path("data/models/shared/model.safetensors")) {
		t.Fatalf("remove a --weights deleted the weights b uses")
	}
	out, err := n.remove("b", true)
	if err != nil || !strings.Contains(out, "delete weights "+a.Path+" (2.0 KiB)") {
		t.Fatalf("remove b --weights: %v\n%s", err, out)
	}
	if exists(n.path("data/models/shared")) {
		t.Errorf("the weights folder a made is still there")
	}
	if got := n.states().Orphans; len(got) != 0 {
		t.Errorf("orphans left: %+v", got)
	}
	n.intact("shared weights")
}

// A unit file at the recorded name that sglprov did not render for the recipe (a
// package's, an operator's, another recipe's) is neither stopped nor deleted: it stays
// byte-identical, the remove says so, and the records go.
func TestRemoveLeavesAUnitItDidNotRender(t *testing.T) {
	n := newNode(t, false)
	unit := filepath.Join(n.state, "units", "sglang-x.service")
	os.MkdirAll(filepath.Dir(unit), 0o755)
	for _, text := range []string{
		"[Service]\nExecStart=/usr/bin/operator-server\n",
		"# Managed by sglprov. Recipe: other. Profile: . Fingerprint: f. Do not edit: changes are replaced on the next apply.\n[Service]\nExecStart=/bin/true\n",
	} {
		os.WriteFile(unit, []byte(text), 0o644)
		n.save(map[string][]engine.Owned{"x": {{Kind: engine.OwnedUnit, Path: "sglang-x.service", Manager: service.KindExec, Step: "svc"}}})
		var out bytes.Buffer
		err := reclaim.Remove(context.Background(), reclaim.RemoveOptions{StateDir: n.state, Recipe: "x", Out: &out,
			NewManager: func(ctx context.Context, kind string) (service.Manager, error) {
				return service.New(ctx, service.Options{Kind: service.KindExec, StateDir: n.state})
			}})
		if err != nil {
			t.Fatalf("remove: %v\n%s", err, out.String())
		}
		if b, _ := os.ReadFile(unit); string(b) != text {
			t.Errorf("the unit sglprov did not render for x was changed or deleted: %q", b)
		}
		if !strings.Contains(out.String(), "is not one sglprov rendered for recipe x; left as it is") {
			t.Errorf("remove did not say why it kept the unit:\n%s", out.String())
		}
		if n.states().Recipes["x"] != nil {
			t.Errorf("the records of x are still there")
		}
	}
	n.intact("foreign unit")
}

// Under --root, remove disables the unit as well as deleting it: the enable links that
// apply made (ROOT/etc/systemd/system/*.wants/UNIT) go, so the booted root starts nothing
// that is gone; a link of the same name that points elsewhere stays, as do the files
// sglprov never wrote.
func TestRemoveUnderRootDisablesTheUnit(t *testing.T) {
	n := newNode(t, true)
	m := service.NewOffline(n.root)
	unit := "# Managed by sglprov. Recipe: x. Profile: . Fingerprint: f. Do not edit: changes are replaced on the next apply.\n[Service]\nExecStart=/bin/true\n[Install]\nWantedBy=multi-user.target\n"
	if _, err := m.Install(context.Background(), "sglang-x.service", []byte(unit)); err != nil {
		t.Fatal(err)
	}
	link := n.path("etc/systemd/system/multi-user.target.wants/sglang-x.service")
	if _, err := os.Lstat(link); err != nil {
		t.Fatalf("the enable link was not made: %v", err)
	}
	other := n.path("etc/systemd/system/custom.target.wants/sglang-x.service")
	os.MkdirAll(filepath.Dir(other), 0o755)
	if err := os.Symlink("/usr/lib/systemd/system/sglang-x.service", other); err != nil {
		t.Fatal(err)
	}
	n.save(map[string][]engine.Owned{"x": {{Kind: engine.OwnedUnit, Path: "sglang-x.service", Manager: service.KindOffline, Step: "svc"}}})
	var out bytes.Buffer
	if err := reclaim.Remove(context.Background(), reclaim.RemoveOptions{StateDir: n.state, Root: n.root, Recipe: "x", Out: &out}); err != nil {
		t.Fatalf("remove --root: %v\n%s", err, out.String())
	}
	if exists(link) || exists(n.path("etc/systemd/system/sglang-x.service")) {
		t.Errorf("remove --root left the unit or its enable link:\n%s", out.String())
	}
	if got, err := os.Readlink(other); err != nil || got != "/usr/lib/systemd/system/sglang-x.service" {
		t.Errorf("a link sglprov did not make: %q, %v", got, err)
	}
	n.intact("remove --root of a unit")
}

// gc frees only the part files this state dir's records name, and none that a running
// download holds: another sglprov's download into the same dest (its own state dir, its own
// files) keeps its part and resume record byte for byte, and so does a download of a file
// this recipe lists that runs right now (its part is locked). remove --weights alike.
func TestGCFreesOnlyItsOwnIdlePartFiles(t *testing.T) {
	for _, withRemove := range []bool{false, true} {
		n := newNode(t, true)
		w := n.weights("data/models/tiny", "model.safetensors")
		w.Parts = []string{".sglprov/parts/model.safetensors.part", ".sglprov/parts/shard-2.safetensors.part"}
		n.save(map[string][]engine.Owned{"a": {w}})
		parts := n.path("data/models/tiny/.sglprov/parts")
		os.MkdirAll(parts, 0o755)
		// A stale part of this recipe's (a killed run's), with its resume record.
		stale := filepath.Join(parts, "model.safetensors.part")
		os.WriteFile(stale, bytes.Repeat([]byte("s"), 500), 0o644)
		os.WriteFile(stale+".json", []byte("{}"), 0o644)
		// Another state dir's download of another file into the same dest, and a download
		// of a file this recipe lists that runs now: both parts are held, as fetch holds them.
		tree, err := foreign.Build(n.base, "data/models/tiny/.sglprov/parts/other.bin.part", "data/models/tiny/.sglprov/parts/other.bin.part.json",
			"data/models/tiny/.sglprov/parts/shard-2.safetensors.part")
		if err != nil {
			t.Fatal(err)
		}
		n.tree = tree
		for _, p := range []string{"other.bin.part", "shard-2.safetensors.part"} {
			f, err := os.Open(filepath.Join(parts, p))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH); err != nil {
				t.Fatal(err)
			}
		}
		var out string
		if withRemove {
			out, err = n.remove("a", true)
		} else {
			out, err = n.gc()
		}
		if err != nil {
			t.Fatalf("gc/remove: %v\n%s", err, out)
		}
		if exists(stale) || exists(stale+".json") {
			t.Errorf("the idle part this recipe's record names was left:\n%s", out)
		}
		if !strings.Contains(out, "keep: part file "+filepath.Join(parts, "shard-2.safetensors.part")+": a running download holds it") {
			t.Errorf("the part in use was not said to be kept:\n%s", out)
		}
		n.intact(fmt.Sprintf("part files (remove: %v)", withRemove))
	}
}

// Two recipes whose records name the same part file (one dest, one listing): gc --dry-run
// counts it once, as gc then frees it once.
func TestGCCountsAPartTwoRecordsNameOnce(t *testing.T) {
	n := newNode(t, true)
	a := n.weights("data/models/tiny", "model.safetensors")
	a.Parts = []string{".sglprov/parts/model.safetensors.part"}
	b := a
	b.Files, b.Dirs = nil, nil
	n.save(map[string][]engine.Owned{"a": {a}, "b": {b}})
	os.MkdirAll(n.path("data/models/tiny/.sglprov/parts"), 0o755)
	os.WriteFile(n.path("data/models/tiny/.sglprov/parts/model.safetensors.part"), bytes.Repeat([]byte("p"), 1000), 0o644)
	var dry bytes.Buffer
	if err := reclaim.GC(context.Background(), reclaim.GCOptions{StateDir: n.state, Root: n.root, DryRun: true, Out: &dry}); err != nil {
		t.Fatal(err)
	}
	out, err := n.gc()
	if err != nil {
		t.Fatal(err)
	}
	if strings.ReplaceAll(dry.String(), "would free", "freed") != out || !strings.Contains(out, "freed 1000 B") {
		t.Errorf("gc --dry-run and gc differ, or the part was not counted once:\n%s---\n%s", dry.String(), out)
	}
	n.intact("a part two records name")
}

// remove deletes the record that its recipe's node is owed an undrain (dry-run only names
// it), and leaves another recipe's record and a file sglprov never wrote beside it
// byte-identical.
func TestRemoveDeletesTheUndrainOwed(t *testing.T) {
	n := newNode(t, false)
	n.save(map[string][]engine.Owned{"a": nil, "b": nil})
	for _, r := range []string{"a", "b"} {
		if err := engine.MarkUndrainOwed(n.state, r, "switching "+r); err != nil {
			t.Fatal(err)
		}
	}
	foreignFile := filepath.Join(filepath.Dir(engine.UndrainOwedPath(n.state, "a")), "a.notes")
	want := []byte("an operator's notes\n")
	if err := os.WriteFile(foreignFile, want, 0o644); err != nil {
		t.Fatal(err)
	}
	other, err := os.ReadFile(engine.UndrainOwedPath(n.state, "b"))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := reclaim.Remove(context.Background(), reclaim.RemoveOptions{StateDir: n.state, Recipe: "a", DryRun: true, Out: &out}); err != nil {
		t.Fatalf("remove --dry-run: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), engine.UndrainOwedPath(n.state, "a")+" (an undrain it was owed)") || !engine.UndrainOwed(n.state, "a") {
		t.Errorf("remove --dry-run does not name the record, or deleted it:\n%s", out.String())
	}
	if out, err := n.remove("a", false); err != nil {
		t.Fatalf("remove: %v\n%s", err, out)
	}
	if engine.UndrainOwed(n.state, "a") {
		t.Errorf("remove left %s", engine.UndrainOwedPath(n.state, "a"))
	}
	if b, err := os.ReadFile(foreignFile); err != nil || !bytes.Equal(b, want) {
		t.Errorf("the file beside the record changed: %q, %v", b, err)
	}
	if b, err := os.ReadFile(engine.UndrainOwedPath(n.state, "b")); err != nil || !bytes.Equal(b, other) {
		t.Errorf("recipe b's record changed: %q, %v", b, err)
	}
	n.intact("remove with an undrain owed")

	// A folder where the record would be is not what sglprov writes: left as it is.
	n.save(map[string][]engine.Owned{"c": nil})
	dirThere := engine.UndrainOwedPath(n.state, "c")
	if err := os.MkdirAll(dirThere, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := n.remove("c", false); err != nil || !exists(dirThere) {
		t.Errorf("remove with a folder at the record's path: %v, folder kept %v\n%s", err, exists(dirThere), out)
	}
}
