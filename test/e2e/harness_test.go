package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var e2eFlag = flag.Bool("e2e", false, "run the end-to-end tests: real systemd in a systemd-nspawn container (needs root, debootstrap, systemd-nspawn)")

// suite is the Debian release of the container root.
const suite = "bookworm"

// rootPackages are installed into the root besides the minbase variant. systemd-sysv gives
// /sbin/init; dbus is the system bus that go-systemd talks to.
var rootPackages = []string{"systemd", "dbus", "systemd-sysv"}

// rootMarker is written into a root once debootstrap has finished; a cached root without it
// is incomplete. Its presence is also checked before a root is booted, so that systemd is
// never booted against any other tree (least of all the host's own root).
const rootMarker = "etc/sglprov-e2e-root"

// containerPath is the PATH of every command run inside the container.
const containerPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// requireE2E skips the test unless -e2e was given and the host can run it.
func requireE2E(t *testing.T) {
	t.Helper()
	if !*e2eFlag {
		t.Skip("end-to-end test against real systemd: run with go test ./test/e2e -e2e (as root)")
	}
	if os.Geteuid() != 0 {
		t.Skip("end-to-end test needs root (debootstrap, systemd-nspawn, nsenter, mount)")
	}
	var missing []string
	for _, tool := range []string{"debootstrap", "systemd-nspawn", "nsenter"} {
		if _, err := exec.LookPath(tool); err != nil {
			missing = append(missing, tool)
		}
	}
	if len(missing) > 0 {
		t.Skipf("end-to-end test needs %s: apt-get install debootstrap systemd-container util-linux",
			strings.Join(missing, ", "))
	}
}

// cacheDir is where the debootstrapped root is kept between runs.
func cacheDir() string {
	if d := os.Getenv("SGLPROV_E2E_CACHE"); d != "" {
		return d
	}
	return "/var/cache/sglprov-e2e"
}

// cachedRoot returns the cached Debian root, making it with debootstrap first when it is not
// there or incomplete. The name carries a digest of the package list, so that a changed
// list makes a new root. A lock file keeps two test processes from building it at once.
func cachedRoot(t *testing.T) string {
	t.Helper()
	dir := cacheDir()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("making cache folder: %v", err)
	}
	sum := sha256.Sum256([]byte(suite + " minbase " + strings.Join(rootPackages, ",")))
	root := filepath.Join(dir, suite+"-root-"+hex.EncodeToString(sum[:])[:12])
	if complete(root) {
		return root
	}
	lock, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatalf("opening cache lock: %v", err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatalf("locking cache: %v", err)
	}
	if complete(root) { // built by another process while this one waited
		return root
	}
	tmp := root + ".tmp"
	if err := os.RemoveAll(tmp); err != nil {
		t.Fatalf("removing an unfinished root: %v", err)
	}
	if err := os.RemoveAll(root); err != nil {
		t.Fatalf("removing an incomplete root: %v", err)
	}
	args := []string{"--variant=minbase", "--include=" + strings.Join(rootPackages, ","), suite, tmp}
	if m := os.Getenv("SGLPROV_E2E_MIRROR"); m != "" {
		args = append(args, m)
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "debootstrap", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("debootstrap %s: %v\n%s", strings.Join(args, " "), err, tail(out, 40))
	}
	if err := os.WriteFile(filepath.Join(tmp, rootMarker), []byte("debootstrap "+strings.Join(args, " ")+"\n"), 0o644); err != nil {
		t.Fatalf("marking the root complete: %v", err)
	}
	if err := os.Rename(tmp, root); err != nil {
		t.Fatalf("moving the root into the cache: %v", err)
	}
	t.Logf("debootstrap made %s in %s", root, time.Since(start).Round(time.Second))
	return root
}

func complete(root string) bool {
	_, err := os.Stat(filepath.Join(root, rootMarker))
	return err == nil
}

