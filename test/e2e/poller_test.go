package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sglprov/sglprov/test/fakesglang"
)

// poller asks the served port over and over while a switch runs, as a router in front of
// the node would, from inside the container's network namespace: each answer is right (the
// fake's good answer), wrong (an answer that is not: "!!!!", empty, another model's), or
// none (refused, reset, not 200, too slow: the node is down). While drained() says the
// node is out of the router (its drain hook ran), no request is sent.
type poller struct {
	stop chan struct{}
	done chan struct{}

	mu                          sync.Mutex
	right, wrong, down, drained int
	firstWrong                  string
	lastRight                   time.Time
	longestGap                  time.Duration // the longest time between two right answers
}

// pollPrompt is one of the fake's built-in questions.
const pollPrompt = "What is 17 * 23? Answer with the number only."

// startPoller polls 127.0.0.1:port in the network namespace of process pid every 50 ms.
// drained may be nil (a router without hooks: it asks all the time).
func startPoller(t *testing.T, pid, port int, drained func() bool) *poller {
	t.Helper()
	p := &poller{stop: make(chan struct{}), done: make(chan struct{}), lastRight: time.Now()}
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			return dialIn(ctx, pid, addr)
		},
	}}
	want := fakesglang.GoodAnswer(pollPrompt)
	body, _ := json.Marshal(map[string]any{"model": "", "max_tokens": 64,
		"messages": []map[string]string{{"role": "user", "content": pollPrompt}}})
	go func() {
		defer close(p.done)
		for {
			select {
			case <-p.stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			if drained != nil && drained() {
				p.mu.Lock()
				p.drained++
				p.mu.Unlock()
				continue
			}
			got, ok := ask(client, port, body)
			now := time.Now()
			p.mu.Lock()
			switch {
			case !ok:
				p.down++
			case strings.TrimSpace(got) == strings.TrimSpace(want):
				p.right++
				p.longestGap = max(p.longestGap, now.Sub(p.lastRight))
				p.lastRight = now
			default:
				p.wrong++
				if p.firstWrong == "" {
					p.firstWrong = got
				}
			}
			p.mu.Unlock()
		}
	}()
	return p
}

// ask sends one chat request; it returns the answer's content (the reasoning when the
// content is empty) and whether the server answered 200.
func ask(client *http.Client, port int, body []byte) (string, bool) {
	resp, err := client.Post(fmt.Sprintf("http://127.0.0.1:%d/v1/chat/completions", port), "application/json", bytes.NewReader(body))
	if err != nil {
		return "", false
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil || resp.StatusCode != http.StatusOK {
		return "", false
	}
	var r struct {
		Choices []struct {
			Message struct {
				Content          *string `json:"content"`
				ReasoningContent *string `json:"reasoning_content"`
			} `json:"message"`
		} `json:"choices"`
	}
	if json.Unmarshal(b, &r) != nil || len(r.Choices) == 0 {
		return string(b), true
	}
	m := r.Choices[0].Message
	if m.Content != nil && *m.Content != "" {
		return *m.Content, true
	}
	if m.ReasoningContent != nil {
		return *m.ReasoningContent, true
	}
	return "", true
}

// dialIn connects to addr from inside the network namespace of process pid: the socket is
// made on a thread moved into that namespace and moved back after. The thread must not
// end while it is elsewhere, nor at all: the harness starts systemd-nspawn with a parent
// death signal, which Linux ties to the thread that forked it, and Go ends a thread whose
// goroutine exits locked to it. A thread that cannot move back is parked for good.
func dialIn(ctx context.Context, pid int, addr string) (net.Conn, error) {
	type result struct {
		c   net.Conn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		home, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			ch <- result{err: err}
			return
		}
		defer home.Close()
		f, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", pid))
		if err != nil {
			runtime.UnlockOSThread()
			ch <- result{err: err}
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			ch <- result{err: fmt.Errorf("entering the container's network: %w", err)}
			return
		}
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", addr)
		ch <- result{c, err}
		if unix.Setns(int(home.Fd()), unix.CLONE_NEWNET) != nil {
			select {} // parked: see above
		}
		runtime.UnlockOSThread()
	}()
	r := <-ch
	return r.c, r.err
}

// pollStats is what a poller saw.
type pollStats struct {
	// Drained counts the polls skipped while the node was out of the router.
	Right, Wrong, Down, Drained int
	FirstWrong                  string
	LongestGap                  time.Duration
}

// finish stops the poller and returns what it saw.
func (p *poller) finish() pollStats {
	close(p.stop)
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	return pollStats{Right: p.right, Wrong: p.wrong, Down: p.down, Drained: p.drained, FirstWrong: p.firstWrong,
		LongestGap: max(p.longestGap, time.Since(p.lastRight))}
}

// drainHooks are a recipe's drain and undrain hooks that mark the node out of the router
// with a file (drainedFile), as a load balancer's deregister and register would.
const drainHooks = `
on_unhealthy: {argv: [/bin/sh, -c, "touch /var/lib/sglprov-drained"]}
on_healthy: {argv: [/bin/sh, -c, "rm -f /var/lib/sglprov-drained"]}
`

// drainedFile is the file drainHooks write, inside the container.
const drainedFile = "/var/lib/sglprov-drained"

// drainedIn reports whether the node in root is out of the router.
func drainedIn(root string) func() bool {
	return func() bool {
		_, err := os.Stat(filepath.Join(root, drainedFile))
		return err == nil
	}
}
