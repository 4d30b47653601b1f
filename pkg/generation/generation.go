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
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/sglprov/sglprov/pkg/atomicfile"
	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/safefile"
	"github.com/sglprov/sglprov/pkg/treelock"
)

// CurrentLink is the name of the link, in a recipe's generations folder, to the last
// generation that passed.
const CurrentLink = "current"

// maxRecord bounds the record file read back.
const maxRecord = 16 << 20

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

// Open reads the record at recordPath of the generations kept in dir (a host path), keeping
// keep passed ones (at least 1). A missing record has no generations.
func Open(dir, recordPath string, keep int) (*Store, error) {
	if keep < 1 {
		keep = 1
	}
	s := &Store{dir: dir, record: recordPath, keep: keep, now: time.Now}
	b, err := safefile.ReadNoFollow(recordPath)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return s, nil
	case err != nil:
		return nil, fmt.Errorf("reading the generations record: %w", err)
	case len(b) > maxRecord:
		return nil, fmt.Errorf("reading the generations record %s: larger than %d bytes", recordPath, maxRecord)
	}
	rec, err := parseRecord(b)
	if err != nil {
		return nil, fmt.Errorf("%w: reading the generations record %s: %v (move it away to start afresh)", exitcode.ErrUsage, recordPath, err)
	}
	s.rec = *rec
	return s, nil
}

