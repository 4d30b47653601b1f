package reclaim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/generation"
	"github.com/sglprov/sglprov/pkg/logval"
	"github.com/sglprov/sglprov/pkg/ownership"
)

// RemoveOptions says what Remove takes off the node.
type RemoveOptions struct {
	// StateDir is the state folder; Root the host root (--root; "" is the host's).
	StateDir, Root string
	// Recipe is the name of the recipe to remove.
	Recipe string
	// Weights deletes the files the recipe's downloads wrote too; DryRun only says the plan.
	Weights, DryRun bool
	// Out gets the plan and the outcome.
	Out io.Writer
	// NewManager returns the service manager of kind (service.KindSystemd or KindExec);
	// nil is service.New.
	NewManager ManagerFunc
	// Node leads to the node's other state dirs, whose recipes' folders are kept.
	Node NodeScope
}

// removal is one line of remove's plan.
type removal struct {
	what   string // "stop, disable and delete unit X", "delete generations", ...
	bytes  int64
	keep   string // why it is kept ("" when it goes)
	do     func(ctx context.Context) error
	freed  bool   // counts toward the bytes freed
	owned  *Owned // the record the line is about (nil for the records line)
	orphan bool   // kept weights the node remembers for gc
}

// remover is one remove: the records it reads and the plan it makes and carries out.
type remover struct {
	opts   RemoveOptions
	dir    string
	states *engine.StateFile
	st     *engine.State
	node   *nodeUsers
	ms     *managers
	// units, gens and weights are the plan's phases, in order; records its last line.
	units, gens, weights []removal
	records              removal
	// owed is the undrain the recipe is owed, deleted with its records ("" when none).
	owed string
}

// Remove takes a recipe off the node: its units, generations and records, and with
// Weights the files its downloads wrote. What another recipe on the node also uses (a unit
// of the same name; a folder that is, holds or lies in one of its folders, of any kind,
// compared as written, as resolved and by inode) is kept and the plan says by whom; kept
// weights are recorded as orphans for gc. It prints the plan first. The removal goes in an
// order a failure cannot wedge: the units first (a unit that cannot be stopped stops the
// remove before anything else is deleted), each part's records dropped as soon as it is
// gone, so that a second remove does only what is left. Every record is checked first
// (ownership.Owned.Check): a record sglprov would not have written stops the remove with
// exit 2 and nothing deleted.
func Remove(ctx context.Context, opts RemoveOptions) error {
	dir := opts.StateDir
	lock, states, err := lockedStates(dir)
	if err != nil {
		return err
	}
	if states == nil {
		fmt.Fprintf(opts.Out, "nothing is recorded in %s: nothing to remove\n", dir)
		return nil
	}
	defer lock.Release()
	st := states.Recipes[opts.Recipe]
	if st == nil {
		fmt.Fprintf(opts.Out, "recipe %s has no records in %s: nothing to remove\n", opts.Recipe, dir)
		return nil
	}
	for _, o := range st.Owns {
		if err := o.Check(opts.Root); err != nil {
			return fmt.Errorf("recipe %s in %s: %w", opts.Recipe, engine.StatePath(dir), err)
		}
	}
	// What the recipes of the node's other state dirs use stays too.
	r := &remover{opts: opts, dir: dir, states: states, st: st, node: loadNodeUsers(opts.Node, dir),
		ms: &managers{dir: dir, root: opts.Root, newFn: opts.NewManager}}
	defer r.ms.close()
	items, err := r.items()
	if err != nil {
		return err
	}
	for _, o := range items {
		if err := r.plan(o); err != nil {
			return err
		}
	}
	r.planRecords()
	total := r.print()
	if opts.DryRun {
		fmt.Fprintf(opts.Out, "would free %s (--dry-run: nothing was changed)\n", logval.Format(total))
		return nil
	}
	if err := r.carryOut(ctx); err != nil {
		return err
	}
	if err := r.forget(); err != nil {
		return err
	}
	fmt.Fprintf(opts.Out, "removed %s; freed %s\n", opts.Recipe, logval.Format(total))
	return nil
}

