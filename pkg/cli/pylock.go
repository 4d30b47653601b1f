package cli

import (
	"context"
	"fmt"
	"strings"
)

// pylockOptions are pylock's flags.
type pylockOptions struct {
	recipeFlags
	out string
}

// parsePylock parses pylock's command line into its options.
func parsePylock(stdio IO, args []string) (*pylockOptions, error) {
	var o pylockOptions
	fs := newFlags("pylock", stdio)
	o.register(fs, stdio)
	fs.StringVar(&o.out, "o", "", "the lock file to write (default: the recipe's python.lock, else RECIPE-NAME.lock.json next to the recipe)")
	return &o, parse(fs, args)
}

// pylockRun writes the lock of the Python environment that the recipe's Python steps made
// on this node: read from the environment and the reports pip wrote when the steps ran.
func pylockRun(ctx context.Context, stdio IO, o *pylockOptions) error {
	done, err := o.unlogged(stdio).PythonLock(ctx, o.out)
	if err != nil {
		return err
	}
	l := done.Lock
	d, _ := l.Digest()
	fmt.Fprintf(stdio.Stdout, "wrote %s: %d packages from wheels, %d local (%s)\n", done.Path, len(l.Packages), len(l.Local), d)
	if miss := l.Unrecorded(); len(miss) > 0 {
		fmt.Fprintf(stdio.Stderr, "note: no wheel digest was recorded for %s: they are listed under \"local\" and a locked install leaves them out (apply --force STEP of the step that installed them records pip's report)\n", strings.Join(miss, ", "))
	}
	if done.Suggest != "" {
		fmt.Fprintf(stdio.Stdout, "review it, commit it beside the recipe, and add `python: {lock: %s}` to the recipe: its Python steps then install exactly this set\n", done.Suggest)
	}
	return nil
}
