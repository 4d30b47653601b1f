package service

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	sddbus "github.com/coreos/go-systemd/v22/dbus"

	"github.com/sglprov/sglprov/pkg/exitcode"
)

const offlineUnit = `[Unit]
Description=x

[Service]
ExecStart=/bin/true

[Install]
WantedBy=multi-user.target
RequiredBy=graphical.target
`

func TestOffline(t *testing.T) {
	root := t.TempDir()
	m, err := New(context.Background(), Options{Root: root, Kind: KindSystemd})
	if err != nil {
		t.Fatal(err)
	}
	if m.Kind() != KindOffline {
		t.Fatalf("kind %q under a root", m.Kind())
	}
	ctx := context.Background()
	changed, err := m.Install(ctx, "s.service", []byte(offlineUnit))
	if err != nil || !changed {
		t.Fatalf("Install = %v, %v", changed, err)
	}
	unitPath := filepath.Join(root, "etc/systemd/system/s.service")
	if m.UnitPath("s.service") != unitPath {
		t.Errorf("UnitPath = %s", m.UnitPath("s.service"))
	}
	if b, _ := os.ReadFile(unitPath); string(b) != offlineUnit {
		t.Errorf("unit file holds %q", b)
	}
	for _, l := range []string{"multi-user.target.wants/s.service", "graphical.target.requires/s.service"} {
		target, err := os.Readlink(filepath.Join(root, "etc/systemd/system", l))
		if err != nil || target != "/etc/systemd/system/s.service" {
			t.Errorf("link %s -> %q, %v", l, target, err)
		}
	}
	changed, err = m.Install(ctx, "s.service", []byte(offlineUnit))
	if err != nil || changed {
		t.Errorf("second Install = %v, %v; want unchanged", changed, err)
	}
	// A link pointing elsewhere is put right.
	link := filepath.Join(root, "etc/systemd/system/multi-user.target.wants/s.service")
	_ = os.Remove(link)
	_ = os.Symlink("/elsewhere", link)
	if changed, err := m.Install(ctx, "s.service", []byte(offlineUnit)); err != nil || !changed {
		t.Errorf("Install over a wrong link = %v, %v", changed, err)
	}
	if err := m.Restart(ctx, "s.service"); err != nil {
		t.Error(err)
	}
	if active, _, _ := m.State(ctx, "s.service"); active != "offline" {
		t.Errorf("State = %q", active)
	}
	if failed, _, _ := m.Failed(ctx, "s.service"); failed {
		t.Error("offline unit failed")
	}
}

func TestNewUnknownKind(t *testing.T) {
	_, err := New(context.Background(), Options{Kind: "upstart"})
	if !errors.Is(err, exitcode.ErrUsage) {
		t.Errorf("New with an unknown kind = %v", err)
	}
}

// fakeConn is a systemd D-Bus connection whose jobs end with a set result.
type fakeConn struct {
	mu      sync.Mutex
	results map[string]string // job ("restart") -> result
	props   map[string]any
	// serviceProps are the Service-type properties (Result).
	serviceProps map[string]any
	calls        []string
	startErr     error
}

func (f *fakeConn) record(s string) {
	f.mu.Lock()
	f.calls = append(f.calls, s)
	f.mu.Unlock()
}

func (f *fakeConn) ReloadContext(context.Context) error { f.record("reload"); return nil }
func (f *fakeConn) EnableUnitFilesContext(_ context.Context, files []string, _, _ bool) (bool, []sddbus.EnableUnitFileChange, error) {
	f.record("enable " + strings.Join(files, ","))
	return true, nil, nil
}
func (f *fakeConn) DisableUnitFilesContext(_ context.Context, files []string, _ bool) ([]sddbus.DisableUnitFileChange, error) {
	f.record("disable " + strings.Join(files, ","))
	return nil, nil
}
func (f *fakeConn) job(name, unit string, ch chan<- string) (int, error) {
	f.record(name + " " + unit)
	if f.startErr != nil {
		return 0, f.startErr
	}
	res, ok := f.results[name]
	if !ok {
		res = "done"
	}
	if res != "never" {
		// go-systemd sends the result from its signal handler, holding its job lock.
		go func() { ch <- res }()
	}
	return 1, nil
}
func (f *fakeConn) StartUnitContext(_ context.Context, n, _ string, ch chan<- string) (int, error) {
	return f.job("start", n, ch)
}
func (f *fakeConn) RestartUnitContext(_ context.Context, n, _ string, ch chan<- string) (int, error) {
	return f.job("restart", n, ch)
}
func (f *fakeConn) StopUnitContext(_ context.Context, n, _ string, ch chan<- string) (int, error) {
	return f.job("stop", n, ch)
}
func (f *fakeConn) ResetFailedUnitContext(context.Context, string) error { return nil }
func (f *fakeConn) GetUnitPropertiesContext(context.Context, string) (map[string]any, error) {
	return f.props, nil
}
func (f *fakeConn) GetUnitTypePropertiesContext(context.Context, string, string) (map[string]any, error) {
	return f.serviceProps, nil
}
func (f *fakeConn) Close() { f.record("close") }