// items returns what the remove takes: the recipe's records, and what it left when it
// stopped naming it (a renamed unit, generations turned off), which goes with it; its
// orphaned weights follow the weights' rule (kept unless --weights, freed by gc).
func (r *remover) items() ([]Owned, error) {
	items := slices.Clone(r.st.Owns)
	for _, o := range r.states.Orphans {
		if o.Recipe != r.opts.Recipe || o.Kind == engine.OwnedWeights {
			continue
		}
		if err := o.Check(r.opts.Root); err != nil {
			return nil, fmt.Errorf("an orphan of recipe %s in %s: %w", r.opts.Recipe, engine.StatePath(r.dir), err)
		}
		if !slices.ContainsFunc(r.st.Owns, func(x Owned) bool { return x.Kind == o.Kind && x.Path == o.Path }) {
			items = append(items, o)
		}
	}
	return items, nil
}

// usedBy returns the other recipes of the state dir that use what o names, joined ("" when
// none does).
func (r *remover) usedBy(o Owned) string {
	var others []string
	for name, other := range r.states.Recipes {
		if name != r.opts.Recipe && usesAny(other.Owns, o) {
			others = append(others, name)
		}
	}
	sort.Strings(others)
	return strings.Join(others, ", ")
}

// plan adds the line of o to its phase: kept, with why, or what deletes it.
func (r *remover) plan(o Owned) error {
	if o.Kind == engine.OwnedGPU {
		return nil
	}
	keep := ""
	if by := r.usedBy(o); by != "" {
		keep = "also used by recipe " + by
	} else if o.Kind != engine.OwnedUnit {
		keep = r.node.keep(o)
	}
	if keep != "" {
		r.add(o, removal{what: describeOwned(o), keep: keep, owned: &o, orphan: o.Kind == engine.OwnedWeights && o.Recipe == ""})
		return nil
	}
	switch o.Kind {
	case engine.OwnedUnit:
		r.units = append(r.units, removal{what: "stop, disable and delete unit " + o.Path + orphanNote(o), owned: &o, do: func(ctx context.Context) error {
			_, err := removeUnit(ctx, r.ms, r.dir, r.opts.Recipe, o, r.opts.Out, false)
			return err
		}})
	case engine.OwnedGenerations:
		return r.planGenerations(o)
	case engine.OwnedWeights:
		r.weights = append(r.weights, r.planWeights(o))
	}
	return nil
}

// add puts the line p about o in the phase of o's kind.
func (r *remover) add(o Owned, p removal) {
	switch o.Kind {
	case engine.OwnedUnit:
		r.units = append(r.units, p)
	case engine.OwnedGenerations:
		r.gens = append(r.gens, p)
	default:
		r.weights = append(r.weights, p)
	}
}

// planGenerations adds the line that deletes the generations folder o.
func (r *remover) planGenerations(o Owned) error {
	store, err := generation.Open(o.Path, engine.GenerationsRecordPath(r.dir, r.opts.Recipe), o.Keep)
	if err != nil {
		return err
	}
	p, _ := store.RemoveAll(true)
	what := fmt.Sprintf("delete %d generation(s) in %s%s", len(p.Freed), o.Path, orphanNote(o))
	if len(p.Shared) > 0 {
		what += fmt.Sprintf("; leave %d that the state dir of %s lists", len(p.Shared), p.Shared[0].Record)
	}
	r.gens = append(r.gens, removal{what: what, bytes: p.Bytes, freed: true, owned: &o,
		do: func(context.Context) error { _, err := store.RemoveAll(false); return err }})
	return nil
}

// planWeights returns the line of the weights folder o: kept without --weights or a list
// of what sglprov wrote there, else deleted with the orphans of the same folder (what a
// removed recipe left there).
func (r *remover) planWeights(o Owned) removal {
	if !r.opts.Weights {
		return removal{what: describeOwned(o), bytes: o.Usage(), keep: "--weights deletes it; gc frees it once no recipe uses it", owned: &o, orphan: true}
	}
	if !o.Listed {
		return removal{what: describeOwned(o), keep: ownership.ErrUnlisted.Error(), owned: &o}
	}
	var same []Owned
	for _, x := range r.states.Orphans {
		if x.Kind == engine.OwnedWeights && x.Listed && x.Path == o.Path && x.Check(r.opts.Root) == nil {
			same = append(same, x)
		}
	}
	all := engine.MergeOwned(append([]Owned{o}, same...))
	return removal{what: "delete weights " + o.Path, bytes: all.Usage(), freed: true, owned: &o,
		do: func(context.Context) error { return r.deleteWeights(all, same) }}
}

