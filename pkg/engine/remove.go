package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/fetch"
	"github.com/sglprov/sglprov/pkg/generation"
	"github.com/sglprov/sglprov/pkg/logval"
	"github.com/sglprov/sglprov/pkg/ownership"
	"github.com/sglprov/sglprov/pkg/service"
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
	NewManager func(ctx context.Context, kind string) (service.Manager, error)
	// Node leads to the node's other state dirs, whose recipes' folders are kept.
	Node NodeScope
}

// GCOptions says where GC frees what no recipe needs.
type GCOptions struct {
	StateDir, Root string
	DryRun         bool
	Out            io.Writer
	// NewManager returns the service manager of kind, for orphaned units; nil is service.New.
	NewManager func(ctx context.Context, kind string) (service.Manager, error)
	// Node leads to the node's other state dirs, whose recipes' folders are kept.
	Node NodeScope
}

// managers opens each service manager once, for the units of a remove or gc.
type managers struct {
	dir, root string
	newFn     func(ctx context.Context, kind string) (service.Manager, error)
	open      map[string]service.Manager
}

// forUnit returns the manager that installed the unit o (unitManager).
func (ms *managers) forUnit(ctx context.Context, o Owned) (service.Manager, error) {
	kind := unitManager(ms.dir, o)
	if m := ms.open[kind]; m != nil {
		return m, nil
	}
	var m service.Manager
	var err error
	if ms.newFn != nil {
		m, err = ms.newFn(ctx, kind)
	} else {
		m, err = service.New(ctx, service.Options{Kind: kind, Root: ms.root, StateDir: ms.dir})
	}
	if err != nil {
		return nil, err
	}
	if ms.open == nil {
		ms.open = map[string]service.Manager{}
	}
	ms.open[kind] = m
	return m, nil
}

func (ms *managers) close() {
	for _, m := range ms.open {
		m.Close()
	}
}

