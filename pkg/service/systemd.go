package service

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	sddbus "github.com/coreos/go-systemd/v22/dbus"

	"github.com/sglprov/sglprov/pkg/atomicfile"
)

// Conn is the part of go-systemd's D-Bus connection the systemd manager uses; *dbus.Conn
// implements it, and tests pass a fake.
type Conn interface {
	ReloadContext(ctx context.Context) error
	EnableUnitFilesContext(ctx context.Context, files []string, runtime, force bool) (bool, []sddbus.EnableUnitFileChange, error)
	DisableUnitFilesContext(ctx context.Context, files []string, runtime bool) ([]sddbus.DisableUnitFileChange, error)
	StartUnitContext(ctx context.Context, name, mode string, ch chan<- string) (int, error)
	RestartUnitContext(ctx context.Context, name, mode string, ch chan<- string) (int, error)
	StopUnitContext(ctx context.Context, name, mode string, ch chan<- string) (int, error)
	ResetFailedUnitContext(ctx context.Context, name string) error
	GetUnitPropertiesContext(ctx context.Context, unit string) (map[string]any, error)
	GetUnitTypePropertiesContext(ctx context.Context, unit, unitType string) (map[string]any, error)
	Close()
}

// Systemd manages units through systemd's D-Bus API: units are written to
// /etc/systemd/system, then daemon-reload, enable, and start or restart jobs whose result
// is awaited.
type Systemd struct {
	conn Conn
	dir  string
	// RuntimeDir is where units are staged for this boot only (RuntimeUnitDir).
	RuntimeDir string
	// verify checks a unit before it is installed (Verify by default).
	verify func(ctx context.Context, unit string, content []byte) (bool, error)
	// journal returns a unit's last log lines (journalctl by default).
	journal func(ctx context.Context, unit string, n int) (string, error)
}

// NewSystemd connects to the system's systemd over D-Bus.
func NewSystemd(ctx context.Context) (*Systemd, error) {
	conn, err := sddbus.NewSystemConnectionContext(ctx)
	if err != nil {
		return nil, fmt.Errorf("connecting to systemd over D-Bus: %w", err)
	}
	return NewSystemdConn(conn, SystemUnitDir, Verify, JournalTail), nil
}

// NewSystemdConn returns a systemd manager over conn that installs units into dir. verify
// and journal may be nil: no check before install, no log lines on failure.
func NewSystemdConn(conn Conn, dir string,
	verify func(ctx context.Context, unit string, content []byte) (bool, error),
	journal func(ctx context.Context, unit string, n int) (string, error)) *Systemd {
	return &Systemd{conn: conn, dir: dir, RuntimeDir: RuntimeUnitDir, verify: verify, journal: journal}
}

// JournalTail returns the last n lines a unit logged, read with journalctl.
func JournalTail(ctx context.Context, unit string, n int) (string, error) {
	out, err := exec.CommandContext(ctx, "journalctl", "-u", unit, "-n", strconv.Itoa(n), "--no-pager", "-o", "cat").Output()
	if err != nil {
		return "", fmt.Errorf("reading the journal of %q: %w", unit, err)
	}
	return strings.TrimRight(string(out), "\n"), nil
}

// Kind returns KindSystemd.
func (s *Systemd) Kind() string { return KindSystemd }

// UnitPath returns /etc/systemd/system/UNIT.
func (s *Systemd) UnitPath(unit string) string { return filepath.Join(s.dir, unit) }

// Install checks the unit with systemd-analyze verify (when installed), writes it when it
// differs from the installed one, reloads systemd when it changed (or when systemd says
// the unit needs a reload) and enables it.
func (s *Systemd) Install(ctx context.Context, unit string, content []byte) (bool, error) {
	if s.verify != nil {
		if _, err := s.verify(ctx, unit, content); err != nil {
			return false, err
		}
	}
	changed, err := atomicfile.WriteIfChanged(s.UnitPath(unit), content, 0o644)
	if err != nil {
		return false, fmt.Errorf("writing unit %q: %w", unit, err)
	}
	reload := changed
	if !reload {
		props, err := s.conn.GetUnitPropertiesContext(ctx, unit)
		if err == nil {
			if need, ok := props["NeedDaemonReload"].(bool); ok && need {
				reload = true
			}
		}
	}
	if reload {
		if err := s.conn.ReloadContext(ctx); err != nil {
			return changed, fmt.Errorf("reloading systemd: %w", err)
		}
	}
	if _, _, err := s.conn.EnableUnitFilesContext(ctx, []string{unit}, false, true); err != nil {
		return changed, fmt.Errorf("enabling unit %q: %w", unit, err)
	}
	return changed, nil
}

