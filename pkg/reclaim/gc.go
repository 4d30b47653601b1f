package reclaim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/generation"
	"github.com/sglprov/sglprov/pkg/logval"
	"github.com/sglprov/sglprov/pkg/ownership"
)

// GCOptions says where GC frees what no recipe needs.
type GCOptions struct {
	StateDir, Root string
	DryRun         bool
	Out            io.Writer
	// NewManager returns the service manager of kind, for orphaned units; nil is service.New.
	NewManager ManagerFunc
	// Node leads to the node's other state dirs, whose recipes' folders are kept.
	Node NodeScope
}

// collector is one gc: what it read of the records, what it freed and what went wrong.
type collector struct {
	opts   GCOptions
	dir    string
	states *engine.StateFile
	verb   string // "freed", or "would free" with DryRun
	total  int64
	errs   []error
	ms     *managers
	// inUse is every folder (and unit) some recipe records.
	inUse []Owned
	// weightsFolders are the weights folders whose part files to free, by folder;
	// partsOf the part files the records name there.
	weightsFolders map[string]Owned
	partsOf        map[string][]string
	// orphans are the orphaned weights to free; left the orphan records that stay.
	orphans, left []Owned
}

// GC frees what no recipe on the node needs: generations beyond the kept ones, the part
// files of every known weights folder, and what removed recipes left (orphans) where no
// recipe uses the folder now. It says how much each frees. Records sglprov would not have
// written are refused (exit 2) and nothing they name is deleted; the rest is still freed.
func GC(ctx context.Context, opts GCOptions) error {
	dir := opts.StateDir
	lock, states, err := lockedStates(dir)
	if err != nil {
		return err
	}
	if states == nil {
		fmt.Fprintf(opts.Out, "nothing is recorded in %s: nothing to free\n", dir)
		return nil
	}
	defer lock.Release()
	c := &collector{opts: opts, dir: dir, states: states, verb: "freed",
		weightsFolders: map[string]Owned{}, partsOf: map[string][]string{}}
	if opts.DryRun {
		c.verb = "would free"
	}
	fmt.Fprintln(opts.Out, "Garbage collection:")
	c.recipes()
	c.ms = &managers{dir: dir, root: opts.Root, newFn: opts.NewManager}
	defer c.ms.close()
	c.sortOrphans(ctx)
	c.freeAllParts()
	c.freeOrphanedWeights()
	if !opts.DryRun && len(states.Orphans) > 0 && len(c.left) != len(states.Orphans) {
		states.Orphans = c.left
		if err := engine.SaveStates(dir, states); err != nil {
			c.errs = append(c.errs, err)
		}
	}
	fmt.Fprintf(opts.Out, "%s %s in all\n", c.verb, logval.Format(c.total))
	if len(c.errs) > 0 {
		return fmt.Errorf("gc: %w", errors.Join(c.errs...))
	}
	return nil
}

// say prints that what frees n bytes (or would) and counts them.
func (c *collector) say(what string, n int64) {
	c.total += n
	fmt.Fprintf(c.opts.Out, "  %s: %s %s\n", what, c.verb, logval.Format(n))
}

// recipes reads every recipe's records, in name order: the folders they use, the weights
// folders whose part files to free, and each one's generations beyond the kept ones,
// pruned.
func (c *collector) recipes() {
	names := make([]string, 0, len(c.states.Recipes))
	for name := range c.states.Recipes {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		for _, o := range c.states.Recipes[name].Owns {
			if err := o.Check(c.opts.Root); err != nil {
				c.errs = append(c.errs, fmt.Errorf("recipe %s in %s: %w", name, engine.StatePath(c.dir), err))
				continue
			}
			switch o.Kind {
			case engine.OwnedUnit:
				c.inUse = append(c.inUse, o)
			case engine.OwnedWeights:
				c.inUse = append(c.inUse, o)
				c.weightsFolders[o.Path] = o
				c.partsOf[o.Path] = append(c.partsOf[o.Path], o.Parts...)
			case engine.OwnedGenerations:
				c.inUse = append(c.inUse, o)
				c.pruneGenerations(name, o)
			}
		}
	}
}

