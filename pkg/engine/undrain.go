package engine

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/sglprov/sglprov/pkg/atomicfile"
)

// undrainOwedDir is the folder, in the state dir, of the records of recipes whose drain
// hook ran and whose undrain hook has not succeeded since.
const undrainOwedDir = "undrain-owed"

// UndrainOwedPath returns the record that says recipe's node is owed an undrain: its drain
// hook ran (a switch, or the daemon's health turning) and its undrain hook has not
// succeeded since. A switch killed in between leaves it, and the next sglprov run whose
// gate passes runs the undrain hook.
func UndrainOwedPath(stateDir, recipe string) string {
	return filepath.Join(stateDir, undrainOwedDir, recipe)
}

// MarkUndrainOwed records, before the drain hook runs, that recipe's node is owed an
// undrain (why: what drains it).
func MarkUndrainOwed(stateDir, recipe, why string) error {
	p := UndrainOwedPath(stateDir, recipe)
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return fmt.Errorf("recording that the node is owed an undrain: %w", err)
	}
	body := fmt.Sprintf("drained at %s by pid %d: %s\n", time.Now().UTC().Format(time.RFC3339), os.Getpid(), why)
	if err := atomicfile.Write(p, []byte(body), 0o600); err != nil {
		return fmt.Errorf("recording that the node is owed an undrain: %w", err)
	}
	return nil
}

// ClearUndrainOwed drops the record once the undrain hook succeeded.
func ClearUndrainOwed(stateDir, recipe string) error {
	if err := os.Remove(UndrainOwedPath(stateDir, recipe)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("dropping the record that the node is owed an undrain: %w", err)
	}
	return nil
}

// UndrainOwed reports whether recipe's node is owed an undrain (UndrainOwedPath).
func UndrainOwed(stateDir, recipe string) bool {
	_, err := os.Lstat(UndrainOwedPath(stateDir, recipe))
	return err == nil
}

// payUndrain runs the undrain hook at the end of a run that passed when the node is still
// owed one (a switch killed between its drain and its undrain left it drained): what
// serves passed this run's gate.
func (e *Engine) payUndrain(ctx context.Context) {
	name := e.opts.Recipe.Name
	gated := false
	for _, v := range e.vertices {
		if v.res != nil && v.res.Gate && v.res.Result == ResultOK {
			gated = true
		}
	}
	if !gated || e.opts.Undrain == nil || e.opts.IgnoreState || e.opts.Root != "" && e.opts.Root != "/" || !UndrainOwed(e.opts.StateDir, name) {
		return
	}
	e.log.Warn("the node is still drained (a switch that drained it did not end: killed, or its undrain hook failed); running the undrain hook, since what serves passed the gate")
	if err := e.opts.Undrain(ctx); err != nil {
		e.log.Error("the undrain hook failed; the next run tries again", "err", err)
		return
	}
	if err := ClearUndrainOwed(e.opts.StateDir, name); err != nil {
		e.log.Warn("undrained", "err", err)
	}
}
