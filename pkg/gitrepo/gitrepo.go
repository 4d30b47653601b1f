// Package gitrepo asks the git command about a work tree, with the environment that keeps
// user and system settings from changing its output.
package gitrepo

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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

// Blob returns the content of the blob named by oid (whole or abbreviated, as a diff's
// `index` line has it) from the object store of the work tree at dir.
func Blob(ctx context.Context, dir, oid string) ([]byte, error) {
	for _, c := range oid {
		if !strings.ContainsRune("0123456789abcdefABCDEF", c) {
			return nil, fmt.Errorf("blob %q: not a hex object name", oid)
		}
	}
	return Output(ctx, dir, "cat-file", "blob", oid)
}

// MergeFile merges three versions of a file as `git merge-file` does: the changes from
// base to theirs are made to ours. It returns the merged content (with conflict markers
// where there are conflicts) and the number of conflicts.
func MergeFile(ctx context.Context, ours, base, theirs []byte) ([]byte, int, error) {
	dir, err := os.MkdirTemp("", "sglprov-merge-")
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
	cmd := command(ctx, dir, "merge-file", "-p", "-q", "ours", "base", "theirs")
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