// removeUnit stops, disables and deletes the unit o that recipe installed, and its
// last-known-good copy. Only a unit file sglprov rendered for recipe is touched: a unit of
// the same name that is another's (a package's, an operator's, another recipe's) is left
// as it is, and said so. With keepRunning (gc) a unit that is active is left too (gc stops
// no server), and one whose file is gone needs no manager. It reports whether the unit is
// gone (or is another's: nothing of the recipe's is left to record).
func removeUnit(ctx context.Context, ms *managers, dir, recipe string, o Owned, out io.Writer, keepRunning bool) (bool, error) {
	m, err := ms.forUnit(ctx, o)
	if err != nil {
		return false, err
	}
	// The check validate, plan and apply make before writing the unit: a file there that
	// sglprov did not render for the recipe is left as it is. A name the system's own unit
	// holds is no reason to keep sglprov's file that shadows it (deleting it gives the name
	// back), but with no file of sglprov's there the unit systemd knows by that name is the
	// system's: it is neither stopped nor disabled.
	_, vendor := service.UnitFiles(service.Options{Kind: m.Kind(), Root: ms.root, Offline: m.Kind() == service.KindOffline, StateDir: dir}, o.Path)
	path := m.UnitPath(o.Path)
	exists, err := service.CheckUnitName(path, vendor, o.Path, recipe)
	switch {
	case errors.Is(err, service.ErrNotRendered):
		fmt.Fprintf(out, "  keep: unit %s: %s is not one sglprov rendered for recipe %s; left as it is\n", o.Path, path, recipe)
		return true, nil
	case errors.Is(err, service.ErrVendorUnit) && !exists:
		fmt.Fprintf(out, "  keep: unit %s: no file of sglprov's is left at %s, and the unit of that name is the system's; left as it is\n", o.Path, path)
		if err := os.Remove(service.LastKnownGoodPath(dir, o.Path)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return false, fmt.Errorf("removing the last-known-good copy of %s: %w", o.Path, err)
		}
		return true, nil
	case err != nil && !errors.Is(err, service.ErrVendorUnit):
		return false, err
	}
	if keepRunning && !exists {
		// Nothing of it is left but maybe its last-known-good copy: no manager call.
		if err := os.Remove(service.LastKnownGoodPath(dir, o.Path)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return false, fmt.Errorf("removing the last-known-good copy of %s: %w", o.Path, err)
		}
		return true, nil
	}
	if keepRunning {
		if active, _, err := m.State(ctx, o.Path); err == nil && (active == "active" || active == "activating" || active == "reloading") {
			fmt.Fprintf(out, "  keep: unit %s of recipe %s, which the recipe no longer names, is %s: stop it (systemctl disable --now %s) and run gc again, or take the recipe off with sglprov remove -f\n", o.Path, recipe, active, o.Path)
			return false, nil
		}
	}
	if rm, ok := m.(service.Remover); ok {
		if err := rm.Remove(ctx, o.Path); err != nil {
			return false, err
		}
	} else {
		_ = m.Stop(ctx, o.Path)
		if err := os.Remove(m.UnitPath(o.Path)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return false, fmt.Errorf("removing unit %s: %w", o.Path, err)
		}
	}
	if err := os.Remove(service.LastKnownGoodPath(dir, o.Path)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, fmt.Errorf("removing the last-known-good copy of %s: %w", o.Path, err)
	}
	return true, nil
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

// lockedStates takes the state dir's lock and reads every recipe's records under it, for
// the commands that change what the node keeps (remove, gc); the caller releases the lock.
// A state dir without a state file holds no records: (nil, nil, nil), and nothing is
// created there.
func lockedStates(dir string) (*Lock, *StateFile, error) {
	if _, err := os.Lstat(StatePath(dir)); errors.Is(err, fs.ErrNotExist) {
		return nil, nil, nil
	}
	lock, err := AcquireLock(dir)
	if err != nil {
		return nil, nil, err
	}
	states, err := LoadStates(dir)
	if err != nil {
		_ = lock.Release()
		return nil, nil, err
	}
	return lock, states, nil
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
			return fmt.Errorf("recipe %s in %s: %w", opts.Recipe, StatePath(dir), err)
		}
	}
	usedBy := func(o Owned) string {
		var others []string
		for name, other := range states.Recipes {
			if name != opts.Recipe && usesAny(other.Owns, o) {
				others = append(others, name)
			}
		}
		sort.Strings(others)
		return strings.Join(others, ", ")
	}

	// What the recipes of the node's other state dirs use stays too.
	node := loadNodeUsers(opts.Node, dir)
	ms := &managers{dir: dir, root: opts.Root, newFn: opts.NewManager}
	defer ms.close()

	// What the recipe left when it stopped naming it (a renamed unit, generations turned
	// off) goes with it; its orphaned weights follow the weights' rule (kept unless
	// --weights, freed by gc).
	items := slices.Clone(st.Owns)
	for _, o := range states.Orphans {
		if o.Recipe == opts.Recipe && o.Kind != OwnedWeights {
			if err := o.Check(opts.Root); err != nil {
				return fmt.Errorf("an orphan of recipe %s in %s: %w", opts.Recipe, StatePath(dir), err)
			}
			if !slices.ContainsFunc(st.Owns, func(x Owned) bool { return x.Kind == o.Kind && x.Path == o.Path }) {
				items = append(items, o)
			}
		}
	}

	// Phases, in order: units, generations, weights; then the records.
	var units, gens, weights []removal
	for _, o := range items {
		o := o
		if o.Kind == OwnedGPU {
			continue
		}
		keep := ""
		if by := usedBy(o); by != "" {
			keep = "also used by recipe " + by
		} else if o.Kind != OwnedUnit {
			keep = node.keep(o)
		}
		if keep != "" {
			r := removal{what: describeOwned(o), keep: keep, owned: &o, orphan: o.Kind == OwnedWeights && o.Recipe == ""}
			switch o.Kind {
			case OwnedUnit:
				units = append(units, r)
			case OwnedGenerations:
				gens = append(gens, r)
			default:
				weights = append(weights, r)
			}
			continue
		}
		switch o.Kind {
		case OwnedUnit:
			units = append(units, removal{what: "stop, disable and delete unit " + o.Path + orphanNote(o), owned: &o, do: func(ctx context.Context) error {
				_, err := removeUnit(ctx, ms, dir, opts.Recipe, o, opts.Out, false)
				return err
			}})
		case OwnedGenerations:
			store, err := generation.Open(o.Path, GenerationsRecordPath(dir, opts.Recipe), o.Keep)
			if err != nil {
				return err
			}
			p, _ := store.RemoveAll(true)
			what := fmt.Sprintf("delete %d generation(s) in %s%s", len(p.Freed), o.Path, orphanNote(o))
			if len(p.Shared) > 0 {
				what += fmt.Sprintf("; leave %d that the state dir of %s lists", len(p.Shared), p.Shared[0].Record)
			}
			gens = append(gens, removal{what: what, bytes: p.Bytes, freed: true, owned: &o,
				do: func(context.Context) error { _, err := store.RemoveAll(false); return err }})
		case OwnedWeights:
			if !opts.Weights {
				weights = append(weights, removal{what: describeOwned(o), bytes: o.Usage(), keep: "--weights deletes it; gc frees it once no recipe uses it", owned: &o, orphan: true})
				continue
			}
			if !o.Listed {
				weights = append(weights, removal{what: describeOwned(o), keep: ownership.ErrUnlisted.Error(), owned: &o})
				continue
			}
			// Orphans of the same folder (what a removed recipe left there) go with it.
			var same []Owned
			for _, x := range states.Orphans {
				if x.Kind == OwnedWeights && x.Listed && x.Path == o.Path && x.Check(opts.Root) == nil {
					same = append(same, x)
				}
			}
			all := mergeOwned(append([]Owned{o}, same...))
			weights = append(weights, removal{what: "delete weights " + o.Path, bytes: all.Usage(), freed: true, owned: &o,
				do: func(context.Context) error {
					if recordedFolder(all) {
						_, inUse, err := freeParts(all, all.Parts, false)
						if err != nil {
							return err
						}
						for _, p := range inUse {
							fmt.Fprintf(opts.Out, "  keep: part file %s: a running download holds it\n", p)
						}
					}
					if _, err := all.Remove(opts.Root); err != nil {
						return err
					}
					states.Orphans = slices.DeleteFunc(states.Orphans, func(x Owned) bool {
						return slices.ContainsFunc(same, func(y Owned) bool { return y.Kind == x.Kind && y.Path == x.Path })
					})
					return nil
				}})
		}
	}
	records := removal{what: "delete the records of recipe " + opts.Recipe + " in " + StatePath(dir)}
	owed := UndrainOwedPath(dir, opts.Recipe)
	if fi, err := os.Lstat(owed); err == nil {
		if fi.Mode().IsRegular() {
			records.what += " and " + owed + " (an undrain it was owed)"
		} else {
			owed = "" // not the file sglprov writes there: left as it is
		}
	}

	fmt.Fprintf(opts.Out, "Remove %s:\n", opts.Recipe)
	var total int64
	for _, p := range slices.Concat(units, gens, weights, []removal{records}) {
		line := "  " + p.what
		if p.bytes > 0 {
			line += " (" + logval.Format(p.bytes) + ")"
		}
		if p.keep != "" {
			line = "  keep: " + p.what + ": " + p.keep
		}
		fmt.Fprintln(opts.Out, line)
		if p.keep == "" && p.freed {
			total += p.bytes
		}
	}
	if opts.DryRun {
		fmt.Fprintf(opts.Out, "would free %s (--dry-run: nothing was changed)\n", logval.Format(total))
		return nil
	}
	// drop takes o's record away: from the recipe's, or, for what it left, the orphans.
	drop := func(o Owned) {
		if o.Recipe != "" {
			states.Orphans = slices.DeleteFunc(states.Orphans, func(x Owned) bool {
				return x.Kind == o.Kind && x.Path == o.Path && x.Recipe == o.Recipe
			})
			return
		}
		st.Owns = dropOwned(st.Owns, o)
	}
	for _, phase := range [][]removal{units, gens, weights} {
		var errs []error
		for _, p := range phase {
			if p.keep != "" {
				if p.orphan {
					states.Orphans = addOrphan(states.Orphans, *p.owned)
				}
				drop(*p.owned)
				continue
			}
			if err := p.do(ctx); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", p.what, err))
				continue
			}
			drop(*p.owned)
		}
		if len(errs) > 0 {
			// What is gone leaves the records; the rest stays for a second remove.
			if err := SaveStates(dir, states); err != nil {
				errs = append(errs, err)
			}
			return fmt.Errorf("removing %s: %w", opts.Recipe, errors.Join(errs...))
		}
		if err := SaveStates(dir, states); err != nil {
			return err
		}
	}
	if owed != "" {
		if err := ClearUndrainOwed(dir, opts.Recipe); err != nil {
			return fmt.Errorf("removing %s: %w", opts.Recipe, err)
		}
	}
	delete(states.Recipes, opts.Recipe)
	// What the recipe left is gone with it (or was another's too, and stays that one's).
	states.Orphans = slices.DeleteFunc(states.Orphans, func(x Owned) bool { return x.Recipe == opts.Recipe })
	// status says the recipe was removed, not how its last run went.
	if states.Removed == nil {
		states.Removed = map[string]time.Time{}
	}
	states.Removed[opts.Recipe] = time.Now().UTC()
	if err := SaveStates(dir, states); err != nil {
		return err
	}
	fmt.Fprintf(opts.Out, "removed %s; freed %s\n", opts.Recipe, logval.Format(total))
	return nil
}

