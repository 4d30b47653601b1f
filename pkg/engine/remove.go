package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

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
}

// GCOptions says where GC frees what no recipe needs.
type GCOptions struct {
	StateDir, Root string
	DryRun         bool
	Out            io.Writer
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

	managers := map[string]service.Manager{}
	managerFor := func(ctx context.Context, o Owned) (service.Manager, error) {
		kind := unitManager(dir, o)
		if m := managers[kind]; m != nil {
			return m, nil
		}
		var m service.Manager
		var err error
		if opts.NewManager != nil {
			m, err = opts.NewManager(ctx, kind)
		} else {
			m, err = service.New(ctx, service.Options{Kind: kind, Root: opts.Root, StateDir: dir})
		}
		if err != nil {
			return nil, err
		}
		managers[kind] = m
		return m, nil
	}
	defer func() {
		for _, m := range managers {
			m.Close()
		}
	}()

	// Phases, in order: units, generations, weights; then the records.
	var units, gens, weights []removal
	for _, o := range st.Owns {
		o := o
		if o.Kind == OwnedGPU {
			continue
		}
		if by := usedBy(o); by != "" {
			r := removal{what: describeOwned(o), keep: "also used by recipe " + by, owned: &o, orphan: o.Kind == OwnedWeights}
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
			units = append(units, removal{what: "stop, disable and delete unit " + o.Path, owned: &o, do: func(ctx context.Context) error {
				m, err := managerFor(ctx, o)
				if err != nil {
					return err
				}
				// Only a unit file sglprov rendered for this recipe is stopped and deleted:
				// a unit of the same name that is another's (a package's, an operator's, a
				// record of another root) is left as it is, and said so.
				exists, ours, err := service.RenderedFor(m.UnitPath(o.Path), opts.Recipe)
				if err != nil {
					return err
				}
				if exists && !ours {
					fmt.Fprintf(opts.Out, "  keep: unit %s: %s is not one sglprov rendered for recipe %s; left as it is\n", o.Path, m.UnitPath(o.Path), opts.Recipe)
					return nil
				}
				if rm, ok := m.(service.Remover); ok {
					if err := rm.Remove(ctx, o.Path); err != nil {
						return err
					}
				} else {
					_ = m.Stop(ctx, o.Path)
					if err := os.Remove(m.UnitPath(o.Path)); err != nil && !errors.Is(err, fs.ErrNotExist) {
						return fmt.Errorf("removing unit %s: %w", o.Path, err)
					}
				}
				if err := os.Remove(service.LastKnownGoodPath(dir, o.Path)); err != nil && !errors.Is(err, fs.ErrNotExist) {
					return fmt.Errorf("removing the last-known-good copy of %s: %w", o.Path, err)
				}
				return nil
			}})
		case OwnedGenerations:
			store, err := generation.Open(o.Path, GenerationsRecordPath(dir, opts.Recipe), o.Keep)
			if err != nil {
				return err
			}
			p, _ := store.RemoveAll(true)
			what := fmt.Sprintf("delete %d generation(s) in %s", len(p.Freed), o.Path)
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
					if _, err := all.Remove(opts.Root, fetch.WorkDir); err != nil {
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
	for _, phase := range [][]removal{units, gens, weights} {
		var errs []error
		for _, p := range phase {
			if p.keep != "" {
				if p.orphan {
					states.Orphans = addOrphan(states.Orphans, *p.owned)
				}
				st.Owns = dropOwned(st.Owns, *p.owned)
				continue
			}
			if err := p.do(ctx); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", p.what, err))
				continue
			}
			st.Owns = dropOwned(st.Owns, *p.owned)
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
	delete(states.Recipes, opts.Recipe)
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

// addOrphan records o as an orphan, merged with an orphan of the same folder.
func addOrphan(orphans []Owned, o Owned) []Owned {
	for i, x := range orphans {
		if x.Kind == o.Kind && x.Path == o.Path {
			orphans[i] = mergeOwned([]Owned{x, o})
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
	for _, x := range all[1:] {
		m.Listed = m.Listed && x.Listed
		m.Files = append(m.Files, x.Files...)
		m.Dirs = append(m.Dirs, x.Dirs...)
		if m.Ino == 0 {
			m.Dev, m.Ino = x.Dev, x.Ino
		}
	}
	slices.Sort(m.Files)
	slices.Sort(m.Dirs)
	m.Files, m.Dirs = slices.Compact(m.Files), slices.Compact(m.Dirs)
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
	for _, name := range names {
		for _, o := range states.Recipes[name].Owns {
			if err := o.Check(opts.Root); err != nil {
				errs = append(errs, fmt.Errorf("recipe %s: %w", name, err))
				continue
			}
			switch o.Kind {
			case OwnedWeights:
				inUse = append(inUse, o)
				weightsFolders[o.Path] = o
			case OwnedGenerations:
				inUse = append(inUse, o)
				store, err := generation.Open(o.Path, GenerationsRecordPath(dir, name), o.Keep)
				if err != nil {
					errs = append(errs, err)
					continue
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
	for _, o := range states.Orphans {
		if err := o.Check(opts.Root); err != nil || o.Kind != OwnedWeights {
			if err == nil {
				err = fmt.Errorf("%w: the orphan record %s %q: only weights are left as orphans; delete it from %s", exitcode.ErrUsage, o.Kind, o.Path, StatePath(dir))
			}
			errs = append(errs, err)
			left = append(left, o)
			continue
		}
		orphans = append(orphans, o)
		if _, ok := weightsFolders[o.Path]; !ok {
			weightsFolders[o.Path] = o
		}
	}
	// Part files of every weights folder the node knows, owned or orphaned.
	folders := make([]string, 0, len(weightsFolders))
	for p := range weightsFolders {
		folders = append(folders, p)
	}
	sort.Strings(folders)
	for _, f := range folders {
		work := filepath.Join(f, fetch.WorkDir)
		if fi, err := os.Lstat(work); err != nil || !fi.IsDir() {
			continue
		}
		// A folder put in the place of the recorded one (another device and inode) is not
		// the one sglprov downloaded into: its part-file folder is not sglprov's.
		if o := weightsFolders[f]; o.Ino != 0 {
			if dev, ino := ownership.Identify(f); dev != o.Dev || ino != o.Ino {
				continue
			}
		}
		n := generation.DiskUsage(work)
		if n == 0 {
			continue
		}
		if !opts.DryRun {
			if err := os.RemoveAll(work); err != nil {
				errs = append(errs, fmt.Errorf("removing part files in %s: %w", f, err))
				continue
			}
		}
		say("part files in "+f, n)
	}
	// What removed recipes left, unless a recipe uses the folder again.
	for _, o := range orphans {
		if usesAny(inUse, o) {
			left = append(left, o)
			continue
		}
		if !o.Listed {
			fmt.Fprintf(opts.Out, "  weights %s: %s\n", o.Path, ownership.ErrUnlisted)
			continue
		}
		n := o.Usage()
		if !opts.DryRun {
			if _, err := o.Remove(opts.Root, fetch.WorkDir); err != nil {
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