// tail returns the last n lines of b.
func tail(b []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// syncBuffer is a bytes.Buffer safe for the nspawn process and the test to share.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Container is a booted copy of the cached root.
type Container struct {
	t *testing.T
	// Root is the container's root folder on the host; files written under it are seen
	// inside the container.
	Root string
	// PID is the host PID of the container's systemd.
	PID     int
	cfg     bootConfig
	nspawn  *exec.Cmd
	console *syncBuffer
	exited  chan struct{}
}

// bootOption changes how bootContainer boots a container.
type bootOption func(*bootConfig)

type bootConfig struct {
	hostNetwork bool
}

// withHostNetwork boots the container in the host's network namespace (for apt to reach
// the host's package mirrors) instead of its own loopback-only one.
func withHostNetwork() bootOption {
	return func(c *bootConfig) { c.hostNetwork = true }
}

// bootContainer copies the cached root into a fresh folder, boots it with systemd-nspawn
// and waits for systemd to finish starting up. It stops the container and removes the
// copy when the test ends, whether or not it failed.
func bootContainer(t *testing.T, opts ...bootOption) *Container {
	t.Helper()
	var cfg bootConfig
	for _, o := range opts {
		o(&cfg)
	}
	base := cachedRoot(t)
	start := time.Now()
	root := freshRoot(t, base)
	copied := time.Since(start)
	if err := checkBootRoot(root); err != nil {
		t.Fatalf("refusing to boot: %v", err)
	}
	c := &Container{t: t, Root: root, cfg: cfg}
	t.Cleanup(c.stop)
	state := c.boot()
	t.Logf("container %s up (%s) in %s (copy %s)", root, state, time.Since(start).Round(10*time.Millisecond), copied.Round(10*time.Millisecond))
	return c
}

// boot starts systemd-nspawn on the container's root and waits for systemd to finish
// starting up; it returns the state systemd reports.
func (c *Container) boot() string {
	c.t.Helper()
	root := c.Root
	// The container's network is its own (loopback only): servers inside listen on
	// 127.0.0.1 without clashing with the host or with other containers.
	args := []string{"--register=no", "--keep-unit", "-q", "--private-network", "-D", root, "-b", "--console=pipe"}
	if c.cfg.hostNetwork {
		args = append(args[:3:3], args[4:]...)
	}
	cmd := exec.Command("systemd-nspawn", args...)
	// Its own process group, so that a kill reaches nspawn's helpers too; SIGTERM (an
	// orderly poweroff) when the test process dies before its clean-up runs.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	console := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = console, console
	if err := cmd.Start(); err != nil {
		c.t.Fatalf("starting systemd-nspawn: %v", err)
	}
	c.nspawn, c.console, c.exited, c.PID = cmd, console, make(chan struct{}), 0
	exited := c.exited
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()

	deadline := time.Now().Add(90 * time.Second)
	for c.PID == 0 {
		c.PID = childOf(cmd.Process.Pid)
		if c.PID != 0 {
			break
		}
		select {
		case <-c.exited:
			c.t.Fatalf("systemd-nspawn exited before the container started:\n%s", console.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("no container process under systemd-nspawn (pid %d):\n%s", cmd.Process.Pid, console.String())
		}
	}
	state := ""
	for {
		out, _, _ := c.exec(context.Background(), 10*time.Second, "systemctl", "is-system-running")
		state = strings.TrimSpace(out)
		if state == "running" || state == "degraded" {
			break
		}
		select {
		case <-c.exited:
			c.t.Fatalf("container stopped while booting (last state %q):\n%s", state, console.String())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			failed, _, _ := c.exec(context.Background(), 10*time.Second, "systemctl", "--failed", "--no-pager")
			c.t.Fatalf("container not up after 90s (systemctl is-system-running: %q)\n%s\nconsole:\n%s", state, failed, console.String())
		}
	}
	return state
}

// Reboot powers the container off (an orderly shutdown, as a reboot does) and boots the
// same root again: what was written to its disk stays, /run starts empty.
func (c *Container) Reboot() {
	c.t.Helper()
	c.stop()
	start := time.Now()
	state := c.boot()
	c.t.Logf("container rebooted (%s) in %s", state, time.Since(start).Round(10*time.Millisecond))
}

// freshRoot gives the test its own writable copy of base: an overlay mount (base as the
// read-only lower layer) where the kernel allows it, else a full copy.
func freshRoot(t *testing.T, base string) string {
	t.Helper()
	dir := t.TempDir()
	root := filepath.Join(dir, "root")
	upper, work := filepath.Join(dir, "upper"), filepath.Join(dir, "work")
	for _, d := range []string{root, upper, work} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatalf("making %s: %v", d, err)
		}
	}
	opts := "lowerdir=" + base + ",upperdir=" + upper + ",workdir=" + work
	err := syscall.Mount("overlay", root, "overlay", 0, opts)
	if err == nil {
		// Registered after t.TempDir, so it runs before the folder is removed.
		t.Cleanup(func() {
			if err := syscall.Unmount(root, 0); err != nil {
				if err := syscall.Unmount(root, syscall.MNT_DETACH); err != nil {
					t.Errorf("unmounting %s: %v", root, err)
				}
			}
		})
		return root
	}
	t.Logf("overlay mount failed (%v); copying the root instead", err)
	if err := os.Remove(root); err != nil {
		t.Fatalf("removing %s: %v", root, err)
	}
	if out, err := exec.Command("cp", "-a", "--reflink=auto", base, root).CombinedOutput(); err != nil {
		t.Fatalf("copying the root: %v\n%s", err, out)
	}
	return root
}

// checkBootRoot refuses any folder but a debootstrapped copy: booting systemd against the
// host's own root would run its tmpfiles clean-up on the host (and empty its /tmp).
func checkBootRoot(root string) error {
	if !filepath.IsAbs(root) || filepath.Clean(root) != root || root == "/" {
		return fmt.Errorf("root %q is not a clean absolute path below /", root)
	}
	rootInfo, err := os.Stat(root)
	if err != nil {
		return fmt.Errorf("checking root: %w", err)
	}
	hostInfo, err := os.Stat("/")
	if err != nil {
		return fmt.Errorf("checking /: %w", err)
	}
	if os.SameFile(rootInfo, hostInfo) {
		return fmt.Errorf("root %q is the host's own root", root)
	}
	if !strings.HasPrefix(root, filepath.Clean(os.TempDir())+string(filepath.Separator)) {
		return fmt.Errorf("root %q is not under the temporary folder %s", root, os.TempDir())
	}
	if _, err := os.Stat(filepath.Join(root, rootMarker)); err != nil {
		return fmt.Errorf("root %q has no %s: not a test root: %w", root, rootMarker, err)
	}
	return nil
}

