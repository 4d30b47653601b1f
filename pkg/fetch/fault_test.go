package fetch

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// action is what the fault server does with one request.
type action struct {
	status      int   // answer this status with no body (e.g. 503)
	ignoreRange bool  // answer 200 with the whole body to a Range request
	dropAfter   int64 // close the connection after this many body bytes (0: never)
	stallAfter  int64 // stop sending after this many body bytes until the client gives up (0: never)
	corrupt     bool  // flip one byte of the body
	redirect    string
	header      http.Header // added to the answer
}

// faultServer serves files and injects faults, and counts what it served.
type faultServer struct {
	*httptest.Server
	files map[string][]byte
	// plan, throttle and onServed are guarded by mu (set them with configure).
	// plan decides what to do with the n-th request (from 0) for a path.
	plan func(n int, r *http.Request) action
	// throttle, when set, sleeps after every 32 KiB written.
	throttle time.Duration
	// onServed, when set, is called with the running total of served body bytes.
	onServed func(total int64)

	served atomic.Int64
	// active counts the requests being answered; peak is the most at one time.
	active, peak atomic.Int64
	mu           sync.Mutex
	counts       map[string]int
	log          []reqLog
}

type reqLog struct {
	path, rng, auth string
	status          int
}

func newFaultServer(t *testing.T, files map[string][]byte) *faultServer {
	t.Helper()
	fs := &faultServer{files: files, counts: map[string]int{}}
	fs.Server = httptest.NewServer(http.HandlerFunc(fs.serve))
	t.Cleanup(fs.Close)
	return fs
}

// configure changes the server's behaviour safely while it serves.
func (fs *faultServer) configure(f func()) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	f()
}

func (fs *faultServer) url(path string) string { return fs.URL + "/" + path }

func (fs *faultServer) requests() []reqLog {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return append([]reqLog(nil), fs.log...)
}

func (fs *faultServer) serve(w http.ResponseWriter, r *http.Request) {
	n := fs.active.Add(1)
	defer fs.active.Add(-1)
	for p := fs.peak.Load(); n > p && !fs.peak.CompareAndSwap(p, n); p = fs.peak.Load() {
	}
	fs.serveCounted(w, r)
}

func (fs *faultServer) serveCounted(w http.ResponseWriter, r *http.Request) {
	path := strings.TrimPrefix(r.URL.Path, "/")
	fs.mu.Lock()
	n := fs.counts[path]
	fs.counts[path]++
	plan, throttle, onServed := fs.plan, fs.throttle, fs.onServed
	fs.mu.Unlock()
	var act action
	if plan != nil {
		act = plan(n, r)
	}
	record := func(status int) {
		fs.mu.Lock()
		fs.log = append(fs.log, reqLog{path: path, rng: r.Header.Get("Range"), auth: r.Header.Get("Authorization"), status: status})
		fs.mu.Unlock()
	}
	for k, v := range act.header {
		w.Header()[k] = v
	}
	if act.redirect != "" {
		record(http.StatusFound)
		http.Redirect(w, r, act.redirect, http.StatusFound)
		return
	}
	data, ok := fs.files[path]
	if !ok {
		record(http.StatusNotFound)
		http.NotFound(w, r)
		return
	}
	if act.status != 0 {
		record(act.status)
		w.WriteHeader(act.status)
		return
	}
	start, end := int64(0), int64(len(data))
	status := http.StatusOK
	if rng := r.Header.Get("Range"); rng != "" && !act.ignoreRange {
		a, b, ok := parseRangeHeader(rng, int64(len(data)))
		if !ok {
			record(http.StatusRequestedRangeNotSatisfiable)
			w.WriteHeader(http.StatusRequestedRangeNotSatisfiable)
			return
		}
		start, end = a, b
		status = http.StatusPartialContent
		w.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", a, b-1, len(data)))
	}
	record(status)
	body := data[start:end]
	if act.corrupt && len(body) > 0 {
		body = append([]byte(nil), body...)
		body[len(body)/2] ^= 0xff
	}
	w.Header().Set("Content-Length", strconv.FormatInt(int64(len(body)), 10))
	w.WriteHeader(status)
	flusher := w.(http.Flusher)
	var sent int64
	for sent < int64(len(body)) {
		k := min(int64(32<<10), int64(len(body))-sent)
		if act.dropAfter > 0 && sent+k > act.dropAfter {
			k = act.dropAfter - sent
		}
		if act.stallAfter > 0 && sent+k > act.stallAfter {
			k = act.stallAfter - sent
		}
		if k > 0 {
			if _, err := w.Write(body[sent : sent+k]); err != nil {
				return
			}
			flusher.Flush()
			sent += k
			total := fs.served.Add(k)
			if onServed != nil {
				onServed(total)
			}
		}
		if act.dropAfter > 0 && sent >= act.dropAfter {
			panic(http.ErrAbortHandler) // closes the connection mid-body
		}
		if act.stallAfter > 0 && sent >= act.stallAfter {
			<-r.Context().Done()
			return
		}
		if throttle > 0 {
			time.Sleep(throttle)
		}
	}
}

// parseRangeHeader parses "bytes=A-B" or "bytes=A-" into [a, b).
func parseRangeHeader(v string, size int64) (int64, int64, bool) {
	spec, ok := strings.CutPrefix(v, "bytes=")
	if !ok {
		return 0, 0, false
	}
	as, bs, ok := strings.Cut(spec, "-")
	if !ok {
		return 0, 0, false
	}
	a, err := strconv.ParseInt(as, 10, 64)
	if err != nil || a >= size {
		return 0, 0, false
	}
	b := size
	if bs != "" {
		e, err := strconv.ParseInt(bs, 10, 64)
		if err != nil || e < a {
			return 0, 0, false
		}
		b = min(e+1, size)
	}
	return a, b, true
}

func randomBytes(t testing.TB, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}
