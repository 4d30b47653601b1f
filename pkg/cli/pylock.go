package cli

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/sglprov/sglprov/pkg/node"
)

// pypylockOptions are pylock's flags.
type pylockOptions struct {
	recipeFlags
	out string
}

// runPylock writes the lock of the Python environment that the recipe's Python steps made
// on this node: read from the environment and the reports pip wrote when the steps ran.
func runPylock(ctx context.Context, stdio IO, args []string) error {
	var o pylockOptions
	fs := newFlags("pylock", stdio)
	o.register(fs, stdio)
	fs.StringVar(&o.out, "o", "", "the lock file to write (default: the recipe's python.lock, else RECIPE-NAME.lock.json next to the recipe)")
	if err := parse(fs, args); err != nil {
		return err
	}
	c, out := &o.recipeFlags, o.out
	r, err := c.loadRecipe(stdio)
	if err != nil {
		return err
	}
	dir, _ := filepath.Abs(filepath.Dir(c.recipe))
	if out == "" {
		out = filepath.Join(dir, r.Name+".lock.json")
		if r.Python != nil {
			out = filepath.Join(dir, r.Python.Lock)
		}
	}
	l, err := node.PythonLock(ctx, r, c.stateDirPath(), c.recipe)
	if err != nil {
		return err
	}
	if err := node.WriteLock(out, l); err != nil {
		return err
	}
	d, _ := l.Digest()
	fmt.Fprintf(stdio.Stdout, "wrote %s: %d packages from wheels, %d local (%s)\n", out, len(l.Packages), len(l.Local), d)
	if miss := l.Unrecorded(); len(miss) > 0 {
		fmt.Fprintf(stdio.Stderr, "note: no wheel digest was recorded for %s: they are listed under \"local\" and a locked install leaves them out (apply --force STEP of the step that installed them records pip's report)\n", strings.Join(miss, ", "))
	}
	if r.Python == nil {
		rel, err := filepath.Rel(dir, out)
		if err != nil {
			rel = out
		}
		fmt.Fprintf(stdio.Stdout, "review it, commit it beside the recipe, and add `python: {lock: %s}` to the recipe: its Python steps then install exactly this set\n", rel)
	}
	return nil
}
