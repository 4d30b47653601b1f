package e2e

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// packagesRecipe installs one small real Debian package (hello) that the minbase root does
// not have; the command it provides is required, and not required up front because the
// step installs it.
const packagesRecipe = `apiVersion: sglprov/v1
name: e2e-packages
requires:
  commands:
    hello: {}
steps:
  - name: host-packages
    packages:
      apt: [hello]
      provides: [hello]
      lock_timeout: 2m
`

// TestPackagesStep runs a packages step in the booted Debian container against the host's
// own apt sources: it installs a package the container lacks, a re-run skips it, removing
// the package makes plan say the step runs, and a dpkg lock held by another process for a
// few seconds delays the step instead of failing it, and so does apt's archives lock.
func TestPackagesStep(t *testing.T) {
	requireE2E(t)
	b := buildBinaries(t)
	c := bootContainer(t, withHostNetwork())
	copyAptConfig(t, c)
	c.CopyIn(b.sglprov, "/usr/local/bin/sglprov", 0o755)
	const recipe = "/etc/sglprov/packages.yaml"
	c.WriteFile(recipe, []byte(packagesRecipe), 0o644)
	sglprov := func(cmd string, timeout time.Duration) (string, int) {
		t.Helper()
		start := time.Now()
		out, code := c.Run(timeout, "sglprov", cmd, "-f", recipe, "--state-dir", stateDir)
		t.Logf("sglprov %s: exit %d in %s", cmd, code, time.Since(start).Round(10*time.Millisecond))
		return out, code
	}

	if out, code := c.Run(time.Minute, "dpkg-query", "-W", "hello"); code == 0 {
		t.Fatalf("the container already has hello:\n%s", out)
	}
	// The root's package lists go: apt knows nothing until the step runs apt-get update
	// against the host's sources.
	lists, _ := filepath.Glob(filepath.Join(c.Root, "var/lib/apt/lists/*_*"))
	for _, p := range lists {
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
	}
	out, code := sglprov("plan", time.Minute)
	if code != 0 || !strings.Contains(out, "command hello: not on the PATH yet; step host-packages installs it") ||
		!regexp.MustCompile(`(?m)^  host-packages +packages +run +new$`).MatchString(out) {
		t.Fatalf("first plan: exit %d\n%s", code, out)
	}
	out, code = sglprov("apply", 10*time.Minute)
	if code != 0 || !regexp.MustCompile(`(?m)^host-packages +ok `).MatchString(out) ||
		!strings.Contains(out, "running apt-get update: apt does not know hello yet") {
		t.Fatalf("first apply: exit %d\n%s", code, out)
	}
	t.Logf("first apply:\n%s", out)
	if got := c.MustRun("hello"); strings.TrimSpace(got) != "Hello, world!" {
		t.Errorf("hello after the install printed %q", got)
	}

	// A re-run finds it installed.
	out, code = sglprov("apply", 5*time.Minute)
	if code != 0 || !regexp.MustCompile(`(?m)^host-packages +skipped +- +unchanged$`).MatchString(out) {
		t.Fatalf("second apply: exit %d\n%s", code, out)
	}

	// Removed by hand: plan says the step runs, and why.
	c.MustRun("dpkg", "-r", "hello")
	out, code = sglprov("plan", time.Minute)
	if code != 0 || !regexp.MustCompile(`(?m)^  host-packages +packages +run +not installed: hello$`).MatchString(out) {
		t.Fatalf("plan after dpkg -r: exit %d\n%s", code, out)
	}

	// Another process holds dpkg's frontend lock for a few seconds, as apt does (a record
	// lock on the whole file; flock(1) takes a different kind of lock that apt does not
	// see): the step waits for it, says so, then installs.
	const hold = 5 * time.Second
	release := holdDpkgLock(t, filepath.Join(c.Root, "var/lib/dpkg/lock-frontend"))
	timer := time.AfterFunc(hold, release)
	defer timer.Stop()
	start := time.Now()
	out, code = sglprov("apply", 5*time.Minute)
	took := time.Since(start)
	if code != 0 || !regexp.MustCompile(`(?m)^host-packages +ok `).MatchString(out) {
		t.Fatalf("apply under a held lock: exit %d\n%s", code, out)
	}
	t.Logf("apply under the held lock:\n%s", out)
	if took < hold-500*time.Millisecond {
		t.Errorf("apply took %s while the lock was held for %s", took, hold)
	}
	for _, want := range []string{"waiting for /var/lib/dpkg/lock-frontend, held by another process", "lock /var/lib/dpkg/lock-frontend, /var/lib/dpkg/lock, /var/cache/apt/archives/lock is free after"} {
		if !strings.Contains(out, want) {
			t.Errorf("apply's output lacks %q:\n%s", want, out)
		}
	}
	if got := c.MustRun("hello"); strings.TrimSpace(got) != "Hello, world!" {
		t.Errorf("hello after the second install printed %q", got)
	}

	// A download-only apt (apt-daily's) holds apt's archives lock alone; apt-get install
	// would fail on it at once (its lock timeout is for the dpkg locks): the step waits.
	c.MustRun("dpkg", "-r", "hello")
	const holdArchives = 3 * time.Second
	releaseArchives := holdDpkgLock(t, filepath.Join(c.Root, "var/cache/apt/archives/lock"))
	archivesTimer := time.AfterFunc(holdArchives, releaseArchives)
	defer archivesTimer.Stop()
	start = time.Now()
	out, code = sglprov("apply", 5*time.Minute)
	if code != 0 || !regexp.MustCompile(`(?m)^host-packages +ok `).MatchString(out) ||
		!strings.Contains(out, "waiting for /var/cache/apt/archives/lock, held by another process") {
		t.Fatalf("apply under a held archives lock: exit %d\n%s", code, out)
	}
	if took := time.Since(start); took < holdArchives-500*time.Millisecond {
		t.Errorf("apply took %s while the archives lock was held for %s", took, holdArchives)
	}

	// A package that does not exist fails the step with its name, after apt-get update.
	const bad = "/etc/sglprov/bad-packages.yaml"
	c.WriteFile(bad, []byte(strings.Replace(packagesRecipe, "apt: [hello]", "apt: [hello, sglprov-no-such-package]", 1)), 0o644)
	out, code = c.Run(5*time.Minute, "sglprov", "apply", "-f", bad, "--state-dir", "/var/lib/sglprov-bad")
	if code != 1 || !strings.Contains(out, "apt does not know package(s) sglprov-no-such-package, even after refreshing its lists") {
		t.Errorf("apply with an unknown package: exit %d\n%s", code, out)
	}
}