// parseRecord reads a record and checks that it names generations as sglprov does: every
// key, the current one too, of the form Key returns (an empty key, or one with a path in
// it, would name the generations folder itself or a folder outside it).
func parseRecord(b []byte) (*Record, error) {
	var rec Record
	if err := json.Unmarshal(b, &rec); err != nil {
		return nil, err
	}
	if rec.Current != "" {
		if err := CheckKey(rec.Current); err != nil {
			return nil, fmt.Errorf("current: %w", err)
		}
	}
	if rec.InPlace != nil && rec.InPlace.From != "" {
		if err := CheckKey(rec.InPlace.From); err != nil {
			return nil, fmt.Errorf("in_place.from: %w", err)
		}
	}
	for i, l := range rec.Links {
		if !filepath.IsAbs(l.Path) || filepath.Clean(l.Path) != l.Path || l.Path == "/" {
			return nil, fmt.Errorf("links[%d]: %q is not an absolute, clean path", i, l.Path)
		}
	}
	for i, g := range rec.Generations {
		if g == nil {
			return nil, fmt.Errorf("generations[%d]: empty", i)
		}
		if err := CheckKey(g.Key); err != nil {
			return nil, fmt.Errorf("generations[%d]: %w", i, err)
		}
	}
	return &rec, nil
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

// maxUnit bounds a unit file Observe reads.
const maxUnit = 1 << 20

// KeyIn returns the generation of the folder dir (a recipe's generations folder) that the
// unit text names ("" when it names none): the first path in it of the form
// .../NAME/KEY/... or .../NAME/KEY, NAME the folder's own name, KEY 16 hex digits.
func KeyIn(unit []byte, dir string) string {
	re := regexp.MustCompile(`/` + regexp.QuoteMeta(filepath.Base(dir)) + `/([0-9a-f]{16})(?:[/\s"']|$)`)
	if m := re.FindSubmatch(unit); m != nil {
		return string(m[1])
	}
	return ""
}

// Observe reads the units that serve the recipe now (the files a reboot or a restart
// starts: /etc/systemd/system/UNIT) and takes the generation they run as the serving one,
// whatever the record says: a switch killed between its promotion and the record, or a
// record written by hand, never makes a prune free the folder a server runs from. It
// returns the key the units run ("" when they name no generation of this folder that is on
// disk, or cannot be read); Mismatch says whether it differs from the record and Repair
// records it.
func (s *Store) Observe(unitFiles ...string) string {
	s.runs = ""
	for _, p := range unitFiles {
		b, err := safefile.ReadNoFollow(p)
		if err != nil || len(b) > maxUnit {
			continue
		}
		key := KeyIn(b, s.dir)
		if key == "" {
			continue
		}
		if fi, err := os.Stat(s.Path(key)); err != nil || !fi.IsDir() {
			continue
		}
		if key != s.rec.Current {
			s.runs = key
		}
		return key
	}
	return ""
}

// Mismatch returns, when the installed unit runs another generation than the record names
// (see Observe), the key the record names ("" for none) and the one that runs; ok is false
// when they agree.
func (s *Store) Mismatch() (recorded, runs string, ok bool) {
	if s.runs == "" {
		return "", "", false
	}
	return s.rec.Current, s.runs, true
}

// Repair records the generation the installed unit runs (Observe) as the serving one when
// the record names another: it is marked as passed (it was promoted; its step records stay
// as they were) and "current" and the roots' links flip to it. Nothing is deleted. It
// returns what it repaired, in one sentence ("" when nothing was to repair).
func (s *Store) Repair() (string, error) {
	recorded, runs, ok := s.Mismatch()
	if !ok {
		return "", nil
	}
	l, err := s.makeAndLock()
	if err != nil {
		return "", err
	}
	defer l.Release()
	was := "no generation"
	if recorded != "" {
		was = "generation " + Short(recorded)
	}
	msg := fmt.Sprintf("the generations record named %s as serving while the installed unit runs generation %s: recorded %s as serving", was, Short(runs), Short(runs))
	g := s.find(runs)
	if g == nil {
		g = &Generation{Key: runs, Created: s.now().UTC()}
		s.rec.Generations = append(s.rec.Generations, g)
	}
	if g.Passed.IsZero() {
		g.Passed = s.now().UTC()
	}
	s.rec.Current = runs
	s.rec.InPlace = nil
	if err := s.save(); err != nil {
		return "", err
	}
	s.runs = ""
	return msg, errors.Join(s.link(runs), s.linkRoots(runs))
}

// Generations returns the generations in the record, oldest first.
func (s *Store) Generations() []Generation {
	out := make([]Generation, 0, len(s.rec.Generations))
	for _, g := range s.rec.Generations {
		out = append(out, *g)
	}
	return out
}

func (s *Store) find(key string) *Generation {
	for _, g := range s.rec.Generations {
		if g.Key == key {
			return g
		}
	}
	return nil
}

// Begin records that a run builds into the generation with key (before anything is
// written there, so that a folder the record does not name is never one of ours half built).
func (s *Store) Begin(key string) error {
	return s.BeginWith(key, nil)
}

// BeginWith is Begin that also records the named digests the key was made of (kept when
// the generation was already recorded with them).
func (s *Store) BeginWith(key string, parts map[string]string) error {
	if err := CheckKey(key); err != nil {
		return err
	}
	l, err := s.makeAndLock()
	if err != nil {
		return err
	}
	defer l.Release()
	if err := s.register(); err != nil {
		return err
	}
	if g := s.find(key); g != nil {
		if g.Parts != nil || parts == nil {
			return nil
		}
		g.Parts = parts
		return s.save()
	}
	s.rec.Generations = append(s.rec.Generations, &Generation{Key: key, Created: s.now().UTC(), Parts: parts})
	return s.save()
}

// Parts returns the named digests the generation with key was made of (nil when they
// were not recorded).
func (s *Store) Parts(key string) map[string]string {
	if g := s.find(key); g != nil {
		return g.Parts
	}
	return nil
}

// Steps returns the step records kept with the generation with key, when it passed.
func (s *Store) Steps(key string) map[string]json.RawMessage {
	if g := s.find(key); g != nil {
		return g.Steps
	}
	return nil
}

// Previous returns the generation to roll back to from the serving one: the newest other
// generation that passed the gate, whose step records are kept and whose folder is still
// on disk ("" when there is none).
func (s *Store) Previous() string {
	var best *Generation
	for _, g := range s.rec.Generations {
		if g.Key == s.Serving() || g.Passed.IsZero() || len(g.Steps) == 0 {
			continue
		}
		if fi, err := os.Stat(s.Path(g.Key)); err != nil || !fi.IsDir() {
			continue
		}
		if best == nil || g.Passed.After(best.Passed) {
			best = g
		}
	}
	if best == nil {
		return ""
	}
	return best.Key
}

// Freed is one generation removed (or that would be, in a dry run).
type Freed struct {
	Key   string `json:"key"`
	Bytes int64  `json:"bytes"`
}

// Shared is a generation that another state dir's record lists too: it is left to it.
type Shared struct {
	Key string `json:"key"`
	// Record is the path of the other state dir's record.
	Record string `json:"record"`
}

// Pruned says what a prune kept and freed.
type Pruned struct {
	// Kept are the keys kept, the serving one first.
	Kept []string `json:"kept"`
	// Freed are the generations removed; Bytes their size together.
	Freed []Freed `json:"freed,omitempty"`
	Bytes int64   `json:"bytes"`
	// Shared are the generations left to another state dir that lists them (dropped from
	// this one's record, their folders kept).
	Shared []Shared `json:"shared,omitempty"`
}

// Passed records that the generation with key passed the gate, with the records of the
// steps that built it: it becomes the serving one and the "current" link is flipped to it
// (a new link renamed over the old one). Then the generations beyond the kept ones are
// removed.
func (s *Store) Passed(key string, steps map[string]json.RawMessage) (*Pruned, error) {
	if err := CheckKey(key); err != nil {
		return nil, err
	}
	l, err := s.makeAndLock()
	if err != nil {
		return nil, err
	}
	defer l.Release()
	if err := s.register(); err != nil {
		return nil, err
	}
	g := s.find(key)
	if g == nil {
		g = &Generation{Key: key, Created: s.now().UTC()}
		s.rec.Generations = append(s.rec.Generations, g)
	}
	g.Passed, g.Steps = s.now().UTC(), steps
	s.rec.Current = key
	s.runs = ""
	s.rec.InPlace = nil
	if err := s.save(); err != nil {
		return nil, err
	}
	// A "current" that cannot be written does not stop the prune: the record says which
	// generation serves.
	lerr := s.link(key)
	rerr := s.linkRoots(key)
	p, perr := s.prune(false, "")
	return p, errors.Join(lerr, rerr, perr)
}

// linkRoots points each root's link at the generation with key: a new link renamed over
// the old one. A folder (or file) at the root that is not a link is the tree an in-place
// run built: it served until now and is renamed beside the root (ROOT.sglprov-inplace,
// recorded in MovedAside), never deleted.
func (s *Store) linkRoots(key string) error {
	var errs []error
	for _, root := range s.roots {
		if err := s.linkRoot(key, root); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (s *Store) linkRoot(key string, root Root) error {
	target := filepath.Join(s.nodeDir, key, root.Sub)
	parent := filepath.Dir(root.Link)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return fmt.Errorf("creating %s for the link to generation %s: %w", parent, Short(key), err)
	}
	tmp := filepath.Join(parent, fmt.Sprintf(".%s.sglprov-link.%d", filepath.Base(root.Link), os.Getpid()))
	_ = os.Remove(tmp)
	if err := os.Symlink(target, tmp); err != nil {
		return fmt.Errorf("linking %s to generation %s: %w", root.Link, Short(key), err)
	}
	if fi, err := os.Lstat(root.Link); err == nil && fi.Mode()&fs.ModeSymlink == 0 {
		aside, err := s.moveAside(root.Link)
		if err != nil {
			_ = os.Remove(tmp)
			return err
		}
		s.rec.MovedAside = append(s.rec.MovedAside, MovedAside{Root: root.Link, Path: aside, At: s.now().UTC()})
		if err := s.save(); err != nil {
			_ = os.Remove(tmp)
			return err
		}
	}
	if err := os.Rename(tmp, root.Link); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("linking %s to generation %s: %w", root.Link, Short(key), err)
	}
	if err := atomicfile.SyncDir(parent); err != nil {
		return err
	}
	i := slices.IndexFunc(s.rec.Links, func(l Link) bool { return l.Path == root.Link })
	if i < 0 {
		s.rec.Links = append(s.rec.Links, Link{Path: root.Link})
		i = len(s.rec.Links) - 1
	}
	s.rec.Links[i].Target = target
	return s.save()
}

// InPlaceServing returns since when, and from which generation, the moved-aside trees
// serve again (nil: they do not; see Record.InPlace).
func (s *Store) InPlaceServing() *InPlace { return s.rec.InPlace }

// Aside returns the folder last moved aside from the root whose link is at link (a host
// path), when it is still there as a folder.
func (s *Store) Aside(link string) (MovedAside, bool) {
	for i := len(s.rec.MovedAside) - 1; i >= 0; i-- {
		m := s.rec.MovedAside[i]
		if m.Root != link {
			continue
		}
		fi, err := os.Lstat(m.Path)
		if err != nil || !fi.IsDir() {
			return MovedAside{}, false
		}
		return m, true
	}
	return MovedAside{}, false
}

// Relink points each link at its Target (a new link renamed over the old one), under the
// generations folder's lock, and records the targets written. Each link must be the one
// sglprov wrote (a link whose target is the one recorded in Links): anything else there is
// left alone and is an error. On an error the links already changed are put back. It
// returns the links as they were, to undo it with.
func (s *Store) Relink(links []Link) ([]Link, error) {
	l, err := s.makeAndLock()
	if err != nil {
		return nil, err
	}
	defer l.Release()
	var prev []Link
	for _, want := range links {
		i := slices.IndexFunc(s.rec.Links, func(x Link) bool { return x.Path == want.Path })
		got, rerr := os.Readlink(want.Path)
		switch {
		case i < 0:
			err = fmt.Errorf("%s is no link sglprov recorded writing: it is left as it is", want.Path)
		case rerr != nil:
			err = fmt.Errorf("reading the link %s (sglprov wrote it to point at %s): %w", want.Path, s.rec.Links[i].Target, rerr)
		case got != s.rec.Links[i].Target:
			err = fmt.Errorf("the link %s points at %s, not at %s where sglprov pointed it: it is left as it is", want.Path, got, s.rec.Links[i].Target)
		default:
			err = s.relink(want.Path, want.Target)
		}
		if err != nil {
			for j := len(prev) - 1; j >= 0; j-- {
				_ = s.relink(prev[j].Path, prev[j].Target)
			}
			return nil, errors.Join(err, s.save())
		}
		prev = append(prev, Link{Path: want.Path, Target: got})
	}
	return prev, s.save()
}

// relink renames a new link to target over the link at p and records it.
func (s *Store) relink(p, target string) error {
	parent := filepath.Dir(p)
	tmp := filepath.Join(parent, fmt.Sprintf(".%s.sglprov-link.%d", filepath.Base(p), os.Getpid()))
	_ = os.Remove(tmp)
	if err := os.Symlink(target, tmp); err != nil {
		return fmt.Errorf("linking %s to %s: %w", p, target, err)
	}
	if err := os.Rename(tmp, p); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("linking %s to %s: %w", p, target, err)
	}
	if err := atomicfile.SyncDir(parent); err != nil {
		return err
	}
	for i := range s.rec.Links {
		if s.rec.Links[i].Path == p {
			s.rec.Links[i].Target = target
		}
	}
	return nil
}

