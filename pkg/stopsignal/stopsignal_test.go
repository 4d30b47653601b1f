package stopsignal

import (
	"context"
	"testing"
	"time"
)

// After the first signal, a command that does not return (a read that ignores its
// context) is ended after the grace; one that returns in time is not; without a signal
// nothing happens.
func TestEndAfterSignal(t *testing.T) {
	t.Run("command hangs", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		stopped, exited := make(chan struct{}), make(chan struct{})
		go endAfterSignal(ctx, func() { close(stopped) }, make(chan struct{}), 50*time.Millisecond, func() { close(exited) })
		cancel()
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			t.Fatal("not ended after the grace")
		}
		select {
		case <-stopped:
		default:
			t.Error("the signals kept their handler: a second one would not end the process")
		}
	})
	t.Run("command returns", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		finished, done := make(chan struct{}), make(chan struct{})
		go func() {
			endAfterSignal(ctx, func() {}, finished, time.Hour, func() { t.Error("exit called") })
			close(done)
		}()
		cancel()
		close(finished)
		<-done
	})
	t.Run("no signal", func(t *testing.T) {
		finished, done := make(chan struct{}), make(chan struct{})
		go func() {
			endAfterSignal(context.Background(), func() { t.Error("stop called") }, finished, time.Millisecond, func() { t.Error("exit called") })
			close(done)
		}()
		close(finished)
		<-done
	})
}