func TestSystemdJobs(t *testing.T) {
	journal := func(_ context.Context, unit string, n int) (string, error) {
		return fmt.Sprintf("last %d lines of %s", n, unit), nil
	}
	tests := []struct {
		name    string
		results map[string]string
		do      func(*Systemd, context.Context) error
		wantErr string
	}{
		{"restart done", nil, func(s *Systemd, ctx context.Context) error { return s.Restart(ctx, "u.service") }, ""},
		{"restart failed", map[string]string{"restart": "failed"},
			func(s *Systemd, ctx context.Context) error { return s.Restart(ctx, "u.service") },
			`restarting unit "u.service": job failed; last log lines:` + "\nlast 30 lines of u.service"},
		{"start timeout", map[string]string{"start": "timeout"},
			func(s *Systemd, ctx context.Context) error { return s.Start(ctx, "u.service") }, `starting unit "u.service": job timeout`},
		{"stop canceled", map[string]string{"stop": "canceled"},
			func(s *Systemd, ctx context.Context) error { return s.Stop(ctx, "u.service") }, `stopping unit "u.service": job canceled`},
		{"start skipped", map[string]string{"start": "skipped"},
			func(s *Systemd, ctx context.Context) error { return s.Start(ctx, "u.service") }, ""},
		{"job never ends", map[string]string{"restart": "never"},
			func(s *Systemd, ctx context.Context) error { return s.Restart(ctx, "u.service") }, "context deadline exceeded"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conn := &fakeConn{results: tt.results}
			s := NewSystemdConn(conn, t.TempDir(), nil, journal)
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			err := tt.do(s, ctx)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("unexpected error %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("error %v, want %q", err, tt.wantErr)
			}
		})
	}
}

