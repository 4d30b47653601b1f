package service

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/sglprov/sglprov/pkg/atomicfile"
	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/hostpath"
)

// Offline installs units under a root folder, as `systemctl --root` does, and starts
// nothing: the unit goes to ROOT/etc/systemd/system/UNIT and each target of the unit's
// WantedBy= (RequiredBy=) gets the symlink ROOT/etc/systemd/system/TARGET.wants/UNIT
// (.requires/UNIT) pointing at /etc/systemd/system/UNIT, the path the unit has once the
// root is booted.
type Offline struct {
	root string
}

// NewOffline returns the offline manager for root.
func NewOffline(root string) *Offline { return &Offline{root: root} }

// Kind returns KindOffline.
func (o *Offline) Kind() string { return KindOffline }

// UnitPath returns ROOT/etc/systemd/system/UNIT.
func (o *Offline) UnitPath(unit string) string {
	return hostpath.Under(o.root, filepath.Join(SystemUnitDir, unit))
}

// EnableLinks returns the enable symlinks of a unit (under the root) and their target,
// read from the unit's [Install] section.
func (o *Offline) EnableLinks(unit string, content []byte) (links []string, target string, err error) {
	u, err := ParseUnit(content)
	if err != nil {
		return nil, "", fmt.Errorf("reading unit %q: %w", unit, err)
	}
	for _, dep := range []struct{ key, suffix string }{{"WantedBy", ".wants"}, {"RequiredBy", ".requires"}} {
		for _, v := range u.Values("Install", dep.key) {
			for _, t := range strings.Fields(v) {
				if strings.ContainsAny(t, "/%") {
					return nil, "", fmt.Errorf("%w: unit %q: %s=%s is not a unit name", exitcode.ErrUsage, unit, dep.key, t)
				}
				links = append(links, hostpath.Under(o.root, filepath.Join(SystemUnitDir, t+dep.suffix, unit)))
			}
		}
	}
	return links, filepath.Join(SystemUnitDir, unit), nil
}

// Install writes the unit when it changed and creates its enable symlinks.
func (o *Offline) Install(_ context.Context, unit string, content []byte) (bool, error) {
	links, target, err := o.EnableLinks(unit, content)
	if err != nil {
		return false, err
	}
	changed, err := atomicfile.WriteIfChanged(o.UnitPath(unit), content, 0o644)
	if err != nil {
		return false, fmt.Errorf("writing unit %q: %w", unit, err)
	}
	for _, l := range links {
		made, err := ensureSymlink(l, target)
		if err != nil {
			return false, fmt.Errorf("enabling unit %q: %w", unit, err)
		}
		changed = changed || made
	}
	return changed, nil
}

// ensureSymlink makes link point at target, replacing a link that points elsewhere. It
// reports whether it changed anything.
func ensureSymlink(link, target string) (bool, error) {
	cur, err := os.Readlink(link)
	if err == nil && cur == target {
		return false, nil
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		if _, statErr := os.Lstat(link); statErr == nil {
			return false, fmt.Errorf("%s exists and is not a symlink", link)
		}
	}
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		return false, fmt.Errorf("creating %s: %w", filepath.Dir(link), err)
	}
	tmp := link + ".sglprov-tmp"
	_ = os.Remove(tmp)
	if err := os.Symlink(target, tmp); err != nil {
		return false, fmt.Errorf("linking %s: %w", link, err)
	}
	if err := os.Rename(tmp, link); err != nil {
		_ = os.Remove(tmp)
		return false, fmt.Errorf("linking %s: %w", link, err)
	}
	return true, atomicfile.SyncDir(filepath.Dir(link))
}

var _ Remover = (*Offline)(nil)

// Remove disables and deletes unit under the root, as `systemctl --root DIR disable` and
// a deletion of its file would: every enable link of it
// (ROOT/etc/systemd/system/*.wants/UNIT, *.requires/UNIT) that points at
// /etc/systemd/system/UNIT, the target Install links to, is deleted, then the unit file. A
// link of that name pointing elsewhere (a unit file of another folder, an operator's) is
// left as it is. Nothing is stopped: under --root nothing runs.
func (o *Offline) Remove(_ context.Context, unit string) error {
	if unit == "" || strings.ContainsAny(unit, "/\x00") {
		return fmt.Errorf("%w: %q is not a unit name", exitcode.ErrUsage, unit)
	}
	target := filepath.Join(SystemUnitDir, unit)
	dir := hostpath.Under(o.root, SystemUnitDir)
	for _, pattern := range []string{"*.wants", "*.requires"} {
		links, err := filepath.Glob(filepath.Join(dir, pattern, unit))
		if err != nil {
			return fmt.Errorf("finding the enable links of unit %q: %w", unit, err)
		}
		for _, l := range links {
			if cur, err := os.Readlink(l); err != nil || cur != target {
				continue
			}
			if err := os.Remove(l); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("disabling unit %q: %w", unit, err)
			}
		}
	}
	if err := os.Remove(o.UnitPath(unit)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("removing unit %q: %w", unit, err)
	}
	return nil
}

// Start does nothing: under --root nothing is started.
func (o *Offline) Start(context.Context, string) error { return nil }

// Restart does nothing.
func (o *Offline) Restart(context.Context, string) error { return nil }

// Stop does nothing.
func (o *Offline) Stop(context.Context, string) error { return nil }

// State returns "offline".
func (o *Offline) State(context.Context, string) (string, string, error) {
	return KindOffline, "", nil
}

// Failed is always false: nothing runs.
func (o *Offline) Failed(context.Context, string) (bool, string, error) { return false, "", nil }

// Close does nothing.
func (o *Offline) Close() error { return nil }
