package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/pylock"
)

// lockOptions are lock's flags.
type lockOptions struct {
	recipeFlags
	out string
}

// runLock writes the lock of the Python environment that the recipe's Python steps made
// on this node: read from the environment and the reports pip wrote when the steps ran.
func runLock(ctx context.Context, stdio IO, args []string) error {
	var o lockOptions
	fs := newFlags("lock", stdio)
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
	st, err := engine.LoadRecipeState(c.stateDirPath(), r.Name)
	if err != nil {
		return err
	}
	// The Python steps' records, oldest run first: a later install's report wins.
	type ran struct {
		step string
		rec  *engine.StepRecord
		py   string
		rep  string
	}
	var runs []ran
	for _, s := range r.Steps {
		sr := st.Steps[s.Name]
		if sr == nil || len(sr.Data) == 0 {
			continue
		}
		var d struct {
			Python    string `json:"python"`
			PipReport string `json:"pip_report"`
		}
		if json.Unmarshal(sr.Data, &d) != nil || d.Python == "" || d.PipReport == "" {
			continue
		}
		runs = append(runs, ran{s.Name, sr, d.Python, d.PipReport})
	}
	if len(runs) == 0 {
		return &exitError{kind: exitcode.ErrUsage, msg: fmt.Sprintf("recipe %s has no Python step (a command step INTERPRETER -m pip install ...) that ran on this node with pip's report recorded (state in %s): run `sglprov apply -f %s` first, on a node that reaches the package index", r.Name, c.stateDirPath(), c.recipe)}
	}
	slices.SortStableFunc(runs, func(a, b ran) int { return a.rec.Started.Compare(b.rec.Started) })
	python := runs[0].py
	var reports []string
	for _, x := range runs {
		if x.py != python {
			return &exitError{kind: exitcode.ErrUsage, msg: fmt.Sprintf("the Python steps of %s use two interpreters (%s in %s, %s in %s); a lock is of one environment", r.Name, python, runs[0].step, x.py, x.step)}
		}
		reports = append(reports, x.rep)
	}
	site, err := pylock.SitePackages(ctx, python)
	if err != nil {
		return err
	}
	l, err := pylock.Scan(site, reports)
	if err != nil {
		return err
	}
	// Only a lock is replaced: a file of another kind under that name is the user's.
	if _, err := os.Lstat(out); err == nil {
		if _, perr := pylock.Read(out); perr != nil {
			return &exitError{kind: exitcode.ErrUsage, msg: fmt.Sprintf("%s exists and is not a lock sglprov wrote (%v): not replacing it; name another file with -o", out, perr)}
		}
	}
	if err := pylock.Write(out, l); err != nil {
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