// holdDpkgLock write-locks the file at path (a path under the container's root, seen from
// the host) the way apt does, until the returned function is called.
func holdDpkgLock(t *testing.T, path string) func() {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o640)
	if err != nil {
		t.Fatalf("opening %s: %v", path, err)
	}
	lk := unix.Flock_t{Type: unix.F_WRLCK}
	if err := unix.FcntlFlock(f.Fd(), unix.F_OFD_SETLK, &lk); err != nil {
		f.Close()
		t.Fatalf("locking %s: %v", path, err)
	}
	done := make(chan struct{})
	release := func() {
		select {
		case <-done:
		default:
			close(done)
			f.Close()
		}
	}
	t.Cleanup(release)
	return release
}

// copyAptConfig gives the container the host's apt sources and any proxy settings: the
// sources lists (replacing the root's own), the keyrings they name that the root lacks, the
// apt.conf.d files that set Acquire:: options, and the proxy variables of the environment.
func copyAptConfig(t *testing.T, c *Container) {
	t.Helper()
	var sources []string
	if _, err := os.Stat("/etc/apt/sources.list"); err == nil {
		sources = append(sources, "/etc/apt/sources.list")
	}
	for _, pat := range []string{"/etc/apt/sources.list.d/*.list", "/etc/apt/sources.list.d/*.sources"} {
		m, _ := filepath.Glob(pat)
		sources = append(sources, m...)
	}
	if len(sources) == 0 {
		t.Log("the host has no apt sources; the container keeps its own")
	} else {
		_ = os.Remove(filepath.Join(c.Root, "etc/apt/sources.list"))
		old, _ := filepath.Glob(filepath.Join(c.Root, "etc/apt/sources.list.d/*"))
		for _, p := range old {
			_ = os.Remove(p)
		}
	}
	keyRE := regexp.MustCompile(`(?i)(?:signed-by[:=]\s*)(/[^\s\]]+)`)
	for _, src := range sources {
		data, err := os.ReadFile(src)
		if err != nil {
			t.Fatalf("reading %s: %v", src, err)
		}
		c.WriteFile(src, data, 0o644)
		for _, m := range keyRE.FindAllSubmatch(data, -1) {
			key := string(m[1])
			if _, err := os.Stat(filepath.Join(c.Root, key)); err == nil {
				continue
			}
			if _, err := os.Stat(key); err == nil {
				c.CopyIn(key, key, 0o644)
			}
		}
	}
	confs, _ := filepath.Glob("/etc/apt/apt.conf.d/*")
	for _, p := range confs {
		data, err := os.ReadFile(p)
		if err != nil || !bytes.Contains(data, []byte("Acquire::")) {
			continue
		}
		c.WriteFile(p, data, 0o644)
	}
	var proxy strings.Builder
	for _, kv := range []struct{ env, opt string }{{"http_proxy", "http"}, {"https_proxy", "https"}} {
		v := os.Getenv(kv.env)
		if v == "" {
			v = os.Getenv(strings.ToUpper(kv.env))
		}
		if v != "" {
			proxy.WriteString("Acquire::" + kv.opt + "::Proxy \"" + v + "\";\n")
		}
	}
	if proxy.Len() > 0 {
		c.WriteFile("/etc/apt/apt.conf.d/99sglprov-e2e-proxy", []byte(proxy.String()), 0o644)
	}
	t.Logf("apt configuration from the host: %s", strings.Join(sources, ", "))
}