// unitManager returns the service manager that installed the unit o: the one its record
// names; for a record that names none (an older sglprov's), the exec manager when the
// unit file is the exec manager's and systemd does not run here, else systemd.
func unitManager(stateDir string, o Owned) string {
	if o.Manager != "" {
		return o.Manager
	}
	if _, err := os.Stat("/run/systemd/system"); errors.Is(err, fs.ErrNotExist) {
		if _, err := os.Lstat(filepath.Join(stateDir, "units", o.Path)); err == nil {
			return service.KindExec
		}
	}
	return service.KindSystemd
}

// usesAny reports whether any of owns uses what o names: the same unit, or a folder (of
// any kind) that overlaps o's folder (ownership.Overlaps).
func usesAny(owns []Owned, o Owned) bool {
	for _, x := range owns {
		switch {
		case x.Kind == OwnedGPU || o.Kind == OwnedGPU:
		case x.Kind == OwnedUnit || o.Kind == OwnedUnit:
			if x.Kind == o.Kind && x.Path == o.Path {
				return true
			}
		case ownership.Overlaps(x.Path, o.Path):
			return true
		}
	}
	return false
}

// orphanNote says, for a plan line, that o is what its recipe left when it stopped naming
// it ("" for what the recipe names now).
func orphanNote(o Owned) string {
	if o.Recipe == "" {
		return ""
	}
	return " (left when the recipe stopped naming it)"
}

