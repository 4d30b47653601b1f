// Package exitcode holds the errors that carry an exit code of sglprov's command-line
// contract, and the mapping from an error to its code. It is a leaf package: the engine, the
// step kinds and the libraries (service) wrap these errors with %w without importing one
// another.
package exitcode

import (
	"errors"
	"regexp"
	"strings"
)

// Errors that carry an exit code of the command-line contract. Callers wrap them with %w;
// Of maps an error back to its code.
var (
	// ErrUsage marks bad usage or an invalid recipe or recipe value (exit 2).
	ErrUsage = errors.New(usageText)
	// ErrGate marks a failed smoke gate (exit 3).
	ErrGate = errors.New("smoke gate failed")
	// ErrHost marks a host that does not meet the recipe's requirements (exit 4).
	ErrHost = errors.New("host does not meet the recipe's requirements")
	// ErrMissing marks something the recipe pins that its origin says does not exist (a
	// model revision the hub does not have): nothing on this host can fix it (exit 4, as
	// for a host that falls short: the run must not start).
	ErrMissing = errors.New("what the recipe pins does not exist")
	// ErrLocked marks a run refused because another holds the lock (exit 5).
	ErrLocked = errors.New("another sglprov run holds the lock")
	// ErrReboot marks a driver/library version mismatch that needs a reboot (exit 6).
	ErrReboot = errors.New("reboot required")
	// ErrInterrupted is the cause a run is cancelled with on Ctrl-C (SIGINT) (exit 130).
	ErrInterrupted = errors.New("stopped by SIGINT")
)

// usageText is ErrUsage's text: the class, which Message drops from a message.
const usageText = "invalid usage or recipe"

// Exit codes of the command-line contract.
const (
	ExitOK     = 0
	ExitFailed = 1
	ExitUsage  = 2
	ExitGate   = 3
	ExitHost   = 4
	ExitLocked = 5
	ExitReboot = 6
	// ExitInterrupted is a run stopped by Ctrl-C (SIGINT): 128 + 2, as shells report it.
	ExitInterrupted = 130
)

// Of returns the exit code for err: 0 for nil, the contract's code for the marked
// errors above, 1 for anything else.
func Of(err error) int {
	switch {
	case err == nil:
		return ExitOK
	case errors.Is(err, ErrUsage):
		return ExitUsage
	case errors.Is(err, ErrGate):
		return ExitGate
	case errors.Is(err, ErrHost), errors.Is(err, ErrMissing):
		return ExitHost
	case errors.Is(err, ErrLocked):
		return ExitLocked
	case errors.Is(err, ErrReboot):
		return ExitReboot
	case errors.Is(err, ErrInterrupted):
		return ExitInterrupted
	}
	return ExitFailed
}

// Err returns the marked error that Of maps to code (ErrHost for 4), or nil for a code
// that none of them carries (0, 1, any other).
func Err(code int) error {
	for _, err := range []error{ErrUsage, ErrGate, ErrHost, ErrLocked, ErrReboot, ErrInterrupted} {
		if Of(err) == code {
			return err
		}
	}
	return nil
}

// classPhrase finds the text of ErrUsage where wrapping with %w put it beside the real
// message: "...: invalid usage or recipe" at the end of a line or before another ": ", or
// "invalid usage or recipe: ..." at the start of one.
var classPhrase = regexp.MustCompile(`(?m)(: ` + regexp.QuoteMeta(usageText) + `(:|$))|((^|: )` + regexp.QuoteMeta(usageText) + `: )`)

// Message returns err's text for a person: without the class phrase of ErrUsage that
// wrapping added beside the real text ("step c: dir is required: invalid usage or recipe"
// reads "step c: dir is required"); the exit code says the class. Other errors' text is
// returned as it is.
func Message(err error) string {
	if err == nil {
		return ""
	}
	msg := err.Error()
	if !errors.Is(err, ErrUsage) {
		return msg
	}
	out := classPhrase.ReplaceAllStringFunc(msg, func(m string) string {
		switch m {
		case ": " + usageText: // "a: invalid usage or recipe" at the end of a line
			return ""
		case ": " + usageText + ":": // "a: invalid usage or recipe: b"
			return ":"
		case ": " + usageText + ": ":
			return ": "
		}
		return "" // "invalid usage or recipe: b" at the start of a line
	})
	if strings.TrimSpace(out) == "" {
		return msg
	}
	return out
}

// Error is an error with its own message that carries the exit code of Kind (one of the
// Err* values) without repeating Kind's text.
type Error struct {
	Msg  string
	Kind error
}

func (e *Error) Error() string { return e.Msg }

// Unwrap returns Kind, which gives the error its exit code.
func (e *Error) Unwrap() error { return e.Kind }
