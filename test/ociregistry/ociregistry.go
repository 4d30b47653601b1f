// Package ociregistry starts a real OCI registry for tests, on a free loopback port, with a
// generated config and its storage in a temporary folder. It runs distribution 3 where
// `make deps` has built it (bin/registry of the checkout, from the module tools/registry
// pins), and Debian's docker-registry (distribution 2.8) otherwise; SGLPROV_OCI_REGISTRY
// names another executable. Find says which.
package ociregistry

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Binary is Debian's registry executable, looked up on PATH when the checkout has no
// bin/registry.
const Binary = "docker-registry"

// Built is where `make deps` (.ci/deps.sh) builds distribution 3 from tools/registry,
// relative to the checkout's root.
const Built = "bin/registry"

// EnvExecutable names the registry executable to run instead (a path, or a name looked up
// on PATH, such as docker-registry to measure Debian's beside the built one).
const EnvExecutable = "SGLPROV_OCI_REGISTRY"

// ErrMissing reports that no registry executable is installed.
var ErrMissing = errors.New("no OCI registry is installed (`make deps` builds distribution 3 into " + Built +
	"; Debian: apt-get install " + Binary + ")")

// Executable is a registry executable and the distribution release it is.
type Executable struct {
	// Path is the executable's path.
	Path string
	// Version is the release its --version names: "3.0.0", "2.8.2".
	Version string
}

// Major returns the version's major number (2 or 3), 0 when it is not known.
func (e Executable) Major() int {
	n, _ := strconv.Atoi(strings.SplitN(e.Version, ".", 2)[0])
	return n
}

// String names the executable and its release, for logs.
func (e Executable) String() string {
	return fmt.Sprintf("%s (distribution %s)", e.Path, e.Version)
}

// ParseVersion returns the release a registry's --version line names, without a leading
// "v" or a "+" suffix: "registry github.com/distribution/distribution/v3 v3.0.0+unknown"
// and "docker-registry github.com/docker/distribution 2.8.2+ds1" give 3.0.0 and 2.8.2.
func ParseVersion(line string) (string, error) {
	f := strings.Fields(line)
	if len(f) < 3 || !strings.Contains(f[1], "distribution") {
		return "", fmt.Errorf("reading the registry's version: %q is not distribution's", strings.TrimSpace(line))
	}
	v := strings.TrimPrefix(f[2], "v")
	v, _, _ = strings.Cut(v, "+")
	if _, err := strconv.Atoi(strings.SplitN(v, ".", 2)[0]); err != nil {
		return "", fmt.Errorf("reading the registry's version: %q", f[2])
	}
	return v, nil
}

var versions sync.Map // path -> string, each executable asked once a process

// Describe runs path --version and returns the executable with its release.
func Describe(path string) (Executable, error) {
	if v, ok := versions.Load(path); ok {
		return Executable{Path: path, Version: v.(string)}, nil
	}
	out, err := exec.Command(path, "--version").Output()
	if err != nil {
		return Executable{}, fmt.Errorf("asking %s its version: %w", path, err)
	}
	v, err := ParseVersion(string(out))
	if err != nil {
		return Executable{}, fmt.Errorf("asking %s its version: %w", path, err)
	}
	versions.Store(path, v)
	return Executable{Path: path, Version: v}, nil
}

// Candidates returns the registries installed, the preferred first: the checkout's
// bin/registry (the checkout that holds the working directory), then docker-registry on
// PATH. With SGLPROV_OCI_REGISTRY set, it returns that executable alone.
func Candidates() ([]Executable, error) {
	var paths []string
	if env := os.Getenv(EnvExecutable); env != "" {
		p, err := exec.LookPath(env)
		if err != nil {
			return nil, fmt.Errorf("finding %s=%s: %w", EnvExecutable, env, err)
		}
		paths = append(paths, p)
	} else {
		if root, ok := checkoutRoot(); ok {
			p := filepath.Join(root, Built)
			if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
				paths = append(paths, p)
			}
		}
		if p, err := exec.LookPath(Binary); err == nil {
			paths = append(paths, p)
		}
	}
	var found []Executable
	for _, p := range paths {
		e, err := Describe(p)
		if err != nil {
			return nil, err
		}
		found = append(found, e)
	}
	return found, nil
}

