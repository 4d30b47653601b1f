package node

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/pylock"
	"github.com/sglprov/sglprov/pkg/recipe"
	"github.com/sglprov/sglprov/pkg/steps"
)

// PythonLock reads the lock of the Python environment that recipe r's Python steps made
// on this node (state dir stateDir; file names the recipe in errors): from the
// environment and the reports pip wrote when the steps ran, as their records name them.
// A recipe with no Python step (steps.PythonSteps), one none of whose Python steps ran with
// pip's report recorded, or one whose steps use two interpreters, is a usage error.
func PythonLock(ctx context.Context, r *recipe.Recipe, stateDir, file string) (*pylock.Lock, error) {
	if len(steps.PythonSteps(r)) == 0 {
		return nil, &exitcode.Error{Kind: exitcode.ErrUsage, Msg: fmt.Sprintf("recipe %s (%s) has no Python step to lock: a lock is of what a command step INTERPRETER -m pip install ... installed; add one (e.g. `command: {argv: [\"{{ .vars.python }}\", -m, pip, install, PACKAGE==VERSION]}`), apply the recipe, then lock", r.Name, file)}
	}
	st, err := engine.LoadRecipeState(stateDir, r.Name)
	if err != nil {
		return nil, err
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
		return nil, &exitcode.Error{Kind: exitcode.ErrUsage, Msg: fmt.Sprintf("recipe %s has no Python step (a command step INTERPRETER -m pip install ...) that ran on this node with pip's report recorded (state in %s): run `sglprov apply -f %s` first, on a node that reaches the package index", r.Name, stateDir, file)}
	}
	slices.SortStableFunc(runs, func(a, b ran) int { return a.rec.Started.Compare(b.rec.Started) })
	python := runs[0].py
	var reports []string
	for _, x := range runs {
		if x.py != python {
			return nil, &exitcode.Error{Kind: exitcode.ErrUsage, Msg: fmt.Sprintf("the Python steps of %s use two interpreters (%s in %s, %s in %s); a lock is of one environment", r.Name, python, runs[0].step, x.py, x.step)}
		}
		reports = append(reports, x.rep)
	}
	site, err := pylock.SitePackages(ctx, python)
	if err != nil {
		return nil, err
	}
	return pylock.Scan(site, reports)
}

// WriteLock writes l to out, replacing only a lock: a file of another kind under that name
// is the user's (a usage error).
func WriteLock(out string, l *pylock.Lock) error {
	// Only a lock is replaced: a file of another kind under that name is the user's.
	if _, err := os.Lstat(out); err == nil {
		if _, perr := pylock.Read(out); perr != nil {
			return &exitcode.Error{Kind: exitcode.ErrUsage, Msg: fmt.Sprintf("%s exists and is not a lock sglprov wrote (%v): not replacing it; name another file with -o", out, perr)}
		}
	}
	return pylock.Write(out, l)
}

// Locked is what Recipe.PythonLock wrote: the lock, where, and (for a recipe without a
// python block) the path the recipe's python.lock should name, relative to its folder.
type Locked struct {
	Lock *pylock.Lock
	Path string
	// Suggest is the python.lock value to add to the recipe ("" when it has a python
	// block).
	Suggest string
}

// PythonLock writes the lock of the Python environment that the recipe's Python steps
// made on this node (PythonLock) to out: by default the recipe's python.lock, else
// RECIPE-NAME.lock.json next to the recipe.
func (n *Recipe) PythonLock(ctx context.Context, out string) (*Locked, error) {
	r, err := n.Load()
	if err != nil {
		return nil, err
	}
	dir, _ := filepath.Abs(filepath.Dir(n.File))
	if out == "" {
		out = filepath.Join(dir, r.Name+".lock.json")
		if r.Python != nil {
			out = filepath.Join(dir, r.Python.Lock)
		}
	}
	l, err := PythonLock(ctx, r, n.StateDir, n.File)
	if err != nil {
		return nil, err
	}
	if err := WriteLock(out, l); err != nil {
		return nil, err
	}
	done := &Locked{Lock: l, Path: out}
	if r.Python == nil {
		if done.Suggest, err = filepath.Rel(dir, out); err != nil {
			done.Suggest = out
		}
	}
	return done, nil
}
