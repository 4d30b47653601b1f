package pkgmgr

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// holdLock write-locks path the way apt does (a record lock on the whole file) through its
// own open file description, until the returned function is called.
func holdLock(t *testing.T, path string) (release func()) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o640)
	if err != nil {
		t.Fatal(err)
	}
	lk := unix.Flock_t{Type: unix.F_WRLCK}
	if err := unix.FcntlFlock(f.Fd(), unix.F_OFD_SETLK, &lk); err != nil {
		t.Fatalf("locking %s: %v", path, err)
	}
	var once sync.Once
	release = func() { once.Do(func() { f.Close() }) }
	t.Cleanup(release)
	return release
}

type lines struct {
	mu sync.Mutex
	l  []string
}

func (l *lines) logf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.l = append(l.l, fmt.Sprintf(format, args...))
}

func (l *lines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.l, "\n")
}

func TestLockWaitWaitsForTheHolder(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lock-frontend")
	release := holdLock(t, path)
	if _, held, err := LockHolder(path); err != nil || !held {
		t.Fatalf("LockHolder of a held lock: held %v, err %v", held, err)
	}
	time.AfterFunc(400*time.Millisecond, release)
	var log lines
	w := LockWait{Timeout: 10 * time.Second, Poll: 20 * time.Millisecond, Every: 100 * time.Millisecond, Logf: log.logf}
	waited, err := w.Wait(context.Background(), path)
	if err != nil {
		t.Fatalf("Wait: %v", err)
	}
	if waited < 350*time.Millisecond {
		t.Errorf("waited %s; the lock was held for 400ms", waited)
	}
	out := log.String()
	if !strings.Contains(out, "waiting for "+path+", held by another process") || !strings.Contains(out, "is free after") {
		t.Errorf("progress lines:\n%s", out)
	}
	if n := strings.Count(out, "waiting for"); n < 2 {
		t.Errorf("%d waiting lines in 400ms at one each 100ms:\n%s", n, out)
	}
}

func TestLockWaitTimesOutNamingTheLock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lock-frontend")
	holdLock(t, path)
	w := LockWait{Timeout: 150 * time.Millisecond, Poll: 20 * time.Millisecond}
	_, err := w.Wait(context.Background(), path)
	if err == nil || !strings.Contains(err.Error(), "waiting for "+path+": still held by another process") || !strings.Contains(err.Error(), "raise lock_timeout") {
		t.Fatalf("err = %v", err)
	}
}

func TestLockWaitFreeAndMissingLocks(t *testing.T) {
	dir := t.TempDir()
	free := filepath.Join(dir, "free")
	os.WriteFile(free, nil, 0o640)
	var log lines
	waited, err := LockWait{Timeout: time.Second, Logf: log.logf}.Wait(context.Background(), free, filepath.Join(dir, "absent"))
	if err != nil || waited > 100*time.Millisecond || log.String() != "" {
		t.Errorf("free locks: waited %s, err %v, log %q", waited, err, log.String())
	}
}

func TestLockWaitCanceled(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lock")
	holdLock(t, path)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := LockWait{Timeout: time.Minute, Poll: 10 * time.Millisecond}.Wait(ctx, path)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v, want the context's", err)
	}
}

func TestParseRealOutputs(t *testing.T) {
	q, _ := os.ReadFile("testdata/dpkg-query-debian12.txt")
	want := dpkgInstalled{"git": {{"amd64", "1:2.39.5-0+deb12u3"}}, "libc6": {{"amd64", "2.36-9+deb12u14"}}}
	if got := parseDpkgQuery(q); !reflect.DeepEqual(got, want) {
		t.Errorf("parseDpkgQuery = %v, want %v", got, want)
	}
	if got := parseDpkgQuery([]byte("foo\tamd64\t1\trc \nbar\tamd64\t1\tiU \nbaz\tall\t1\tiW \n")); !reflect.DeepEqual(got, dpkgInstalled{"baz": {{"all", "1"}}}) {
		t.Errorf("removed and unpacked counted as installed: %v", got)
	}
	p, _ := os.ReadFile("testdata/apt-cache-policy-debian12.txt")
	wantPolicy := map[string]string{"git": "1:2.39.5-0+deb12u3", "hello": "2.10-3"}
	if got := parsePolicy(p); !reflect.DeepEqual(got, wantPolicy) {
		t.Errorf("parsePolicy = %v, want %v", got, wantPolicy)
	}
}

