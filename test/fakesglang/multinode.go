package fakesglang

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Group is the fake's multi-node launch (SGLang's --nnodes N --node-rank R
// --dist-init-addr HOST:PORT). The fake really meets at the rendezvous over TCP: rank 0
// listens at --dist-init-addr, every other rank connects, says its rank and holds the
// connection for as long as it runs.
type Group struct {
	// Nodes and Rank are --nnodes and --node-rank; Addr is --dist-init-addr.
	Nodes, Rank int
	Addr        string
	// JoinTimeout bounds the meeting (--fake-join-timeout, default 10m): a worker that
	// cannot reach the head, or a head that misses a worker, exits 1.
	JoinTimeout time.Duration
	// Iface is NCCL_SOCKET_IFNAME: a worker connects from that interface's address (a
	// name that is no interface of the host fails as NCCL's bootstrap does).
	Iface string
}

// ParseGroup reads the multi-node flags; nil when --nnodes is absent or 1.
func ParseGroup(args []string, getenv func(string) string) (*Group, error) {
	a := ParseArgs(args)
	nn := a.Get("nnodes", "1")
	n, err := strconv.Atoi(nn)
	if err != nil || n < 1 {
		return nil, fmt.Errorf("--nnodes %q: want a whole number above 0", nn)
	}
	if n == 1 {
		return nil, nil
	}
	g := &Group{Nodes: n, Addr: a.Get("dist-init-addr", ""), JoinTimeout: 10 * time.Minute}
	if g.Rank, err = strconv.Atoi(a.Get("node-rank", "0")); err != nil || g.Rank < 0 || g.Rank >= n {
		return nil, fmt.Errorf("--node-rank %q: want 0 to %d", a.Get("node-rank", ""), n-1)
	}
	if _, _, err := net.SplitHostPort(g.Addr); err != nil {
		return nil, fmt.Errorf("please provide --dist-init-addr as host:port of head node (got %q)", g.Addr)
	}
	if v := a.Get("fake-join-timeout", ""); v != "" {
		if g.JoinTimeout, err = parseDuration(v); err != nil || g.JoinTimeout <= 0 {
			return nil, fmt.Errorf("--fake-join-timeout %q: want a duration such as 30s", v)
		}
	}
	if getenv != nil {
		g.Iface = getenv("NCCL_SOCKET_IFNAME")
	}
	return g, nil
}

// member is a running node of a group.
type member struct {
	g    Group
	ln   net.Listener // the head's rendezvous listener
	conn net.Conn     // a worker's connection to the head
	done chan error   // a worker: the head went away

	mu       sync.Mutex
	joined   map[int]net.Conn
	knocking []net.Conn // the head: ranks that came while the group was broken
	lost     string     // the head: why the group broke ("" while whole)
}

// startGroup joins the group the command line describes (nil, nil without one): the head
// waits until every rank has joined, a worker until the head took it in. Both are bounded
// by the group's JoinTimeout and ctx.
func startGroup(ctx context.Context, args []string, getenv func(string) string, log io.Writer) (*member, error) {
	g, err := ParseGroup(args, getenv)
	if err != nil || g == nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, g.JoinTimeout)
	defer cancel()
	m := &member{g: *g, done: make(chan error, 1), joined: map[int]net.Conn{}}
	if g.Rank == 0 {
		return m, m.lead(ctx, log)
	}
	return m, m.join(ctx, log)
}

// lead listens at the rendezvous and waits until ranks 1..n-1 joined.
func (m *member) lead(ctx context.Context, log io.Writer) error {
	ln, err := net.Listen("tcp", m.g.Addr)
	if err != nil {
		return fmt.Errorf("rank 0 cannot listen at the rendezvous %s: %w", m.g.Addr, err)
	}
	m.ln = ln
	fmt.Fprintf(log, "fake-sglang: rank 0 of %d waiting at %s\n", m.g.Nodes, m.g.Addr)
	all := make(chan struct{})
	go m.accept(log, all)
	select {
	case <-all:
		fmt.Fprintf(log, "fake-sglang: all %d ranks joined\n", m.g.Nodes)
		return nil
	case <-ctx.Done():
		ln.Close()
		return fmt.Errorf("rank 0: only %d of %d ranks joined at %s within %s", len(m.snapshot())+1, m.g.Nodes, m.g.Addr, m.g.JoinTimeout)
	}
}

func (m *member) snapshot() map[int]net.Conn {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[int]net.Conn{}
	for k, v := range m.joined {
		out[k] = v
	}
	return out
}

