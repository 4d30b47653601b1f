package engine

import "github.com/sglprov/sglprov/pkg/exitcode"

// Errors that carry an exit code of the command-line contract (see package exitcode, where
// they live so that libraries can wrap them without importing the engine). Steps wrap them
// with %w; ExitCode maps an error back to its code.
var (
	// ErrUsage is exitcode.ErrUsage.
	ErrUsage = exitcode.ErrUsage
	// ErrGate is exitcode.ErrGate.
	ErrGate = exitcode.ErrGate
	// ErrHost is exitcode.ErrHost.
	ErrHost = exitcode.ErrHost
	// ErrMissing is exitcode.ErrMissing.
	ErrMissing = exitcode.ErrMissing
	// ErrLocked is exitcode.ErrLocked.
	ErrLocked = exitcode.ErrLocked
	// ErrReboot is exitcode.ErrReboot.
	ErrReboot = exitcode.ErrReboot
	// ErrInterrupted is exitcode.ErrInterrupted.
	ErrInterrupted = exitcode.ErrInterrupted
)

// Exit codes of the command-line contract (package exitcode).
const (
	ExitOK          = exitcode.ExitOK
	ExitFailed      = exitcode.ExitFailed
	ExitUsage       = exitcode.ExitUsage
	ExitGate        = exitcode.ExitGate
	ExitHost        = exitcode.ExitHost
	ExitLocked      = exitcode.ExitLocked
	ExitReboot      = exitcode.ExitReboot
	ExitInterrupted = exitcode.ExitInterrupted
)

// Message returns err's text for a person, without the usage class text that wrapping put
// beside the real message (exitcode.Message).
func Message(err error) string { return exitcode.Message(err) }

// ExitCode returns the exit code for err: 0 for nil, the contract's code for the marked
// errors, 1 for anything else.
func ExitCode(err error) int { return exitcode.Of(err) }

// SkipError is returned by a step's Run when the step did not do its work and says why
// (the smoke gate under --root, where nothing was started): the run records the step as
// skipped with that reason, never as ok, and the run does not fail for it.
type SkipError struct {
	// Reason says why the step did nothing, e.g. "offline (--root): no server is started".
	Reason string
}

// Error says the step was skipped and why.
func (e *SkipError) Error() string { return "skipped: " + e.Reason }

// Skipped returns the error a step's Run returns when it skipped its work for reason.
func Skipped(reason string) error { return &SkipError{Reason: reason} }