// TestMissingWithRealDpkgQuery runs the host's dpkg-query against a database folder made
// here: installed, removed (config files left) and never-seen packages.
func TestMissingWithRealDpkgQuery(t *testing.T) {
	if _, err := os.Stat("/usr/bin/dpkg-query"); err != nil {
		t.Skip("no dpkg-query on this host")
	}
	admin := t.TempDir()
	status := `Package: git
Status: install ok installed
Architecture: amd64
Version: 1:2.39.5-0+deb12u3

Package: hello
Status: deinstall ok config-files
Architecture: amd64
Version: 2.10-3
Conffiles:
 /etc/hello.conf 0123456789abcdef0123456789abcdef

`
	os.WriteFile(filepath.Join(admin, "status"), []byte(status), 0o644)
	os.MkdirAll(filepath.Join(admin, "info"), 0o755)
	os.MkdirAll(filepath.Join(admin, "updates"), 0o755)
	a := &Apt{AdminDir: admin}
	got, err := a.Missing(context.Background(), []string{"git", "hello", "libnuma-dev=2.0.16-1"})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"hello", "libnuma-dev=2.0.16-1"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Missing = %q, want %q", got, want)
	}
	// An empty root has nothing installed.
	a.AdminDir = filepath.Join(t.TempDir(), "var/lib/dpkg")
	if got, err := a.Missing(context.Background(), []string{"git"}); err != nil || len(got) != 1 {
		t.Errorf("Missing in an empty root = %q, %v", got, err)
	}
}

// fakeRunner answers apt-cache policy from a table that apt-get update replaces, and
// records every command.
type fakeRunner struct {
	mu            sync.Mutex
	calls         []string
	policy        string
	updated       string
	whenHeld      func() bool // reports, at apt-get install time, whether the lock is still held
	heldAtInstall bool
	installErr    error // what apt-get install returns
}

func (f *fakeRunner) Run(ctx context.Context, argv, env []string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, strings.Join(argv, " ")+" ["+strings.Join(env, " ")+"]")
	if argv[len(argv)-1] == "update" {
		f.policy = f.updated
	}
	if f.whenHeld != nil && strings.Contains(strings.Join(argv, " "), " install ") {
		f.heldAtInstall = f.whenHeld()
	}
	if strings.Contains(strings.Join(argv, " "), " install ") {
		return f.installErr
	}
	return nil
}

func (f *fakeRunner) Output(ctx context.Context, argv []string) ([]byte, []byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, strings.Join(argv, " "))
	return []byte(f.policy), nil, nil
}

func aptIn(t *testing.T, r Runner, listsAge time.Duration) *Apt {
	dir := t.TempDir()
	admin, lists := filepath.Join(dir, "dpkg"), filepath.Join(dir, "lists")
	os.MkdirAll(admin, 0o755)
	os.MkdirAll(lists, 0o755)
	if listsAge >= 0 {
		p := filepath.Join(lists, "deb.debian.org_debian_dists_bookworm_InRelease")
		os.WriteFile(p, nil, 0o644)
		old := time.Now().Add(-listsAge)
		os.Chtimes(p, old, old)
	}
	archives := filepath.Join(dir, "archives")
	os.MkdirAll(archives, 0o755)
	return &Apt{Runner: r, AdminDir: admin, ListsDir: lists, ArchivesDir: archives, LockTimeout: 5 * time.Second, LockPoll: 20 * time.Millisecond,
		lookPath: func(string) (string, error) { return "/usr/bin/apt-get", nil }}
}

const helloPolicy = "hello:\n  Installed: (none)\n  Candidate: 2.10-3\n"

