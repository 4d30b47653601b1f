package cli

import (
	"os"

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
