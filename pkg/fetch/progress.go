package fetch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"sync"
	"time"

	"github.com/charmbracelet/x/term"
	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"

	"github.com/sglprov/sglprov/pkg/logval"
)

// TerminalReporter draws one progress bar per active file and one for the total on a
// terminal (github.com/vbauerster/mpb/v8). The speed is a moving average of the bytes
// actually written over the last SpeedWindow; a file that ends with an error keeps its bar,
// marked "interrupted" or "failed". When the terminal is a SharedConsole, lines that other
// steps log while the bars are up are printed above them and stay. Call Close once the
// Fetch calls are over.
type TerminalReporter struct {
	p       *mpb.Progress
	restore func()
	now     func() time.Time

	mu      sync.Mutex
	bars    map[string]*termBar
	total   *termBar
	sum     int64
	started time.Time // when the first file started
	kept    int64     // bytes that were on disk already when their file started
}

// SharedConsole is a terminal shared with concurrent log output (pkg/console): the bars
// draw on Raw, and lines written to the console meanwhile go through Divert's writer.
type SharedConsole interface {
	// Raw returns the writer underneath, for the bars to draw on.
	Raw() io.Writer
	// Divert sends the console's whole lines to above until restore is called.
	Divert(above io.Writer) (restore func())
}

// SpeedWindow is the span the bars' speed is averaged over.
const SpeedWindow = 5 * time.Second

type termBar struct {
	bar *mpb.Bar
	ok  bool // guarded by the reporter's mu

	// mu guards what the bar's decorator reads while mpb draws; it is never held while
	// calling mpb (whose drawing goroutine calls the decorator).
	mu     sync.Mutex
	meter  meter
	cur    int64
	size   int64
	status string // "interrupted" or "failed" once the file ended without completing
}

// set updates the bar's numbers for its decorator and returns the new count.
func (b *termBar) set(f func(b *termBar)) int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	f(b)
	return b.cur
}

// meter is a moving average of bytes written: cumulative counts at the times they were
// reached, the oldest kept being the last one before the window.
type meter struct {
	samples []sample
}

type sample struct {
	at time.Time
	n  int64
}

func (m *meter) add(at time.Time, n int64) {
	m.samples = append(m.samples, sample{at, n})
	// Keep one sample at or before the window's start as the base.
	cut := 0
	for i := 1; i < len(m.samples) && !m.samples[i].at.After(at.Add(-SpeedWindow)); i++ {
		cut = i
	}
	m.samples = m.samples[cut:]
}

// shift moves every sample by d bytes: bytes that count for the position but were not
// written in the window (a file resumed from disk).
func (m *meter) shift(d int64) {
	for i := range m.samples {
		m.samples[i].n += d
	}
}

// rate returns bytes per second over the window ending at now (0 without two samples).
func (m *meter) rate(now time.Time, cur int64) float64 {
	if len(m.samples) == 0 {
		return 0
	}
	base := m.samples[0]
	for _, s := range m.samples {
		if s.at.After(now.Add(-SpeedWindow)) {
			break
		}
		base = s
	}
	d := now.Sub(base.at).Seconds()
	if d <= 0 {
		return 0
	}
	return float64(cur-base.n) / d
}

// NewTerminalReporter returns a reporter that draws bars on w (a terminal).
func NewTerminalReporter(w io.Writer) *TerminalReporter {
	return newTerminalReporter(w, false)
}

// newTerminalReporter can force drawing on a writer that is not a terminal (tests).
func newTerminalReporter(w io.Writer, forceTTY bool) *TerminalReporter {
	out := w
	shared, isShared := w.(SharedConsole)
	if isShared {
		out = shared.Raw()
	}
	r := &TerminalReporter{
		p: mpb.New(mpb.WithOutput(out), mpb.WithRefreshRate(200*time.Millisecond),
			mpb.WithConsoleWriter(newRedrawWriter(out, forceTTY)),
			mpb.ContainerOptional(mpb.WithAutoRefresh(), forceTTY),
			mpb.ContainerOptional(mpb.WithWidth(100), forceTTY)),
		bars:    map[string]*termBar{},
		now:     time.Now,
		restore: func() {},
	}
	if isShared {
		r.restore = shared.Divert(r.p)
	}
	return r
}

// redrawWriter is mpb's console writer: each frame goes out in one write, and the next
// one starts by going back to the left edge, then up over the last frame and erasing
// below. A terminal echoes Ctrl-C as "^C" where the cursor is, below the bars; going up
// from there without the carriage return left the first two columns of the top bar on
// the screen and printed the next log line two columns in ("mo22:31:31 WARN ...").
type redrawWriter struct {
	bytes.Buffer
	out      io.Writer
	fd       uintptr
	terminal bool
	force    bool
}

