// Package pkgmgr installs operating-system packages through the host's package manager.
// Apt (Debian, Ubuntu) is the one implemented: installed packages are read with
// dpkg-query, missing ones installed with apt-get, and the dpkg lock that cloud-init and
// unattended-upgrades hold on a first boot is waited for, not failed on.
//
// A manager is behind the small Manager interface, so that dnf/rpm can be added as another
// implementation (rpm -q for Missing, dnf install -y for Install, waiting on rpm's
// /var/lib/rpm/.rpm.lock) without the step that uses it changing.
package pkgmgr

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
)

// Manager reads and installs packages of one package manager.
type Manager interface {
	// Name is the manager's key in a recipe ("apt").
	Name() string
	// Missing returns, in their order, the packages of pkgs that are not installed.
	Missing(ctx context.Context, pkgs []string) ([]string, error)
	// Install installs pkgs, waiting for the package database's lock. Packages that do not
	// exist are an *UnknownError naming them.
	Install(ctx context.Context, pkgs []string) error
}

// Runner runs the manager's commands. Run's output goes to the caller's log; Output
// captures it.
type Runner interface {
	// Run runs argv with env added to the process's environment.
	Run(ctx context.Context, argv []string, env []string) error
	// Output runs argv and returns its standard output and standard error.
	Output(ctx context.Context, argv []string) (stdout, stderr []byte, err error)
}

// ExecRunner runs commands with os/exec; Run's output goes to Out (discarded when nil).
type ExecRunner struct {
	Out interface{ Write([]byte) (int, error) }
}

// Run runs argv with env added to the environment, its output to r.Out.
func (r ExecRunner) Run(ctx context.Context, argv []string, env []string) error {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append(cmd.Environ(), env...)
	if r.Out != nil {
		cmd.Stdout, cmd.Stderr = r.Out, r.Out
	}
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("running %s: %w", strings.Join(argv, " "), err)
	}
	return nil
}

// Output runs argv and returns what it printed.
func (ExecRunner) Output(ctx context.Context, argv []string) ([]byte, []byte, error) {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	return out.Bytes(), errb.Bytes(), err
}

// UnknownError names packages the manager does not know, even after refreshing its lists.
type UnknownError struct {
	// Manager is the manager's name; Packages the unknown ones.
	Manager  string
	Packages []string
}

// Error names the packages and the fix.
func (e *UnknownError) Error() string {
	return fmt.Sprintf("%s does not know package(s) %s, even after refreshing its lists: check the names, or add the repository that has them (for the CUDA toolkit, NVIDIA's apt repository: see docs/cloud-init.md)",
		e.Manager, strings.Join(e.Packages, ", "))
}

// ErrDpkgInterrupted marks an install refused, or failed, because an earlier dpkg run did
// not finish: `dpkg --configure -a` (as root) finishes it.
var ErrDpkgInterrupted = errors.New("dpkg was interrupted")

// ErrNoManager marks a host without the manager's tools (a packages step for apt on a host
// without dpkg).
var ErrNoManager = errors.New("package manager not found on this host")

// baseName strips a version ("=1.2-3") and an architecture (":amd64") from a package
// argument.
func baseName(pkg string) string {
	name, _, _ := strings.Cut(pkg, "=")
	name, _, _ = strings.Cut(name, ":")
	return name
}
