// Package gitrepo asks the git command about a work tree, with the environment that keeps
// user and system settings from changing its output. Every argument that comes from a
// recipe or a patch (a URL, a commit, an object name) is passed after "--", or is checked
// to be hex first, so that git never reads it as an option.
package gitrepo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/sglprov/sglprov/pkg/procgroup"
)

// Output runs `git -C dir ARGS...` and returns its standard output; a failure carries
// git's standard error.
func Output(ctx context.Context, dir string, args ...string) ([]byte, error) {
	out, err := command(ctx, dir, args...).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) && len(ee.Stderr) > 0 {
			return out, fmt.Errorf("git %s in %s: %s", strings.Join(args, " "), dir, strings.TrimSpace(string(ee.Stderr)))
		}
		return out, fmt.Errorf("git %s in %s: %w", strings.Join(args, " "), dir, err)
	}
	return out, nil
}

// Head returns the commit the work tree at dir has checked out (lower-case hex).
func Head(ctx context.Context, dir string) (string, error) {
	out, err := Output(ctx, dir, "rev-parse", "--verify", "HEAD")
	if err != nil {
		return "", err
	}
	return strings.ToLower(strings.TrimSpace(string(out))), nil
}

func command(ctx context.Context, dir string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "git", append([]string{"-C", dir}, args...)...)
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_OPTIONAL_LOCKS=0", "LC_ALL=C")
	return cmd
}

// maxStderr bounds what is kept of a clone's standard error (its last bytes).
const maxStderr = 16 << 10

// AllowedProtocols are the transports a clone may use (GIT_ALLOW_PROTOCOL), its
// submodules' included: never a transport helper such as fd:: or ext::, which would run a
// command or read a file descriptor instead of fetching.
const AllowedProtocols = "file:git:http:https:ssh"

// Defaults of CloneOptions.
const (
	// DefaultCloneStall is how long a git child of a clone may write nothing under its
	// folder before it is killed.
	DefaultCloneStall = 5 * time.Minute
	// DefaultCloneTimeout bounds each git child of a clone (the clone, the checkout, the
	// submodules' fetch).
	DefaultCloneTimeout = 2 * time.Hour
)

// CloneOptions bounds a clone in time. The zero value means the defaults.
type CloneOptions struct {
	// Stall kills a git child that wrote no byte under the clone's folder for this long
	// (default DefaultCloneStall): a server that accepts the connection and sends nothing,
	// or a transport that waits for ever.
	Stall time.Duration
	// Timeout bounds each git child (default DefaultCloneTimeout).
	Timeout time.Duration
}

// Clone is CloneWith with the default bounds.
func Clone(ctx context.Context, url, dst, commit string) error {
	return CloneWith(ctx, url, dst, commit, CloneOptions{})
}

// CloneWith clones the repository at url into dst (a folder that does not exist yet) and
// checks out commit, a full hex object name, detached, with its submodules. The URL comes
// after "--" and one that starts with "-" is refused, so that git never reads it as an
// option (--upload-pack=...); git never asks for a password on the terminal, uses only the
// AllowedProtocols, and reads the host's git settings as any clone does. Each git child
// runs in its own process group, killed whole when it writes nothing under dst for
// opt.Stall or runs past opt.Timeout; HTTP transfers slower than 1 KiB/s for a minute are
// aborted by git itself. The error carries git's standard error, which may quote the URL:
// callers redact it.
func CloneWith(ctx context.Context, url, dst, commit string, opt CloneOptions) error {
	if strings.HasPrefix(url, "-") {
		return fmt.Errorf("cloning: the repository URL starts with \"-\", which git would read as an option")
	}
	if len(commit) != 40 && len(commit) != 64 || strings.Trim(commit, "0123456789abcdefABCDEF") != "" {
		return fmt.Errorf("cloning: %q is not a full hex commit", commit)
	}
	if opt.Stall <= 0 {
		opt.Stall = DefaultCloneStall
	}
	if opt.Timeout <= 0 {
		opt.Timeout = DefaultCloneTimeout
	}
	run := func(what, dir string, args ...string) error {
		// The system's and the user's git settings stay (a proxy, url.insteadOf, a
		// credential helper), as for any clone on the host.
		if dir != "" {
			args = append([]string{"-C", dir}, args...)
		}
		cctx, cancel := context.WithTimeoutCause(ctx, opt.Timeout, fmt.Errorf("ran past %s", opt.Timeout))
		defer cancel()
		sctx, stop := context.WithCancelCause(cctx)
		defer stop(nil)
		cmd := exec.Command("git", args...)
		cmd.Env = append(os.Environ(), "LC_ALL=C", "GIT_TERMINAL_PROMPT=0", "GIT_ALLOW_PROTOCOL="+AllowedProtocols,
			"GIT_HTTP_LOW_SPEED_LIMIT=1024", "GIT_HTTP_LOW_SPEED_TIME=60")
		errb := &procgroup.Tail{Max: maxStderr}
		cmd.Stdout, cmd.Stderr = io.Discard, errb
		done := make(chan struct{})
		go watchGrowth(dst, opt.Stall, done, stop)
		// Killed with its children (git-remote-https, ssh), which would keep the pipes open.
		err := procgroup.Run(sctx, cmd, procgroup.Options{OutputGrace: 5 * time.Second})
		close(done)
		if err != nil {
			if cause := context.Cause(sctx); cause != nil && ctx.Err() == nil {
				return fmt.Errorf("%s: git %w; killed it (and its children)", what, cause)
			}
			if msg := strings.TrimSpace(string(errb.Bytes())); msg != "" {
				return fmt.Errorf("%s: git: %s (%w)", what, msg, err)
			}
			return fmt.Errorf("%s: git: %w", what, err)
		}
		return nil
	}
	// In the working directory, as go-getter cloned: a relative local path is read from it.
	if err := run("cloning", "", "clone", "--quiet", "--no-checkout", "--", url, dst); err != nil {
		return err
	}
	if err := run("checking out "+commit, dst, "checkout", "--quiet", "--detach", commit, "--"); err != nil {
		return err
	}
	return run("fetching the submodules", dst, "submodule", "--quiet", "update", "--init", "--recursive")
}

