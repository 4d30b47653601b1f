package cli

import (
	"io"
	"os"

	"charm.land/log/v2"

	"github.com/sglprov/sglprov/pkg/journald"
)

// journalStderr upgrades stderr to the journal's native protocol when it is the journal's
// stream (a systemd unit's output): each log record then keeps its level as PRIORITY and
// its keys as fields, where a line on the stream would be PRIORITY=6 whatever it says.
func journalStderr(stdio IO) IO {
	if stdio.Stderr != os.Stderr || !journald.StderrIsJournal(stdio.Getenv) {
		return stdio
	}
	stdio.Stderr = journald.NewWriter(journald.Socket, "sglprov", os.Stderr)
	stdio.journal = true
	return stdio
}

// withRecipe adds the recipe's name to every record under the journal (its RECIPE field),
// where several recipes' daemons and runs share one log; a terminal does without.
func withRecipe(stdio IO, newLogger func(io.Writer) *log.Logger, recipe string) func(io.Writer) *log.Logger {
	if !stdio.journal {
		return newLogger
	}
	return func(w io.Writer) *log.Logger { return newLogger(w).With("recipe", recipe) }
}
