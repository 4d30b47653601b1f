// Package ociregistry starts a real OCI registry for tests: Debian's docker-registry
// (distribution 2.8), on a free loopback port, with a generated config and its storage in
// a temporary folder. .ci/deps.sh installs the package.
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
	"syscall"
	"time"
)

// Binary is the registry's executable name, looked up on PATH.
const Binary = "docker-registry"

// ErrMissing reports that the registry's executable is not installed.
var ErrMissing = errors.New(Binary + " is not installed (Debian: apt-get install docker-registry, or `make deps` as root)")

// Registry is a running registry.
type Registry struct {
	// Addr is "127.0.0.1:PORT".
	Addr string
	// Dir holds the config, the storage and the log.
	Dir string

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
	bin, err := exec.LookPath(Binary)
	if err != nil {
		return nil, ErrMissing
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
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
	cfg := filepath.Join(dir, "config.yml")
	if err := os.WriteFile(cfg, []byte(Config(dir, addr, opt)), 0o644); err != nil {
		return nil, err
	}
	logf, err := os.Create(filepath.Join(dir, "registry.log"))
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd := exec.Command(bin, "serve", cfg)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", Binary, err)
	}
	r := &Registry{Addr: addr, Dir: dir, cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(r.done) }()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/v2/", nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK || (opt.Htpasswd != "" || opt.Token != nil) && resp.StatusCode == http.StatusUnauthorized {
				return r, nil
			}
		}
		select {
		case <-r.done:
			b, _ := os.ReadFile(filepath.Join(dir, "registry.log"))
			return nil, fmt.Errorf("%s exited before it answered: %s", Binary, strings.TrimSpace(string(b)))
		case <-ctx.Done():
			r.Stop()
			return nil, fmt.Errorf("%s did not answer on %s within 20s", Binary, addr)
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

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("finding a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
