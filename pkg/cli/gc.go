package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/fetch"
	"github.com/sglprov/sglprov/pkg/generation"
	"github.com/sglprov/sglprov/pkg/logval"
)

// runGC frees what no recipe on the node needs: generations beyond the kept ones, the
// part files of unfinished downloads, and weights that removed recipes left and no recipe
// uses. It says how much each frees.
func runGC(ctx context.Context, stdio IO, args []string) error {
	var c common
	var dryRun bool
	fs := newFlags("gc", stdio)
	c.register(fs, stdio)
	fs.BoolVar(&dryRun, "dry-run", false, "say what would be freed; change nothing")
	if err := parse(fs, args); err != nil {
		return err
	}
	dir := c.stateDirPath()
	lock, states, err := lockedStates(dir)
	if err != nil {
		return err
	}
	defer lock.Release()
	verb := "freed"
	if dryRun {
		verb = "would free"
	}
	var total int64
	var errs []error
	say := func(what string, n int64) {
		total += n
		fmt.Fprintf(stdio.Stdout, "  %s: %s %s\n", what, verb, logval.Format(n))
	}
	names := make([]string, 0, len(states.Recipes))
	for name := range states.Recipes {
		names = append(names, name)
	}
	sort.Strings(names)
	fmt.Fprintln(stdio.Stdout, "Garbage collection:")
	owned := map[string]bool{} // weights folders some recipe owns
	for _, name := range names {
		for _, o := range states.Recipes[name].Owns {
			switch o.Kind {
			case engine.OwnedWeights:
				owned[filepath.Clean(o.Path)] = true
			case engine.OwnedGenerations:
				store, err := generation.Open(o.Path, filepath.Join(dir, "generations", name+".json"), o.Keep)
				if err != nil {
					errs = append(errs, err)
					continue
				}
				p, err := store.Prune(dryRun)
				if err != nil {
					errs = append(errs, err)
				}
				if p != nil {
					fmt.Fprintf(stdio.Stdout, "  generations of %s: %s\n", name, strings.Replace(p.Describe(logval.Format), "; freed", "; "+verb, 1))
					total += p.Bytes
				}
			}
		}
	}
	// Part files of every weights folder the node knows, owned or orphaned.
	var folders []string
	for p := range owned {
		folders = append(folders, p)
	}
	for _, o := range states.Orphans {
		folders = append(folders, filepath.Clean(o.Path))
	}
	sort.Strings(folders)
	for _, f := range folders {
		work := filepath.Join(f, fetch.WorkDir)
		n := generation.DiskUsage(work)
		if n == 0 {
			continue
		}
		if !dryRun {
			if err := os.RemoveAll(work); err != nil {
				errs = append(errs, fmt.Errorf("removing part files in %s: %w", f, err))
				continue
			}
		}
		say("part files in "+f, n)
	}
	// Weights removed recipes left, unless a recipe owns them again.
	var left []engine.Owned
	for _, o := range states.Orphans {
		if o.Kind != engine.OwnedWeights || owned[filepath.Clean(o.Path)] {
			continue
		}
		n := generation.DiskUsage(o.Path)
		if !dryRun {
			if err := os.RemoveAll(o.Path); err != nil {
				errs = append(errs, fmt.Errorf("removing weights %s: %w", o.Path, err))
				left = append(left, o)
				continue
			}
		}
		say("weights no recipe uses, "+o.Path, n)
	}
	if !dryRun && len(states.Orphans) > 0 {
		states.Orphans = left
		if err := engine.SaveStates(dir, states); err != nil {
			errs = append(errs, err)
		}
	}
	fmt.Fprintf(stdio.Stdout, "%s %s in all\n", verb, logval.Format(total))
	if len(errs) > 0 {
		return fmt.Errorf("gc: %w", errors.Join(errs...))
	}
	return nil
}

// lockedStates takes the state dir's lock and reads every recipe's records under it, for
// the commands that change what the node keeps (remove, gc); the caller releases the lock.
func lockedStates(dir string) (*engine.Lock, *engine.StateFile, error) {
	lock, err := engine.AcquireLock(dir)
	if err != nil {
		return nil, nil, err
	}
	states, err := engine.LoadStates(dir)
	if err != nil {
		_ = lock.Release()
		return nil, nil, err
	}
	return lock, states, nil
}
