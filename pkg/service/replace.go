package service

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Switcher is a Manager that can take a service out of the boot and back (a model switch
// stops and disables the units of the recipe it replaces, and brings them back when its
// own gate fails).
type Switcher interface {
	// Disable stops unit and removes its enablement links.
	Disable(ctx context.Context, unit string) error
	// Enable enables unit and (re)starts it.
	Enable(ctx context.Context, unit string) error
	// InUse reports whether unit is active (or on its way) or enabled.
	InUse(ctx context.Context, unit string) (bool, error)
}

var _ Switcher = (*Systemd)(nil)

// InUse reports whether unit is active, activating or enabled.
func (s *Systemd) InUse(ctx context.Context, unit string) (bool, error) {
	props, err := s.conn.GetUnitPropertiesContext(ctx, unit)
	if err != nil {
		return false, fmt.Errorf("reading the state of unit %q: %w", unit, err)
	}
	active, _ := props["ActiveState"].(string)
	file, _ := props["UnitFileState"].(string)
	return active == "active" || active == "activating" || active == "reloading" || file == "enabled", nil
}

// headerWindow is how much of a unit file UnitsOfRecipe reads for the header.
const headerWindow = 4096

// UnitsOfRecipe returns, sorted, the units in dir (a unit folder, under the root if any)
// that sglprov rendered for the recipe named recipe: their first line is the header Render
// writes, naming the recipe. Units of other recipes, or not sglprov's, are left out.
func UnitsOfRecipe(dir, recipe string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing units in %s: %w", dir, err)
	}
	want := "# Managed by sglprov. Recipe: " + recipe + ". Profile: "
	var out []string
	for _, e := range entries {
		if !e.Type().IsRegular() || !strings.HasSuffix(e.Name(), ".service") {
			continue
		}
		f, err := os.Open(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		head := make([]byte, headerWindow)
		n, _ := io.ReadFull(f, head)
		f.Close()
		first, _, _ := strings.Cut(string(head[:n]), "\n")
		if strings.HasPrefix(first, want) {
			out = append(out, e.Name())
		}
	}
	sort.Strings(out)
	return out, nil
}

// Remover is a Manager that can take a unit off the node: stop it, disable it and delete
// its files.
type Remover interface {
	Remove(ctx context.Context, unit string) error
}

var _ Remover = (*Systemd)(nil)

// Remove stops and disables unit, deletes its persistent and staged files and reloads
// systemd. A unit that is not loaded is only deleted.
func (s *Systemd) Remove(ctx context.Context, unit string) error {
	props, err := s.conn.GetUnitPropertiesContext(ctx, unit)
	if err != nil {
		return fmt.Errorf("reading the state of unit %q: %w", unit, err)
	}
	if load, _ := props["LoadState"].(string); load != "not-found" {
		if err := s.Stop(ctx, unit); err != nil {
			return err
		}
	}
	if s.Persistent(unit) {
		if _, err := s.conn.DisableUnitFilesContext(ctx, []string{unit}, false); err != nil {
			return fmt.Errorf("disabling unit %q: %w", unit, err)
		}
	}
	for _, p := range []string{s.UnitPath(unit), s.runtimePath(unit)} {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("removing %s: %w", p, err)
		}
	}
	if err := s.conn.ReloadContext(ctx); err != nil {
		return fmt.Errorf("reloading systemd: %w", err)
	}
	_ = s.conn.ResetFailedUnitContext(ctx, unit)
	return nil
}
