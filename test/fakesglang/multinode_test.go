package fakesglang

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// node runs one rank of a group as the binary would, returning its port-file path, a stop
// function and its exit code channel.
func node(t *testing.T, rank, addr string, env map[string]string, extra ...string) (portFile string, stop func(), done chan int, log func() string) {
	t.Helper()
	portFile = filepath.Join(t.TempDir(), "port")
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	var buf bytes.Buffer
	done = make(chan int, 1)
	args := append([]string{"--model-path", "/m", "--port", "0", "--fake-port-file", portFile,
		"--nnodes", "2", "--node-rank", rank, "--dist-init-addr", addr}, extra...)
	go func() { done <- Main(ctx, args, lockedWriter{&mu, &buf}, func(k string) string { return env[k] }) }()
	t.Cleanup(cancel)
	return portFile, cancel, done, func() string { mu.Lock(); defer mu.Unlock(); return buf.String() }
}

func waitPort(t *testing.T, path string, within time.Duration) string {
	t.Helper()
	for end := time.Now().Add(within); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if b, err := os.ReadFile(path); err == nil {
			return strings.TrimSpace(string(b))
		}
	}
	return ""
}

func status(t *testing.T, port, path string) int {
	t.Helper()
	c := http.Client{Timeout: 5 * time.Second}
	var resp *http.Response
	var err error
	if path == "/v1/chat/completions" {
		resp, err = c.Post("http://127.0.0.1:"+port+path, "application/json",
			strings.NewReader(`{"model":"/m","messages":[{"role":"user","content":"What is 2+2?"}]}`))
	} else {
		resp, err = c.Get("http://127.0.0.1:" + port + path)
	}
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	return resp.StatusCode
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// TestGroupRendezvous: the head serves nothing until the worker has joined over TCP at
// --dist-init-addr; the worker serves only the dummy health (200 on /health, 404 on the
// API); once the worker is gone the head answers 503 on health and 500 on chat for good.
func TestGroupRendezvous(t *testing.T) {
	addr := freeAddr(t)
	headPort, _, headDone, headLog := node(t, "0", addr, nil)
	if p := waitPort(t, headPort, 300*time.Millisecond); p != "" {
		t.Fatalf("the head serves on %s before the worker joined", p)
	}
	workerPort, stopWorker, workerDone, _ := node(t, "1", addr, nil)
	hp, wp := waitPort(t, headPort, 10*time.Second), waitPort(t, workerPort, 10*time.Second)
	if hp == "" || wp == "" {
		t.Fatalf("ports head %q worker %q; head log:\n%s", hp, wp, headLog())
	}
	if c := status(t, hp, "/v1/chat/completions"); c != 200 {
		t.Errorf("head chat with the group whole: %d", c)
	}
	if c := status(t, wp, "/health_generate"); c != 200 {
		t.Errorf("worker dummy health: %d", c)
	}
	if c := status(t, wp, "/v1/models"); c != 404 {
		t.Errorf("worker /v1/models: %d, want 404 (only rank 0 serves the API)", c)
	}
	stopWorker()
	<-workerDone
	var h int
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if h = status(t, hp, "/health_generate"); h == 503 {
			break
		}
	}
	if h != 503 || status(t, hp, "/v1/chat/completions") != 500 {
		t.Errorf("head after the worker left: health %d", h)
	}
	if !strings.Contains(headLog(), "rank 1 left the group") {
		t.Errorf("head log:\n%s", headLog())
	}
	select {
	case code := <-headDone:
		t.Errorf("the head exited %d", code)
	default:
	}
}

// TestGroupWorkerFails: a worker whose NCCL_SOCKET_IFNAME is no interface fails as NCCL's
// bootstrap does; one that cannot reach the head gives up after the join timeout naming
// the rendezvous; a worker exits when the head goes away.
func TestGroupWorkerFails(t *testing.T) {
	addr := freeAddr(t)
	_, _, done, log := node(t, "1", addr, map[string]string{"NCCL_SOCKET_IFNAME": "nosuch0"})
	if code := <-done; code != 1 || !strings.Contains(log(), "no socket interface found (NCCL_SOCKET_IFNAME=nosuch0") {
		t.Errorf("exit %d, log:\n%s", code, log())
	}
	_, _, done, log = node(t, "1", addr, nil, "--fake-join-timeout", "1s")
	if code := <-done; code != 1 || !strings.Contains(log(), "rank 1 could not join the rendezvous "+addr+" within 1s") {
		t.Errorf("exit %d, log:\n%s", code, log())
	}
	_, stopHead, _, _ := node(t, "0", addr, nil)
	wPort, _, wDone, wLog := node(t, "1", addr, nil)
	if waitPort(t, wPort, 10*time.Second) == "" {
		t.Fatalf("worker never joined:\n%s", wLog())
	}
	stopHead()
	select {
	case code := <-wDone:
		if code != 1 || !strings.Contains(wLog(), "rank 1 lost the head at "+addr) {
			t.Errorf("exit %d, log:\n%s", code, wLog())
		}
	case <-time.After(10 * time.Second):
		t.Error("the worker outlived its head")
	}
}

// TestGroupRestartInOrder: once a worker is gone, a new worker that comes knocks at the
// broken head, which holds its connection without taking it in (as torch's TCPStore on a
// head whose group broke); when the head restarts, the waiting worker dials the new head
// and the group serves again.
func TestGroupRestartInOrder(t *testing.T) {
	addr := freeAddr(t)
	headPort, stopHead, headDone, headLog := node(t, "0", addr, nil)
	workerPort, stopWorker, workerDone, _ := node(t, "1", addr, nil)
	if waitPort(t, headPort, 10*time.Second) == "" || waitPort(t, workerPort, 10*time.Second) == "" {
		t.Fatalf("the group did not form:\n%s", headLog())
	}
	stopWorker()
	<-workerDone
	waitLog := func(log func() string, want string) bool {
		for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
			if strings.Contains(log(), want) {
				return true
			}
		}
		return false
	}
	if !waitLog(headLog, "rank 1 left the group") {
		t.Fatalf("head log:\n%s", headLog())
	}
	workerPort, _, workerDone, workerLog := node(t, "1", addr, nil)
	if !waitLog(headLog, "rank 1 knocks from") {
		t.Fatalf("the new worker did not knock at the broken head:\n%s", headLog())
	}
	if strings.Contains(workerLog(), "joined the group") {
		t.Fatalf("a broken head took the worker in:\n%s", workerLog())
	}
	stopHead()
	<-headDone
	headPort, _, _, headLog = node(t, "0", addr, nil)
	hp := waitPort(t, headPort, 15*time.Second)
	if hp == "" || waitPort(t, workerPort, 15*time.Second) == "" {
		t.Fatalf("the group did not form again; head:\n%s\nworker:\n%s", headLog(), workerLog())
	}
	if c := status(t, hp, "/v1/chat/completions"); c != 200 {
		t.Errorf("head chat after the group restarted: %d", c)
	}
	select {
	case code := <-workerDone:
		t.Errorf("the worker exited %d:\n%s", code, workerLog())
	default:
	}
}
