// Package stopsignal stops a command on SIGINT or SIGTERM: the first cancels its context,
// which stops its children and records what it did; a second one ends the process at
// once, whatever it waits on (the default action: a shell sees 130 for SIGINT); a command
// that has not returned within a grace after the first is ended.
package stopsignal

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sglprov/sglprov/pkg/exitcode"
)

// Handle returns a context that the first SIGINT or SIGTERM cancels (with cause
// exitcode.ErrInterrupted for SIGINT, "stopped by SIGTERM" otherwise), interrupted, which
// says whether that was a SIGINT, and done, to call once the command has returned. When it
// has not returned within grace after the signal, force is called (it ends the process).
func Handle(parent context.Context, grace time.Duration, force func()) (ctx context.Context, interrupted func() bool, done func()) {
	ctx, cancel := context.WithCancelCause(parent)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	var sigint atomic.Bool
	go func() {
		select {
		case s := <-sigs:
			sigint.Store(s == os.Interrupt)
			if s == os.Interrupt {
				cancel(exitcode.ErrInterrupted) // "stopped by SIGINT"; the report records 130
			} else {
				cancel(fmt.Errorf("stopped by %s", signalName(s)))
			}
			// The first SIGINT or SIGTERM cancels the command, which stops its children and
			// records what it did; a second one ends the process at once, whatever it
			// waits on (the default action: a shell sees 130 for SIGINT).
			signal.Stop(sigs)
		case <-ctx.Done():
		}
	}()
	finished := make(chan struct{})
	go endAfterSignal(ctx, func() { signal.Stop(sigs) }, finished, grace, force)
	return ctx, sigint.Load, func() {
		close(finished)
		signal.Stop(sigs)
		cancel(nil)
	}
}

// ForceExitAfter is how long a command may take to stop after SIGINT or SIGTERM before the
// process ends without waiting for it: longer than any clean stop takes (a build's children
// get 10 s, a server under the exec manager its unit's TimeoutStopSec, 90 s by default), so
// that it ends only what waits on something deaf to the cancel.
const ForceExitAfter = 2 * time.Minute

// endAfterSignal waits for the first signal (ctx done), then gives the signals back their
// default action, so that a second one ends the process at once, and calls exit when the
// command has not finished within grace.
func endAfterSignal(ctx context.Context, stop func(), finished <-chan struct{}, grace time.Duration, exit func()) {
	select {
	case <-ctx.Done():
	case <-finished:
		return
	}
	stop()
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-finished:
	case <-t.C:
		exit()
	}
}

func signalName(s os.Signal) string {
	switch s {
	case os.Interrupt:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	}
	return s.String()
}