// Start starts the unit (clearing a failed state first) and waits for the job's result.
func (s *Systemd) Start(ctx context.Context, unit string) error {
	_ = s.conn.ResetFailedUnitContext(ctx, unit)
	return s.job(ctx, "starting", unit, s.conn.StartUnitContext)
}

// Restart clears a failed state and restarts the unit, waiting for the job's result.
func (s *Systemd) Restart(ctx context.Context, unit string) error {
	// A unit that hit its start limit refuses to restart until its failed state is reset;
	// a unit that is not failed answers with an error, which changes nothing.
	_ = s.conn.ResetFailedUnitContext(ctx, unit)
	return s.job(ctx, "restarting", unit, s.conn.RestartUnitContext)
}

// Stop stops the unit and waits for the job's result.
func (s *Systemd) Stop(ctx context.Context, unit string) error {
	return s.job(ctx, "stopping", unit, s.conn.StopUnitContext)
}

type jobFunc func(ctx context.Context, name, mode string, ch chan<- string) (int, error)

// job enqueues a job and waits for its result. The channel is buffered: go-systemd sends
// the result while holding its job lock, and a result nobody reads any more (the context
// ended) must not block the connection.
func (s *Systemd) job(ctx context.Context, doing, unit string, start jobFunc) error {
	ch := make(chan string, 1)
	if _, err := start(ctx, unit, "replace", ch); err != nil {
		return fmt.Errorf("%s unit %q: %w", doing, unit, err)
	}
	select {
	case result := <-ch:
		switch result {
		case "done", "skipped":
			return nil
		}
		msg := fmt.Sprintf("%s unit %q: job %s", doing, unit, result)
		if lines := s.lastLines(ctx, unit); lines != "" {
			msg += "; last log lines:\n" + lines
		}
		return fmt.Errorf("%s", msg)
	case <-ctx.Done():
		return fmt.Errorf("%s unit %q: waiting for the job: %w", doing, unit, ctx.Err())
	}
}

func (s *Systemd) lastLines(ctx context.Context, unit string) string {
	if s.journal == nil {
		return ""
	}
	lines, err := s.journal(ctx, unit, JournalLines)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	return lines
}

// State returns the unit's ActiveState and SubState.
func (s *Systemd) State(ctx context.Context, unit string) (string, string, error) {
	props, err := s.conn.GetUnitPropertiesContext(ctx, unit)
	if err != nil {
		return "", "", fmt.Errorf("reading the state of unit %q: %w", unit, err)
	}
	active, _ := props["ActiveState"].(string)
	sub, _ := props["SubState"].(string)
	return active, sub, nil
}

// Failed reports whether the unit has failed, with its last journal lines: it is in the
// failed state, or its process exited with an error and systemd waits to restart it (a
// server that crashes on start would crash again: the gate need not wait for systemd's
// start limit to give up).
func (s *Systemd) Failed(ctx context.Context, unit string) (bool, string, error) {
	active, sub, err := s.State(ctx, unit)
	if err != nil {
		return false, "", err
	}
	switch {
	case active == "failed":
	case sub == "auto-restart":
		props, err := s.conn.GetUnitTypePropertiesContext(ctx, unit, "Service")
		if err != nil {
			return false, "", fmt.Errorf("reading the service state of unit %q: %w", unit, err)
		}
		if result, _ := props["Result"].(string); result == "" || result == "success" {
			return false, "", nil
		}
	default:
		return false, "", nil
	}
	return true, s.lastLines(ctx, unit), nil
}

// Close closes the D-Bus connection; the services keep running.
func (s *Systemd) Close() error {
	s.conn.Close()
	return nil
}