// accept takes ranks in: each says "rank R", gets "ok" and is watched until its
// connection ends, which breaks the group for good (as a dead rank breaks NCCL's
// communicator: only a restart of the whole group mends it).
func (m *member) accept(log io.Writer, all chan struct{}) {
	var once sync.Once
	for {
		c, err := m.ln.Accept()
		if err != nil {
			return
		}
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		line, err := bufio.NewReader(io.LimitReader(c, 64)).ReadString('\n')
		r, aerr := strconv.Atoi(strings.TrimPrefix(strings.TrimSpace(line), "rank "))
		m.mu.Lock()
		_, dup := m.joined[r]
		bad := err != nil || aerr != nil || r < 1 || r >= m.g.Nodes
		broken := !bad && m.lost != ""
		bad = bad || dup
		switch {
		case broken:
			m.knocking = append(m.knocking, c)
		case !bad:
			m.joined[r] = c
		}
		n := len(m.joined)
		m.mu.Unlock()
		if broken {
			// As torch's TCPStore on a head whose group broke: the store still takes the
			// connection, and the rank waits on it for a group that only a restart of the
			// head makes; the connection ends when the head's server does.
			_ = c.SetDeadline(time.Time{})
			fmt.Fprintf(log, "fake-sglang: rank %d knocks from %s at a broken group: it waits until the head restarts\n", r, c.RemoteAddr())
			continue
		}
		if bad {
			fmt.Fprintf(c, "no\n")
			c.Close()
			continue
		}
		_ = c.SetDeadline(time.Time{})
		fmt.Fprintf(c, "ok\n")
		fmt.Fprintf(log, "fake-sglang: rank %d joined from %s\n", r, c.RemoteAddr())
		if n == m.g.Nodes-1 {
			once.Do(func() { close(all) })
		}
		go func(r int, c net.Conn) {
			_, _ = io.Copy(io.Discard, io.LimitReader(c, 1<<20))
			m.mu.Lock()
			if m.lost == "" {
				m.lost = fmt.Sprintf("rank %d (%s) is gone", r, c.RemoteAddr())
			}
			m.mu.Unlock()
			fmt.Fprintf(log, "fake-sglang: rank %d left the group: the group is broken until it is restarted\n", r)
		}(r, c)
	}
}

// join connects to the head (from NCCL_SOCKET_IFNAME's address when set) until it is taken
// in or ctx ends.
func (m *member) join(ctx context.Context, log io.Writer) error {
	d := net.Dialer{Timeout: 2 * time.Second}
	if m.g.Iface != "" {
		ip, err := ifaceAddr(m.g.Iface)
		if err != nil {
			return fmt.Errorf("NCCL WARN Bootstrap : no socket interface found (NCCL_SOCKET_IFNAME=%s: %v)", m.g.Iface, err)
		}
		d.LocalAddr = &net.TCPAddr{IP: ip}
	}
	last := errors.New("no attempt")
	for {
		c, err := d.DialContext(ctx, "tcp", m.g.Addr)
		if err == nil {
			// The answer comes when the head takes the rank in, which a broken head does
			// only once it has restarted (its old server then drops the connection, and
			// the rank dials again), within the meeting's bound.
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			if dl, ok := ctx.Deadline(); ok {
				_ = c.SetReadDeadline(dl)
			}
			fmt.Fprintf(c, "rank %d\n", m.g.Rank)
			line, rerr := bufio.NewReader(io.LimitReader(c, 64)).ReadString('\n')
			if rerr == nil && strings.TrimSpace(line) == "ok" {
				_ = c.SetDeadline(time.Time{})
				m.conn = c
				fmt.Fprintf(log, "fake-sglang: rank %d joined the group at %s from %s\n", m.g.Rank, m.g.Addr, c.LocalAddr())
				go func() {
					_, _ = io.Copy(io.Discard, io.LimitReader(c, 1<<20))
					m.done <- fmt.Errorf("rank %d lost the head at %s: NCCL error: remote process exited or there was a network error", m.g.Rank, m.g.Addr)
				}()
				return nil
			}
			c.Close()
			err = fmt.Errorf("the head refused rank %d (%q, %v)", m.g.Rank, strings.TrimSpace(line), rerr)
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("rank %d could not join the rendezvous %s within %s (torch.distributed TCPStore timeout): %v", m.g.Rank, m.g.Addr, m.g.JoinTimeout, last)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// ifaceAddr returns the first address of the interface (IPv4 first).
func ifaceAddr(name string) (net.IP, error) {
	i, err := net.InterfaceByName(name)
	if err != nil {
		return nil, err
	}
	addrs, err := i.Addrs()
	if err != nil {
		return nil, err
	}
	var v6 net.IP
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if n.IP.To4() != nil {
				return n.IP, nil
			}
			if v6 == nil && !n.IP.IsLinkLocalUnicast() {
				v6 = n.IP
			}
		}
	}
	if v6 == nil {
		return nil, fmt.Errorf("interface %s has no address", name)
	}
	return v6, nil
}

// Wrap returns what the node serves over HTTP: a worker SGLang's dummy health server
// (/health, /health_generate and /ping always 200, whatever the group's state); the head
// next while the group is whole, and once a rank is gone 503 on health and 500 on
// everything else.
func (m *member) Wrap(next http.Handler) http.Handler {
	if m == nil {
		return next
	}
	if m.g.Rank != 0 {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch r.URL.Path {
			case "/health", "/health_generate", "/ping":
				w.WriteHeader(http.StatusOK)
			default:
				writeError(w, http.StatusNotFound, "Not Found")
			}
		})
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.mu.Lock()
		lost := m.lost
		m.mu.Unlock()
		switch {
		case lost == "":
			next.ServeHTTP(w, r)
		case r.URL.Path == "/health" || r.URL.Path == "/health_generate":
			w.WriteHeader(http.StatusServiceUnavailable)
		default:
			writeError(w, http.StatusInternalServerError, "NCCL error: remote process exited or there was a network error: "+lost)
		}
	})
}

// Done fires when a worker lost the head (nil for the head and for no group).
func (m *member) Done() <-chan error {
	if m == nil || m.g.Rank == 0 {
		return nil
	}
	return m.done
}

// Close ends the node's part in the group.
func (m *member) Close() {
	if m == nil {
		return
	}
	if m.ln != nil {
		m.ln.Close()
	}
	if m.conn != nil {
		m.conn.Close()
	}
	for _, c := range m.snapshot() {
		c.Close()
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, c := range m.knocking {
		c.Close()
	}
}