// childOf returns the PID of the systemd process whose parent is ppid, or 0.
func childOf(ppid int) int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so split after the last ')'.
		s := string(stat)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		fields := strings.Fields(s[i+1:])
		if len(fields) < 2 || fields[1] != strconv.Itoa(ppid) {
			continue
		}
		if comm := s[strings.IndexByte(s, '(')+1 : i]; comm == "systemd" || comm == "init" {
			return pid
		}
	}
	return 0
}

// stop powers the container off: SIGTERM to systemd-nspawn (an orderly shutdown of the
// container), SIGKILL to the container and nspawn's group when that takes too long.
func (c *Container) stop() {
	select {
	case <-c.exited:
		return
	default:
	}
	_ = c.nspawn.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.exited:
		return
	case <-time.After(20 * time.Second):
	}
	c.t.Logf("container did not stop within 20s of SIGTERM; killing it")
	if c.PID != 0 {
		_ = syscall.Kill(c.PID, syscall.SIGKILL)
	}
	_ = syscall.Kill(-c.nspawn.Process.Pid, syscall.SIGKILL)
	select {
	case <-c.exited:
	case <-time.After(10 * time.Second):
		c.t.Errorf("systemd-nspawn (pid %d) still running after SIGKILL", c.nspawn.Process.Pid)
	}
}

// Console returns what the container printed so far.
func (c *Container) Console() string { return c.console.String() }

// exec runs argv inside the container with a clean environment (PATH and the given
// NAME=VALUE pairs, which may lead argv) and returns its combined output and exit code.
func (c *Container) exec(ctx context.Context, timeout time.Duration, argv ...string) (string, int, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	args := []string{"-t", strconv.Itoa(c.PID), "-a", "env", "-i", "PATH=" + containerPath,
		"LANG=C.UTF-8", "HOME=/root", "SYSTEMD_PAGER=", "SYSTEMD_COLORS=0"}
	args = append(args, argv...)
	cmd := exec.CommandContext(ctx, "nsenter", args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	var exit *exec.ExitError
	if errors.As(err, &exit) && ctx.Err() == nil {
		return out.String(), exit.ExitCode(), nil
	}
	if err != nil {
		return out.String(), -1, fmt.Errorf("running %v in the container: %w", argv, err)
	}
	return out.String(), 0, nil
}

// Run runs argv inside the container and returns its output and exit code; it fails the
// test when the command cannot be run at all.
func (c *Container) Run(timeout time.Duration, argv ...string) (string, int) {
	c.t.Helper()
	out, code, err := c.exec(context.Background(), timeout, argv...)
	if err != nil {
		c.t.Fatalf("%v\n%s", err, out)
	}
	return out, code
}

// MustRun runs argv inside the container and fails the test unless it exits 0.
func (c *Container) MustRun(argv ...string) string {
	c.t.Helper()
	out, code := c.Run(time.Minute, argv...)
	if code != 0 {
		c.t.Fatalf("%s: exit %d\n%s", strings.Join(argv, " "), code, out)
	}
	return out
}

// WriteFile writes a file at the container path name (absolute, e.g. /etc/x), making its
// folders.
func (c *Container) WriteFile(name string, data []byte, perm os.FileMode) {
	c.t.Helper()
	host := c.hostPath(name)
	if err := os.MkdirAll(filepath.Dir(host), 0o755); err != nil {
		c.t.Fatalf("making folder for %s: %v", name, err)
	}
	if err := os.WriteFile(host, data, perm); err != nil {
		c.t.Fatalf("writing %s: %v", name, err)
	}
	if err := os.Chmod(host, perm); err != nil {
		c.t.Fatalf("chmod %s: %v", name, err)
	}
}

// CopyIn copies the host file src to the container path name with mode perm.
func (c *Container) CopyIn(src, name string, perm os.FileMode) {
	c.t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		c.t.Fatalf("reading %s: %v", src, err)
	}
	c.WriteFile(name, data, perm)
}

// ReadFile reads the container path name.
func (c *Container) ReadFile(name string) []byte {
	c.t.Helper()
	b, err := os.ReadFile(c.hostPath(name))
	if err != nil {
		c.t.Fatalf("reading %s in the container: %v", name, err)
	}
	return b
}

func (c *Container) hostPath(name string) string {
	if !filepath.IsAbs(name) {
		c.t.Fatalf("container path %q is not absolute", name)
	}
	return filepath.Join(c.Root, filepath.Clean(name))
}

// Show returns the named properties of a unit (systemctl show -p), by name.
func (c *Container) Show(unit string, props ...string) map[string]string {
	c.t.Helper()
	out := c.MustRun("systemctl", "show", "-p", strings.Join(props, ","), unit)
	m := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			m[k] = v
		}
	}
	return m
}
