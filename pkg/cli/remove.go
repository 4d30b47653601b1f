package cli

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/generation"
	"github.com/sglprov/sglprov/pkg/logval"
	"github.com/sglprov/sglprov/pkg/service"
)

// removal is one line of remove's plan.
type removal struct {
	what   string // "stop, disable and delete unit X", "delete generations", ...
	bytes  int64
	keep   string // why it is kept ("" when it goes)
	do     func(ctx context.Context) error
	freed  bool // counts toward the bytes freed
	orphan *engine.Owned
}

// runRemove takes a recipe off the node: its units, generations and records, and with
// --weights its downloads; what another recipe on the node also uses is kept.
func runRemove(ctx context.Context, stdio IO, args []string) error {
	var c common
	var weights, dryRun bool
	flags := newFlags("remove", stdio)
	c.register(flags, stdio)
	flags.BoolVar(&weights, "weights", false, "delete the recipe's downloaded weights too")
	flags.BoolVar(&dryRun, "dry-run", false, "say what would be removed and freed; change nothing")
	if err := parse(flags, args); err != nil {
		return err
	}
	r, err := c.loadRecipe()
	if err != nil {
		return err
	}
	dir := c.stateDirPath()
	lock, states, err := lockedStates(dir)
	if err != nil {
		return err
	}
	defer lock.Release()
	st := states.Recipes[r.Name]
	if st == nil {
		fmt.Fprintf(stdio.Stdout, "recipe %s has no records in %s: nothing to remove\n", r.Name, dir)
		return nil
	}
	usedBy := func(o engine.Owned) string {
		var others []string
		for name, other := range states.Recipes {
			if name == r.Name {
				continue
			}
			for _, x := range other.Owns {
				if x.Kind == o.Kind && overlaps(x.Path, o.Path) {
					others = append(others, name)
					break
				}
			}
		}
		return strings.Join(others, ", ")
	}

	var mgr service.Manager
	newManager := func(ctx context.Context) (service.Manager, error) {
		if mgr != nil {
			return mgr, nil
		}
		m, err := service.New(ctx, service.Options{Kind: service.KindSystemd, Root: c.root, StateDir: dir})
		if err != nil {
			return nil, err
		}
		mgr = m
		return m, nil
	}
	var plan []removal
	for _, o := range st.Owns {
		o := o
		if by := usedBy(o); by != "" {
			plan = append(plan, removal{what: describeOwned(o), keep: "also used by recipe " + by})
			continue
		}
		switch o.Kind {
		case engine.OwnedUnit:
			plan = append(plan, removal{what: "stop, disable and delete unit " + o.Path, do: func(ctx context.Context) error {
				m, err := newManager(ctx)
				if err != nil {
					return err
				}
				if rm, ok := m.(service.Remover); ok {
					return rm.Remove(ctx, o.Path)
				}
				if err := os.Remove(m.UnitPath(o.Path)); err != nil && !errors.Is(err, fs.ErrNotExist) {
					return fmt.Errorf("removing unit %s: %w", o.Path, err)
				}
				return nil
			}})
			plan = append(plan, removal{what: "delete the last-known-good copy of " + o.Path, do: func(context.Context) error {
				err := os.Remove(service.LastKnownGoodPath(dir, o.Path))
				if errors.Is(err, fs.ErrNotExist) {
					return nil
				}
				return err
			}})
		case engine.OwnedGenerations:
			store, err := generation.Open(o.Path, filepath.Join(dir, "generations", r.Name+".json"), o.Keep)
			if err != nil {
				return err
			}
			p, _ := store.RemoveAll(true)
			plan = append(plan, removal{what: fmt.Sprintf("delete %d generation(s) in %s", len(p.Freed), o.Path), bytes: p.Bytes, freed: true,
				do: func(context.Context) error { _, err := store.RemoveAll(false); return err }})
		case engine.OwnedWeights:
			size := generation.DiskUsage(o.Path)
			if !weights {
				plan = append(plan, removal{what: describeOwned(o), bytes: size, keep: "--weights deletes it; gc frees it once no recipe uses it", orphan: &o})
				continue
			}
			plan = append(plan, removal{what: "delete weights " + o.Path, bytes: size, freed: true,
				do: func(context.Context) error { return os.RemoveAll(o.Path) }})
		}
	}
	plan = append(plan, removal{what: "delete the records of recipe " + r.Name + " in " + engine.StatePath(dir)})

	fmt.Fprintf(stdio.Stdout, "Remove %s:\n", r.Name)
	var total int64
	for _, p := range plan {
		line := "  " + p.what
		if p.bytes > 0 {
			line += " (" + logval.Format(p.bytes) + ")"
		}
		if p.keep != "" {
			line = "  keep: " + p.what + ": " + p.keep
		}
		fmt.Fprintln(stdio.Stdout, line)
		if p.keep == "" && p.freed {
			total += p.bytes
		}
	}
	if dryRun {
		fmt.Fprintf(stdio.Stdout, "would free %s (--dry-run: nothing was changed)\n", logval.Format(total))
		return nil
	}
	var errs []error
	for _, p := range plan {
		if p.keep != "" {
			if p.orphan != nil {
				states.Orphans = append(states.Orphans, *p.orphan)
			}
			continue
		}
		if p.do != nil {
			if err := p.do(ctx); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", p.what, err))
			}
		}
	}
	if mgr != nil {
		mgr.Close()
	}
	if len(errs) > 0 {
		// The records stay, so that a second remove finds what is left.
		return fmt.Errorf("removing %s: %w", r.Name, errors.Join(errs...))
	}
	delete(states.Recipes, r.Name)
	if err := engine.SaveStates(dir, states); err != nil {
		return err
	}
	fmt.Fprintf(stdio.Stdout, "removed %s; freed %s\n", r.Name, logval.Format(total))
	return nil
}

// describeOwned names an owned thing for a plan line.
func describeOwned(o engine.Owned) string {
	switch o.Kind {
	case engine.OwnedUnit:
		return "unit " + o.Path
	case engine.OwnedWeights:
		return "weights " + o.Path
	}
	return o.Kind + " " + o.Path
}

// overlaps reports whether two host paths (or unit names) are one, or one lies inside the
// other.
func overlaps(a, b string) bool {
	a, b = filepath.Clean(a), filepath.Clean(b)
	return a == b || strings.HasPrefix(a, b+string(filepath.Separator)) || strings.HasPrefix(b, a+string(filepath.Separator))
}