// describeOwned names an owned thing for a plan line.
func describeOwned(o Owned) string {
	switch o.Kind {
	case OwnedUnit:
		return "unit " + o.Path
	case OwnedWeights:
		return "weights " + o.Path
	}
	return o.Kind + " " + o.Path
}

// dropOwned returns owns without the record of o's kind and path.
func dropOwned(owns []Owned, o Owned) []Owned {
	return slices.DeleteFunc(slices.Clone(owns), func(x Owned) bool { return x.Kind == o.Kind && x.Path == o.Path })
}

// addOrphan records o as an orphan: weights merged with an orphan of the same folder, a
// unit or generations folder once per recipe that left it.
func addOrphan(orphans []Owned, o Owned) []Owned {
	for i, x := range orphans {
		if x.Kind != o.Kind || x.Path != o.Path {
			continue
		}
		if o.Kind == OwnedWeights {
			orphans[i] = mergeOwned([]Owned{x, o})
			return orphans
		}
		if x.Recipe == o.Recipe {
			o.Step = ""
			orphans[i] = o
			return orphans
		}
	}
	o.Step = ""
	return append(orphans, o)
}

// mergeOwned returns one record of the folder of all[0] listing what every one of all lists.
func mergeOwned(all []Owned) Owned {
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
	verb := "freed"
	if opts.DryRun {
		verb = "would free"
	}
	var total int64
	var errs []error
	say := func(what string, n int64) {
		total += n
		fmt.Fprintf(opts.Out, "  %s: %s %s\n", what, verb, logval.Format(n))
	}
	names := make([]string, 0, len(states.Recipes))
	for name := range states.Recipes {
		names = append(names, name)
	}
	sort.Strings(names)
	fmt.Fprintln(opts.Out, "Garbage collection:")
	var inUse []Owned                    // every folder some recipe records
	weightsFolders := map[string]Owned{} // part files to free, by folder
	partsOf := map[string][]string{}     // the part files the records name, by folder
	for _, name := range names {
		for _, o := range states.Recipes[name].Owns {
			if err := o.Check(opts.Root); err != nil {
				errs = append(errs, fmt.Errorf("recipe %s in %s: %w", name, StatePath(dir), err))
				continue
			}
			switch o.Kind {
			case OwnedUnit:
				inUse = append(inUse, o)
			case OwnedWeights:
				inUse = append(inUse, o)
				weightsFolders[o.Path] = o
				partsOf[o.Path] = append(partsOf[o.Path], o.Parts...)
			case OwnedGenerations:
				inUse = append(inUse, o)
				store, err := generation.Open(o.Path, GenerationsRecordPath(dir, name), o.Keep)
				if err != nil {
					errs = append(errs, err)
					continue
				}
				if msg, err := servingFromUnit(store, opts.Root, dir, states.Recipes[name].Owns, opts.DryRun); err != nil {
					errs = append(errs, err)
				} else if msg != "" {
					fmt.Fprintf(opts.Out, "  generations of %s: %s\n", name, msg)
				}
				p, err := store.Prune(opts.DryRun)
				if err != nil {
					errs = append(errs, err)
				}
				if p != nil {
					fmt.Fprintf(opts.Out, "  generations of %s: %s\n", name, strings.Replace(p.Describe(logval.Format), "; freed", "; "+verb, 1))
					total += p.Bytes
				}
			}
		}
	}
	var orphans, left []Owned
	ms := &managers{dir: dir, root: opts.Root, newFn: opts.NewManager}
	defer ms.close()
	for _, o := range states.Orphans {
		err := o.Check(opts.Root)
		if err == nil && (o.Kind == OwnedGPU || o.Kind != OwnedWeights && o.Recipe == "") {
			err = fmt.Errorf("%w: the orphan record %s %q: names no recipe that left it; delete it from %s", exitcode.ErrUsage, o.Kind, o.Path, StatePath(dir))
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("an orphan in %s: %w", StatePath(dir), err))
			left = append(left, o)
			continue
		}
		if o.Kind != OwnedWeights {
			if gone, err := gcOrphan(ctx, opts, ms, states, inUse, o, say); err != nil {
				errs = append(errs, err)
				left = append(left, o)
			} else if !gone {
				left = append(left, o)
			}
			continue
		}
		orphans = append(orphans, o)
		if _, ok := weightsFolders[o.Path]; !ok {
			weightsFolders[o.Path] = o
		}
		partsOf[o.Path] = append(partsOf[o.Path], o.Parts...)
	}
	// The part files this state dir's records name, in every weights folder it knows, owned
	// or orphaned; never one a running download holds.
	folders := make([]string, 0, len(weightsFolders))
	for p := range weightsFolders {
		folders = append(folders, p)
	}
	sort.Strings(folders)
	for _, f := range folders {
		// A folder put in the place of the recorded one (another device and inode) is not
		// the one sglprov downloaded into: its part files are not sglprov's.
		if !recordedFolder(weightsFolders[f]) {
			continue
		}
		n, inUse, err := freeParts(weightsFolders[f], partsOf[f], opts.DryRun)
		if err != nil {
			errs = append(errs, fmt.Errorf("removing part files in %s: %w", f, err))
		}
		for _, p := range inUse {
			fmt.Fprintf(opts.Out, "  keep: part file %s: a running download holds it\n", p)
		}
		if n > 0 {
			say("part files in "+f, n)
		}
	}
	// What removed recipes left, unless a recipe uses the folder again.
	var node *nodeUsers
	for _, o := range orphans {
		if usesAny(inUse, o) {
			left = append(left, o)
			continue
		}
		if node == nil {
			node = loadNodeUsers(opts.Node, dir)
		}
		if keep := node.keep(o); keep != "" {
			fmt.Fprintf(opts.Out, "  keep: weights %s: %s\n", o.Path, keep)
			left = append(left, o)
			continue
		}
		if !o.Listed {
			fmt.Fprintf(opts.Out, "  weights %s: %s\n", o.Path, ownership.ErrUnlisted)
			continue
		}
		n := o.Usage()
		if !opts.DryRun {
			if _, err := o.Remove(opts.Root); err != nil {
				errs = append(errs, fmt.Errorf("removing weights %s: %w", o.Path, err))
				left = append(left, o)
				continue
			}
		}
		say("weights no recipe uses, "+o.Path, n)
	}
	if !opts.DryRun && len(states.Orphans) > 0 && len(left) != len(states.Orphans) {
		states.Orphans = left
		if err := SaveStates(dir, states); err != nil {
			errs = append(errs, err)
		}
	}
	fmt.Fprintf(opts.Out, "%s %s in all\n", verb, logval.Format(total))
	if len(errs) > 0 {
		return fmt.Errorf("gc: %w", errors.Join(errs...))
	}
	return nil
}