func TestInstallFreshListsInstallsAtOnce(t *testing.T) {
	r := &fakeRunner{policy: helloPolicy}
	a := aptIn(t, r, time.Hour)
	if err := a.Install(context.Background(), []string{"hello"}); err != nil {
		t.Fatal(err)
	}
	if len(r.calls) != 2 || !strings.HasPrefix(r.calls[1], "apt-get -q -o DPkg::Lock::Timeout=") ||
		!strings.Contains(r.calls[1], " install -y --no-install-recommends ") || !strings.HasSuffix(r.calls[1], " hello [DEBIAN_FRONTEND=noninteractive NEEDRESTART_MODE=l APT_LISTCHANGES_FRONTEND=none]") {
		t.Errorf("calls:\n%s", strings.Join(r.calls, "\n"))
	}
}

func TestInstallUpdatesStaleOrMissingLists(t *testing.T) {
	for name, age := range map[string]time.Duration{"two days old": 48 * time.Hour, "never fetched": -1} {
		t.Run(name, func(t *testing.T) {
			r := &fakeRunner{policy: helloPolicy, updated: helloPolicy}
			var log lines
			a := aptIn(t, r, age)
			a.Logf = log.logf
			if err := a.Install(context.Background(), []string{"hello"}); err != nil {
				t.Fatal(err)
			}
			if len(r.calls) != 4 || !strings.Contains(r.calls[1], " update [") || !strings.Contains(r.calls[3], " install ") {
				t.Errorf("calls:\n%s", strings.Join(r.calls, "\n"))
			}
			if !strings.Contains(log.String(), "running apt-get update: the package lists") {
				t.Errorf("log: %s", log.String())
			}
		})
	}
}

func TestInstallUnknownPackageUpdatesThenFailsWithItsName(t *testing.T) {
	r := &fakeRunner{policy: "", updated: helloPolicy}
	a := aptIn(t, r, time.Hour)
	err := a.Install(context.Background(), []string{"hello", "no-such-package"})
	var ue *UnknownError
	if !errors.As(err, &ue) || !reflect.DeepEqual(ue.Packages, []string{"no-such-package"}) {
		t.Fatalf("err = %v", err)
	}
	if !strings.Contains(err.Error(), "apt does not know package(s) no-such-package") {
		t.Errorf("message: %v", err)
	}
	for _, c := range r.calls {
		if strings.Contains(c, " install ") {
			t.Errorf("installed despite an unknown package: %s", c)
		}
	}
}

func TestInstallWaitsForTheDpkgLock(t *testing.T) {
	r := &fakeRunner{policy: helloPolicy}
	a := aptIn(t, r, time.Hour)
	lock := filepath.Join(a.AdminDir, "lock-frontend")
	release := holdLock(t, lock)
	r.whenHeld = func() bool { _, held, _ := LockHolder(lock); return held }
	var log lines
	a.Logf = log.logf
	time.AfterFunc(300*time.Millisecond, release)
	start := time.Now()
	if err := a.Install(context.Background(), []string{"hello"}); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 250*time.Millisecond {
		t.Errorf("install took %s; the lock was held 300ms", took)
	}
	if r.heldAtInstall {
		t.Error("apt-get install ran while the lock was held")
	}
	if !strings.Contains(log.String(), "waiting for "+lock) {
		t.Errorf("log:\n%s", log.String())
	}
}

// TestLockHolderNamesAnotherProcess: a classic record lock (the kind apt takes) held by
// another process is reported with that process's pid and name.
func TestLockHolderNamesAnotherProcess(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3 to hold a lock with fcntl.lockf")
	}
	path := filepath.Join(t.TempDir(), "lock-frontend")
	cmd := exec.Command(py, "-c", `import fcntl, sys, time
f = open(sys.argv[1], "w")
fcntl.lockf(f, fcntl.LOCK_EX)
print("locked", flush=True)
time.sleep(30)`, path)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line := make([]byte, 7)
	if _, err := io.ReadFull(out, line); err != nil || string(line) != "locked\n" {
		t.Fatalf("the lock holder did not start: %q, %v", line, err)
	}
	h, held, err := LockHolder(path)
	if err != nil || !held || h.PID != cmd.Process.Pid || !strings.HasPrefix(h.Comm, "python3") {
		t.Fatalf("LockHolder = %+v, %v, %v; want pid %d (python3)", h, held, err, cmd.Process.Pid)
	}
	if want := fmt.Sprintf("pid %d (%s)", cmd.Process.Pid, h.Comm); h.String() != want {
		t.Errorf("String() = %q, want %q", h.String(), want)
	}
}

