package pkgmgr

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Apt is the Debian/Ubuntu package manager: dpkg-query reads what is installed, apt-get
// installs.
type Apt struct {
	// Runner runs dpkg-query, apt-cache and apt-get (ExecRunner when nil).
	Runner Runner
	// AdminDir is dpkg's database folder (default /var/lib/dpkg); ListsDir apt's package
	// lists (default /var/lib/apt/lists). Under --root, Missing reads ROOT/var/lib/dpkg.
	AdminDir, ListsDir string
	// ArchivesDir is apt's download cache (default /var/cache/apt/archives), whose lock
	// apt-get install takes after the dpkg locks.
	ArchivesDir string
	// LockTimeout bounds the wait for the dpkg and apt lists locks (default 15 minutes).
	LockTimeout time.Duration
	// LockPoll and LockEvery are how often a held lock is tested and logged (see LockWait).
	LockPoll, LockEvery time.Duration
	// ListsMaxAge is how old the package lists may be before apt-get update runs first
	// (default a day).
	ListsMaxAge time.Duration
	// Logf receives progress lines (the lock wait, the update).
	Logf func(format string, args ...any)
	// Now is the clock (time.Now when nil).
	Now func() time.Time

	// lookPath finds apt-get (exec.LookPath when nil; tests with a fake runner replace it).
	lookPath func(string) (string, error)
}

// Name returns "apt".
func (a *Apt) Name() string { return "apt" }

func (a *Apt) runner() Runner {
	if a.Runner == nil {
		return ExecRunner{}
	}
	return a.Runner
}

func (a *Apt) adminDir() string {
	if a.AdminDir == "" {
		return "/var/lib/dpkg"
	}
	return a.AdminDir
}

func (a *Apt) listsDir() string {
	if a.ListsDir == "" {
		return "/var/lib/apt/lists"
	}
	return a.ListsDir
}

func (a *Apt) archivesDir() string {
	if a.ArchivesDir == "" {
		return "/var/cache/apt/archives"
	}
	return a.ArchivesDir
}

func (a *Apt) logf(format string, args ...any) {
	if a.Logf != nil {
		a.Logf(format, args...)
	}
}

func (a *Apt) now() time.Time {
	if a.Now == nil {
		return time.Now()
	}
	return a.Now()
}

func (a *Apt) lockTimeout() time.Duration {
	if a.LockTimeout <= 0 {
		return 15 * time.Minute
	}
	return a.LockTimeout
}

// Missing reads the installed packages with dpkg-query and returns those of pkgs that are
// not installed (never installed, removed, or half-installed), or not in the version or
// architecture a package argument names ("git=1:2.39.5-0+deb12u3", "libc6:i386"). A database folder that does
// not exist (an empty --root) has nothing installed.
func (a *Apt) Missing(ctx context.Context, pkgs []string) ([]string, error) {
	if len(pkgs) == 0 {
		return nil, nil
	}
	if _, err := os.Stat(filepath.Join(a.adminDir(), "status")); errors.Is(err, fs.ErrNotExist) {
		return append([]string(nil), pkgs...), nil
	}
	argv := []string{"dpkg-query", "--admindir=" + a.adminDir(), "-W", "-f=${Package}\t${Architecture}\t${Version}\t${db:Status-Abbrev}\n"}
	for _, p := range pkgs {
		argv = append(argv, baseName(p))
	}
	out, errOut, err := a.runner().Output(ctx, argv)
	if err != nil {
		var exitErr *exec.ExitError
		switch {
		case errors.Is(err, exec.ErrNotFound):
			return nil, fmt.Errorf("reading installed packages: dpkg-query not found (apt packages need a Debian or Ubuntu host): %w", ErrNoManager)
		case errors.As(err, &exitErr) && exitErr.ExitCode() == 1:
			// Some packages are unknown to dpkg: the others are still listed.
		default:
			return nil, fmt.Errorf("reading installed packages: dpkg-query: %w: %s", err, strings.TrimSpace(string(errOut)))
		}
	}
	installed := parseDpkgQuery(out)
	var missing []string
	for _, p := range pkgs {
		if !installed.has(p) {
			missing = append(missing, p)
		}
	}
	return missing, nil
}

// dpkgInstalled is what dpkg-query says is installed: each package's installed
// architectures and versions.
type dpkgInstalled map[string][]dpkgPackage

type dpkgPackage struct{ arch, version string }