// InPlaceServes records that the moved-aside trees serve again (their roots' links point
// at them and their unit passed the gate): no generation serves, the "current" link is
// removed (it names the generation that serves), and every generation is kept as before.
// A generation that passes later serves again as usual.
func (s *Store) InPlaceServes() error {
	l, err := s.makeAndLock()
	if err != nil {
		return err
	}
	defer l.Release()
	s.rec.InPlace = &InPlace{Since: s.now().UTC(), From: s.rec.Current}
	s.rec.Current, s.runs = "", ""
	if err := s.save(); err != nil {
		return err
	}
	cur := filepath.Join(s.dir, CurrentLink)
	if fi, err := os.Lstat(cur); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
		if err := os.Remove(cur); err != nil {
			return fmt.Errorf("removing the link to the generation that served: %w", err)
		}
	}
	return nil
}

// removeLinks deletes the links at the roots that still point where sglprov last
// pointed them (a link or folder someone put there instead is left).
func (s *Store) removeLinks() error {
	var errs []error
	for _, l := range s.rec.Links {
		if got, err := os.Readlink(l.Path); err != nil || got != l.Target {
			continue
		}
		if err := os.Remove(l.Path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("removing the link %s: %w", l.Path, err))
		}
	}
	return errors.Join(errs...)
}