// growthEvery is how often watchGrowth measures the clone's folder.
var growthEvery = 2 * time.Second

// watchGrowth stops the git child (stop) when nothing under dir grew, appeared or changed
// for stall, until done is closed.
func watchGrowth(dir string, stall time.Duration, done <-chan struct{}, stop func(error)) {
	t := time.NewTicker(min(growthEvery, stall))
	defer t.Stop()
	last, since := treeSize(dir), time.Now()
	for {
		select {
		case <-done:
			return
		case <-t.C:
		}
		if n := treeSize(dir); n != last {
			last, since = n, time.Now()
			continue
		}
		if time.Since(since) >= stall {
			stop(fmt.Errorf("wrote nothing under %s for %s (a server that sends nothing, or a transport that waits)", dir, stall))
			return
		}
	}
}

// treeSize sums the sizes and counts the entries under dir (-1 when it does not exist).
func treeSize(dir string) int64 {
	var n int64 = -1
	_ = filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		n++
		if fi, err := d.Info(); err == nil && d.Type().IsRegular() {
			n += fi.Size()
		}
		return nil
	})
	return n
}

// Blob returns the content of the blob named by oid (whole or abbreviated, as a diff's
// `index` line has it) from the object store of the work tree at dir.
func Blob(ctx context.Context, dir, oid string) ([]byte, error) {
	for _, c := range oid {
		if !strings.ContainsRune("0123456789abcdefABCDEF", c) {
			return nil, fmt.Errorf("blob %q: not a hex object name", oid)
		}
	}
	return Output(ctx, dir, "cat-file", "blob", "--", oid)
}

// MergePrefix starts the names of the folders MergeFile writes the three versions to.
const MergePrefix = "sglprov-merge-"

// MergeFile merges three versions of a file as `git merge-file` does: the changes from
// base to theirs are made to ours. It returns the merged content (with conflict markers
// where there are conflicts) and the number of conflicts. The versions are written to a
// folder made in scratch (a folder of the caller's, which a run killed meanwhile leaves
// the folder in for the next run to remove; "" is the system's temporary folder) and
// removed after.
func MergeFile(ctx context.Context, scratch string, ours, base, theirs []byte) ([]byte, int, error) {
	dir, err := os.MkdirTemp(scratch, MergePrefix)
	if err != nil {
		return nil, 0, fmt.Errorf("merging: %w", err)
	}
	defer os.RemoveAll(dir)
	names := []string{"ours", "base", "theirs"}
	for i, b := range [][]byte{ours, base, theirs} {
		if err := os.WriteFile(filepath.Join(dir, names[i]), b, 0o600); err != nil {
			return nil, 0, fmt.Errorf("merging: %w", err)
		}
	}
	cmd := command(ctx, dir, "merge-file", "-p", "-q", "--", "ours", "base", "theirs")
	out, err := cmd.Output()
	if err == nil {
		return out, 0, nil
	}
	var ee *exec.ExitError
	// The exit status is the number of conflicts (capped at 127); 255 is an error.
	if errors.As(err, &ee) && ee.ExitCode() > 0 && ee.ExitCode() < 128 {
		return out, ee.ExitCode(), nil
	}
	if errors.As(err, &ee) && len(ee.Stderr) > 0 {
		return nil, 0, fmt.Errorf("git merge-file: %s", strings.TrimSpace(string(ee.Stderr)))
	}
	return nil, 0, fmt.Errorf("git merge-file: %w", err)
}

// RemoveStaleMerges removes the folders that MergeFile wrote to the system's temporary
// folder (as sglprov did before merges were staged in the caller's folder) and a run
// killed mid-merge left: those this user owns, older than a minute, holding only the
// three versions. It returns how many it removed.
func RemoveStaleMerges(now time.Time) int {
	tmp := os.TempDir()
	entries, err := os.ReadDir(tmp)
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), MergePrefix) {
			continue
		}
		dir := filepath.Join(tmp, e.Name())
		fi, err := os.Lstat(dir)
		if err != nil || !fi.IsDir() || now.Sub(fi.ModTime()) < time.Minute {
			continue
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); !ok || int(st.Uid) != os.Getuid() {
			continue
		}
		inner, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		ours := true
		for _, f := range inner {
			switch f.Name() {
			case "ours", "base", "theirs":
			default:
				ours = false
			}
			if !f.Type().IsRegular() {
				ours = false
			}
		}
		if ours && os.RemoveAll(dir) == nil {
			n++
		}
	}
	return n
}
