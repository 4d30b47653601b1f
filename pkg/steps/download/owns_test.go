package download

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sglprov/sglprov/internal/foreign"
	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/test/fakehub"
)

// The step owns only what it wrote: into a dest that was there, holding a user's file and
// a copy of one listed file the user put there, it lists the files it downloaded and no
// folder of its own; removing what it lists leaves the user's files and the folder, byte
// for byte.
func TestOwnsListsOnlyWhatItWrote(t *testing.T) {
	ctx := context.Background()
	fx := newFixture(t, fakehub.Options{})
	tree, err := foreign.Build(filepath.Dir(fx.dest), "m/USER-NOTE.txt")
	if err != nil {
		t.Fatal(err)
	}
	src := fx.srcFiles(t)
	seeded := src[0]
	b, _ := os.ReadFile(filepath.Join(fx.src, seeded))
	if err := os.WriteFile(filepath.Join(fx.dest, seeded), b, 0o644); err != nil {
		t.Fatal(err)
	}
	st := fx.step(t, fx.hfSpec("main"), nil)
	if err := st.Run(ctx, fx.env); err != nil {
		t.Fatal(err)
	}
	owns := st.Owns(fx.env)
	if len(owns) != 1 || !owns[0].Listed || owns[0].Path != fx.dest {
		t.Fatalf("Owns = %+v, want the dest, listed", owns)
	}
	o := owns[0]
	want := slices.DeleteFunc(slices.Clone(src), func(s string) bool { return s == seeded })
	if strings.Join(o.Files, " ") != strings.Join(want, " ") {
		t.Errorf("listed files %v, want %v (not the user's file, not the copy the user put there)", o.Files, want)
	}
	if slices.Contains(o.Dirs, ".") {
		t.Errorf("the dest was there before the run, yet it is listed as made: %v", o.Dirs)
	}
	if _, err := o.Remove(""); err != nil {
		t.Fatal(err)
	}
	if changed := tree.Changed(); len(changed) > 0 {
		t.Errorf("removing what the step wrote changed files it never wrote:\n%s", strings.Join(changed, "\n"))
	}
	if _, err := os.Stat(filepath.Join(fx.dest, seeded)); err != nil {
		t.Errorf("the copy the user put there went: %v", err)
	}
	for _, f := range want {
		if _, err := os.Lstat(filepath.Join(fx.dest, f)); err == nil {
			t.Errorf("%s, which the step wrote, is still there", f)
		}
	}
}

// A dest the step made, with the hf-cache layout, is gone whole after a remove of what it
// lists: every blob, link, ref and folder is the step's.
func TestOwnsHFCacheMadeDest(t *testing.T) {
	ctx := context.Background()
	fx := newFixture(t, fakehub.Options{})
	spec := fx.hfSpec("main")
	spec.Layout = LayoutHFCache
	st := fx.step(t, spec, nil)
	if err := st.Run(ctx, fx.env); err != nil {
		t.Fatal(err)
	}
	owns := st.Owns(fx.env)
	if len(owns) != 1 || !slices.Contains(owns[0].Dirs, ".") {
		t.Fatalf("Owns = %+v, want the dest listed as made", owns)
	}
	if _, err := owns[0].Remove(""); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(fx.dest); err == nil {
		var left []string
		filepath.Walk(fx.dest, func(p string, _ os.FileInfo, _ error) error { left = append(left, p); return nil })
		t.Errorf("the dest the step made is still there: %v", left)
	}
}

// A step that failed before it wrote anything owns nothing (its dest was there): a remove
// after it deletes nothing there.
func TestOwnsNothingAfterAFailureBeforeWriting(t *testing.T) {
	ctx := context.Background()
	fx := newFixture(t, fakehub.Options{})
	if err := os.MkdirAll(fx.dest, 0o755); err != nil {
		t.Fatal(err)
	}
	st := fx.step(t, fx.hfSpec("no-such-branch"), nil)
	if err := st.Run(ctx, fx.env); err == nil {
		t.Fatal("a revision the hub does not have downloaded")
	}
	if owns := st.Owns(fx.env); len(owns) != 0 {
		t.Errorf("Owns after a failure before writing = %+v, want none", owns)
	}
}