// has reports whether the package argument pkg ("name", "name:arch", "name=version") is
// installed: in that architecture ("all" fits any) and that version, when they are given.
func (d dpkgInstalled) has(pkg string) bool {
	rest, version, _ := strings.Cut(pkg, "=")
	name, arch, _ := strings.Cut(rest, ":")
	for _, p := range d[name] {
		if (arch == "" || p.arch == arch || p.arch == "all") && (version == "" || p.version == version) {
			return true
		}
	}
	return false
}

// parseDpkgQuery reads "NAME\tARCH\tVERSION\tSTATUS" lines
// (${Package}\t${Architecture}\t${Version}\t${db:Status-Abbrev}) into the installed
// packages: the status's second letter is i (installed), or W or t (installed, triggers
// awaited or pending).
func parseDpkgQuery(out []byte) dpkgInstalled {
	installed := dpkgInstalled{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Split(sc.Text(), "\t")
		if len(f) != 4 || len(f[3]) < 2 {
			continue
		}
		switch f[3][1] {
		case 'i', 'W', 't':
			installed[f[0]] = append(installed[f[0]], dpkgPackage{arch: f[1], version: f[2]})
		}
	}
	return installed
}

// Install installs pkgs with apt-get install -y --no-install-recommends, non-interactively.
// It runs apt-get update first when the package lists are older than ListsMaxAge (or were
// never fetched) or apt does not know one of pkgs, and waits for the dpkg and lists locks,
// and apt's archives lock, logging who holds them, instead of failing while another apt
// runs.
func (a *Apt) Install(ctx context.Context, pkgs []string) error {
	if len(pkgs) == 0 {
		return nil
	}
	lookPath := a.lookPath
	if lookPath == nil {
		lookPath = exec.LookPath
	}
	if _, err := lookPath("apt-get"); err != nil {
		return fmt.Errorf("installing %s: apt-get not found (apt packages need a Debian or Ubuntu host): %w", strings.Join(pkgs, ", "), ErrNoManager)
	}
	if journal := a.interrupted(); journal != "" {
		return fmt.Errorf("installing %s: %w: %s holds the journal of a dpkg run that did not finish (it was killed, or the host went down mid-install); run `dpkg --configure -a` as root to finish it, then apply again",
			strings.Join(pkgs, ", "), ErrDpkgInterrupted, journal)
	}
	deadline := a.now().Add(a.lockTimeout())
	unknown, err := a.unknown(ctx, pkgs)
	if err != nil {
		return err
	}
	age, fetched := a.listsAge()
	maxAge := a.ListsMaxAge
	if maxAge <= 0 {
		maxAge = 24 * time.Hour
	}
	if why := updateReason(unknown, age, fetched, maxAge); why != "" {
		a.logf("running apt-get update: %s", why)
		if err := a.waitLocks(ctx, deadline, filepath.Join(a.listsDir(), "lock")); err != nil {
			return err
		}
		if err := a.runner().Run(ctx, a.aptGet(deadline, "update"), aptEnv); err != nil {
			return fmt.Errorf("updating the package lists: %w", err)
		}
		if unknown, err = a.unknown(ctx, pkgs); err != nil {
			return err
		}
	}
	if len(unknown) > 0 {
		return &UnknownError{Manager: "apt", Packages: unknown}
	}
	// apt-get install takes the archives lock after the dpkg locks, and waits for it not at
	// all (DPkg::Lock::Timeout is for the dpkg locks): a download-only run holds it alone.
	if err := a.waitLocks(ctx, deadline, filepath.Join(a.adminDir(), "lock-frontend"), filepath.Join(a.adminDir(), "lock"),
		filepath.Join(a.archivesDir(), "lock")); err != nil {
		return err
	}
	argv := a.aptGet(deadline, "install", "-y", "--no-install-recommends",
		"-o", "Dpkg::Options::=--force-confdef", "-o", "Dpkg::Options::=--force-confold")
	argv = append(argv, pkgs...)
	a.logf("installing %s", strings.Join(pkgs, " "))
	if err := a.runner().Run(ctx, argv, aptEnv); err != nil {
		if a.interrupted() != "" || strings.Contains(err.Error(), "dpkg --configure -a") {
			// dpkg stopped half way (apt says so as "E: dpkg was interrupted, you must
			// manually run 'dpkg --configure -a'..."): the fix comes first.
			return fmt.Errorf("installing %s: %w; run `dpkg --configure -a` as root to finish it, then apply again: %w",
				strings.Join(pkgs, ", "), ErrDpkgInterrupted, err)
		}
		return fmt.Errorf("installing %s: %w", strings.Join(pkgs, ", "), err)
	}
	return nil
}

