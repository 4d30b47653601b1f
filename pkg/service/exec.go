package service

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sglprov/sglprov/pkg/atomicfile"
	"github.com/sglprov/sglprov/pkg/procgroup"
)

// ExecOptions configures the exec manager.
type ExecOptions struct {
	// UnitDir holds the unit files; LogDir the services' logs (UNIT.log, appended);
	// CacheDir stands for /var/cache (%C, CacheDirectory=).
	UnitDir, LogDir, CacheDir string
	// RestartDelay overrides the unit's RestartSec= when set.
	RestartDelay time.Duration
	// StopTimeout overrides the unit's TimeoutStopSec= when set.
	StopTimeout time.Duration
	// MaxRestarts is how many failures within RestartWindow are restarted before the
	// service is failed (5 and 10 minutes by default, like systemd's start limit).
	MaxRestarts   int
	RestartWindow time.Duration
	// FastExit and FastExitLimit: FastExitLimit exits in a row, each within FastExit of
	// its start, fail the service at once (1s and 3 by default).
	FastExit      time.Duration
	FastExitLimit int
}

// Exec runs each unit's ExecStart= as a supervised child process, for hosts without
// systemd (containers) and for demonstrations: the child runs in its own process group,
// with the unit's Environment= on top of this process's environment, in its
// WorkingDirectory=, as its User= (which needs root unless it is the current user), its
// output appended to LogDir/UNIT.log. A failed child is restarted after RestartSec=
// (Restart=on-failure semantics, Restart=always and no honoured), within a bound; Stop
// sends SIGTERM to the process group and SIGKILL after TimeoutStopSec=.
//
// The children belong to this process: Close stops them, and they are also sent SIGTERM if
// this process dies (the parent-death signal). An apply that starts a service with the
// exec manager and runs the smoke gate in the same process must Close the manager when it
// ends.
type Exec struct {
	opts  ExecOptions
	mu    sync.Mutex
	procs map[string]*proc
}

// NewExec returns an exec manager.
func NewExec(opts ExecOptions) *Exec {
	if opts.MaxRestarts <= 0 {
		opts.MaxRestarts = 5
	}
	if opts.RestartWindow <= 0 {
		opts.RestartWindow = 10 * time.Minute
	}
	if opts.FastExit <= 0 {
		opts.FastExit = time.Second
	}
	if opts.FastExitLimit <= 0 {
		opts.FastExitLimit = 3
	}
	return &Exec{opts: opts, procs: map[string]*proc{}}
}

// Kind returns KindExec.
func (m *Exec) Kind() string { return KindExec }

// UnitPath returns UnitDir/UNIT.
func (m *Exec) UnitPath(unit string) string { return filepath.Join(m.opts.UnitDir, unit) }

// LogPath returns the file a service's output is appended to.
func (m *Exec) LogPath(unit string) string { return filepath.Join(m.opts.LogDir, unit+".log") }

// Install checks that the unit can be run and writes it when it changed.
func (m *Exec) Install(_ context.Context, unit string, content []byte) (bool, error) {
	if _, err := ReadService(unit, content, m.opts.CacheDir); err != nil {
		return false, err
	}
	changed, err := atomicfile.WriteIfChanged(m.UnitPath(unit), content, 0o644)
	if err != nil {
		return false, fmt.Errorf("writing unit %q: %w", unit, err)
	}
	return changed, nil
}

// Start starts the service unless it runs (or waits to be restarted). It returns an error
// when the first start fails (the executable cannot be run).
func (m *Exec) Start(_ context.Context, unit string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if p := m.procs[unit]; p != nil && !p.finished() {
		return nil
	}
	content, err := os.ReadFile(m.UnitPath(unit))
	if err != nil {
		return fmt.Errorf("starting unit %q: %w", unit, err)
	}
	svc, err := ReadService(unit, content, m.opts.CacheDir)
	if err != nil {
		return fmt.Errorf("starting unit %q: %w", unit, err)
	}
	p, err := m.newProc(unit, svc)
	if err != nil {
		return fmt.Errorf("starting unit %q: %w", unit, err)
	}
	started := make(chan error, 1)
	go p.supervise(started)
	if err := <-started; err != nil {
		return fmt.Errorf("starting unit %q: %w", unit, err)
	}
	m.procs[unit] = p
	return nil
}

