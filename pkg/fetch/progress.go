package fetch

import (
	"io"
	"math"
	"sync"
	"time"

	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"

	"github.com/sglprov/sglprov/pkg/logval"
)

// TerminalReporter draws one progress bar per active file and one for the total on a
// terminal (github.com/vbauerster/mpb/v8). Call Close once the Fetch calls are over.
type TerminalReporter struct {
	p *mpb.Progress

	mu    sync.Mutex
	bars  map[string]*termBar
	total *mpb.Bar
	sum   int64
	last  time.Time
}

type termBar struct {
	bar  *mpb.Bar
	last time.Time
	cur  int64
}

// NewTerminalReporter returns a reporter that draws bars on w (a terminal).
func NewTerminalReporter(w io.Writer) *TerminalReporter {
	return newTerminalReporter(w, false)
}

// newTerminalReporter can force drawing on a writer that is not a terminal (tests).
func newTerminalReporter(w io.Writer, forceTTY bool) *TerminalReporter {
	return &TerminalReporter{
		p: mpb.New(mpb.WithOutput(w), mpb.WithRefreshRate(200*time.Millisecond),
			mpb.ContainerOptional(mpb.WithAutoRefresh(), forceTTY), mpb.ContainerOptional(mpb.WithWidth(100), forceTTY)),
		bars: map[string]*termBar{},
	}
}

func (r *TerminalReporter) newBar(name string, total int64, priority int, removeOnComplete bool) *mpb.Bar {
	return r.p.AddBar(max(total, 0),
		mpb.BarPriority(priority),
		mpb.BarOptional(mpb.BarRemoveOnComplete(), removeOnComplete),
		mpb.PrependDecorators(
			decor.Name(name, decor.WCSyncSpaceR),
			decor.Counters(decor.SizeB1024(0), "% .1f / % .1f", decor.WCSyncSpace),
		),
		mpb.AppendDecorators(
			decor.EwmaSpeed(decor.SizeB1024(0), "% .1f", 30, decor.WCSyncSpace),
			decor.Name(" ETA "),
			decor.EwmaETA(decor.ET_STYLE_GO, 30, decor.WCSyncSpace),
		),
	)
}

// Start implements Reporter.
func (r *TerminalReporter) Start(file string, size, have int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	if r.total == nil {
		r.total = r.newBar("total", 0, math.MaxInt32, false)
		r.last = now
	}
	if b, ok := r.bars[file]; ok { // the file starts over
		b.bar.SetCurrent(have)
		r.total.IncrInt64(have - b.cur)
		b.cur, b.last = have, now
		return
	}
	b := &termBar{bar: r.newBar(file, size, len(r.bars), true), last: now, cur: have}
	b.bar.SetCurrent(have)
	r.bars[file] = b
	r.sum += max(size, 0)
	r.total.SetTotal(r.sum, false)
	r.total.IncrInt64(have)
}

// Add implements Reporter.
func (r *TerminalReporter) Add(file string, n int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	b, ok := r.bars[file]
	if !ok {
		return
	}
	now := time.Now()
	b.cur += n
	if n < 0 {
		b.bar.SetCurrent(b.cur)
		r.total.IncrInt64(n)
		return
	}
	b.bar.EwmaIncrInt64(n, now.Sub(b.last))
	r.total.EwmaIncrInt64(n, now.Sub(r.last))
	b.last, r.last = now, now
}

// Done implements Reporter.
func (r *TerminalReporter) Done(file string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	b, ok := r.bars[file]
	if !ok {
		return
	}
	if err != nil {
		b.bar.Abort(false)
		return
	}
	b.bar.SetTotal(-1, true)
}

// Close waits for the bars to be drawn a last time and stops drawing.
func (r *TerminalReporter) Close() {
	r.mu.Lock()
	for _, b := range r.bars {
		if !b.bar.Completed() {
			b.bar.Abort(false)
		}
	}
	if r.total != nil {
		r.total.SetTotal(-1, true)
	}
	r.mu.Unlock()
	r.p.Wait()
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
		"bytes_per_second", logval.Bytes(rate(f.cur-f.have, d)))
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
			r.log("downloading", "file", name, "bytes", logval.Bytes(f.cur), "bytes_per_second", logval.Bytes(bps))
			continue
		}
		pct := 100
		if f.size > 0 {
			pct = int(100 * float64(f.cur) / float64(f.size))
		}
		kv := []any{"file", name, "bytes", logval.Bytes(f.cur), "total_bytes", logval.Bytes(f.size), "percent", pct,
			"bytes_per_second", logval.Bytes(bps)}
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