func TestSystemdInstallAndState(t *testing.T) {
	dir := t.TempDir()
	conn := &fakeConn{props: map[string]any{"ActiveState": "failed", "SubState": "failed", "NeedDaemonReload": false}}
	var verified []string
	verify := func(_ context.Context, unit string, _ []byte) (bool, error) {
		verified = append(verified, unit)
		return true, nil
	}
	journal := func(context.Context, string, int) (string, error) { return "boom", nil }
	s := NewSystemdConn(conn, dir, verify, journal)
	ctx := context.Background()
	changed, err := s.Install(ctx, "u.service", []byte(offlineUnit))
	if err != nil || !changed {
		t.Fatalf("Install = %v, %v", changed, err)
	}
	changed, err = s.Install(ctx, "u.service", []byte(offlineUnit))
	if err != nil || changed {
		t.Fatalf("second Install = %v, %v", changed, err)
	}
	want := []string{"reload", "enable u.service", "enable u.service"}
	if strings.Join(conn.calls, "|") != strings.Join(want, "|") {
		t.Errorf("calls %q, want %q (one reload, only when the file changed)", conn.calls, want)
	}
	if len(verified) != 2 {
		t.Errorf("verified %d times", len(verified))
	}
	conn.props["NeedDaemonReload"] = true
	conn.calls = nil
	if _, err := s.Install(ctx, "u.service", []byte(offlineUnit)); err != nil {
		t.Fatal(err)
	}
	if len(conn.calls) == 0 || conn.calls[0] != "reload" {
		t.Errorf("NeedDaemonReload did not reload: %q", conn.calls)
	}
	active, sub, err := s.State(ctx, "u.service")
	if err != nil || active != "failed" || sub != "failed" {
		t.Errorf("State = %q %q %v", active, sub, err)
	}
	failed, lines, err := s.Failed(ctx, "u.service")
	if err != nil || !failed || lines != "boom" {
		t.Errorf("Failed = %v %q %v", failed, lines, err)
	}
	// A server that exited with an error and waits for its restart has failed for the
	// gate; one that waits after a clean exit, or runs, has not.
	for _, tc := range []struct {
		active, sub, result string
		want                bool
	}{
		{"activating", "auto-restart", "exit-code", true},
		{"activating", "auto-restart", "signal", true},
		{"activating", "auto-restart", "success", false},
		{"active", "running", "success", false},
		{"activating", "start", "", false},
	} {
		conn.props["ActiveState"], conn.props["SubState"] = tc.active, tc.sub
		conn.serviceProps = map[string]any{"Result": tc.result}
		if failed, _, err := s.Failed(ctx, "u.service"); err != nil || failed != tc.want {
			t.Errorf("%s/%s result %s: Failed = %v, %v; want %v", tc.active, tc.sub, tc.result, failed, err, tc.want)
		}
	}
	conn.props["ActiveState"], conn.props["SubState"] = "failed", "failed"
	verifyErr := errors.New("bad unit")
	s = NewSystemdConn(conn, dir, func(context.Context, string, []byte) (bool, error) { return true, verifyErr }, nil)
	if _, err := s.Install(ctx, "v.service", []byte(offlineUnit)); !errors.Is(err, verifyErr) {
		t.Errorf("Install of a unit that fails verification = %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "v.service")); err == nil {
		t.Error("a unit that failed verification was written")
	}
}

// execTest writes a unit running script under sh and returns the exec manager.
func execTest(t *testing.T, opts ExecOptions) (*Exec, string) {
	t.Helper()
	dir := t.TempDir()
	opts.UnitDir, opts.LogDir, opts.CacheDir = filepath.Join(dir, "units"), filepath.Join(dir, "logs"), filepath.Join(dir, "cache")
	if opts.RestartDelay == 0 {
		opts.RestartDelay = 20 * time.Millisecond
	}
	if opts.StopTimeout == 0 {
		opts.StopTimeout = 2 * time.Second
	}
	m := NewExec(opts)
	t.Cleanup(func() { _ = m.Close() })
	return m, dir
}

func shUnit(t *testing.T, script string, env map[string]string) []byte {
	t.Helper()
	d := Data{Recipe: "r", Unit: "x.service", Command: []string{"/bin/sh", "-c", script}, Env: env,
		Args: []string{"arg with space", "50%", "$literal"}}
	out, err := Render("t", shippedTemplate(t), d)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// alive reports whether pid is a process that has not exited (a zombie waiting for a
// reaper counts as exited).
func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

func TestExecRunsAndStopsTheGroup(t *testing.T) {
	m, dir := execTest(t, ExecOptions{})
	ctx := context.Background()
	pidFile := filepath.Join(dir, "pids")
	// The script forks a grandchild, records both pids and the args it got, and waits.
	script := `sleep 60 & echo "$$ $!" > ` + pidFile + `; printf '%s|' "$0" "$@" > ` + pidFile + `.args; echo "env=$GREETING home=$HOME"; wait`
	if _, err := m.Install(ctx, "x.service", shUnit(t, script, map[string]string{"GREETING": "hi there"})); err != nil {
		t.Fatal(err)
	}
	if err := m.Start(ctx, "x.service"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the pid file", func() bool { b, _ := os.ReadFile(pidFile); return strings.Count(string(b), " ") == 1 })
	b, _ := os.ReadFile(pidFile)
	var shPid, sleepPid int
	fmt.Sscanf(string(b), "%d %d", &shPid, &sleepPid)
	if active, sub, _ := m.State(ctx, "x.service"); active != "active" || sub != "running" {
		t.Errorf("State = %s/%s", active, sub)
	}
	// The shell creates the file before printf writes to it: wait for the content.
	waitFor(t, "the args file", func() bool { b, _ := os.ReadFile(pidFile + ".args"); return strings.HasSuffix(string(b), "|") })
	args, _ := os.ReadFile(pidFile + ".args")
	if string(args) != "arg with space|50%|$literal|" {
		t.Errorf("the child got args %q", args)
	}
	// Start again is a no-op while it runs.
	if err := m.Start(ctx, "x.service"); err != nil {
		t.Fatal(err)
	}
	// The script echoes its environment after writing the args file: wait for the line
	// before stopping it (its expanded form: the log's "starting" line quotes the script).
	waitFor(t, "the environment line in the log", func() bool {
		b, _ := os.ReadFile(m.LogPath("x.service"))
		return strings.Contains(string(b), "env=hi there")
	})
	if err := m.Stop(ctx, "x.service"); err != nil {
		t.Fatal(err)
	}
	for _, pid := range []int{shPid, sleepPid} {
		waitFor(t, fmt.Sprintf("pid %d to go", pid), func() bool { return !alive(pid) })
	}
	if active, _, _ := m.State(ctx, "x.service"); active != "inactive" {
		t.Errorf("State after Stop = %s", active)
	}
	log, _ := os.ReadFile(m.LogPath("x.service"))
	if !strings.Contains(string(log), "env=hi there home="+filepath.Join(dir, "cache", "sglang")) {
		t.Errorf("log does not show the unit's environment:\n%s", log)
	}
	if _, err := os.Stat(filepath.Join(dir, "cache", "sglang")); err != nil {
		t.Errorf("CacheDirectory not created: %v", err)
	}
}

func TestExecRestartsOnFailure(t *testing.T) {
	m, dir := execTest(t, ExecOptions{FastExit: 10 * time.Millisecond})
	ctx := context.Background()
	count := filepath.Join(dir, "count")
	// Fails twice (after a short run), then stays up.
	script := `echo x >> ` + count + `; n=$(wc -l < ` + count + `); sleep 0.05; if [ "$n" -lt 3 ]; then echo "crash $n"; exit 1; fi; echo up; exec sleep 60`
	if _, err := m.Install(ctx, "x.service", shUnit(t, script, nil)); err != nil {
		t.Fatal(err)
	}
	if err := m.Start(ctx, "x.service"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the third start", func() bool {
		log, _ := os.ReadFile(m.LogPath("x.service"))
		return strings.Contains(string(log), "up\n")
	})
	if active, sub, _ := m.State(ctx, "x.service"); active != "active" || sub != "running" {
		t.Errorf("State = %s/%s", active, sub)
	}
	if failed, _, _ := m.Failed(ctx, "x.service"); failed {
		t.Error("Failed after recovering")
	}
	// Two crashes, two restarts by the supervisor, counted (the daemon exports them).
	if n := m.Restarts("x.service"); n != 2 {
		t.Errorf("Restarts = %d, want 2", n)
	}
}

func TestExecFailsAfterFastCrashes(t *testing.T) {
	m, _ := execTest(t, ExecOptions{})
	ctx := context.Background()
	if _, err := m.Install(ctx, "x.service", shUnit(t, `echo "CUDA error: no kernel image"; exit 3`, nil)); err != nil {
		t.Fatal(err)
	}
	if err := m.Start(ctx, "x.service"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "failed", func() bool { f, _, _ := m.Failed(ctx, "x.service"); return f })
	_, lines, _ := m.Failed(ctx, "x.service")
	if strings.Count(lines, "\nCUDA error: no kernel image\n") != 3 || !strings.Contains(lines, "exit status 3") {
		t.Errorf("last lines:\n%s", lines)
	}
	// Start after a failure begins afresh.
	if err := m.Start(ctx, "x.service"); err != nil {
		t.Fatal(err)
	}
	if active, _, _ := m.State(ctx, "x.service"); active == "failed" {
		waitFor(t, "a fresh start", func() bool { a, _, _ := m.State(ctx, "x.service"); return a != "failed" })
	}
}

func TestExecRestartBound(t *testing.T) {
	m, _ := execTest(t, ExecOptions{MaxRestarts: 2, FastExit: time.Millisecond})
	ctx := context.Background()
	if _, err := m.Install(ctx, "x.service", shUnit(t, `sleep 0.02; exit 1`, nil)); err != nil {
		t.Fatal(err)
	}
	if err := m.Start(ctx, "x.service"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "failed", func() bool { f, _, _ := m.Failed(ctx, "x.service"); return f })
	log, _ := os.ReadFile(m.LogPath("x.service"))
	if n := strings.Count(string(log), "sglprov: x.service: starting"); n != 3 {
		t.Errorf("%d starts, want 3 (the first and two restarts)\n%s", n, log)
	}
}

func TestExecStartErrors(t *testing.T) {
	m, _ := execTest(t, ExecOptions{})
	ctx := context.Background()
	if err := m.Start(ctx, "missing.service"); err == nil {
		t.Error("Start of a unit that is not installed succeeded")
	}
	d := Data{Recipe: "r", Unit: "x.service", Command: []string{"/nonexistent/server"}}
	unit, err := Render("t", shippedTemplate(t), d)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Install(ctx, "x.service", unit); err != nil {
		t.Fatal(err)
	}
	if err := m.Start(ctx, "x.service"); err == nil || !strings.Contains(err.Error(), "/nonexistent/server") {
		t.Errorf("Start of a missing executable = %v", err)
	}
	bad := []byte("[Service]\nExecStart=/bin/a ; /bin/b\n")
	if _, err := m.Install(ctx, "y.service", bad); err == nil {
		t.Error("Install of a unit the exec manager cannot run succeeded")
	}
}

func TestExecStopEscalates(t *testing.T) {
	m, _ := execTest(t, ExecOptions{StopTimeout: 100 * time.Millisecond})
	ctx := context.Background()
	if _, err := m.Install(ctx, "x.service", shUnit(t, `trap "" TERM; echo ready; while :; do sleep 0.01; done`, nil)); err != nil {
		t.Fatal(err)
	}
	if err := m.Start(ctx, "x.service"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "ready", func() bool {
		b, _ := os.ReadFile(m.LogPath("x.service"))
		return strings.Contains(string(b), "\nready\n")
	})
	begin := time.Now()
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(begin); d > 2*time.Second {
		t.Errorf("stop took %s", d)
	}
	log, _ := os.ReadFile(m.LogPath("x.service"))
	if !strings.Contains(string(log), "killing") {
		t.Errorf("no SIGKILL escalation in the log:\n%s", log)
	}
}

// Remove under a root deletes the unit and the enable links Install made, and leaves a
// link of the same name that points elsewhere and another unit's links as they are.
func TestOfflineRemove(t *testing.T) {
	root := t.TempDir()
	m := NewOffline(root)
	ctx := context.Background()
	if _, err := m.Install(ctx, "s.service", []byte(offlineUnit)); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Install(ctx, "other.service", []byte(offlineUnit)); err != nil {
		t.Fatal(err)
	}
	sys := filepath.Join(root, "etc/systemd/system")
	// An operator's link of the same name in another target, to a unit file elsewhere.
	foreign := filepath.Join(sys, "custom.target.wants/s.service")
	if err := os.MkdirAll(filepath.Dir(foreign), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/usr/lib/systemd/system/s.service", foreign); err != nil {
		t.Fatal(err)
	}
	if err := m.Remove(ctx, "s.service"); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	for _, p := range []string{"s.service", "multi-user.target.wants/s.service", "graphical.target.requires/s.service"} {
		if _, err := os.Lstat(filepath.Join(sys, p)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s is still there after Remove (%v)", p, err)
		}
	}
	if got, err := os.Readlink(foreign); err != nil || got != "/usr/lib/systemd/system/s.service" {
		t.Errorf("the operator's link: %q, %v; want it left as it was", got, err)
	}
	for _, p := range []string{"other.service", "multi-user.target.wants/other.service", "graphical.target.requires/other.service"} {
		if _, err := os.Lstat(filepath.Join(sys, p)); err != nil {
			t.Errorf("another unit's %s went with it: %v", p, err)
		}
	}
	if err := m.Remove(ctx, "s.service"); err != nil {
		t.Errorf("a second Remove: %v", err)
	}
	if err := m.Remove(ctx, "../s.service"); !errors.Is(err, exitcode.ErrUsage) {
		t.Errorf("Remove of a path: %v, want exit 2", err)
	}
}