// pruneGenerations frees the generations of recipe name in the folder o beyond the kept
// ones, the one its installed unit runs recorded as serving first.
func (c *collector) pruneGenerations(name string, o Owned) {
	store, err := generation.Open(o.Path, engine.GenerationsRecordPath(c.dir, name), o.Keep)
	if err != nil {
		c.errs = append(c.errs, err)
		return
	}
	if msg, err := servingFromUnit(store, c.opts.Root, c.dir, c.states.Recipes[name].Owns, c.opts.DryRun); err != nil {
		c.errs = append(c.errs, err)
	} else if msg != "" {
		fmt.Fprintf(c.opts.Out, "  generations of %s: %s\n", name, msg)
	}
	p, err := store.Prune(c.opts.DryRun)
	if err != nil {
		c.errs = append(c.errs, err)
	}
	if p != nil {
		fmt.Fprintf(c.opts.Out, "  generations of %s: %s\n", name, strings.Replace(p.Describe(logval.Format), "; freed", "; "+c.verb, 1))
		c.total += p.Bytes
	}
}

// sortOrphans checks each orphan record: a unit or generations folder is freed now
// (gcOrphan), weights are kept for freeOrphanedWeights and their part files for
// freeAllParts; a record sglprov would not have written stays, and is an error.
func (c *collector) sortOrphans(ctx context.Context) {
	for _, o := range c.states.Orphans {
		err := o.Check(c.opts.Root)
		if err == nil && (o.Kind == engine.OwnedGPU || o.Kind != engine.OwnedWeights && o.Recipe == "") {
			err = fmt.Errorf("%w: the orphan record %s %q: names no recipe that left it; delete it from %s", exitcode.ErrUsage, o.Kind, o.Path, engine.StatePath(c.dir))
		}
		if err != nil {
			c.errs = append(c.errs, fmt.Errorf("an orphan in %s: %w", engine.StatePath(c.dir), err))
			c.left = append(c.left, o)
			continue
		}
		if o.Kind != engine.OwnedWeights {
			if gone, err := c.gcOrphan(ctx, o); err != nil {
				c.errs = append(c.errs, err)
				c.left = append(c.left, o)
			} else if !gone {
				c.left = append(c.left, o)
			}
			continue
		}
		c.orphans = append(c.orphans, o)
		if _, ok := c.weightsFolders[o.Path]; !ok {
			c.weightsFolders[o.Path] = o
		}
		c.partsOf[o.Path] = append(c.partsOf[o.Path], o.Parts...)
	}
}

// freeAllParts frees the part files this state dir's records name, in every weights
// folder it knows, owned or orphaned; never one a running download holds.
func (c *collector) freeAllParts() {
	folders := make([]string, 0, len(c.weightsFolders))
	for p := range c.weightsFolders {
		folders = append(folders, p)
	}
	sort.Strings(folders)
	for _, f := range folders {
		// A folder put in the place of the recorded one (another device and inode) is not
		// the one sglprov downloaded into: its part files are not sglprov's.
		if !recordedFolder(c.weightsFolders[f]) {
			continue
		}
		n, inUse, err := freeParts(c.weightsFolders[f], c.partsOf[f], c.opts.DryRun)
		if err != nil {
			c.errs = append(c.errs, fmt.Errorf("removing part files in %s: %w", f, err))
		}
		for _, p := range inUse {
			fmt.Fprintf(c.opts.Out, "  keep: part file %s: a running download holds it\n", p)
		}
		if n > 0 {
			c.say("part files in "+f, n)
		}
	}
}

// freeOrphanedWeights deletes what removed recipes left, unless a recipe (of this state dir
// or another on the node) uses the folder again.
func (c *collector) freeOrphanedWeights() {
	var node *nodeUsers
	for _, o := range c.orphans {
		if usesAny(c.inUse, o) {
			c.left = append(c.left, o)
			continue
		}
		if node == nil {
			node = loadNodeUsers(c.opts.Node, c.dir)
		}
		if keep := node.keep(o); keep != "" {
			fmt.Fprintf(c.opts.Out, "  keep: weights %s: %s\n", o.Path, keep)
			c.left = append(c.left, o)
			continue
		}
		if !o.Listed {
			fmt.Fprintf(c.opts.Out, "  weights %s: %s\n", o.Path, ownership.ErrUnlisted)
			continue
		}
		n := o.Usage()
		if !c.opts.DryRun {
			if _, err := o.Remove(c.opts.Root); err != nil {
				c.errs = append(c.errs, fmt.Errorf("removing weights %s: %w", o.Path, err))
				c.left = append(c.left, o)
				continue
			}
		}
		c.say("weights no recipe uses, "+o.Path, n)
	}
}