// gcOrphan frees a unit or generations folder its recipe left when it stopped naming it:
// a unit no recipe names now, unless it is running (gc stops no server), and the
// generations beyond the one that serves (the root's link may still point into it; remove
// of the recipe deletes it whole). It reports whether nothing of it is left to record.
func gcOrphan(ctx context.Context, opts GCOptions, ms *managers, states *StateFile, inUse []Owned, o Owned, say func(string, int64)) (bool, error) {
	if usesAny(inUse, o) {
		fmt.Fprintf(opts.Out, "  keep: %s, which recipe %s left: a recipe uses it now\n", describeOwned(o), o.Recipe)
		return false, nil
	}
	switch o.Kind {
	case OwnedUnit:
		if opts.DryRun {
			fmt.Fprintf(opts.Out, "  unit %s that recipe %s no longer names: would stop, disable and delete it unless it is active\n", o.Path, o.Recipe)
			return false, nil
		}
		gone, err := removeUnit(ctx, ms, opts.StateDir, o.Recipe, o, opts.Out, true)
		if err != nil {
			return false, fmt.Errorf("removing unit %s that recipe %s no longer names: %w", o.Path, o.Recipe, err)
		}
		if gone {
			fmt.Fprintf(opts.Out, "  unit %s that recipe %s no longer names: deleted\n", o.Path, o.Recipe)
		}
		return gone, nil
	case OwnedGenerations:
		if st := states.Recipes[o.Recipe]; st != nil && slices.ContainsFunc(st.Owns, func(x Owned) bool { return x.Kind == OwnedGenerations }) {
			// The recipe's generations record is one file, which its folder of now lists.
			fmt.Fprintf(opts.Out, "  keep: generations %s, which recipe %s left: its generations record is the one its folder %s keeps now; delete the generations there yourself once nothing serves from them\n",
				o.Path, o.Recipe, generationsOf(st))
			return false, nil
		}
		store, err := generation.Open(o.Path, GenerationsRecordPath(opts.StateDir, o.Recipe), 1)
		if err != nil {
			return false, err
		}
		p, err := store.Prune(opts.DryRun)
		if p != nil {
			say("generations recipe "+o.Recipe+" left in "+o.Path+" (the serving one kept)", p.Bytes)
		}
		return false, err
	}
	return false, nil
}