// Find returns the registry Start runs: the first of Candidates, ErrMissing without any.
func Find() (Executable, error) {
	c, err := Candidates()
	if err != nil {
		return Executable{}, err
	}
	if len(c) == 0 {
		return Executable{}, ErrMissing
	}
	return c[0], nil
}

// checkoutRoot returns the folder, at or above the working directory, whose go.mod is
// sglprov's.
func checkoutRoot() (string, bool) {
	dir, err := os.Getwd()
	if err != nil {
		return "", false
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && modulePath(string(b)) == "github.com/sglprov/sglprov" {
			return dir, true
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", false
		}
		dir = parent
	}
}

func modulePath(gomod string) string {
	for _, l := range strings.Split(gomod, "\n") {
		if f := strings.Fields(l); len(f) == 2 && f[0] == "module" {
			return strings.Trim(f[1], `"`)
		}
	}
	return ""
}

// Registry is a running registry.
type Registry struct {
	// Addr is "127.0.0.1:PORT".
	Addr string
	// Dir holds the config, the storage and the log.
	Dir string
	// Executable is the registry that runs.
	Executable Executable

	cmd  *exec.Cmd
	done chan struct{}
}

// Options are a registry's optional settings.
type Options struct {
	// Htpasswd, when set, is the content of an htpasswd file (bcrypt hashes): the registry
	// then answers 401 with a Basic challenge to requests without those credentials.
	Htpasswd string
	// Token, when set, makes the registry ask for bearer tokens from a token service
	// (distribution's token auth): 401 with a Bearer challenge naming Realm and Service.
	Token *TokenAuth
	// RedirectTo, when set, makes the registry answer blob GETs and HEADs with a 307 to
	// this base URL followed by the blob's path in the storage folder (distribution's
	// redirect storage middleware), as a registry that keeps its blobs in object storage
	// redirects to a signed URL. Serve Dir/storage there.
	RedirectTo string
	// Executable, when set, is the registry to run instead of Find's.
	Executable *Executable
}

// TokenAuth configures distribution's token auth.
type TokenAuth struct {
	// Realm is the token service's URL; Service and Issuer the "aud" and "iss" a token
	// must carry.
	Realm, Service, Issuer string
	// RootCertPEM is the certificate whose key signs the tokens (the x5c chain's root).
	RootCertPEM []byte
}

// Config returns the registry's config: storage under dir, listening on addr.
func Config(dir, addr string, opt Options) string {
	auth := ""
	switch {
	case opt.Htpasswd != "":
		auth = fmt.Sprintf("auth:\n  htpasswd:\n    realm: sglprov-test\n    path: %s\n", filepath.Join(dir, "htpasswd"))
	case opt.Token != nil:
		auth = fmt.Sprintf("auth:\n  token:\n    realm: %s\n    service: %s\n    issuer: %s\n    rootcertbundle: %s\n",
			opt.Token.Realm, opt.Token.Service, opt.Token.Issuer, filepath.Join(dir, "token-root.pem"))
	}
	if opt.RedirectTo != "" {
		auth += fmt.Sprintf("middleware:\n  storage:\n    - name: redirect\n      options: {baseurl: %q}\n", opt.RedirectTo)
	}
	return auth + fmt.Sprintf(`version: 0.1
log:
  level: warn
  accesslog: {disabled: true}
storage:
  filesystem: {rootdirectory: %s}
  delete: {enabled: true}
  maintenance:
    uploadpurging: {enabled: false}
http:
  addr: %s
  secret: sglprov-test-secret
`, filepath.Join(dir, "storage"), addr)
}

// Start starts a registry with its files under dir and waits until it answers /v2/.
func Start(dir string) (*Registry, error) {
	return StartWith(dir, Options{})
}