// interrupted returns dpkg's journal folder (ADMINDIR/updates) when it holds an entry of
// a dpkg run that did not finish, as apt checks before it installs ("" when none). Its
// entries are named by numbers; "tmp.i" is dpkg's own scratch file.
func (a *Apt) interrupted() string {
	dir := filepath.Join(a.adminDir(), "updates")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return ""
	}
	for _, e := range entries {
		if n := e.Name(); n != "" && strings.Trim(n, "0123456789") == "" {
			return dir
		}
	}
	return ""
}

// aptEnv keeps apt and dpkg from asking questions. needrestart (Ubuntu 22.04 and later)
// only lists the services an upgraded library leaves outdated: restarting them is not the
// packages step's to do (the model server, or the sglprov daemon running this very step).
var aptEnv = []string{"DEBIAN_FRONTEND=noninteractive", "NEEDRESTART_MODE=l", "APT_LISTCHANGES_FRONTEND=none"}

// aptGet returns an apt-get command line that lets apt itself wait for the dpkg lock for
// what is left of the wait (a lock taken between sglprov's check and apt's own).
func (a *Apt) aptGet(deadline time.Time, args ...string) []string {
	left := int(deadline.Sub(a.now()).Seconds())
	if left < 1 {
		left = 1
	}
	return append([]string{"apt-get", "-q", "-o", "DPkg::Lock::Timeout=" + strconv.Itoa(left)}, args...)
}

func (a *Apt) waitLocks(ctx context.Context, deadline time.Time, paths ...string) error {
	w := LockWait{Timeout: deadline.Sub(a.now()), Limit: a.lockTimeout(), Poll: a.LockPoll, Every: a.LockEvery, Logf: a.Logf}
	if w.Timeout < 0 {
		w.Timeout = 0
	}
	_, err := w.Wait(ctx, paths...)
	return err
}

// updateReason says why apt-get update must run first, or "" when it need not.
func updateReason(unknown []string, age time.Duration, fetched bool, maxAge time.Duration) string {
	switch {
	case len(unknown) > 0:
		return "apt does not know " + strings.Join(unknown, ", ") + " yet"
	case !fetched:
		return "the package lists were never fetched"
	case age > maxAge:
		return fmt.Sprintf("the package lists are %s old (more than %s)", age.Round(time.Minute), maxAge)
	}
	return ""
}

// listsAge returns the age of the newest package list (a Release, InRelease or Packages
// file); fetched is false when there is none.
func (a *Apt) listsAge() (age time.Duration, fetched bool) {
	entries, err := os.ReadDir(a.listsDir())
	if err != nil {
		return 0, false
	}
	var newest time.Time
	for _, e := range entries {
		n := e.Name()
		if !strings.HasSuffix(n, "Release") && !strings.Contains(n, "_Packages") {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			continue
		}
		if fi.ModTime().After(newest) {
			newest = fi.ModTime()
		}
	}
	if newest.IsZero() {
		return 0, false
	}
	return a.now().Sub(newest), true
}

// unknown returns the packages of pkgs that apt has no installation candidate for, read
// from `apt-cache policy`.
func (a *Apt) unknown(ctx context.Context, pkgs []string) ([]string, error) {
	argv := []string{"apt-cache", "policy"}
	for _, p := range pkgs {
		argv = append(argv, baseName(p))
	}
	out, errOut, err := a.runner().Output(ctx, argv)
	if err != nil {
		return nil, fmt.Errorf("asking apt about %s: apt-cache policy: %w: %s", strings.Join(pkgs, ", "), err, strings.TrimSpace(string(errOut)))
	}
	candidates := parsePolicy(out)
	var out2 []string
	for _, p := range pkgs {
		if c := candidates[baseName(p)]; c == "" || c == "(none)" {
			out2 = append(out2, p)
		}
	}
	return out2, nil
}

// parsePolicy reads `apt-cache policy` output into each package's candidate version.
func parsePolicy(out []byte) map[string]string {
	cands := map[string]string{}
	cur := ""
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		if line != "" && line[0] != ' ' && strings.HasSuffix(line, ":") {
			cur = strings.TrimSuffix(line, ":")
			cur, _, _ = strings.Cut(cur, ":")
			continue
		}
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "Candidate:"); ok && cur != "" {
			cands[cur] = strings.TrimSpace(v)
		}
	}
	return cands
}
