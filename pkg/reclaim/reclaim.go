// Package reclaim takes back from the node what sglprov wrote there and no longer needs:
// remove takes a recipe off (its units, generations, records and, with --weights, the
// files its downloads wrote), gc frees what no recipe needs (generations beyond the kept
// ones, idle part files, what removed recipes left). It deletes only what the records of
// the state dir say sglprov wrote (ownership.Owned), never what another recipe, of this
// state dir or of another on the node, also uses, and a file sglprov never wrote stays as
// it is. It reads and writes the records through the engine's state file and lock.
package reclaim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/ownership"
	"github.com/sglprov/sglprov/pkg/service"
)

// Owned is a record of something sglprov wrote (engine.Owned).
type Owned = engine.Owned

// ManagerFunc returns the service manager of kind (service.KindSystemd or KindExec), for
// the units of a remove or gc; nil is service.New.
type ManagerFunc = func(ctx context.Context, kind string) (service.Manager, error)

// managers opens each service manager once, for the units of a remove or gc.
type managers struct {
	dir, root string
	newFn     ManagerFunc
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
		return true, removeLastKnownGood(dir, o)
	case err != nil && !errors.Is(err, service.ErrVendorUnit):
		return false, err
	}
	if keepRunning && !exists {
		// Nothing of it is left but maybe its last-known-good copy: no manager call.
		return true, removeLastKnownGood(dir, o)
	}
	if keepRunning {
		if active, _, err := m.State(ctx, o.Path); err == nil && (active == "active" || active == "activating" || active == "reloading") {
			fmt.Fprintf(out, "  keep: unit %s of recipe %s, which the recipe no longer names, is %s: stop it (systemctl disable --now %s) and run gc again, or take the recipe off with sglprov remove -f\n", o.Path, recipe, active, o.Path)
			return false, nil
		}
	}
	if err := deleteUnit(ctx, m, o); err != nil {
		return false, err
	}
	return true, removeLastKnownGood(dir, o)
}

// deleteUnit stops, disables and deletes the unit o through its manager m.
func deleteUnit(ctx context.Context, m service.Manager, o Owned) error {
	if rm, ok := m.(service.Remover); ok {
		return rm.Remove(ctx, o.Path)
	}
	_ = m.Stop(ctx, o.Path)
	if err := os.Remove(m.UnitPath(o.Path)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("removing unit %s: %w", o.Path, err)
	}
	return nil
}

// removeLastKnownGood deletes the last-known-good copy of the unit o, if there is one.
func removeLastKnownGood(dir string, o Owned) error {
	if err := os.Remove(service.LastKnownGoodPath(dir, o.Path)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("removing the last-known-good copy of %s: %w", o.Path, err)
	}
	return nil
}

// lockedStates takes the state dir's lock and reads every recipe's records under it, for
// the commands that change what the node keeps (remove, gc); the caller releases the lock.
// A state dir without a state file holds no records: (nil, nil, nil), and nothing is
// created there.
func lockedStates(dir string) (*engine.Lock, *engine.StateFile, error) {
	if _, err := os.Lstat(engine.StatePath(dir)); errors.Is(err, fs.ErrNotExist) {
		return nil, nil, nil
	}
	lock, err := engine.AcquireLock(dir)
	if err != nil {
		return nil, nil, err
	}
	states, err := engine.LoadStates(dir)
	if err != nil {
		_ = lock.Release()
		return nil, nil, err
	}
	return lock, states, nil
}

// usesAny reports whether any of owns uses what o names: the same unit, or a folder (of
// any kind) that overlaps o's folder (ownership.Overlaps).
func usesAny(owns []Owned, o Owned) bool {
	for _, x := range owns {
		switch {
		case x.Kind == engine.OwnedGPU || o.Kind == engine.OwnedGPU:
		case x.Kind == engine.OwnedUnit || o.Kind == engine.OwnedUnit:
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
	case engine.OwnedUnit:
		return "unit " + o.Path
	case engine.OwnedWeights:
		return "weights " + o.Path
	}
	return o.Kind + " " + o.Path
}

// dropOwned returns owns without the record of o's kind and path.
func dropOwned(owns []Owned, o Owned) []Owned {
	return slices.DeleteFunc(slices.Clone(owns), func(x Owned) bool { return x.Kind == o.Kind && x.Path == o.Path })
}