func newRedrawWriter(out io.Writer, force bool) *redrawWriter {
	w := &redrawWriter{out: out, force: force}
	if f, ok := out.(*os.File); ok && term.IsTerminal(f.Fd()) {
		w.fd, w.terminal = f.Fd(), true
	}
	return w
}

// IsTerminal implements mpb.ConsoleWriter.
func (w *redrawWriter) IsTerminal() bool { return w.terminal }

// GetTermSize implements mpb.ConsoleWriter.
func (w *redrawWriter) GetTermSize() (width, height int, err error) { return term.GetSize(w.fd) }

// Flush implements mpb.ConsoleWriter: it writes the frame, and readies the move back over
// its lines for the next one.
func (w *redrawWriter) Flush(lines int) error {
	if _, err := w.WriteTo(w.out); err != nil {
		return err
	}
	if (w.terminal || w.force) && lines > 0 {
		fmt.Fprintf(&w.Buffer, "\r\x1b[%dA\x1b[J", lines)
	}
	return nil
}

func (r *TerminalReporter) newBar(name string, b *termBar, priority int, removeOnComplete bool) *mpb.Bar {
	return r.p.AddBar(max(b.size, 0),
		mpb.BarPriority(priority),
		mpb.BarOptional(mpb.BarRemoveOnComplete(), removeOnComplete),
		mpb.PrependDecorators(
			decor.Name(name, decor.WCSyncSpaceR),
			decor.Counters(decor.SizeB1024(0), "% .1f / % .1f", decor.WCSyncSpace),
		),
		mpb.AppendDecorators(
			decor.Any(func(decor.Statistics) string { return r.tail(b) }, decor.WCSyncSpace),
		),
	)
}

// tail is what follows a bar: its speed and ETA, or how it ended. mpb's drawing calls it.
func (r *TerminalReporter) tail(b *termBar) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.status != "" {
		return b.status
	}
	bps := b.meter.rate(r.now(), b.cur)
	eta := "-"
	if bps > 0 && b.size > 0 {
		eta = time.Duration(float64(b.size-b.cur) / bps * float64(time.Second)).Round(time.Second).String()
	}
	return fmt.Sprintf("%s/s ETA %s", FormatBytes(int64(bps)), eta)
}

// Start implements Reporter.
func (r *TerminalReporter) Start(file string, size, have int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	if r.total == nil {
		r.total = &termBar{}
		r.total.meter.add(now, 0)
		r.started = now
		r.total.bar = r.newBar("total", r.total, math.MaxInt32, false)
	}
	if b, ok := r.bars[file]; ok { // the file starts over
		var delta int64
		b.set(func(b *termBar) {
			delta = have - b.cur
			b.cur, b.status, b.meter = have, "", meter{}
			b.meter.add(now, have)
		})
		b.ok = false
		b.bar.SetCurrent(have)
		r.total.bar.SetCurrent(r.total.set(func(t *termBar) { t.cur += delta; t.meter.shift(delta) }))
		return
	}
	b := &termBar{size: size, cur: have}
	b.meter.add(now, have)
	r.kept += max(have, 0)
	b.bar = r.newBar(file, b, len(r.bars), true)
	b.bar.SetCurrent(have)
	r.bars[file] = b
	r.sum += max(size, 0)
	r.total.set(func(t *termBar) { t.size = r.sum })
	r.total.bar.SetTotal(r.sum, false)
	// Bytes already on disk are not speed: the total's meter starts past them.
	cur := r.total.set(func(t *termBar) { t.cur += have; t.meter.shift(have) })
	r.total.bar.SetCurrent(cur)
}

// Add implements Reporter: n bytes of file were written (negative: dropped).
func (r *TerminalReporter) Add(file string, n int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	b, ok := r.bars[file]
	if !ok {
		return
	}
	now := r.now()
	cur := b.set(func(b *termBar) {
		b.cur += n
		if n < 0 { // dropped bytes restart the file's average
			b.meter = meter{}
		}
		b.meter.add(now, b.cur)
	})
	total := r.total.set(func(t *termBar) {
		t.cur += n
		if n < 0 {
			t.meter = meter{}
		}
		t.meter.add(now, t.cur)
	})
	b.bar.SetCurrent(cur)
	r.total.bar.SetCurrent(total)
}

// Done implements Reporter. A file that ended with an error keeps its bar, marked
// "interrupted" (the run was cancelled) or "failed".
func (r *TerminalReporter) Done(file string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	b, ok := r.bars[file]
	if !ok {
		return
	}
	if err != nil {
		status := "failed"
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			status = "interrupted"
		}
		b.set(func(b *termBar) { b.status = status })
		b.bar.Abort(false)
		return
	}
	b.ok = true
	b.bar.SetTotal(-1, true)
}

