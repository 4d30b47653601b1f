// Package foreign builds, for tests of what sglprov deletes, a tree of files sglprov never
// wrote: a password file in etc/, a user's file in home/u/, another recipe's generation,
// an admin's unit and a unit of the system's packages, and any file a test names (one a
// user dropped inside a weights dest). It records each file's sha256, so that a test can
// say afterwards that every one is byte-identical.
package foreign

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
)

// Files are the paths, relative to the tree's root, that every tree holds.
var Files = []string{
	"etc/passwd",
	"home/u/notes.txt",
	"home/u/.ssh/authorized_keys",
	// A generation of a recipe the tests do not remove.
	"opt/sglprov/generations/other/0123456789abcdef/bin/server",
	// An admin's unit, and a unit of the system's packages, at names a recipe may give its
	// unit (AdminUnit, VendorUnit).
	"etc/systemd/system/" + AdminUnit,
	"lib/systemd/system/" + VendorUnit,
}

// AdminUnit is the name of the unit an admin wrote in etc/systemd/system, and VendorUnit
// that of the unit the system's packages installed in lib/systemd/system.
const (
	AdminUnit  = "backup.service"
	VendorUnit = "ssh.service"
)

// OtherGenerations is the generations folder (relative) of the recipe whose generation
// Files holds, and OtherKey that generation's key.
const (
	OtherGenerations = "opt/sglprov/generations/other"
	OtherKey         = "0123456789abcdef"
)

// Tree is a built tree: its root and each file's sha256 by path relative to it.
type Tree struct {
	Root string            `json:"root"`
	Sums map[string]string `json:"sums"`
}

// Build writes Files and extra (paths relative to root) under root, each with content of
// its own, and returns the tree with their digests.
func Build(root string, extra ...string) (*Tree, error) {
	t := &Tree{Root: root, Sums: map[string]string{}}
	for _, rel := range append(append([]string{}, Files...), extra...) {
		p := filepath.Join(root, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return nil, fmt.Errorf("creating the folder of %s: %w", rel, err)
		}
		content := []byte("not written by sglprov: " + rel + "\n")
		if err := os.WriteFile(p, content, 0o644); err != nil {
			return nil, fmt.Errorf("writing %s: %w", rel, err)
		}
		sum := sha256.Sum256(content)
		t.Sums[rel] = hex.EncodeToString(sum[:])
	}
	return t, nil
}

// Changed returns the files of the tree that are gone or whose bytes differ now, each
// with what is wrong; none when the tree is as it was built.
func (t *Tree) Changed() []string {
	var out []string
	for rel, want := range t.Sums {
		b, err := os.ReadFile(filepath.Join(t.Root, filepath.FromSlash(rel)))
		if err != nil {
			out = append(out, fmt.Sprintf("%s: %v", rel, err))
			continue
		}
		sum := sha256.Sum256(b)
		if got := hex.EncodeToString(sum[:]); got != want {
			out = append(out, fmt.Sprintf("%s: sha256 %s, was %s", rel, got, want))
		}
	}
	sort.Strings(out)
	return out
}

// Save writes the tree's record to path (for a test script that checks it later).
func (t *Tree) Save(path string) error {
	b, err := json.Marshal(t)
	if err != nil {
		return fmt.Errorf("encoding the tree: %w", err)
	}
	return os.WriteFile(path, b, 0o644)
}

// Load reads a tree's record written by Save.
func Load(path string) (*Tree, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the tree's record: %w", err)
	}
	var t Tree
	if err := json.Unmarshal(b, &t); err != nil {
		return nil, fmt.Errorf("reading the tree's record %s: %w", path, err)
	}
	return &t, nil
}
