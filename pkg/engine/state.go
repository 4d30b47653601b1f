package engine

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/sglprov/sglprov/pkg/atomicfile"
	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/ownership"
	"github.com/sglprov/sglprov/pkg/safefile"
)

// StateVersion is the version of state.json this build writes: 2 keeps one record set
// per recipe (StateFile); version 1 held one recipe's records at the top level and is read
// as that recipe's.
const StateVersion = 2

// Results a step record can hold.
const (
	ResultOK          = "ok"
	ResultFailed      = "failed"
	ResultInterrupted = "interrupted"
	ResultRunning     = "running"
	ResultBlocked     = "blocked"
	ResultSkipped     = "skipped"
	ResultNotSelected = "not selected"
)

// StateFile is what state.json holds: each recipe's records by recipe name. A recipe reads
// and writes only its own.
type StateFile struct {
	Version int               `json:"version"`
	Updated time.Time         `json:"updated"`
	Recipes map[string]*State `json:"recipes"`
	// Orphans are what removed recipes left on the node (weights kept by a remove without
	// --weights): gc frees those no recipe owns.
	Orphans []Owned `json:"orphans,omitempty"`
	// Removed says when each recipe sglprov remove took off the node was removed; an apply
	// of the recipe takes it out again.
	Removed map[string]time.Time `json:"removed,omitempty"`
}

// Owned is something on the node a recipe installed and a remove takes away (see
// pkg/ownership, which checks records and deletes what they name).
type Owned = ownership.Owned

// Kinds of Owned.
const (
	OwnedUnit        = ownership.KindUnit
	OwnedWeights     = ownership.KindWeights
	OwnedGenerations = ownership.KindGenerations
)

// Owner is implemented by steps that install something a remove takes away: a unit, a
// folder of downloaded weights. Owns names them (unit names; host paths).
type Owner interface {
	Owns(env *Env) []Owned
}

// SaveStates writes every recipe's records (remove and gc, which change more than one
// recipe's), atomically.
func SaveStates(dir string, f *StateFile) error {
	f.Version = StateVersion
	return f.save(dir)
}

// State is one recipe's records in state.json: the last known outcome of every step.
type State struct {
	Version int                    `json:"version"`
	Recipe  string                 `json:"recipe"`
	Updated time.Time              `json:"updated"`
	Facts   map[string]string      `json:"facts,omitempty"`
	Steps   map[string]*StepRecord `json:"steps"`
	// Owns is what the recipe installed on the node (units, weights, generations), for
	// remove and gc.
	Owns  []Owned                    `json:"owns,omitempty"`
	Extra map[string]json.RawMessage `json:"extra,omitempty"`

	// orphaned are records Owns no longer holds (the recipe stopped naming them) that the
	// next Save moves to the state file's orphans.
	orphaned []Owned
}

// Orphan records that the recipe no longer names o (a unit it renamed, a dest it moved,
// generations it turned off): the next Save moves it to the state file's orphans, which gc
// and remove free later, rather than forgetting it.
func (s *State) Orphan(o Owned) {
	if o.Kind == ownership.KindGPU {
		return
	}
	if o.Kind != OwnedWeights {
		o.Recipe = s.Recipe
	}
	s.orphaned = append(s.orphaned, o)
}

// StepRecord is the recorded outcome of one step.
type StepRecord struct {
	// Fingerprint digests Parts.
	Fingerprint string `json:"fingerprint"`
	// Parts are the digests of the named inputs.
	Parts map[string]string `json:"parts,omitempty"`
	// Result is ok, failed, interrupted or running (a run that died without recording).
	Result string `json:"result"`
	// Started and Duration of the last time the step ran.
	Started  time.Time     `json:"started"`
	Duration time.Duration `json:"duration_ns"`
	// Reason the step last ran, and the error when it failed.
	Reason string `json:"reason,omitempty"`
	Error  string `json:"error,omitempty"`
	// PID of the run that recorded "running".
	PID int `json:"pid,omitempty"`
	// Artifact is the digest of the fleet cache artifact the step's outputs came from or
	// were published as, on its last successful run.
	Artifact string `json:"artifact,omitempty"`
	// Data is the step's own record (verified files, the winning profile, ...).
	Data json.RawMessage `json:"data,omitempty"`
}