// A system folder as dest is refused when the step is built (validate, plan), and one
// reached as the step resolves it (under --root, or through a relative dest) when it runs.
func TestDestSystemFolderRefused(t *testing.T) {
	for _, dest := range []string{"/", "/etc", "/home", "/usr", "/var", "/opt", "/root", "/boot", "/etc/"} {
		spec := Spec{Dest: dest, Files: []FileSpec{{URL: "https://mirror.example/x.safetensors", SHA256: strings.Repeat("a", 64)}}}
		if _, err := New(spec); err == nil || !strings.Contains(err.Error(), "system folder") || exitcode.Of(err) != 2 {
			t.Errorf("dest %s: %v, want exit 2 naming a system folder", dest, err)
		}
	}
	for _, dest := range []string{"/var/lib/sglprov/models/x", "/opt/models", "/home/u/models"} {
		spec := Spec{Dest: dest, Files: []FileSpec{{URL: "https://mirror.example/x.safetensors", SHA256: strings.Repeat("a", 64)}}}
		if _, err := New(spec); err != nil {
			t.Errorf("dest %s: %v", dest, err)
		}
	}
	// Relative: the recipe's folder's parent's parent is the root.
	root := t.TempDir()
	env := engine.NewTestEnv(t.TempDir(), &syncBuffer{})
	env.Root = root
	env.RecipeDir = filepath.Join(root, "etc", "sglprov")
	st, err := New(Spec{Dest: "..", Files: []FileSpec{{URL: "https://mirror.example/x.safetensors", SHA256: strings.Repeat("a", 64)}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Run(context.Background(), env); err == nil || exitcode.Of(err) != 2 || !strings.Contains(err.Error(), "system folder") {
		t.Errorf("a relative dest that is the root's etc: %v, want exit 2", err)
	}
}

// A file at a listed path that is not the listed file and that the step did not write (a
// user's own copy, another version) is never deleted: the step fails naming it and the fix,
// and the file stays byte for byte. Moved away, the next run downloads the listed one.
func TestAFileItDidNotWriteAtAListedPathStays(t *testing.T) {
	ctx := context.Background()
	fx := newFixture(t, fakehub.Options{})
	listed := fx.srcFiles(t)[0]
	tree, err := foreign.Build(filepath.Dir(fx.dest), "m/"+listed)
	if err != nil {
		t.Fatal(err)
	}
	st := fx.step(t, fx.hfSpec("main"), nil)
	err = st.Run(ctx, fx.env)
	var nl *NotListedError
	p := filepath.Join(fx.dest, listed)
	if !errors.As(err, &nl) || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "move it away or delete it") {
		t.Fatalf("Run with a user's file at %s: %v, want a refusal naming it and the fix", listed, err)
	}
	if changed := tree.Changed(); len(changed) > 0 {
		t.Fatalf("the step changed files it never wrote:\n%s", strings.Join(changed, "\n"))
	}
	if err := os.Rename(p, p+".mine"); err != nil {
		t.Fatal(err)
	}
	if err := st.Run(ctx, fx.env); err != nil {
		t.Fatalf("Run once the file is moved away: %v", err)
	}
	want, _ := os.ReadFile(filepath.Join(fx.src, listed))
	if got, _ := os.ReadFile(p); !bytes.Equal(got, want) {
		t.Errorf("%s is not the listed file after the run", listed)
	}
}

// The record names the part files of the files the step lists (with hf-cache, in the
// snapshot's part folder): the only part files gc and remove free in its dest.
func TestOwnsNamesThePartFilesOfItsFiles(t *testing.T) {
	ctx := context.Background()
	for _, layout := range []string{"", LayoutHFCache} {
		fx := newFixture(t, fakehub.Options{})
		spec := fx.hfSpec("main")
		spec.Layout = layout
		st := fx.step(t, spec, nil)
		if err := st.Run(ctx, fx.env); err != nil {
			t.Fatal(err)
		}
		owns := st.Owns(fx.env)
		if len(owns) != 1 {
			t.Fatalf("Owns = %+v", owns)
		}
		src := fx.srcFiles(t)
		want := ".sglprov/parts/" + src[0] + ".part"
		if layout == LayoutHFCache {
			want = "models--org--model/snapshots/" + fx.hub.Commit() + "/" + want
		}
		if len(owns[0].Parts) != len(src) || !slices.Contains(owns[0].Parts, want) {
			t.Errorf("layout %q: Parts = %v, want one per listed file, %s among them", layout, owns[0].Parts, want)
		}
		if err := owns[0].Check(""); err != nil {
			t.Errorf("the record fails its own check: %v", err)
		}
	}
}
