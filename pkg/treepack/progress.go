package treepack

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Progress is where an unpack stands.
type Progress struct {
	// Done and Total are the layers' bytes read and to read.
	Done, Total int64
	// Rate is bytes per second since the start; ETA the time left at that rate.
	Rate    float64
	ETA     time.Duration
	Elapsed time.Duration
}

// String says the progress in a log's words.
func (p Progress) String() string {
	return fmt.Sprintf("%d/%d MiB, %.0f MiB/s, %s left", p.Done>>20, p.Total>>20, p.Rate/(1<<20), p.ETA.Round(time.Second))
}

// progress calls UnpackOptions.Progress every ProgressEvery while the layers stream, and
// on report.
type progress struct {
	fn    func(Progress)
	total int64
	read  *atomic.Int64
	start time.Time
	quit  chan struct{}
	wg    sync.WaitGroup
}

// startProgress starts the reports of the layer bytes read (none when opt.Progress is
// nil).
func startProgress(opt UnpackOptions, total int64, read *atomic.Int64) *progress {
	p := &progress{fn: opt.Progress, total: total, read: read, start: time.Now(), quit: make(chan struct{})}
	if p.fn == nil {
		return p
	}
	every := opt.ProgressEvery
	if every <= 0 {
		every = 2 * time.Second
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				p.report()
			case <-p.quit:
				return
			}
		}
	}()
	return p
}

// report reports the bytes read so far, the rate since the start and the time left.
func (p *progress) report() {
	if p.fn == nil {
		return
	}
	done := p.read.Load()
	el := time.Since(p.start)
	pr := Progress{Done: done, Total: p.total, Elapsed: el}
	if s := el.Seconds(); s > 0 {
		pr.Rate = float64(done) / s
	}
	if pr.Rate > 0 {
		pr.ETA = time.Duration(float64(p.total-done) / pr.Rate * float64(time.Second))
	}
	p.fn(pr)
}

// stop ends the periodic reports and waits for the last one.
func (p *progress) stop() {
	close(p.quit)
	p.wg.Wait()
}