func TestInstallWithoutAptGet(t *testing.T) {
	a := aptIn(t, &fakeRunner{}, time.Hour)
	a.lookPath = func(f string) (string, error) { return "", exec.ErrNotFound }
	err := a.Install(context.Background(), []string{"hello"})
	if !errors.Is(err, ErrNoManager) || !strings.Contains(err.Error(), "apt-get not found (apt packages need a Debian or Ubuntu host)") {
		t.Errorf("err = %v", err)
	}
}

// TestMissingComparesAPinnedVersion: a package pinned to a version ("git=1:2.30.2-1") is
// missing while another version of it is installed, and one pinned to an architecture
// while only another architecture's is; the host's dpkg-query reads the database.
func TestMissingComparesAPinnedVersion(t *testing.T) {
	if _, err := os.Stat("/usr/bin/dpkg-query"); err != nil {
		t.Skip("no dpkg-query on this host")
	}
	admin := t.TempDir()
	status := `Package: git
Status: install ok installed
Architecture: amd64
Version: 1:2.39.5-0+deb12u3

Package: libnuma1
Status: install ok installed
Architecture: amd64
Multi-Arch: same
Version: 2.0.16-1

`
	os.WriteFile(filepath.Join(admin, "status"), []byte(status), 0o644)
	os.MkdirAll(filepath.Join(admin, "info"), 0o755)
	os.MkdirAll(filepath.Join(admin, "updates"), 0o755)
	a := &Apt{AdminDir: admin}
	pkgs := []string{"git=1:2.39.5-0+deb12u3", "git=1:2.30.2-1+deb11u2", "libnuma1:amd64", "libnuma1:i386", "libnuma1:amd64=2.0.16-1"}
	got, err := a.Missing(context.Background(), pkgs)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"git=1:2.30.2-1+deb11u2", "libnuma1:i386"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Missing(%q) = %q, want %q", pkgs, got, want)
	}
}

// TestInstallLockNeverFreed: a dpkg lock held past lock_timeout fails the install at that
// time, naming the lock and the lock_timeout as the recipe set it (not what was left of it
// after the lists were read), and apt-get install never runs.
func TestInstallLockNeverFreed(t *testing.T) {
	r := &fakeRunner{policy: helloPolicy}
	a := aptIn(t, r, time.Hour)
	a.LockTimeout = 500 * time.Millisecond
	lock := filepath.Join(a.AdminDir, "lock")
	holdLock(t, lock)
	start := time.Now()
	err := a.Install(context.Background(), []string{"hello"})
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("Install took %s with lock_timeout 500ms", took)
	}
	if err == nil || !strings.Contains(err.Error(), "waiting for "+lock+": still held by another process") ||
		!strings.Contains(err.Error(), "(lock_timeout 500ms)") {
		t.Errorf("err = %v", err)
	}
	for _, c := range r.calls {
		if strings.Contains(c, " install ") {
			t.Errorf("apt-get install ran under a held lock: %s", c)
		}
	}
}

// TestInstallWaitsForTheArchivesLock: apt-get install takes /var/cache/apt/archives/lock
// after the dpkg locks, with no timeout of its own (DPkg::Lock::Timeout covers the dpkg
// locks only), and a download-only run (apt-daily's) holds it without them: the install
// waits for it too instead of failing at once.
func TestInstallWaitsForTheArchivesLock(t *testing.T) {
	r := &fakeRunner{policy: helloPolicy}
	a := aptIn(t, r, time.Hour)
	lock := filepath.Join(a.ArchivesDir, "lock")
	release := holdLock(t, lock)
	r.whenHeld = func() bool { _, held, _ := LockHolder(lock); return held }
	var log lines
	a.Logf = log.logf
	time.AfterFunc(300*time.Millisecond, release)
	if err := a.Install(context.Background(), []string{"hello"}); err != nil {
		t.Fatal(err)
	}
	if r.heldAtInstall {
		t.Error("apt-get install ran while the archives lock was held")
	}
	if !strings.Contains(log.String(), "waiting for "+lock) {
		t.Errorf("log:\n%s", log.String())
	}
}