// moveAside renames what stands at p to the first free p.sglprov-inplace[-N].
func (s *Store) moveAside(p string) (string, error) {
	for i := 1; i <= 100; i++ {
		aside := p + ".sglprov-inplace"
		if i > 1 {
			aside += fmt.Sprintf("-%d", i)
		}
		if _, err := os.Lstat(aside); err == nil {
			continue
		}
		if err := os.Rename(p, aside); err != nil {
			return "", fmt.Errorf("moving the in-place tree %s aside to %s (so that the link to the serving generation can be put there): %w", p, aside, err)
		}
		return aside, nil
	}
	return "", fmt.Errorf("moving the in-place tree %s aside: %s.sglprov-inplace to -100 all exist; move them away", p, p)
}

// link points the "current" link at key.
func (s *Store) link(key string) error {
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", s.dir, err)
	}
	cur := filepath.Join(s.dir, CurrentLink)
	if fi, err := os.Lstat(cur); err == nil && fi.Mode()&fs.ModeSymlink == 0 {
		return fmt.Errorf("%s is not the link sglprov writes (it is a %s sglprov did not make): move it away so that the link to the serving generation can be written", cur, kindOf(fi))
	}
	tmp := filepath.Join(s.dir, fmt.Sprintf(".%s.%d", CurrentLink, os.Getpid()))
	_ = os.Remove(tmp)
	if err := os.Symlink(key, tmp); err != nil {
		return fmt.Errorf("linking the current generation: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(s.dir, CurrentLink)); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("linking the current generation: %w", err)
	}
	return atomicfile.SyncDir(s.dir)
}