// StartWith is Start with options.
func StartWith(dir string, opt Options) (*Registry, error) {
	var bin Executable
	if opt.Executable != nil {
		bin = *opt.Executable
	} else {
		var err error
		if bin, err = Find(); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(filepath.Join(dir, "storage"), 0o755); err != nil {
		return nil, err
	}
	if opt.Htpasswd != "" {
		if err := os.WriteFile(filepath.Join(dir, "htpasswd"), []byte(opt.Htpasswd), 0o600); err != nil {
			return nil, err
		}
	}
	if opt.Token != nil {
		if err := os.WriteFile(filepath.Join(dir, "token-root.pem"), opt.Token.RootCertPEM, 0o600); err != nil {
			return nil, err
		}
	}
	// The port is free when it is picked and taken by the registry a moment later:
	// another process may take it in between (tests run side by side, and some start
	// registries of their own). The registry then fails to listen while the other server
	// answers /v2/; each registry's answers carry a header of its own, so that a port
	// another server holds is seen, and another port is tried.
	var lastErr error
	for range 5 {
		r, err := startOnce(dir, bin, opt)
		if err == nil {
			return r, nil
		}
		lastErr = err
		if !errors.Is(err, errPortTaken) {
			return nil, err
		}
	}
	return nil, lastErr
}

// errPortTaken: another server answered on the port the registry was to listen on.
var errPortTaken = errors.New("another server holds the registry's port")

// identHeader is the header whose value tells a registry this package started from
// another server on the same port.
const identHeader = "X-Sglprov-Test-Registry"

// startOnce starts the registry on a free port and waits until it answers /v2/ with its
// own identity header.
func startOnce(dir string, bin Executable, opt Options) (*Registry, error) {
	port, err := pickPort()
	if err != nil {
		return nil, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	ident := fmt.Sprintf("%d-%d", os.Getpid(), time.Now().UnixNano())
	cfg := filepath.Join(dir, "config.yml")
	conf := Config(dir, addr, opt) + fmt.Sprintf("  headers:\n    %s: [%q]\n", identHeader, ident)
	if err := os.WriteFile(cfg, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	logf, err := os.Create(filepath.Join(dir, "registry.log"))
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd := exec.Command(bin.Path, "serve", cfg)
	cmd.Stdout, cmd.Stderr = logf, logf
	// distribution 3 traces every request with OpenTelemetry and, by default, exports the
	// spans over OTLP to localhost:4318; nothing collects them here.
	cmd.Env = append(os.Environ(), "OTEL_TRACES_EXPORTER=none")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	r := &Registry{Addr: addr, Dir: dir, Executable: bin, cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(r.done) }()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/v2/", nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.Header.Get(identHeader) != ident {
				r.Stop()
				return nil, fmt.Errorf("%s on %s: %w", bin, addr, errPortTaken)
			}
			if resp.StatusCode == http.StatusOK || (opt.Htpasswd != "" || opt.Token != nil) && resp.StatusCode == http.StatusUnauthorized {
				return r, nil
			}
		}
		select {
		case <-r.done:
			b, _ := os.ReadFile(filepath.Join(dir, "registry.log"))
			if strings.Contains(string(b), "address already in use") {
				return nil, fmt.Errorf("%s on %s: %w", bin, addr, errPortTaken)
			}
			return nil, fmt.Errorf("%s exited before it answered: %s", bin, strings.TrimSpace(string(b)))
		case <-ctx.Done():
			r.Stop()
			return nil, fmt.Errorf("%s did not answer on %s within 20s", bin, addr)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// CPUTime returns the user and system CPU time the registry's process has used so far
// (from /proc/PID/stat): benchmarks split a transfer's cost between client and registry.
func (r *Registry) CPUTime() (time.Duration, error) {
	if r == nil || r.cmd == nil || r.cmd.Process == nil {
		return 0, errors.New("the registry is not running")
	}
	select {
	case <-r.done:
		return 0, errors.New("the registry has exited")
	default:
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", r.cmd.Process.Pid))
	if err != nil {
		return 0, fmt.Errorf("reading the registry's CPU time: %w", err)
	}
	// The fields after the command name (in parentheses, which may hold spaces): utime and
	// stime are the 14th and 15th of the line, in clock ticks (100 a second on Linux).
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("reading the registry's CPU time: no command in %q", s)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("reading the registry's CPU time: %d fields", len(f))
	}
	var ticks int64
	for _, v := range f[11:13] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("reading the registry's CPU time: %w", err)
		}
		ticks += n
	}
	return time.Duration(ticks) * 10 * time.Millisecond, nil
}

// Stop stops the registry and waits for it to exit.
func (r *Registry) Stop() {
	if r == nil || r.cmd == nil || r.cmd.Process == nil {
		return
	}
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-r.done:
	case <-time.After(5 * time.Second):
		_ = r.cmd.Process.Kill()
		<-r.done
	}
}

// pickPort is freePort; a test makes it return a port another server holds.
var pickPort = freePort

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("finding a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