// StatePath returns the path of state.json in dir.
func StatePath(dir string) string { return filepath.Join(dir, "state.json") }

// GenerationsRecordPath returns the path of recipe's generations record in the state dir
// dir: generations/RECIPE.json.
func GenerationsRecordPath(dir, recipe string) string {
	return filepath.Join(dir, "generations", recipe+".json")
}

// LoadStates reads every recipe's records from state.json in dir; a missing file holds
// none. A version-1 file (one recipe's records at the top level) is read as that recipe's.
func LoadStates(dir string) (*StateFile, error) {
	f := &StateFile{Version: StateVersion, Recipes: map[string]*State{}}
	b, err := safefile.ReadNoFollow(StatePath(dir))
	if errors.Is(err, fs.ErrNotExist) {
		return f, nil
	}
	if errors.Is(err, safefile.ErrNotRegular) || errors.Is(err, safefile.ErrSymlink) {
		return nil, fmt.Errorf("%w: reading state: %v; remove it", exitcode.ErrUsage, err)
	}
	if err != nil {
		return nil, fmt.Errorf("reading state: %w", err)
	}
	var head struct {
		Version int `json:"version"`
	}
	if err := json.Unmarshal(b, &head); err != nil {
		return nil, fmt.Errorf("reading state %s: %w (move it away to start afresh)", StatePath(dir), err)
	}
	switch {
	case head.Version > StateVersion:
		return nil, fmt.Errorf("reading state %s: version %d is newer than this sglprov understands (%d)", StatePath(dir), head.Version, StateVersion)
	case head.Version < 2:
		// One recipe's records at the top level: they are that recipe's.
		st := &State{}
		if err := json.Unmarshal(b, st); err != nil {
			return nil, fmt.Errorf("reading state %s: %w (move it away to start afresh)", StatePath(dir), err)
		}
		st.Version = StateVersion
		if st.Steps == nil {
			st.Steps = map[string]*StepRecord{}
		}
		f.Updated = st.Updated
		f.Recipes[st.Recipe] = st
		return f, nil
	}
	if err := json.Unmarshal(b, f); err != nil {
		return nil, fmt.Errorf("reading state %s: %w (move it away to start afresh)", StatePath(dir), err)
	}
	if f.Recipes == nil {
		f.Recipes = map[string]*State{}
	}
	for name, st := range f.Recipes {
		if st == nil {
			st = &State{}
			f.Recipes[name] = st
		}
		st.Version, st.Recipe = StateVersion, name
		if st.Steps == nil {
			st.Steps = map[string]*StepRecord{}
		}
	}
	return f, nil
}

// LoadRecipeState reads one recipe's records from state.json in dir; a recipe with none
// has an empty state.
func LoadRecipeState(dir, recipe string) (*State, error) {
	f, err := LoadStates(dir)
	if err != nil {
		return nil, err
	}
	if st := f.Recipes[recipe]; st != nil {
		return st, nil
	}
	return &State{Version: StateVersion, Recipe: recipe, Steps: map[string]*StepRecord{}}, nil
}

// LoadState reads the records of the recipe that state.json in dir was last updated for
// (the only one, on a node with one recipe); a missing file is an empty state.
func LoadState(dir string) (*State, error) {
	f, err := LoadStates(dir)
	if err != nil {
		return nil, err
	}
	var last *State
	for _, st := range f.Recipes {
		if last == nil || st.Updated.After(last.Updated) || st.Updated.Equal(last.Updated) && st.Recipe < last.Recipe {
			last = st
		}
	}
	if last == nil {
		return &State{Version: StateVersion, Steps: map[string]*StepRecord{}}, nil
	}
	return last, nil
}