// generationsOf returns the generations folder st names.
func generationsOf(st *State) string {
	for _, x := range st.Owns {
		if x.Kind == OwnedGenerations {
			return x.Path
		}
	}
	return ""
}

// recordedFolder reports whether the folder at o.Path is the one its record was written for
// (its device and inode; a record without them names no folder sglprov wrote into).
func recordedFolder(o Owned) bool {
	if o.Ino == 0 {
		return false // no list of sglprov's: nothing there is its to free
	}
	dev, ino := ownership.Identify(o.Path)
	return dev == o.Dev && ino == o.Ino
}

// freeParts frees the part files parts (relative to the weights folder of o) with their
// resume records (fetch.FreePartAt), then the part-file folders left empty. The folder is
// opened once and checked to be the one o records (device and inode), and everything below
// it is reached through that handle, one folder at a time without following a link: a part
// that lies behind a link, or that is not a part file inside a part-file folder
// (fetch.WorkDir), is not touched. A part a running download holds is left (inUse, its host
// path). It returns the bytes freed (with dryRun: that would be).
func freeParts(o Owned, parts []string, dryRun bool) (freed int64, inUse []string, err error) {
	dirfd, ok, err := ownership.OpenFolder(o.Path, o.Dev, o.Ino)
	if err != nil {
		return 0, nil, fmt.Errorf("opening %s: %w", o.Path, err)
	}
	if !ok {
		return 0, nil, nil // gone, or not the folder sglprov downloaded into
	}
	defer unix.Close(dirfd)
	var errs []error
	parts = slices.Clone(parts)
	slices.Sort(parts)
	for _, rel := range slices.Compact(parts) { // several records may name one part
		if !strings.HasSuffix(rel, ".part") || !slices.Contains(strings.Split(rel, "/"), fetch.WorkDir) || !localRel(rel) {
			continue
		}
		host := filepath.Join(o.Path, filepath.FromSlash(rel))
		sub, ok, err := ownership.OpenUnder(dirfd, path.Dir(rel))
		if err != nil {
			errs = append(errs, fmt.Errorf("opening the folder of %s: %w", host, err))
			continue
		}
		if !ok {
			continue // not there, or a folder on the way is a link
		}
		n, held, err := fetch.FreePartAt(sub, path.Base(rel), host, dryRun)
		unix.Close(sub)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if held {
			inUse = append(inUse, host)
			continue
		}
		freed += n
		if !dryRun {
			// The part-file folders left empty, up to the one named fetch.WorkDir.
			for d := path.Dir(rel); d != "."; d = path.Dir(d) {
				if !ownership.RemoveEmptyUnder(dirfd, d) || path.Base(d) == fetch.WorkDir {
					break
				}
			}
		}
	}
	return freed, inUse, errors.Join(errs...)
}

// localRel reports whether rel is a clean relative '/'-separated path inside its folder.
func localRel(rel string) bool {
	return rel != "" && path.Clean(rel) == rel && !path.IsAbs(rel) && rel != ".." && !strings.HasPrefix(rel, "../")
}
