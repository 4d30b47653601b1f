package engine

import (
	"fmt"
	"io"
	"runtime/debug"
)

// PanicError is a step that panicked: a bug in sglprov, reported as the step's failure
// (exit 1) with its stack in the step log, never a dead run.
type PanicError struct {
	// What was running: "run", "deciding", "publishing".
	What string
	// Value is what the step panicked with; Stack the goroutine's stack then.
	Value any
	Stack []byte
	// Log is the step log that holds the stack ("" when it could not be written).
	Log string
}

// Error says the step panicked, with what, and where the stack is.
func (e *PanicError) Error() string {
	where := "its stack is in the apply's output"
	if e.Log != "" {
		where = "its stack is in " + e.Log
	}
	return fmt.Sprintf("the step panicked while %s (a bug in sglprov; %s): %v", e.What, where, e.Value)
}

// guard runs f, and turns a panic in it into a *PanicError whose stack is written to the
// step log (env's, or one opened in runDir when the step has none yet).
func (e *Engine) guard(v *vertex, env *Env, runDir, what string, f func() error) (err error) {
	defer func() {
		r := recover()
		if r == nil {
			return
		}
		pe := &PanicError{What: what, Value: r, Stack: debug.Stack()}
		w, logPath := env.Out, env.LogPath
		if logPath == "" && runDir != "" {
			if lf, p, lerr := openStepLog(runDir, v.step.Name); lerr == nil {
				defer lf.Close()
				w, logPath = lf, p
			}
		}
		if w != nil && w != io.Discard && logPath != "" {
			if _, werr := fmt.Fprintf(w, "panic while %s: %v\n\n%s\n", what, r, pe.Stack); werr == nil {
				pe.Log = logPath
			}
		}
		if pe.Log == "" {
			e.log.Error("step panicked", "step", v.step.Name, "while", what, "panic", fmt.Sprint(r), "stack", string(pe.Stack))
		}
		err = pe
	}()
	return f()
}
