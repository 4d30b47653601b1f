package service

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	sddbus "github.com/coreos/go-systemd/v22/dbus"

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
		s.unwatch(ctx, unit)
		return true, s.reloadIfNeeded(ctx, unit, true)
	}
	if err := os.MkdirAll(s.RuntimeDir, 0o755); err != nil {
		return false, fmt.Errorf("creating %s: %w", s.RuntimeDir, err)
	}
	if err := s.watch(ctx, unit); err != nil {
		return false, err
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
		s.unwatch(ctx, unit)
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
	s.unwatch(ctx, unit)
	if err := s.conn.ReloadContext(ctx); err != nil {
		return true, fmt.Errorf("reloading systemd: %w", err)
	}
	return true, nil
}

// transientStarter is a Conn that can start a transient unit (systemd's D-Bus API).
type transientStarter interface {
	StartTransientUnitContext(ctx context.Context, name, mode string, properties []sddbus.Property, ch chan<- string) (int, error)
}

// unstageScript is the watcher a staged unit gets: it waits until the process that staged
// the unit ends (its PID no longer names a live process that started when it did), and if
// the staged file is still there (no promote or discard dropped it: the process was
// killed), it removes it, reloads systemd and restarts the unit from /etc/systemd/system
// (the last one that passed), or stops it when there is none there (a first install).
const unstageScript = `pid=$1 start=$2 unit=$3 staged=$4 persistent=$5
alive() {
	s=$(cat /proc/$pid/stat 2>/dev/null) || return 1
	set -- ${s##*) }
	case "$1" in Z|X) return 1;; esac
	[ "${20}" = "$start" ]
}
while alive; do sleep 0.5; done
[ -e "$staged" ] || exit 0
echo "the process $pid that staged $unit ended without keeping it: dropping $staged and restarting the unit that passed"
rm -f "$staged"
systemctl daemon-reload
if [ -e "$persistent" ]; then exec systemctl restart "$unit"; fi
exec systemctl stop "$unit"
`

// WatcherUnit is the transient unit that drops unit's staged file once the process that
// staged it ends without promoting or discarding it (a kill -9).
func WatcherUnit(unit string) string {
	return "sglprov-unstage-" + strings.TrimSuffix(unit, ".service") + ".service"
}

// watch starts, once per process and unit, the transient watcher of unit's staged file
// (WatcherUnit): a staged unit never stays the one in effect past the process that staged
// it, so that a `systemctl restart` after a killed switch restarts the unit in /etc, not a
// candidate that has not passed. A Conn that cannot start transient units (a test's) has
// none.
func (s *Systemd) watch(ctx context.Context, unit string) error {
	ts, ok := s.conn.(transientStarter)
	if !ok {
		return nil
	}
	watchers.mu.Lock()
	defer watchers.mu.Unlock()
	if watchers.units[unit] {
		return nil
	}
	start, err := selfStartTime()
	if err != nil {
		return fmt.Errorf("staging unit %q: %w", unit, err)
	}
	name := WatcherUnit(unit)
	// A watcher that failed before is still loaded under its name.
	_ = s.conn.ResetFailedUnitContext(ctx, name)
	props := []sddbus.Property{
		sddbus.PropDescription("sglprov: drop the staged " + unit + " if the process that staged it ends without keeping it"),
		// systemd substitutes $VAR in a command's arguments when it execs it ("$$" is a
		// "$"): the script's own are escaped.
		sddbus.PropExecStart([]string{"/bin/sh", "-c", strings.ReplaceAll(unstageScript, "$", "$$"), "sglprov-unstage",
			strconv.Itoa(os.Getpid()), start, unit, s.runtimePath(unit), s.UnitPath(unit)}, false),
	}
	ch := make(chan string, 1)
	if _, err := ts.StartTransientUnitContext(ctx, name, "replace", props, ch); err != nil {
		if strings.Contains(err.Error(), "already") {
			// Another process's watcher guards the unit (another state dir staged it):
			// it drops the file when that process ends.
			return nil
		}
		return fmt.Errorf("staging unit %q: starting %s, which drops it should this process end without keeping it: %w", unit, name, err)
	}
	select {
	case <-ch:
	case <-ctx.Done():
		return ctx.Err()
	}
	watchers.units[unit] = true
	return nil
}

// watchers are the units whose staged file this process's watcher guards (WatcherUnit):
// one per process and unit, whichever manager staged it.
var watchers = struct {
	mu    sync.Mutex
	units map[string]bool
}{units: map[string]bool{}}

// unwatch stops this process's watcher of unit's staged file (the file is gone: promoted
// or discarded).
func (s *Systemd) unwatch(ctx context.Context, unit string) {
	watchers.mu.Lock()
	defer watchers.mu.Unlock()
	if !watchers.units[unit] {
		return
	}
	delete(watchers.units, unit)
	_, _ = s.conn.StopUnitContext(ctx, WatcherUnit(unit), "replace", nil)
}

// selfStartTime returns this process's start time as /proc/self/stat gives it (field 22),
// which tells it from a later process that reuses its PID.
func selfStartTime() (string, error) {
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return "", fmt.Errorf("reading this process's start time: %w", err)
	}
	s := string(b)
	i := strings.LastIndex(s, ") ")
	if i < 0 {
		return "", errors.New("reading this process's start time: /proc/self/stat has no command field")
	}
	f := strings.Fields(s[i+2:])
	if len(f) < 20 {
		return "", errors.New("reading this process's start time: /proc/self/stat is short")
	}
	return f[19], nil
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
