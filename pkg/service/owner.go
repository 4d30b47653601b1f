package service

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/hostpath"
)

// VendorUnitDirs are the folders the system's packages install their units into. A unit
// sglprov writes to /etc/systemd/system under one of their names would shadow that unit.
var VendorUnitDirs = []string{"/lib/systemd/system", "/usr/lib/systemd/system"}

// Errors CheckUnitName wraps, both with exitcode.ErrUsage.
var (
	// ErrNotRendered marks a unit file at the unit's path that sglprov did not render for
	// the recipe (no header of sglprov's naming it): an admin's, a package's, another
	// recipe's. It is never overwritten or deleted.
	ErrNotRendered = errors.New("a unit file sglprov did not render for this recipe")
	// ErrVendorUnit marks a unit name that a unit of the system's packages holds
	// (VendorUnitDirs): a unit of that name in /etc would shadow it.
	ErrVendorUnit = errors.New("a unit of the system holds this name")
)

// UnitFiles returns where the manager opts selects keeps the file of unit (its UnitPath),
// and the folders of the system's own units it must not shadow (VendorUnitDirs under the
// root; none for the exec manager, whose units systemd never reads). It makes no manager.
func UnitFiles(opts Options, unit string) (path string, vendor []string) {
	if !opts.Offline && (opts.Root == "" || opts.Root == "/") && opts.Kind == KindExec {
		return filepath.Join(opts.StateDir, "units", unit), nil
	}
	for _, d := range VendorUnitDirs {
		vendor = append(vendor, hostpath.Under(opts.Root, d))
	}
	return hostpath.Under(opts.Root, filepath.Join(SystemUnitDir, unit)), vendor
}

// CheckUnitName is the one check of a unit name before sglprov writes or deletes the unit file
// at path for recipe (validate, plan, apply, remove and gc all call it). exists says that a
// file (or a link, or anything) is at path. The error wraps ErrNotRendered when what is at
// path is not a unit sglprov rendered for recipe, and ErrVendorUnit when a unit of that name
// is in one of vendor (the system's unit folders); both name the file and the fix, and wrap
// exitcode.ErrUsage. Nothing it reads blocks: a FIFO at path is not a unit sglprov rendered.
func CheckUnitName(path string, vendor []string, unit, recipe string) (exists bool, err error) {
	exists, ours, err := RenderedFor(path, recipe)
	if err != nil {
		return exists, err
	}
	if exists && !ours {
		return true, fmt.Errorf("%w: %w: unit %s: %s is not one sglprov rendered for recipe %s (no header of sglprov's naming it); sglprov never overwrites or deletes it: choose another unit name in the recipe, or move that file away yourself if it is no longer needed",
			exitcode.ErrUsage, ErrNotRendered, unit, path, recipe)
	}
	for _, d := range vendor {
		p := filepath.Join(d, unit)
		if _, err := os.Lstat(p); err == nil {
			return exists, fmt.Errorf("%w: %w: unit %s: the system has a unit of that name (%s), which a unit in %s would shadow; choose another unit name in the recipe (such as sglang-%s)",
				exitcode.ErrUsage, ErrVendorUnit, unit, p, SystemUnitDir, unit)
		}
	}
	return exists, nil
}

// RenderedFor reports whether the unit file at path is one sglprov rendered for the recipe
// named recipe (its first line is Render's header naming it); exists is false when there is
// no file there. A unit of the same name that is not sglprov's, or another recipe's, is
// not this recipe's to stop or delete; neither is anything there that is not a regular file
// (a link, such as a mask to /dev/null, a FIFO: never waited on).
func RenderedFor(path, recipe string) (exists, ours bool, err error) {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, false, nil
	}
	if err != nil {
		return false, false, fmt.Errorf("reading unit %s: %w", path, err)
	}
	if !fi.Mode().IsRegular() {
		return true, false, nil
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOFOLLOW|syscall.O_NOCTTY, 0)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return false, false, nil
		}
		if errors.Is(err, syscall.ELOOP) {
			return true, false, nil
		}
		return true, false, fmt.Errorf("reading unit %s: %w", path, err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return true, false, nil
	}
	head := make([]byte, headerWindow)
	n, _ := io.ReadFull(f, head)
	first, _, _ := strings.Cut(string(head[:n]), "\n")
	return true, strings.HasPrefix(first, "# Managed by sglprov. Recipe: "+recipe+". Profile: "), nil
}