// keptKeys returns the generations a prune keeps: the serving one and the newest passed
// ones up to keep, and besides, when given, the one being built.
func (s *Store) keptKeys(building string) []string {
	passed := make([]*Generation, 0, len(s.rec.Generations))
	for _, g := range s.rec.Generations {
		if !g.Passed.IsZero() {
			passed = append(passed, g)
		}
	}
	sort.SliceStable(passed, func(i, j int) bool { return passed[i].Passed.After(passed[j].Passed) })
	var kept []string
	if cur := s.Serving(); cur != "" {
		kept = append(kept, cur)
	}
	// The generation the record names stays too while the installed unit runs another
	// (Observe): the mismatch is repaired, never acted on by deletion.
	if s.runs != "" && s.rec.Current != "" {
		kept = append(kept, s.rec.Current)
	}
	for _, g := range passed {
		if len(kept) >= s.keep {
			break
		}
		if !contains(kept, g.Key) {
			kept = append(kept, g.Key)
		}
	}
	if building != "" && !contains(kept, building) {
		kept = append(kept, building)
	}
	return kept
}

// Prune removes the generations beyond the kept ones (see Passed): their folders and their
// records. With dryRun it only says what it would remove.
func (s *Store) Prune(dryRun bool) (*Pruned, error) {
	return s.lockedPrune(dryRun, "")
}

// PruneKeeping is Prune that also keeps the generation being built (gc while a new one is
// half built: it is the next apply's to finish).
func (s *Store) PruneKeeping(building string, dryRun bool) (*Pruned, error) {
	return s.lockedPrune(dryRun, building)
}

// lockedPrune is prune under the generations folder's lock (none needed for a dry run or
// when the folder is not there).
func (s *Store) lockedPrune(dryRun bool, building string) (*Pruned, error) {
	if !dryRun {
		if _, err := os.Lstat(s.dir); err == nil {
			l, err := s.lock()
			if err != nil {
				return nil, err
			}
			defer l.Release()
		}
	}
	return s.prune(dryRun, building)
}

// prune removes the generations beyond the kept ones; a generation the record of another
// state dir lists (Users) is left to it: dropped from this record, its folder kept.
func (s *Store) prune(dryRun bool, building string) (*Pruned, error) {
	kept := s.keptKeys(building)
	p := &Pruned{Kept: kept}
	others := s.others()
	var left []*Generation
	var errs []error
	for _, g := range s.rec.Generations {
		if contains(kept, g.Key) {
			left = append(left, g)
			continue
		}
		if by := sharedWith(others, g.Key); by != "" {
			p.Shared = append(p.Shared, Shared{Key: g.Key, Record: by})
			continue
		}
		size := DiskUsage(s.Path(g.Key))
		if !dryRun {
			if err := os.RemoveAll(s.Path(g.Key)); err != nil {
				errs = append(errs, fmt.Errorf("removing generation %s: %w", g.Key, err))
				left = append(left, g)
				continue
			}
		}
		p.Freed = append(p.Freed, Freed{Key: g.Key, Bytes: size})
		p.Bytes += size
	}
	if !dryRun && len(left) != len(s.rec.Generations) {
		s.rec.Generations = left
		if err := s.save(); err != nil {
			errs = append(errs, err)
		}
	}
	return p, errors.Join(errs...)
}

// removeTree removes a generation's folder (os.RemoveAll; tests make it fail).
var removeTree = os.RemoveAll