// TestInstallLeavesServicesRunning: apt-get runs with needrestart in list mode. In its
// automatic mode (NEEDRESTART_MODE=a) a library that the install upgrades (libc6 beside
// build-essential's libc6-dev) restarts every service that maps it: the model server,
// unasked, and the sglprov daemon in the middle of its own apply.
func TestInstallLeavesServicesRunning(t *testing.T) {
	r := &fakeRunner{policy: helloPolicy}
	a := aptIn(t, r, time.Hour)
	if err := a.Install(context.Background(), []string{"hello"}); err != nil {
		t.Fatal(err)
	}
	last := r.calls[len(r.calls)-1]
	if !strings.Contains(last, " install ") || !strings.Contains(last, "NEEDRESTART_MODE=l") || strings.Contains(last, "NEEDRESTART_MODE=a") {
		t.Errorf("apt-get install: %s", last)
	}
}

// A dpkg run that did not finish left its journal in ADMINDIR/updates (apt refuses to
// install then): Install says so, and the fix, before it runs apt at all.
func TestInstallRefusesAnInterruptedDpkg(t *testing.T) {
	r := &fakeRunner{policy: helloPolicy}
	a := aptIn(t, r, time.Hour)
	updates := filepath.Join(a.AdminDir, "updates")
	if err := os.MkdirAll(updates, 0o755); err != nil {
		t.Fatal(err)
	}
	// dpkg's scratch file alone is no unfinished run.
	if err := os.WriteFile(filepath.Join(updates, "tmp.i"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := a.Install(context.Background(), []string{"hello"}); err != nil {
		t.Fatalf("Install with only tmp.i in updates/: %v", err)
	}
	if err := os.WriteFile(filepath.Join(updates, "0001"), []byte("Package: hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r.calls = nil
	err := a.Install(context.Background(), []string{"hello"})
	if !errors.Is(err, ErrDpkgInterrupted) || !strings.Contains(err.Error(), updates+" holds the journal of a dpkg run that did not finish") ||
		!strings.Contains(err.Error(), "run `dpkg --configure -a` as root") {
		t.Errorf("Install = %v; want the interrupted dpkg and its fix named", err)
	}
	if len(r.calls) != 0 {
		t.Errorf("apt ran: %q", r.calls)
	}
}

// apt-get saying that dpkg was interrupted (its own check, or dpkg killed during this
// install) gives an error whose first line has the fix.
func TestInstallFailureOfAnInterruptedDpkgNamesTheFix(t *testing.T) {
	aptSays := errors.New("running apt-get: exit status 100: E: dpkg was interrupted, you must manually run 'dpkg --configure -a' to correct the problem.")
	a := aptIn(t, &fakeRunner{policy: helloPolicy, installErr: aptSays}, time.Hour)
	err := a.Install(context.Background(), []string{"hello"})
	first, _, _ := strings.Cut(err.Error(), "\n")
	if !errors.Is(err, ErrDpkgInterrupted) || !errors.Is(err, aptSays) ||
		!strings.HasPrefix(first, "installing hello: dpkg was interrupted; run `dpkg --configure -a` as root to finish it, then apply again: running apt-get: exit status 100: E: dpkg was interrupted") {
		t.Errorf("Install = %v", err)
	}
	// Another failure is passed on as it is.
	other := errors.New("running apt-get: exit status 100: E: Unable to fetch some archives")
	a = aptIn(t, &fakeRunner{policy: helloPolicy, installErr: other}, time.Hour)
	if err := a.Install(context.Background(), []string{"hello"}); errors.Is(err, ErrDpkgInterrupted) || !errors.Is(err, other) {
		t.Errorf("Install = %v", err)
	}
}
