package patch

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/sglprov/sglprov/pkg/treelock"
)

// lockName is the lock file's name inside stageDir (see pkg/treelock): every run that
// writes the tree holds it from before it reads what an earlier run left until its write
// is done.
const lockName = treelock.LockName

// lockTree creates the stage folder of the tree at root (if needed) and takes its lock
// (treelock.Acquire): another process's hold is an error that wraps exitcode.ErrLocked.
func lockTree(ctx context.Context, root string) (*treelock.Lock, error) {
	return treelock.Acquire(ctx, root, stageDir, "writing the patched files of")
}

// clearStage removes what the stage folder holds besides the lock, and reports how many
// entries it removed.
func clearStage(stage string) (int, error) {
	entries, err := os.ReadDir(stage)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("reading %s: %w", stage, err)
	}
	n := 0
	for _, e := range entries {
		if e.Name() == lockName {
			continue
		}
		if err := os.RemoveAll(filepath.Join(stage, e.Name())); err != nil {
			return n, fmt.Errorf("removing %s: %w", filepath.Join(stage, e.Name()), err)
		}
		n++
	}
	return n, nil
}