// gcOrphan frees a unit or generations folder its recipe left when it stopped naming it:
// a unit no recipe names now, unless it is running (gc stops no server), and the
// generations beyond the one that serves (the root's link may still point into it; remove
// of the recipe deletes it whole). It reports whether nothing of it is left to record.
func (c *collector) gcOrphan(ctx context.Context, o Owned) (bool, error) {
	out := c.opts.Out
	if usesAny(c.inUse, o) {
		fmt.Fprintf(out, "  keep: %s, which recipe %s left: a recipe uses it now\n", describeOwned(o), o.Recipe)
		return false, nil
	}
	switch o.Kind {
	case engine.OwnedUnit:
		if c.opts.DryRun {
			fmt.Fprintf(out, "  unit %s that recipe %s no longer names: would stop, disable and delete it unless it is active\n", o.Path, o.Recipe)
			return false, nil
		}
		gone, err := removeUnit(ctx, c.ms, c.dir, o.Recipe, o, out, true)
		if err != nil {
			return false, fmt.Errorf("removing unit %s that recipe %s no longer names: %w", o.Path, o.Recipe, err)
		}
		if gone {
			fmt.Fprintf(out, "  unit %s that recipe %s no longer names: deleted\n", o.Path, o.Recipe)
		}
		return gone, nil
	case engine.OwnedGenerations:
		return false, c.pruneOrphanedGenerations(o)
	}
	return false, nil
}

// pruneOrphanedGenerations frees the generations the recipe left in the folder o, all but
// the serving one, unless its generations record is now its new folder's.
func (c *collector) pruneOrphanedGenerations(o Owned) error {
	if st := c.states.Recipes[o.Recipe]; st != nil && slices.ContainsFunc(st.Owns, func(x Owned) bool { return x.Kind == engine.OwnedGenerations }) {
		// The recipe's generations record is one file, which its folder of now lists.
		fmt.Fprintf(c.opts.Out, "  keep: generations %s, which recipe %s left: its generations record is the one its folder %s keeps now; delete the generations there yourself once nothing serves from them\n",
			o.Path, o.Recipe, generationsOf(st))
		return nil
	}
	store, err := generation.Open(o.Path, engine.GenerationsRecordPath(c.dir, o.Recipe), 1)
	if err != nil {
		return err
	}
	p, err := store.Prune(c.opts.DryRun)
	if p != nil {
		c.say("generations recipe "+o.Recipe+" left in "+o.Path+" (the serving one kept)", p.Bytes)
	}
	return err
}

// generationsOf returns the generations folder st names.
func generationsOf(st *engine.State) string {
	for _, x := range st.Owns {
		if x.Kind == engine.OwnedGenerations {
			return x.Path
		}
	}
	return ""
}

// servingFromUnit takes the generation the recipe's installed unit runs (owns' units) as the
// serving one of store, and records it when the record names another (with dryRun it
// only says so). It returns what it repaired or would repair ("" when nothing).
func servingFromUnit(store *generation.Store, root, stateDir string, owns []Owned, dryRun bool) (string, error) {
	store.Observe(engine.ServingUnitFiles(root, stateDir, owns)...)
	recorded, runs, ok := store.Mismatch()
	if !ok {
		return "", nil
	}
	if dryRun {
		was := "no generation"
		if recorded != "" {
			was = "generation " + generation.Short(recorded)
		}
		return fmt.Sprintf("the record names %s as serving while the installed unit runs generation %s: it is kept, and gc records it as serving", was, generation.Short(runs)), nil
	}
	msg, err := store.Repair()
	if err != nil {
		return "", fmt.Errorf("recording generation %s, which the installed unit runs, as serving: %w", generation.Short(runs), err)
	}
	return msg, nil
}
