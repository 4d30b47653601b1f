package daemon

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/expfmt"

	"github.com/sglprov/sglprov/pkg/atomicfile"
)

// Serve serves /metrics, /healthz and /readyz on addr until the listener fails; it
// returns the bound address.
func (m *Metrics) Serve(addr string) (net.Addr, func() error, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("listening for metrics on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", m.healthz)
	mux.HandleFunc("/readyz", m.readyz)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			_ = err // the daemon goes on without metrics
		}
	}()
	return ln.Addr(), srv.Close, nil
}

// WriteTextfile writes the metrics for node_exporter's textfile collector, as its docs
// ask: to a temporary file in the same folder, renamed over path (atomicfile: fsynced, a
// name the collector's *.prom glob does not match), mode 0644 for the collector to read.
// It makes the folder first (mode 0755) where the host has none yet, and sets the
// heartbeat to now.
func (m *Metrics) WriteTextfile(path string) error {
	if m == nil || path == "" {
		return nil
	}
	m.beat()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("making the metrics textfile's folder: %w", err)
	}
	fams, err := m.reg.Gather()
	if err != nil {
		return fmt.Errorf("gathering metrics: %w", err)
	}
	var b bytes.Buffer
	for _, f := range fams {
		if _, err := expfmt.MetricFamilyToText(&b, f); err != nil {
			return fmt.Errorf("encoding metrics: %w", err)
		}
	}
	if err := atomicfile.Write(path, b.Bytes(), 0o644); err != nil {
		return fmt.Errorf("writing metrics textfile: %w", err)
	}
	// atomicfile's temporary file takes the process's umask; the collector needs to read.
	if err := os.Chmod(path, 0o644); err != nil {
		return fmt.Errorf("writing metrics textfile: %w", err)
	}
	return nil
}

// probeTimeout bounds how long /healthz waits for the served port during a switch.
const probeTimeout = 500 * time.Millisecond

// refusing returns, for each recipe whose switch runs now, why its served port does not
// accept a connection ("" when it does): the port is dialled with each request, so
// /healthz follows what a client of the node finds.
func (m *Metrics) refusing() map[*recipeState]string {
	m.mu.Lock()
	addrs := map[*recipeState]string{}
	for _, s := range m.states {
		if s.switching != "" {
			addrs[s] = s.switching
		}
	}
	m.mu.Unlock()
	out := map[*recipeState]string{}
	for s, addr := range addrs {
		c, err := net.DialTimeout("tcp", addr, probeTimeout)
		if err != nil {
			out[s] = err.Error()
			continue
		}
		_ = c.Close()
		out[s] = ""
	}
	return out
}

// switchingLine judges a recipe whose switch runs (ok false when it does not): 503 while
// its served port refuses connections, else what its health says with the switch noted.
func switchingLine(s *recipeState, refused map[*recipeState]string, what string) (served bool, line string, ok bool) {
	why, switching := refused[s]
	if !switching {
		return false, "", false
	}
	if why != "" {
		return false, fmt.Sprintf("%s: a switch of %s is in progress and its served port %s refuses connections (%s)", what, s.switchUnit, s.switching, oneLine(why, "refused")), true
	}
	return true, "", true
}

// healthz is what a load balancer asks: 200 only while every recipe's node serves
// correct answers (health "healthy"), 503 otherwise, the body naming each recipe's health
// and, for one that is not healthy, why ("node_health=degraded: canary failed: ...").
func (m *Metrics) healthz(w http.ResponseWriter, _ *http.Request) {
	refused := m.refusing()
	m.answer(w, func(s *recipeState) (bool, string) {
		if ok, line, switching := switchingLine(s, refused, "node_health=switching"); switching && !ok {
			return false, line
		}
		note := ""
		if _, switching := refused[s]; switching {
			note = "; switch in progress (" + s.switchUnit + ")"
		}
		h := s.health
		if h == "" {
			return false, "node_health=starting: the first apply has not finished" + note
		}
		if h == Healthy {
			if s.pending != "" {
				return true, "node_health=healthy; change pending: " + oneLine(s.pending, "its switch failed") + note
			}
			return true, "node_health=healthy" + note
		}
		return false, fmt.Sprintf("node_health=%s: %s%s", h, oneLine(s.reason, h.Words()), note)
	})
}

// readyz answers 200 once the first gate of every recipe passed (an apply succeeded),
// and stays so; 503 before.
func (m *Metrics) readyz(w http.ResponseWriter, _ *http.Request) {
	refused := m.refusing()
	m.answer(w, func(s *recipeState) (bool, string) {
		if ok, line, switching := switchingLine(s, refused, "not ready"); switching && !ok {
			return false, line
		}
		if s.ready {
			return true, "ready"
		}
		if s.health == Stopped {
			return false, "not ready: the daemon stopped"
		}
		return false, "not ready: the first gate has not passed yet"
	})
}

// answer writes 200 when judge passes every recipe, else 503; one line per recipe
// ("RECIPE: ..."), or the one line alone for a single recipe, prefixed "ok " on 200.
func (m *Metrics) answer(w http.ResponseWriter, judge func(*recipeState) (bool, string)) {
	m.mu.Lock()
	names := make([]string, 0, len(m.states))
	for n := range m.states {
		names = append(names, n)
	}
	sort.Strings(names)
	all := len(names) > 0
	var lines []string
	for _, n := range names {
		ok, line := judge(m.states[n])
		all = all && ok
		if len(names) > 1 {
			line = n + ": " + line
		}
		lines = append(lines, line)
	}
	m.mu.Unlock()
	if len(names) == 0 {
		lines = []string{"node_health=starting: the first apply has not finished"}
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	code, prefix := http.StatusServiceUnavailable, ""
	if all {
		code, prefix = http.StatusOK, "ok "
	}
	w.WriteHeader(code)
	fmt.Fprintf(w, "%s%s\n", prefix, strings.Join(lines, "\n"))
}

// oneLine is s on one line, at most 512 bytes; def when s is empty. The lines of s (a
// refusal lists one problem a line) are joined with "; ", so that they stay apart.
func oneLine(s, def string) string {
	var parts []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.Join(strings.Fields(l), " "); l != "" {
			parts = append(parts, l)
		}
	}
	s = strings.Join(parts, "; ")
	s = strings.ReplaceAll(s, ":; ", ": ")
	if s == "" {
		return def
	}
	if len(s) > 512 {
		s = s[:512] + "..."
	}
	return s
}