// Restarts returns how many times the supervisor started the service again after its
// process ended, since it was last started (systemd's NRestarts); 0 when it is not known.
func (m *Exec) Restarts(unit string) int {
	m.mu.Lock()
	p := m.procs[unit]
	m.mu.Unlock()
	if p == nil {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.restarts
}

// LastExit returns how the service's process last ended by itself (not stopped by Stop);
// ok is false when it has not.
func (m *Exec) LastExit(unit string) (Exit, bool) {
	m.mu.Lock()
	p := m.procs[unit]
	m.mu.Unlock()
	if p == nil {
		return Exit{}, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.last, p.last.PID != 0
}

// noteExit records how the process pid ended (runErr: its Wait's error).
func (p *proc) noteExit(pid int, runErr error) {
	status := "exit status 0"
	if runErr != nil {
		status = runErr.Error()
	}
	p.mu.Lock()
	p.last = Exit{PID: pid, Status: status, At: time.Now()}
	p.mu.Unlock()
}

// Restart stops the service and starts it again from the installed unit file.
func (m *Exec) Restart(ctx context.Context, unit string) error {
	if err := m.Stop(ctx, unit); err != nil {
		return err
	}
	return m.Start(ctx, unit)
}

// Stop stops the service: SIGTERM to its process group, SIGKILL after the stop timeout.
func (m *Exec) Stop(ctx context.Context, unit string) error {
	m.mu.Lock()
	p := m.procs[unit]
	m.mu.Unlock()
	if p == nil {
		return nil
	}
	return p.stop(ctx)
}

// State returns the service's state: active/running, activating/auto-restart (waiting to
// be restarted), failed/failed, or inactive/dead.
func (m *Exec) State(_ context.Context, unit string) (string, string, error) {
	m.mu.Lock()
	p := m.procs[unit]
	m.mu.Unlock()
	if p == nil {
		return "inactive", "dead", nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.active, p.sub, nil
}

// Failed reports whether the service failed for good (restart bound reached, repeated
// exits right after start, or Restart=no), with the last lines of its log.
func (m *Exec) Failed(ctx context.Context, unit string) (bool, string, error) {
	active, _, err := m.State(ctx, unit)
	if err != nil || active != "failed" {
		return false, "", err
	}
	return true, readTail(m.LogPath(unit), JournalLines), nil
}

// Close stops every service this manager started.
func (m *Exec) Close() error {
	m.mu.Lock()
	procs := make([]*proc, 0, len(m.procs))
	for _, p := range m.procs {
		procs = append(procs, p)
	}
	m.mu.Unlock()
	var errs []error
	for _, p := range procs {
		errs = append(errs, p.stop(context.Background()))
	}
	return errors.Join(errs...)
}

// readTail returns the last n lines of a file, reading at most its last 64 KiB.
func readTail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	const max = 64 << 10
	if st, err := f.Stat(); err == nil && st.Size() > max {
		if _, err := f.Seek(st.Size()-max, io.SeekStart); err != nil {
			return ""
		}
	}
	b, _ := io.ReadAll(f)
	return tailLines(b, n)
}

// proc supervises one service.
type proc struct {
	m        *Exec
	unit     string
	svc      *ExecService
	env      []string
	cred     *syscall.Credential
	delay    time.Duration
	stopWait time.Duration

	stopOnce sync.Once
	stopCh   chan struct{}
	done     chan struct{}

	mu          sync.Mutex
	active, sub string
	failures    []time.Time
	fastExits   int
	restarts    int // times the supervisor started the child again after it ended
	last        Exit
}

func (m *Exec) newProc(unit string, svc *ExecService) (*proc, error) {
	p := &proc{m: m, unit: unit, svc: svc, stopCh: make(chan struct{}), done: make(chan struct{}),
		active: "activating", sub: "start", delay: svc.RestartSec, stopWait: svc.TimeoutStopSec}
	if m.opts.RestartDelay > 0 {
		p.delay = m.opts.RestartDelay
	}
	if m.opts.StopTimeout > 0 {
		p.stopWait = m.opts.StopTimeout
	}
	env := map[string]string{}
	for _, kv := range os.Environ() {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	for k, v := range svc.Env {
		env[k] = v
	}
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		p.env = append(p.env, k+"="+env[k])
	}
	if svc.User != "" {
		cred, err := credentialFor(svc.User)
		if err != nil {
			return nil, err
		}
		p.cred = cred
	}
	for _, d := range svc.CacheDirectories {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("creating cache directory: %w", err)
		}
		if p.cred != nil {
			if err := os.Chown(d, int(p.cred.Uid), int(p.cred.Gid)); err != nil {
				return nil, fmt.Errorf("handing %s to %s: %w", d, svc.User, err)
			}
		}
	}
	if err := os.MkdirAll(m.opts.LogDir, 0o755); err != nil {
		return nil, fmt.Errorf("creating log folder: %w", err)
	}
	return p, nil
}

// credentialFor returns the credential to run as name: nil when it is the current user;
// switching users needs root.
func credentialFor(name string) (*syscall.Credential, error) {
	if cur, err := user.Current(); err == nil && cur.Username == name {
		return nil, nil
	}
	u, err := user.Lookup(name)
	if err != nil {
		return nil, fmt.Errorf("looking up user %q: %w", name, err)
	}
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("running as user %q needs root", name)
	}
	uid, _ := strconv.ParseUint(u.Uid, 10, 32)
	gid, _ := strconv.ParseUint(u.Gid, 10, 32)
	cred := &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	if ids, err := u.GroupIds(); err == nil {
		for _, g := range ids {
			if v, err := strconv.ParseUint(g, 10, 32); err == nil {
				cred.Groups = append(cred.Groups, uint32(v))
			}
		}
	}
	return cred, nil
}

func (p *proc) set(active, sub string) {
	p.mu.Lock()
	p.active, p.sub = active, sub
	p.mu.Unlock()
}

