package node

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/generation"
	"github.com/sglprov/sglprov/pkg/recipe"
)

// KeptGeneration returns the key of the generation of store that key names (the whole key or a
// prefix of it that names one) when a roll back can go to it: it passed its gate, its
// step records are kept, its folder is on disk and it does not serve now. The error names
// the generations there are (bad usage when key names none or several).
func KeptGeneration(store *generation.Store, key string) (string, error) {
	var found []generation.Generation
	for _, g := range store.Generations() {
		if strings.HasPrefix(g.Key, strings.ToLower(key)) {
			found = append(found, g)
		}
	}
	switch {
	case len(found) == 0:
		return "", fmt.Errorf("%w: no generation %q: the recipe keeps %s (sglprov status lists them)", exitcode.ErrUsage, key, keysOf(store))
	case len(found) > 1:
		return "", fmt.Errorf("%w: %q names %d generations: give more of the key (%s)", exitcode.ErrUsage, key, len(found), keysOf(store))
	}
	g := found[0]
	short := generation.Short(g.Key)
	switch {
	case g.Key == store.Serving():
		return "", fmt.Errorf("%w: generation %s serves already", exitcode.ErrUsage, short)
	case g.Passed.IsZero():
		return "", fmt.Errorf("%w: generation %s never passed its gate: a roll back goes only to one that did", exitcode.ErrUsage, short)
	case len(g.Steps) == 0:
		return "", fmt.Errorf("%w: generation %s keeps no step records to go back with", exitcode.ErrUsage, short)
	}
	if fi, err := os.Stat(store.Path(g.Key)); err != nil || !fi.IsDir() {
		return "", fmt.Errorf("%w: generation %s is no longer on disk (%s)", exitcode.ErrUsage, short, store.Path(g.Key))
	}
	return g.Key, nil
}

// keysOf lists store's generations by short key, or says there are none.
func keysOf(store *generation.Store) string {
	var keys []string
	for _, g := range store.Generations() {
		keys = append(keys, generation.Short(g.Key))
	}
	if len(keys) == 0 {
		return "no generation"
	}
	return strings.Join(keys, ", ")
}

// GenerationEntry is one generation of a recipe as status lists it.
type GenerationEntry struct {
	// Key is the generation's key (its folder's name).
	Key string `json:"key"`
	// Created is when a run first built into it; Passed when it last passed its gate
	// (absent: never).
	Created time.Time  `json:"created"`
	Passed  *time.Time `json:"passed,omitempty"`
	// State is "serving", "previous" (where `sglprov rollback` goes), "passed" (kept:
	// `rollback --to KEY` goes there) or "failed" (never passed; gc frees it).
	State string `json:"state"`
}

// Generations returns the generations recipe name keeps in stateDir's record, newest
// first (nil when it keeps none). With the recipe r (nil: not known), the folders are
// looked at too: a generation whose folder is gone is not where a roll back can go.
func Generations(root, stateDir, name string, r *recipe.Recipe) ([]GenerationEntry, error) {
	var store *generation.Store
	var err error
	if r != nil && r.UsesGenerations() {
		store, err = OpenGenerations(root, stateDir, r)
	} else {
		store, err = generation.Open("", engine.GenerationsRecordPath(stateDir, name), 1)
	}
	if err != nil {
		return nil, err
	}
	prev := store.Previous()
	if r == nil {
		prev = previousByRecord(store)
	}
	var out []GenerationEntry
	for _, g := range store.Generations() {
		e := GenerationEntry{Key: g.Key, Created: g.Created, State: "failed"}
		if !g.Passed.IsZero() {
			p := g.Passed
			e.Passed, e.State = &p, "passed"
		}
		switch g.Key {
		case store.Serving():
			e.State = "serving"
		case prev:
			e.State = "previous"
		}
		out = append(out, e)
	}
	slices.Reverse(out)
	return out, nil
}

// previousByRecord is Store.Previous from the record alone (the folders not looked at).
func previousByRecord(store *generation.Store) string {
	var best *generation.Generation
	for _, g := range store.Generations() {
		if g.Key == store.Serving() || g.Passed.IsZero() || len(g.Steps) == 0 {
			continue
		}
		if best == nil || g.Passed.After(best.Passed) {
			best = &g
		}
	}
	if best == nil {
		return ""
	}
	return best.Key
}