// Close draws the bars a last time and stops drawing: a file that did not finish is
// marked interrupted, and the total is complete only when every file is.
func (r *TerminalReporter) Close() {
	r.mu.Lock()
	all := true
	for _, b := range r.bars {
		if !b.ok {
			b.set(func(b *termBar) {
				if b.status == "" {
					b.status = "interrupted"
				}
			})
			b.bar.Abort(false)
		}
		all = all && b.ok
	}
	if r.total != nil {
		if all {
			// Done: how long it took and the average speed, not the last seconds' "ETA 0s".
			d := r.now().Sub(r.started)
			r.total.set(func(t *termBar) {
				t.status = fmt.Sprintf("done in %s, %s/s", d.Round(100*time.Millisecond),
					FormatBytes(rate(t.cur-r.kept, d)))
			})
			r.total.bar.SetTotal(-1, true)
		} else {
			r.total.set(func(t *termBar) { t.status = "interrupted" })
			r.total.bar.Abort(false)
		}
	}
	r.mu.Unlock()
	r.p.Wait()
	r.restore()
}

// PipeReporter logs, every interval, one line per active file with its bytes, rate and
// ETA as fields, for output that is not a terminal (cloud-init, journald, JSON logs).
// Call Close when done.
type PipeReporter struct {
	log      func(msg string, keyvals ...any)
	interval time.Duration
	now      func() time.Time

	mu    sync.Mutex
	files map[string]*pipeFile
	order []string

	stop chan struct{}
	done chan struct{}
	once sync.Once
}

type pipeFile struct {
	size, have, cur int64
	start           time.Time
	lastCur         int64
	lastAt          time.Time
}

// NewPipeReporter returns a reporter that calls log for each active file every interval
// (10s when interval is 0), and once when a file is done. The fields are "file",
// "bytes", "total_bytes", "percent", "bytes_per_second", "eta_seconds" and "seconds";
// sizes and times are logval values (numbers in JSON logs).
func NewPipeReporter(log func(msg string, keyvals ...any), interval time.Duration) *PipeReporter {
	if interval <= 0 {
		interval = 10 * time.Second
	}
	r := &PipeReporter{log: log, interval: interval, now: time.Now, files: map[string]*pipeFile{},
		stop: make(chan struct{}), done: make(chan struct{})}
	go r.loop()
	return r
}

func (r *PipeReporter) loop() {
	defer close(r.done)
	t := time.NewTicker(r.interval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			r.Report()
		case <-r.stop:
			return
		}
	}
}

// Start implements Reporter.
func (r *PipeReporter) Start(file string, size, have int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	if _, ok := r.files[file]; !ok {
		r.order = append(r.order, file)
	}
	r.files[file] = &pipeFile{size: size, have: have, cur: have, start: now, lastCur: have, lastAt: now}
}

// Add implements Reporter.
func (r *PipeReporter) Add(file string, n int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if f, ok := r.files[file]; ok {
		f.cur += n
	}
}

// Done implements Reporter.
func (r *PipeReporter) Done(file string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f, ok := r.files[file]
	if !ok {
		return
	}
	delete(r.files, file)
	for i, name := range r.order {
		if name == file {
			r.order = append(r.order[:i], r.order[i+1:]...)
			break
		}
	}
	d := r.now().Sub(f.start)
	if err != nil {
		r.log("download failed", "file", file, "bytes", logval.Bytes(f.cur), "err", err)
		return
	}
	r.log("downloaded", "file", file, "bytes", logval.Bytes(f.cur), "seconds", logval.Seconds(d),
		"bytes_per_second", logval.Rate(rate(f.cur-f.have, d)))
}

// Report writes one line per active file now: bytes, rate since the last line, and ETA.
// The reporter calls it every interval.
func (r *PipeReporter) Report() {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	for _, name := range r.order {
		f := r.files[name]
		bps := rate(f.cur-f.lastCur, now.Sub(f.lastAt))
		f.lastCur, f.lastAt = f.cur, now
		if f.size < 0 {
			r.log("downloading", "file", name, "bytes", logval.Bytes(f.cur), "bytes_per_second", logval.Rate(bps))
			continue
		}
		pct := 100
		if f.size > 0 {
			pct = int(100 * float64(f.cur) / float64(f.size))
		}
		kv := []any{"file", name, "bytes", logval.Bytes(f.cur), "total_bytes", logval.Bytes(f.size), "percent", pct,
			"bytes_per_second", logval.Rate(bps)}
		if bps > 0 {
			eta := time.Duration(float64(f.size-f.cur) / float64(bps) * float64(time.Second)).Round(time.Second)
			kv = append(kv, "eta_seconds", logval.Seconds(eta))
		}
		r.log("downloading", kv...)
	}
}

// rate returns n bytes over d as bytes per second.
func rate(n int64, d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64(float64(n) / d.Seconds())
}

// Close stops the periodic lines.
func (r *PipeReporter) Close() {
	r.once.Do(func() { close(r.stop) })
	<-r.done
}
