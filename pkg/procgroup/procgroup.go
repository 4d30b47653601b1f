// Package procgroup runs a child process in a process group of its own and stops the
// whole group: SIGTERM to every process in it, then SIGKILL after a grace period, so that
// what the child started (a wrapper script's commands, git's transport helpers, a
// server's workers) goes with it.
//
// The child's output is read by the package itself, through pipes it owns, so that a
// process that keeps the output open after the child has exited never holds the caller:
// reading goes on for a bounded time (Options.OutputGrace) after the child exits, and a
// writer that fails does not stop the reading. Tail and Head keep a bounded part of it.
//
// A process that leaves the group (setsid) is out of reach, as it is for systemd's
// KillMode=process-group; sglprov's children do not.
package procgroup

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// DefaultOutputGrace is how long output is still read after the child has exited, when
// Options.OutputGrace is zero.
const DefaultOutputGrace = time.Second

// Options say how a child runs and stops.
type Options struct {
	// Grace is how long the group has between SIGTERM and SIGKILL when it is stopped
	// (Stop, or Run's context ending); zero sends SIGKILL at once.
	Grace time.Duration
	// ParentDeath is the signal the child gets when the thread that started it dies (so
	// that it does not outlive sglprov); zero sends none. Linux's PR_SET_PDEATHSIG.
	ParentDeath syscall.Signal
	// KeepLeftovers leaves running the processes of the group that are still there when
	// the child exits by itself (a command may start a server meant to outlive it); by
	// default they are killed (SIGKILL) as soon as the child has exited. A stopped child's
	// group is killed whole either way.
	KeepLeftovers bool
	// OutputGrace is how long the output is still read after the child has exited (what
	// its group wrote is in the pipe already; a process that keeps the pipe open is not
	// waited for); DefaultOutputGrace when zero.
	OutputGrace time.Duration
}

// Child is a started child process, the leader of its own process group.
type Child struct {
	cmd    *exec.Cmd
	pgid   int
	opt    Options
	exited chan struct{} // closed when the child has exited and been waited for
	done   chan struct{} // closed when, besides, its output has been read
	err    error         // cmd.Wait's, set before exited is closed
	killed atomic.Bool
	stop   sync.Once
}

// Start starts cmd in a process group of its own, with its other SysProcAttr settings
// (credentials among them) kept. A cmd.Stdout or cmd.Stderr that is not an *os.File is
// fed from a pipe that Start makes (one pipe when both are the same writer); cmd must not
// have been started and must not be waited for by the caller: use Wait.
func Start(cmd *exec.Cmd, opt Options) (*Child, error) {
	if opt.OutputGrace <= 0 {
		opt.OutputGrace = DefaultOutputGrace
	}
	cmd.SysProcAttr = groupAttr(cmd.SysProcAttr, opt)
	var out outputPipes
	if err := out.connect(cmd); err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		out.closeAll()
		return nil, err
	}
	// The child holds its own copies now; once it and its group are gone, the reads end.
	for _, f := range out.childEnds {
		_ = f.Close()
	}
	c := &Child{cmd: cmd, pgid: cmd.Process.Pid, opt: opt, exited: make(chan struct{}), done: make(chan struct{})}
	copied := out.drain()
	go c.watch(&out, copied)
	return c, nil
}

// groupAttr returns a copy of attr (nil: none) that starts the child as the leader of a
// group of its own, with opt's parent-death signal.
func groupAttr(attr *syscall.SysProcAttr, opt Options) *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{}
	if attr != nil {
		c := *attr
		a = &c
	}
	a.Setpgid, a.Pgid = true, 0
	if opt.ParentDeath != 0 {
		a.Pdeathsig = opt.ParentDeath
	}
	return a
}

// watch waits for the child to exit, kills the leftovers of its group (unless they are
// kept), and waits for its output to be read, at most OutputGrace longer.
func (c *Child) watch(out *outputPipes, copied <-chan struct{}) {
	c.err = c.cmd.Wait()
	close(c.exited)
	if !c.opt.KeepLeftovers {
		c.killGroup(syscall.SIGKILL)
	}
	select {
	case <-copied:
	case <-time.After(c.opt.OutputGrace):
		// A process outside the group, or a leftover, still holds the pipe.
		out.closeReaders()
		<-copied
	}
	out.closeReaders()
	close(c.done)
}

// outputPipes are the pipes Start makes for the child's output: the ends read here, the
// writer each feeds, and the ends the child writes to.
type outputPipes struct {
	readers   []*os.File
	writers   []io.Writer
	childEnds []*os.File
}

