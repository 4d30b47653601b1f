package ownership

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/sglprov/sglprov/pkg/exitcode"
)

func TestSystemFolder(t *testing.T) {
	root := t.TempDir()
	for _, tc := range []struct {
		root, p string
		want    bool
	}{
		{"", "/", true}, {"", "/etc", true}, {"", "/etc/", true}, {"", "/home", true}, {"", "/usr/local", true},
		{"", "/var/lib", true}, {"", "/opt", true}, {"", "/root", true}, {"", "/boot", true},
		{"", "/opt/models", false}, {"", "/var/lib/sglprov/models/x", false}, {"", "/home/u/models", false},
		{root, root, true}, {root, filepath.Join(root, "etc"), true}, {root, filepath.Join(root, "home"), true},
		{root, filepath.Join(root, "data/models"), false},
		{root, "/etc", true}, // outside the root, still a system folder
	} {
		if got := SystemFolder(tc.root, tc.p); got != tc.want {
			t.Errorf("SystemFolder(%q, %q) = %v, want %v", tc.root, tc.p, got, tc.want)
		}
	}
	// A folder that is a link to a system folder is one.
	link := filepath.Join(root, "data")
	os.MkdirAll(filepath.Join(root, "etc"), 0o755)
	if err := os.Symlink(filepath.Join(root, "etc"), link); err != nil {
		t.Fatal(err)
	}
	if !SystemFolder(root, link) {
		t.Errorf("a link to the root's etc is not a system folder")
	}
}

func TestCheckRefusesRecordsSglprovDoesNotWrite(t *testing.T) {
	root := t.TempDir()
	good := Owned{Kind: KindWeights, Path: filepath.Join(root, "data/m"), Files: []string{"a.safetensors", "sub/b.json"}, Dirs: []string{".", "sub"}, Listed: true, Dev: 1, Ino: 2}
	if err := good.Check(root); err != nil {
		t.Errorf("a good record: %v", err)
	}
	for name, o := range map[string]Owned{
		"the root":         {Kind: KindWeights, Path: root},
		"etc":              {Kind: KindWeights, Path: filepath.Join(root, "etc")},
		"host etc":         {Kind: KindWeights, Path: "/etc"},
		"outside the root": {Kind: KindWeights, Path: "/srv/data/m"},
		"relative":         {Kind: KindWeights, Path: "data/m"},
		"not clean":        {Kind: KindWeights, Path: root + "/data/../etc"},
		"file leaves":      {Kind: KindWeights, Path: filepath.Join(root, "data/m"), Files: []string{"../../etc/passwd"}},
		"absolute file":    {Kind: KindWeights, Path: filepath.Join(root, "data/m"), Files: []string{"/etc/passwd"}},
		"empty file":       {Kind: KindWeights, Path: filepath.Join(root, "data/m"), Files: []string{""}},
		"dir leaves":       {Kind: KindWeights, Path: filepath.Join(root, "data/m"), Dirs: []string{".."}},
		"generations etc":  {Kind: KindGenerations, Path: filepath.Join(root, "etc")},
		"unit with a path": {Kind: KindUnit, Path: "../../etc/passwd"},
		"unknown kind":     {Kind: "tree", Path: filepath.Join(root, "data/m")},
	} {
		if err := o.Check(root); !errors.Is(err, exitcode.ErrUsage) {
			t.Errorf("%s: Check = %v, want refused (exit 2)", name, err)
		}
	}
}

func TestOverlaps(t *testing.T) {
	root := t.TempDir()
	a := filepath.Join(root, "a")
	os.MkdirAll(filepath.Join(a, "sub"), 0o755)
	os.Symlink(a, filepath.Join(root, "b"))
	os.Symlink(filepath.Join(a, "sub"), filepath.Join(root, "c"))
	for _, tc := range []struct {
		x, y string
		want bool
	}{
		{a, a, true},
		{a, filepath.Join(a, "sub"), true},
		{filepath.Join(root, "b"), a, true},             // a link to the folder
		{filepath.Join(root, "c"), a, true},             // a link into it
		{filepath.Join(root, "b", "sub", "x"), a, true}, // a path through the link, not there yet
		{filepath.Join(root, "ab"), a, false},           // a prefix that is not a parent
		{filepath.Join(root, "d"), filepath.Join(root, "e"), false},
	} {
		if got := Overlaps(tc.x, tc.y); got != tc.want {
			t.Errorf("Overlaps(%s, %s) = %v, want %v", tc.x, tc.y, got, tc.want)
		}
	}
}

// Remove deletes the listed files and the folders sglprov made when empty; a user's file
// keeps its folder; a record without a list deletes nothing.
func TestRemoveDeletesOnlyWhatIsListed(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "data/m")
	os.MkdirAll(filepath.Join(dir, "sub"), 0o755)
	os.MkdirAll(filepath.Join(dir, "empty"), 0o755)
	for _, f := range []string{"a.safetensors", "sub/b.json", "sub/user.txt", "user.txt"} {
		os.WriteFile(filepath.Join(dir, f), []byte(f), 0o644)
	}
	dev, ino := Identify(dir)
	o := Owned{Kind: KindWeights, Path: dir, Files: []string{"a.safetensors", "sub/b.json", "gone.json"}, Dirs: []string{".", "sub", "empty"}, Listed: true, Dev: dev, Ino: ino}
	res, err := o.Remove(root)
	if err != nil {
		t.Fatal(err)
	}
	if res.Files != 2 || res.Bytes != int64(len("a.safetensors")+len("sub/b.json")) {
		t.Errorf("Removed = %+v", res)
	}
	for f, want := range map[string]bool{"a.safetensors": false, "sub/b.json": false, "sub/user.txt": true, "user.txt": true, "empty": false, "sub": true} {
		if _, err := os.Lstat(filepath.Join(dir, f)); (err == nil) != want {
			t.Errorf("%s there = %v, want %v", f, err == nil, want)
		}
	}
	if _, err := (Owned{Kind: KindWeights, Path: dir}).Remove(root); !errors.Is(err, ErrUnlisted) {
		t.Errorf("an unlisted record: %v", err)
	}
}