// deleteWeights deletes the weights folder all (its part files first, those a running
// download holds left) and forgets the orphans same that it merged.
func (r *remover) deleteWeights(all Owned, same []Owned) error {
	if recordedFolder(all) {
		_, inUse, err := freeParts(all, all.Parts, false)
		if err != nil {
			return err
		}
		for _, p := range inUse {
			fmt.Fprintf(r.opts.Out, "  keep: part file %s: a running download holds it\n", p)
		}
	}
	if _, err := all.Remove(r.opts.Root); err != nil {
		return err
	}
	r.states.Orphans = slices.DeleteFunc(r.states.Orphans, func(x Owned) bool {
		return slices.ContainsFunc(same, func(y Owned) bool { return y.Kind == x.Kind && y.Path == x.Path })
	})
	return nil
}

// planRecords makes the plan's last line: the recipe's records, and the undrain it is
// owed when that is the file sglprov writes there.
func (r *remover) planRecords() {
	r.records = removal{what: "delete the records of recipe " + r.opts.Recipe + " in " + engine.StatePath(r.dir)}
	r.owed = engine.UndrainOwedPath(r.dir, r.opts.Recipe)
	if fi, err := os.Lstat(r.owed); err == nil {
		if fi.Mode().IsRegular() {
			r.records.what += " and " + r.owed + " (an undrain it was owed)"
		} else {
			r.owed = "" // not the file sglprov writes there: left as it is
		}
	}
}

// print writes the plan and returns the bytes it frees.
func (r *remover) print() int64 {
	fmt.Fprintf(r.opts.Out, "Remove %s:\n", r.opts.Recipe)
	var total int64
	for _, p := range slices.Concat(r.units, r.gens, r.weights, []removal{r.records}) {
		line := "  " + p.what
		if p.bytes > 0 {
			line += " (" + logval.Format(p.bytes) + ")"
		}
		if p.keep != "" {
			line = "  keep: " + p.what + ": " + p.keep
		}
		fmt.Fprintln(r.opts.Out, line)
		if p.keep == "" && p.freed {
			total += p.bytes
		}
	}
	return total
}

// drop takes o's record away: from the recipe's, or, for what it left, the orphans.
func (r *remover) drop(o Owned) {
	if o.Recipe != "" {
		r.states.Orphans = slices.DeleteFunc(r.states.Orphans, func(x Owned) bool {
			return x.Kind == o.Kind && x.Path == o.Path && x.Recipe == o.Recipe
		})
		return
	}
	r.st.Owns = dropOwned(r.st.Owns, o)
}

// carryOut runs the plan phase by phase, saving the records after each: a phase that fails
// stops the remove, what is gone having left the records and the rest staying for a
// second remove.
func (r *remover) carryOut(ctx context.Context) error {
	for _, phase := range [][]removal{r.units, r.gens, r.weights} {
		var errs []error
		for _, p := range phase {
			if p.keep != "" {
				if p.orphan {
					r.states.AddOrphan(*p.owned)
				}
				r.drop(*p.owned)
				continue
			}
			if err := p.do(ctx); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", p.what, err))
				continue
			}
			r.drop(*p.owned)
		}
		if len(errs) > 0 {
			if err := engine.SaveStates(r.dir, r.states); err != nil {
				errs = append(errs, err)
			}
			return fmt.Errorf("removing %s: %w", r.opts.Recipe, errors.Join(errs...))
		}
		if err := engine.SaveStates(r.dir, r.states); err != nil {
			return err
		}
	}
	return nil
}

// forget deletes the recipe's records (and the undrain it was owed) once all it named is
// gone, and notes when it was removed.
func (r *remover) forget() error {
	if r.owed != "" {
		if err := engine.ClearUndrainOwed(r.dir, r.opts.Recipe); err != nil {
			return fmt.Errorf("removing %s: %w", r.opts.Recipe, err)
		}
	}
	states := r.states
	delete(states.Recipes, r.opts.Recipe)
	// What the recipe left is gone with it (or was another's too, and stays that one's).
	states.Orphans = slices.DeleteFunc(states.Orphans, func(x Owned) bool { return x.Recipe == r.opts.Recipe })
	// status says the recipe was removed, not how its last run went.
	if states.Removed == nil {
		states.Removed = map[string]time.Time{}
	}
	states.Removed[r.opts.Recipe] = time.Now().UTC()
	return engine.SaveStates(r.dir, states)
}