// connect gives cmd's Stdout and Stderr that are not files a pipe each (one pipe when
// both are the same writer).
func (p *outputPipes) connect(cmd *exec.Cmd) error {
	sameWriter := cmd.Stdout != nil && cmd.Stdout == cmd.Stderr
	stdout, err := p.pipe(cmd.Stdout)
	if err != nil {
		return err
	}
	stderr := stdout
	if !sameWriter {
		if stderr, err = p.pipe(cmd.Stderr); err != nil {
			p.closeAll()
			return err
		}
	}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	return nil
}

// pipe returns what the child writes to for w: w itself when it is nil or a file, else
// the writing end of a new pipe that feeds w.
func (p *outputPipes) pipe(w io.Writer) (io.Writer, error) {
	if w == nil {
		return nil, nil
	}
	if _, ok := w.(*os.File); ok {
		return w, nil
	}
	r, cw, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("making the output pipe: %w", err)
	}
	p.readers, p.writers, p.childEnds = append(p.readers, r), append(p.writers, w), append(p.childEnds, cw)
	return cw, nil
}

// closeAll closes both ends of every pipe (the child was not started).
func (p *outputPipes) closeAll() {
	for _, f := range append(p.readers, p.childEnds...) {
		_ = f.Close()
	}
}

// closeReaders closes the ends read here, which ends the reads.
func (p *outputPipes) closeReaders() {
	for _, r := range p.readers {
		_ = r.Close()
	}
}

// drain copies each pipe to its writer; the channel is closed once every pipe has ended.
func (p *outputPipes) drain() <-chan struct{} {
	copied := make(chan struct{})
	var wg sync.WaitGroup
	for i := range p.readers {
		wg.Add(1)
		go func(r io.Reader, w io.Writer) {
			defer wg.Done()
			drain(w, r)
		}(p.readers[i], p.writers[i])
	}
	go func() { wg.Wait(); close(copied) }()
	return copied
}

// drain copies r to w until r ends; a failing w does not stop the reading, so that the
// child never blocks on a full pipe.
func drain(w io.Writer, r io.Reader) {
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			_, _ = w.Write(buf[:n])
		}
		if err != nil {
			return
		}
	}
}

// Pid returns the child's process ID, which is its group's ID too.
func (c *Child) Pid() int { return c.pgid }

// Exited is closed when the child has exited (its group and output may not be done yet:
// see Done).
func (c *Child) Exited() <-chan struct{} { return c.exited }

// Done is closed when the child has exited, its group has been killed (unless
// KeepLeftovers) and its output has been read.
func (c *Child) Done() <-chan struct{} { return c.done }

// Wait waits for Done and returns how the child ended: nil, an *exec.ExitError, or the
// error of waiting for it. It may be called more than once, from any goroutine.
func (c *Child) Wait() error {
	<-c.done
	return c.err
}

// Signal sends sig to every process of the child's group.
func (c *Child) Signal(sig syscall.Signal) error {
	if err := syscall.Kill(-c.pgid, sig); err != nil {
		return fmt.Errorf("signalling process group %d: %w", c.pgid, err)
	}
	return nil
}

func (c *Child) killGroup(sig syscall.Signal) { _ = syscall.Kill(-c.pgid, sig) }

// Stop stops the child's group: SIGTERM, then, when the child has not exited within
// Options.Grace, SIGKILL (at once when Grace is zero); whatever of the group outlives the
// child is killed too. It returns Wait's result; a second Stop only waits.
func (c *Child) Stop() error {
	c.stop.Do(func() {
		if c.opt.Grace > 0 {
			c.killGroup(syscall.SIGTERM)
			t := time.NewTimer(c.opt.Grace)
			select {
			case <-c.exited:
			case <-t.C:
			}
			t.Stop()
		}
		select {
		case <-c.exited:
		default:
			c.killed.Store(true)
			c.killGroup(syscall.SIGKILL)
			<-c.exited
		}
		// Whatever of the group outlived its leader goes too.
		c.killGroup(syscall.SIGKILL)
	})
	return c.Wait()
}

// Killed reports whether Stop had to send SIGKILL because the child was still running
// after the grace period (or at once, with no grace).
func (c *Child) Killed() bool { return c.killed.Load() }

// Run starts cmd as Start does and waits for it; when ctx ends first, the group is
// stopped (Stop). It returns how the child ended (after a stop, typically an
// *exec.ExitError of a signal; the caller asks ctx why), or ctx's error when ctx had
// ended before the start.
func Run(ctx context.Context, cmd *exec.Cmd, opt Options) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c, err := Start(cmd, opt)
	if err != nil {
		return err
	}
	select {
	case <-c.exited:
	case <-ctx.Done():
		return c.Stop()
	}
	return c.Wait()
}