// interruptedRecipe installs hello; it requires no command, so nothing is refused up front.
const interruptedRecipe = `apiVersion: sglprov/v1
name: e2e-dpkg-interrupted
steps:
  - name: host-packages
    packages:
      apt: [hello]
      lock_timeout: 1m
`

// TestPackagesDpkgInterrupted kills a real dpkg half way through installing a package
// (its preinst waits, dpkg gets SIGKILL), which leaves dpkg's journal in
// /var/lib/dpkg/updates as a power cut would; apt itself then refuses to install. The
// packages step fails at once with a first line (the summary's) that says dpkg was
// interrupted and names the fix, `dpkg --configure -a`; once that ran, the step no longer
// says so.
func TestPackagesDpkgInterrupted(t *testing.T) {
	requireE2E(t)
	b := buildBinaries(t)
	c := bootContainer(t)
	c.CopyIn(b.sglprov, "/usr/local/bin/sglprov", 0o755)
	const recipe = "/etc/sglprov/interrupted.yaml"
	c.WriteFile(recipe, []byte(interruptedRecipe), 0o644)
	c.WriteFile("/root/slow/DEBIAN/control", []byte("Package: sglprov-e2e-slow\nVersion: 1\nArchitecture: all\nMaintainer: e2e <e2e@example.invalid>\nDescription: a package whose preinst waits\n"), 0o644)
	c.WriteFile("/root/slow/DEBIAN/preinst", []byte("#!/bin/sh\necho $$ > /tmp/preinst.pid\nexec sleep 300\n"), 0o755)
	c.MustRun("dpkg-deb", "--build", "/root/slow", "/root/slow.deb")
	c.MustRun("sh", "-c", `dpkg -i /root/slow.deb >/tmp/dpkg.log 2>&1 & echo $! > /tmp/dpkg.pid
n=0; while [ ! -s /tmp/preinst.pid ] && [ $n -lt 300 ]; do sleep 0.1; n=$((n+1)); done
[ -s /tmp/preinst.pid ] || { cat /tmp/dpkg.log; exit 1; }
kill -9 "$(cat /tmp/dpkg.pid)"; kill -9 "$(cat /tmp/preinst.pid)"; sleep 0.5`)
	journal, _ := os.ReadDir(filepath.Join(c.Root, "var/lib/dpkg/updates"))
	if len(journal) == 0 {
		t.Fatal("the killed dpkg left no journal in /var/lib/dpkg/updates")
	}
	// apt sees the same.
	if out, code := c.Run(time.Minute, "apt-get", "install", "-y", "hello"); code == 0 || !strings.Contains(out, "dpkg was interrupted") {
		t.Fatalf("apt-get install after the kill: exit %d\n%s", code, out)
	}

	out, code := c.Run(5*time.Minute, "sglprov", "apply", "-f", recipe, "--state-dir", stateDir)
	t.Logf("apply after the kill: exit %d\n%s", code, out)
	if code != 1 {
		t.Errorf("apply exit %d, want 1", code)
	}
	summary := regexp.MustCompile(`(?m)^host-packages +failed +\S+ +.*installing hello: dpkg was interrupted: /var/lib/dpkg/updates holds the journal of a dpkg run that did not finish .*run ` + "`dpkg --configure -a`" + ` as root`)
	if !summary.MatchString(out) {
		t.Errorf("the summary's line does not name the interrupted dpkg and its fix:\n%s", out)
	}

	c.Run(5*time.Minute, "dpkg", "--configure", "-a") // the half-installed package stays broken; the journal goes
	if journal, _ := os.ReadDir(filepath.Join(c.Root, "var/lib/dpkg/updates")); len(journal) != 0 {
		t.Fatalf("dpkg --configure -a left its journal: %v", journal)
	}
	out, _ = c.Run(5*time.Minute, "sglprov", "apply", "-f", recipe, "--state-dir", stateDir)
	if strings.Contains(out, "dpkg was interrupted") {
		t.Errorf("apply after dpkg --configure -a still says dpkg was interrupted:\n%s", out)
	}
}