// Save writes this recipe's records into state.json, keeping every other recipe's as the
// file has them: the file is read again, this recipe's entry replaced, and the whole written
// atomically (a temporary file, fsynced, renamed over state.json, the directory fsynced).
// Callers hold the state dir's lock, so no other run writes in between.
func (s *State) Save(dir string) error {
	f, err := LoadStates(dir)
	if err != nil {
		return fmt.Errorf("saving state: %w", err)
	}
	s.Version = StateVersion
	f.Version = StateVersion
	f.Recipes[s.Recipe] = s
	delete(f.Removed, s.Recipe)
	// Orphans stay when a recipe uses their folder again: they list what sglprov wrote
	// there, which gc frees once no recipe uses the folder (or remove --weights with it).
	for _, o := range s.orphaned {
		f.AddOrphan(o)
	}
	f.Updated = s.Updated
	if err := f.save(dir); err != nil {
		return err
	}
	s.orphaned = nil
	return nil
}

// RemoveRecipeState deletes one recipe's records from state.json in dir (sglprov remove); it reports
// whether there were any.
func RemoveRecipeState(dir, recipe string) (bool, error) {
	f, err := LoadStates(dir)
	if err != nil {
		return false, err
	}
	if _, ok := f.Recipes[recipe]; !ok {
		return false, nil
	}
	delete(f.Recipes, recipe)
	return true, f.save(dir)
}

func (f *StateFile) save(dir string) error {
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding state: %w", err)
	}
	if err := atomicfile.Write(StatePath(dir), append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("writing state: %w", err)
	}
	return nil
}

// EnsureStateDir creates the state directory with mode 0700 (and corrects the mode of an
// existing one). It refuses a state directory that holds a symbolic link, and, unless
// insecure is set (--insecure-permissions), one that is owned by someone other than root
// or the invoking user or lies in a folder others can write (see CheckPermissions).
func EnsureStateDir(dir string, insecure bool) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("creating state dir: %w", err)
	}
	if !insecure {
		if err := CheckPermissions(dir); err != nil {
			return fmt.Errorf("state dir: %w", err)
		}
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return fmt.Errorf("setting state dir mode: %w", err)
	}
	if err := safefile.NoSymlinks(dir); err != nil {
		return fmt.Errorf("%w: state dir: %v", exitcode.ErrUsage, err)
	}
	return nil
}

// AddOrphan records o as an orphan of f: weights merged with an orphan of the same folder,
// a unit or generations folder once per recipe that left it.
func (f *StateFile) AddOrphan(o Owned) {
	for i, x := range f.Orphans {
		if x.Kind != o.Kind || x.Path != o.Path {
			continue
		}
		if o.Kind == OwnedWeights {
			f.Orphans[i] = MergeOwned([]Owned{x, o})
			return
		}
		if x.Recipe == o.Recipe {
			o.Step = ""
			f.Orphans[i] = o
			return
		}
	}
	o.Step = ""
	f.Orphans = append(f.Orphans, o)
}

// MergeOwned returns one record of the folder of all[0] listing what every one of all
// lists.
func MergeOwned(all []Owned) Owned {
	m := all[0]
	m.Step = ""
	m.Files, m.Dirs = slices.Clone(m.Files), slices.Clone(m.Dirs)
	m.Parts = slices.Clone(m.Parts)
	for _, x := range all[1:] {
		m.Listed = m.Listed && x.Listed
		m.Files = append(m.Files, x.Files...)
		m.Dirs = append(m.Dirs, x.Dirs...)
		m.Parts = append(m.Parts, x.Parts...)
		if m.Ino == 0 {
			m.Dev, m.Ino = x.Dev, x.Ino
		}
	}
	slices.Sort(m.Files)
	slices.Sort(m.Dirs)
	slices.Sort(m.Parts)
	m.Files, m.Dirs, m.Parts = slices.Compact(m.Files), slices.Compact(m.Dirs), slices.Compact(m.Parts)
	return m
}
