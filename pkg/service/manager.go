package service

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/sglprov/sglprov/pkg/exitcode"
)

// Manager kinds, as a recipe's systemd step names them in `manager:`.
const (
	KindSystemd = "systemd"
	KindExec    = "exec"
	KindOffline = "offline"
)

// JournalLines is how many of a failed unit's last log lines Failed returns.
const JournalLines = 30

// Manager installs units and starts, stops and watches the services they describe.
type Manager interface {
	// Kind is KindSystemd, KindOffline or KindExec.
	Kind() string
	// UnitPath returns the file the unit is installed as (under the root, if any).
	UnitPath(unit string) string
	// Install writes the unit file when it differs from the installed one, makes the
	// service manager read it and enables it. It reports whether the file changed.
	Install(ctx context.Context, unit string, content []byte) (changed bool, err error)
	// Start starts the service unless it already runs.
	Start(ctx context.Context, unit string) error
	// Restart stops the service if it runs and starts it again.
	Restart(ctx context.Context, unit string) error
	// Stop stops the service.
	Stop(ctx context.Context, unit string) error
	// State returns the service's state as systemd names it: active is "active",
	// "activating", "deactivating", "inactive" or "failed" ("offline" under --root); sub
	// is the finer state, e.g. "running", "auto-restart", "dead".
	State(ctx context.Context, unit string) (active, sub string, err error)
	// Failed reports whether the service has failed (stopped, not coming back) and, when
	// it has, its last log lines.
	Failed(ctx context.Context, unit string) (failed bool, lastLines string, err error)
	// Close releases the manager. The exec manager stops the services it started: they are
	// children of this process and must not outlive the run.
	Close() error
}

// RestartCounter is implemented by a manager that counts how many times it started a
// service again after its process ended (the exec supervisor).
type RestartCounter interface {
	// Restarts returns the count for unit since it was last started.
	Restarts(unit string) int
	// LastExit returns how unit's process last ended by itself; ok is false when it has not.
	LastExit(unit string) (x Exit, ok bool)
}

// Exit is how a service's process ended, as its supervisor saw it.
type Exit struct {
	// PID is the process's id; Status how it ended ("exit status 1", "signal: killed").
	PID    int
	Status string
	// At is when the supervisor saw it end.
	At time.Time
}

var (
	_ RestartCounter = (*Exec)(nil)
	_ Manager        = (*Systemd)(nil)
	_ Manager        = (*Offline)(nil)
	_ Manager        = (*Exec)(nil)
)

// Options selects and configures a manager.
type Options struct {
	// Kind is KindSystemd (the default when empty) or KindExec. Root or Offline select the
	// offline manager whatever Kind says.
	Kind string
	// Root is the host root (--root); a root other than "" or "/" means offline.
	Root string
	// Offline is set under --root: nothing is started.
	Offline bool
	// StateDir is sglprov's state folder; the exec manager keeps its unit files, logs and
	// cache folders under it.
	StateDir string
}

// New returns the manager that opts select. The systemd manager needs systemd running as
// the host's init (/run/systemd/system) and connects to it over D-Bus.
func New(ctx context.Context, opts Options) (Manager, error) {
	if opts.Offline || (opts.Root != "" && opts.Root != "/") {
		return NewOffline(opts.Root), nil
	}
	switch opts.Kind {
	case "", KindSystemd:
		if _, err := os.Stat("/run/systemd/system"); errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%w: systemd is not running on this host (no /run/systemd/system); use manager: exec to run the server as a child process",
				exitcode.ErrHost)
		}
		return NewSystemd(ctx)
	case KindExec:
		return NewExec(ExecOptions{
			UnitDir:  filepath.Join(opts.StateDir, "units"),
			LogDir:   filepath.Join(opts.StateDir, "logs"),
			CacheDir: filepath.Join(opts.StateDir, "cache"),
		}), nil
	}
	return nil, fmt.Errorf("%w: unknown service manager %q (want systemd or exec)", exitcode.ErrUsage, opts.Kind)
}