// RemoveAll removes every generation, the "current" link, the folder when empty, and the
// record (sglprov remove). A generation another state dir's record lists is left to it (in
// Shared), as are the link and the folder while another state dir uses them. With dryRun it
// only says what it would free.
func (s *Store) RemoveAll(dryRun bool) (*Pruned, error) {
	p := &Pruned{}
	var l *treelock.Lock
	if _, err := os.Lstat(s.dir); err == nil && !dryRun {
		var err error
		if l, err = s.lock(); err != nil {
			return nil, err
		}
		defer l.Release()
	}
	others := s.others()
	for _, g := range s.rec.Generations {
		if by := sharedWith(others, g.Key); by != "" {
			p.Shared = append(p.Shared, Shared{Key: g.Key, Record: by})
			continue
		}
		size := DiskUsage(s.Path(g.Key))
		p.Freed = append(p.Freed, Freed{Key: g.Key, Bytes: size})
		p.Bytes += size
	}
	if dryRun {
		return p, nil
	}
	var errs []error
	left := map[string]bool{}
	for _, f := range p.Freed {
		if err := removeTree(s.Path(f.Key)); err != nil {
			errs = append(errs, fmt.Errorf("removing generation %s: %w", f.Key, err))
			left[f.Key] = true
		}
	}
	if len(errs) > 0 {
		// What could not be removed stays recorded (and this state dir a user of the
		// folder), so that the next remove or gc finds it and tries again.
		kept := s.rec.Generations[:0]
		for _, g := range s.rec.Generations {
			if left[g.Key] {
				kept = append(kept, g)
			}
		}
		s.rec.Generations = kept
		if err := s.save(); err != nil {
			errs = append(errs, err)
		}
		if l != nil {
			l.Release()
		}
		p.Freed = slices.DeleteFunc(p.Freed, func(f Freed) bool { return left[f.Key] })
		return p, errors.Join(errs...)
	}
	if err := s.unregister(); err != nil {
		errs = append(errs, err)
	}
	if len(s.users(true)) == 0 {
		cur := filepath.Join(s.dir, CurrentLink)
		if fi, err := os.Lstat(cur); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
			_ = os.Remove(cur)
		}
		if err := s.removeLinks(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := os.Remove(s.record); err != nil && !errors.Is(err, fs.ErrNotExist) {
		errs = append(errs, fmt.Errorf("removing the generations record: %w", err))
	}
	if len(errs) == 0 {
		s.rec = Record{}
	}
	if l != nil {
		l.Release() // removes the lock folder when empty
	}
	_ = os.Remove(s.dir) // only when empty: what else is there is not ours
	return p, errors.Join(errs...)
}

// lock takes the generations folder's lock (treelock): another sglprov changing the
// generations there is an error that wraps exitcode.ErrLocked.
func (s *Store) lock() (*treelock.Lock, error) {
	return treelock.Acquire(context.Background(), s.dir, LockDir, "changing the generations in")
}

// makeAndLock creates the generations folder when it is not there and takes its lock.
func (s *Store) makeAndLock() (*treelock.Lock, error) {
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating %s: %w", s.dir, err)
	}
	return s.lock()
}

// userFile is the file in LockDir that says this store's record lists generations here.
func (s *Store) userFile() string {
	abs, err := filepath.Abs(s.record)
	if err != nil {
		abs = s.record
	}
	sum := sha256.Sum256([]byte(abs))
	return filepath.Join(s.dir, LockDir, "user-"+hex.EncodeToString(sum[:8]))
}

// register records, under the lock, that this store's record lists generations here.
func (s *Store) register() error {
	abs, err := filepath.Abs(s.record)
	if err != nil {
		return fmt.Errorf("naming the generations record: %w", err)
	}
	p := s.userFile()
	if b, err := safefile.ReadNoFollow(p); err == nil && string(b) == abs+"\n" {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return fmt.Errorf("creating %s: %w", filepath.Dir(p), err)
	}
	if err := atomicfile.Write(p, []byte(abs+"\n"), 0o600); err != nil {
		return fmt.Errorf("recording the state dir that uses %s: %w", s.dir, err)
	}
	return nil
}

// unregister removes this store's user file.
func (s *Store) unregister() error {
	if err := os.Remove(s.userFile()); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("removing %s: %w", s.userFile(), err)
	}
	return nil
}

