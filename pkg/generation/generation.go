// Package generation keeps a recipe's generations: the folders that hold what a serving
// node's server reads (source tree, venv, built wheels), one per set of inputs, built beside
// the one that serves and never written again once it served. A record in the state dir
// lists them with the time each passed the gate; a "current" link names the last one that
// passed. The anchors are NixOS generations and OSTree deployments.
//
// The package knows folders and records only; which steps build into a generation, and
// when one passed, is the engine's to say.
package generation

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"sort"
	"time"
)

// CurrentLink is the name of the link, in a recipe's generations folder, to the last
// generation that passed.
const CurrentLink = "current"

// LockDir is the folder, in a recipe's generations folder, that holds the lock every run
// that changes the generations takes (see pkg/treelock) and a file for each state dir
// whose record lists generations there ("user-ID", holding the record's path): one
// recipe applied from two state dirs shares the folder, and neither deletes a generation
// the other's record lists.
const LockDir = ".sglprov-generations"

// keyRE is the form of a key Key returns: nothing else names a generation's folder.
var keyRE = regexp.MustCompile(`^[0-9a-f]{16}$`)

// CheckKey refuses a key that is not of the form Key returns (16 lowercase hex digits).
func CheckKey(key string) error {
	if !keyRE.MatchString(key) {
		return fmt.Errorf("%q is not a generation key (16 hex digits, as sglprov writes them)", key)
	}
	return nil
}

// Generation is one generation in the record.
type Generation struct {
	// Key names the generation's folder: a digest of what decides it.
	Key string `json:"key"`
	// Created is when a run first built into it.
	Created time.Time `json:"created"`
	// Passed is when it last passed the gate (zero: never).
	Passed time.Time `json:"passed,omitzero"`
	// Steps are the records of the steps that built it, as they stood when it passed:
	// going back to it takes them, so nothing is built again.
	Steps map[string]json.RawMessage `json:"steps,omitempty"`
	// Parts are the named digests its key was made of (Key(Parts) == Key): a later run
	// compares its own with them to say which input made a new generation.
	Parts map[string]string `json:"parts,omitempty"`
}

// Record is what the record file holds.
type Record struct {
	// Current is the key of the generation that last passed (the serving one).
	Current     string        `json:"current,omitempty"`
	Generations []*Generation `json:"generations"`
	// MovedAside are the folders that stood where a root's link goes (a tree built in
	// place before generations, which sglprov did not record writing) and were renamed
	// beside it when the first generation passed: kept, never deleted by sglprov.
	MovedAside []MovedAside `json:"moved_aside,omitempty"`
	// Links are the links sglprov wrote at the roots, each with the target it last
	// wrote: a remove deletes a link only while it still points there.
	Links []Link `json:"links,omitempty"`
	// InPlace, when set, says that the trees moved aside serve again (a roll back from the
	// first generation, which nothing earlier precedes): no generation serves (Current is
	// empty) and the roots' links point at the moved-aside folders.
	InPlace *InPlace `json:"in_place,omitempty"`
}

// InPlace says since when the moved-aside trees serve again.
type InPlace struct {
	// Since is when they passed the gate again; From the generation that served before.
	Since time.Time `json:"since"`
	From  string    `json:"from,omitempty"`
}

// Link is a link sglprov wrote at a root.
type Link struct {
	// Path is the link's host path; Target what sglprov wrote into it.
	Path   string `json:"path"`
	Target string `json:"target"`
}

// MovedAside is a folder renamed away from a root so that the root's link could be put
// there.
type MovedAside struct {
	// Root is where it stood (a host path); Path where it is now.
	Root string `json:"root"`
	Path string `json:"path"`
	// At is when it was moved.
	At time.Time `json:"at"`
}

// Root is a folder a recipe names whose contents live in each generation: a link there
// points to the serving generation's Sub folder, flipped when a generation passes.
type Root struct {
	// Link is the host path of the link ("/opt/sglang").
	Link string
	// Sub is the folder inside each generation the link points to.
	Sub string
}

// Store is one recipe's generations.
type Store struct {
	dir    string
	record string
	keep   int
	now    func() time.Time
	rec    Record
	// nodeDir is the generations folder as the node sees it (the links' targets); roots
	// the links flipped when a generation passes.
	nodeDir string
	roots   []Root
	// runs is the generation the installed unit runs (Observe), when it differs from the
	// record's: it serves, whatever the record says.
	runs string
}

// SetRoots names the links flipped to each generation that passes: each root's link gets
// the target nodeDir/KEY/SUB (nodeDir is the generations folder as the node sees it).
func (s *Store) SetRoots(nodeDir string, roots []Root) {
	s.nodeDir, s.roots = nodeDir, roots
}

// MovedAside returns the folders moved away from the roots (see Record.MovedAside).
func (s *Store) MovedAside() []MovedAside { return s.rec.MovedAside }

// Key returns a generation's key from the named digests that decide it.
func Key(parts map[string]string) string {
	names := make([]string, 0, len(parts))
	for k := range parts {
		names = append(names, k)
	}
	sort.Strings(names)
	h := sha256.New()
	for _, k := range names {
		fmt.Fprintf(h, "%s=%s\n", k, parts[k])
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// Dir returns the folder that holds the generations.
func (s *Store) Dir() string { return s.dir }

// Path returns the host path of the generation with key.
func (s *Store) Path(key string) string { return filepath.Join(s.dir, key) }

// Serving returns the key of the generation that serves: the one the installed unit runs
// (Observe), else the last one that passed ("" when none has).
func (s *Store) Serving() string {
	if s.runs != "" {
		return s.runs
	}
	return s.rec.Current
}

// Recorded returns the key the record names as serving (Record.Current), whatever the
// installed unit runs.
func (s *Store) Recorded() string { return s.rec.Current }

// Served reports whether the generation with key has served: it passed the gate, or the
// installed unit runs it. Nothing writes into such a generation again.
func (s *Store) Served(key string) bool {
	if key == "" {
		return false
	}
	if key == s.Serving() || key == s.rec.Current {
		return true
	}
	g := s.find(key)
	return g != nil && !g.Passed.IsZero()
}

// Short returns the first 12 characters of a key, for messages.
func Short(key string) string {
	if len(key) > 12 {
		return key[:12]
	}
	return key
}

// contains reports whether list holds s.
func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
