package service

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/sglprov/sglprov/pkg/atomicfile"
)

// RuntimeUnitDir is where a unit staged for this boot only is written: systemd reads it
// before /etc/systemd/system (systemd.unit(5), the unit load path), and it is on the
// tmpfs /run, which a reboot empties. A staged unit therefore serves until the next boot,
// when the unit in /etc/systemd/system (the last one that passed) serves again.
const RuntimeUnitDir = "/run/systemd/system.control"

// Stager is a Manager that can put a unit in effect for this boot only, ahead of the
// persistent one, and later keep it or drop it: a switch whose gate has not passed yet
// never reaches the unit a reboot starts.
type Stager interface {
	// Stage puts content in effect for this boot as unit (the persistent unit stays as it
	// is), or, when content is the persistent unit, drops what was staged. It reports
	// whether the unit in effect changed; the caller restarts the service.
	Stage(ctx context.Context, unit string, content []byte) (changed bool, err error)
	// Commit makes the staged unit the persistent one and enables it (the service is not
	// restarted: what runs is what was staged); with nothing staged it enables the unit.
	Commit(ctx context.Context, unit string) error
	// Discard drops the staged unit, so that the persistent one is in effect again; it
	// reports whether one was staged. The caller restarts the service.
	Discard(ctx context.Context, unit string) (bool, error)
	// Staged reports whether a staged unit is in effect.
	Staged(unit string) bool
	// Persistent reports whether the persistent unit file exists.
	Persistent(unit string) bool
}

var _ Stager = (*Systemd)(nil)

// runtimePath returns the staged file of unit.
func (s *Systemd) runtimePath(unit string) string { return filepath.Join(s.RuntimeDir, unit) }

// Staged reports whether unit has a staged file.
func (s *Systemd) Staged(unit string) bool {
	_, err := os.Lstat(s.runtimePath(unit))
	return err == nil
}

// Persistent reports whether unit's file exists in the persistent unit folder.
func (s *Systemd) Persistent(unit string) bool {
	_, err := os.Lstat(s.UnitPath(unit))
	return err == nil
}

// Stage writes content as unit's staged file (after systemd-analyze verify) and reloads
// systemd; when content is the persistent unit, it removes a staged file instead.
func (s *Systemd) Stage(ctx context.Context, unit string, content []byte) (bool, error) {
	if s.verify != nil {
		if _, err := s.verify(ctx, unit, content); err != nil {
			return false, err
		}
	}
	persistent, err := os.ReadFile(s.UnitPath(unit))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, fmt.Errorf("reading unit %q: %w", unit, err)
	}
	staged, serr := os.ReadFile(s.runtimePath(unit))
	hasStaged := serr == nil
	effective := persistent
	if hasStaged {
		effective = staged
	}
	if persistent != nil && bytes.Equal(content, persistent) {
		if !hasStaged {
			return false, s.reloadIfNeeded(ctx, unit, false)
		}
		if err := os.Remove(s.runtimePath(unit)); err != nil {
			return false, fmt.Errorf("removing the staged unit %q: %w", unit, err)
		}
		return true, s.reloadIfNeeded(ctx, unit, true)
	}
	if err := os.MkdirAll(s.RuntimeDir, 0o755); err != nil {
		return false, fmt.Errorf("creating %s: %w", s.RuntimeDir, err)
	}
	wrote, err := atomicfile.WriteIfChanged(s.runtimePath(unit), content, 0o644)
	if err != nil {
		return false, fmt.Errorf("staging unit %q: %w", unit, err)
	}
	return !bytes.Equal(effective, content), s.reloadIfNeeded(ctx, unit, wrote)
}

// Commit writes the staged unit as the persistent one, removes the staged file, reloads
// systemd and enables the unit. The persistent file is written before the staged one goes,
// so that a kill in between leaves the same unit in effect either way.
func (s *Systemd) Commit(ctx context.Context, unit string) error {
	staged, err := os.ReadFile(s.runtimePath(unit))
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return fmt.Errorf("reading the staged unit %q: %w", unit, err)
	default:
		if _, err := atomicfile.WriteIfChanged(s.UnitPath(unit), staged, 0o644); err != nil {
			return fmt.Errorf("writing unit %q: %w", unit, err)
		}
		if err := os.Remove(s.runtimePath(unit)); err != nil {
			return fmt.Errorf("removing the staged unit %q: %w", unit, err)
		}
		if err := s.conn.ReloadContext(ctx); err != nil {
			return fmt.Errorf("reloading systemd: %w", err)
		}
	}
	if _, _, err := s.conn.EnableUnitFilesContext(ctx, []string{unit}, false, true); err != nil {
		return fmt.Errorf("enabling unit %q: %w", unit, err)
	}
	return nil
}

// Discard removes unit's staged file and reloads systemd.
func (s *Systemd) Discard(ctx context.Context, unit string) (bool, error) {
	err := os.Remove(s.runtimePath(unit))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("removing the staged unit %q: %w", unit, err)
	}
	if err := s.conn.ReloadContext(ctx); err != nil {
		return true, fmt.Errorf("reloading systemd: %w", err)
	}
	return true, nil
}

// Disable stops unit and removes its enablement links (a model switch takes its place);
// Enable puts them back.
func (s *Systemd) Disable(ctx context.Context, unit string) error {
	if err := s.Stop(ctx, unit); err != nil {
		return err
	}
	if _, err := s.conn.DisableUnitFilesContext(ctx, []string{unit}, false); err != nil {
		return fmt.Errorf("disabling unit %q: %w", unit, err)
	}
	return nil
}

// Enable enables unit and starts it.
func (s *Systemd) Enable(ctx context.Context, unit string) error {
	if _, _, err := s.conn.EnableUnitFilesContext(ctx, []string{unit}, false, true); err != nil {
		return fmt.Errorf("enabling unit %q: %w", unit, err)
	}
	return s.Restart(ctx, unit)
}

// reloadIfNeeded reloads systemd when changed is set or systemd says the unit needs it.
func (s *Systemd) reloadIfNeeded(ctx context.Context, unit string, changed bool) error {
	if !changed {
		props, err := s.conn.GetUnitPropertiesContext(ctx, unit)
		if err == nil {
			if need, ok := props["NeedDaemonReload"].(bool); ok && need {
				changed = true
			}
		}
	}
	if !changed {
		return nil
	}
	if err := s.conn.ReloadContext(ctx); err != nil {
		return fmt.Errorf("reloading systemd: %w", err)
	}
	return nil
}