func (p *proc) finished() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *proc) logf(f *os.File, format string, args ...any) {
	fmt.Fprintf(f, "sglprov: %s: %s\n", p.unit, fmt.Sprintf(format, args...))
}

// supervise runs the service until it is stopped or fails for good. The result of the
// first start goes to started.
func (p *proc) supervise(started chan<- error) {
	defer close(p.done)
	first := true
	for {
		cmd, logf, err := p.spawn()
		if first {
			started <- err
			first = false
			if err != nil {
				_ = logf.Close()
				p.set("failed", "failed")
				return
			}
		}
		var runErr error
		var ran time.Duration
		if err != nil {
			runErr = err
		} else {
			began := time.Now()
			p.set("active", "running")
			wait := make(chan error, 1)
			go func() { wait <- cmd.Wait() }()
			select {
			case runErr = <-wait:
			case <-p.stopCh:
				p.set("deactivating", "stop-sigterm")
				p.terminate(cmd, logf)
				p.set("inactive", "dead")
				logf.Close()
				return
			}
			ran = time.Since(began)
			p.noteExit(cmd.Pid(), runErr)
		}
		if runErr != nil {
			p.logf(logf, "exited: %v", runErr)
		} else {
			p.logf(logf, "exited: status 0")
		}
		logf.Close()
		if !p.shouldRestart(runErr, ran) {
			return
		}
		p.set("activating", "auto-restart")
		select {
		case <-time.After(p.delay):
		case <-p.stopCh:
			p.set("inactive", "dead")
			return
		}
		p.mu.Lock()
		p.restarts++
		p.mu.Unlock()
	}
}

// spawn starts the command once; the log file is returned open (closed by the caller).
func (p *proc) spawn() (*procgroup.Child, *os.File, error) {
	logf, err := os.OpenFile(p.m.LogPath(p.unit), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, nil, fmt.Errorf("opening the log: %w", err)
	}
	p.logf(logf, "starting: %s", displayArgv(p.svc.Argv))
	cmd := exec.Command(p.svc.Argv[0], p.svc.Argv[1:]...)
	cmd.Env = p.env
	cmd.Dir = strings.TrimPrefix(p.svc.WorkingDirectory, "-")
	if cmd.Dir != "" && strings.HasPrefix(p.svc.WorkingDirectory, "-") {
		if _, err := os.Stat(cmd.Dir); err != nil {
			cmd.Dir = ""
		}
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: p.cred}
	// Own process group, so that stop reaches every process the server forks, and what
	// the main process leaves in it goes when it exits; SIGTERM to the child if this
	// process dies, so that it does not outlive its supervisor.
	child, err := procgroup.Start(cmd, procgroup.Options{Grace: p.stopWait, ParentDeath: syscall.SIGTERM})
	if err != nil {
		p.logf(logf, "cannot start: %v", err)
		return nil, logf, err
	}
	return child, logf, nil
}

// displayArgv joins argv for a log line, quoting the arguments that need it.
func displayArgv(argv []string) string {
	words := make([]string, len(argv))
	for i, a := range argv {
		words[i] = a
		if a == "" || strings.ContainsFunc(a, func(r rune) bool { return r <= ' ' || r == '"' || r == '\\' || r == '\'' }) {
			words[i] = strconv.Quote(a)
		}
	}
	return strings.Join(words, " ")
}

// terminate stops the process group: SIGTERM, then SIGKILL after the stop timeout.
func (p *proc) terminate(child *procgroup.Child, logf *os.File) {
	err := child.Stop()
	if child.Killed() {
		p.logf(logf, "did not stop within %s; killing", p.stopWait)
		return
	}
	p.logf(logf, "stopped: %v", err)
}

// shouldRestart records an exit and says whether to restart; when not, it sets the final
// state.
func (p *proc) shouldRestart(runErr error, ran time.Duration) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	failed := runErr != nil && !p.svc.IgnoreFailure
	switch {
	case !failed && p.svc.Restart != "always":
		p.active, p.sub = "inactive", "dead"
		return false
	case failed && p.svc.Restart == "no":
		p.active, p.sub = "failed", "failed"
		return false
	case !failed:
		p.fastExits = 0
		return true
	}
	now := time.Now()
	p.failures = append(p.failures, now)
	kept := p.failures[:0]
	for _, t := range p.failures {
		if now.Sub(t) <= p.m.opts.RestartWindow {
			kept = append(kept, t)
		}
	}
	p.failures = kept
	if ran < p.m.opts.FastExit {
		p.fastExits++
	} else {
		p.fastExits = 0
	}
	if len(p.failures) > p.m.opts.MaxRestarts || p.fastExits >= p.m.opts.FastExitLimit {
		p.active, p.sub = "failed", "failed"
		return false
	}
	return true
}

// stop asks the supervisor to stop the service and waits until it has.
func (p *proc) stop(ctx context.Context) error {
	p.stopOnce.Do(func() { close(p.stopCh) })
	select {
	case <-p.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("stopping unit %q: %w", p.unit, ctx.Err())
	}
}