// users returns the records of the other state dirs that use this generations folder
// (their record files still there); with clean (under the lock, not in a dry run), user
// files whose record is gone are removed.
func (s *Store) users(clean bool) []string {
	entries, err := os.ReadDir(filepath.Join(s.dir, LockDir))
	if err != nil {
		return nil
	}
	mine := s.userFile()
	myRec, _ := os.Stat(s.record)
	var out []string
	for _, e := range entries {
		p := filepath.Join(s.dir, LockDir, e.Name())
		if !strings.HasPrefix(e.Name(), "user-") || p == mine || !e.Type().IsRegular() {
			continue
		}
		b, err := safefile.ReadNoFollow(p)
		if err != nil || len(b) > 4096 {
			continue
		}
		rec := strings.TrimSpace(string(b))
		fi, err := os.Stat(rec)
		if errors.Is(err, fs.ErrNotExist) {
			if clean {
				_ = os.Remove(p) // that state dir's record is gone: it uses nothing here
			}
			continue
		}
		if err != nil || myRec != nil && os.SameFile(fi, myRec) {
			continue
		}
		out = append(out, rec)
	}
	sort.Strings(out)
	return out
}

// anyKey stands, in others, for every key: another state dir's record that cannot be read.
const anyKey = "*"

// sharedWith returns the record of another state dir that lists key ("" when none does).
func sharedWith(others map[string]string, key string) string {
	if by, ok := others[key]; ok {
		return by
	}
	return others[anyKey]
}

// others returns the keys the other state dirs' records list, each with that record's
// path; a record there that cannot be read or is not of the form sglprov writes lists
// every key (anyKey).
func (s *Store) others() map[string]string {
	out := map[string]string{}
	for _, path := range s.users(false) {
		b, err := safefile.ReadNoFollow(path)
		if err != nil || len(b) > maxRecord {
			out[anyKey] = path
			continue
		}
		rec, err := parseRecord(b)
		if err != nil {
			// What it lists is unknown: every generation is left to it.
			out[anyKey] = path
			continue
		}
		for _, g := range rec.Generations {
			if _, ok := out[g.Key]; !ok {
				out[g.Key] = path
			}
		}
	}
	return out
}

// kindOf names what a file is, for messages.
func kindOf(fi fs.FileInfo) string {
	switch {
	case fi.IsDir():
		return "folder"
	case fi.Mode().IsRegular():
		return "file"
	}
	return "special file"
}

func (s *Store) save() error {
	if err := os.MkdirAll(filepath.Dir(s.record), 0o700); err != nil {
		return fmt.Errorf("creating the generations record's folder: %w", err)
	}
	b, err := json.MarshalIndent(&s.rec, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding the generations record: %w", err)
	}
	if err := atomicfile.Write(s.record, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("writing the generations record: %w", err)
	}
	return nil
}

// DiskUsage returns the bytes the regular files under path take (a file with several
// links counted once); 0 when path is not there.
func DiskUsage(path string) int64 {
	var total int64
	seen := map[[2]uint64]bool{}
	_ = filepath.WalkDir(path, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return nil
		}
		if id, ok := inode(fi); ok {
			if seen[id] {
				return nil
			}
			seen[id] = true
		}
		total += fi.Size()
		return nil
	})
	return total
}

// Short returns the first 12 characters of a key, for messages.
func Short(key string) string {
	if len(key) > 12 {
		return key[:12]
	}
	return key
}

// Describe says what a prune kept and freed, in one line.
func (p *Pruned) Describe(format func(int64) string) string {
	kept := make([]string, 0, len(p.Kept))
	for _, k := range p.Kept {
		kept = append(kept, Short(k))
	}
	s := "kept " + strings.Join(kept, ", ")
	if len(kept) == 0 {
		s = "kept none"
	}
	if len(p.Shared) > 0 {
		s += fmt.Sprintf("; left %d to the other state dir that lists them (%s)", len(p.Shared), p.Shared[0].Record)
	}
	if len(p.Freed) == 0 {
		return s + "; freed nothing"
	}
	freed := make([]string, 0, len(p.Freed))
	for _, f := range p.Freed {
		freed = append(freed, Short(f.Key))
	}
	return fmt.Sprintf("%s; freed %s (%s)", s, strings.Join(freed, ", "), format(p.Bytes))
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
