package multinode

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sglprov/sglprov/test/fakesglang"
)

// A fixture /proc/net/tcp and tcp6: the rendezvous port 29500 (0x733C) listens on
// 10.0.0.1; worker 10.0.0.2 holds two connections to it, the head's own process one (from
// 10.0.0.1), a v4-mapped worker 10.0.0.3 one over tcp6; a connection from the rendezvous
// port's host to elsewhere in TIME_WAIT and a connection on another port are not counted.
func TestReadRendezvousIn(t *testing.T) {
	proc := t.TempDir()
	if err := os.MkdirAll(filepath.Join(proc, "net"), 0o755); err != nil {
		t.Fatal(err)
	}
	const hdr = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
	tcp := hdr +
		"   0: 0100000A:733C 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 101 1\n" +
		"   1: 0100000A:733C 0200000A:C350 01 00000000:00000000 00:00000000 00000000     0        0 102 1\n" +
		"   2: 0100000A:733C 0200000A:C351 01 00000000:00000000 00:00000000 00000000     0        0 103 1\n" +
		"   3: 0100000A:733C 0100000A:9C40 01 00000000:00000000 00:00000000 00000000     0        0 104 1\n" +
		"   4: 0100000A:733C 0500000A:C352 06 00000000:00000000 00:00000000 00000000     0        0 0 1\n" +
		"   5: 0100000A:7530 0200000A:C353 01 00000000:00000000 00:00000000 00000000     0        0 105 1\n"
	tcp6 := hdr +
		"   0: 0000000000000000FFFF00000100000A:733C 0000000000000000FFFF00000300000A:D000 01 00000000:00000000 00:00000000 00000000     0        0 106 1\n"
	for name, s := range map[string]string{"tcp": tcp, "tcp6": tcp6} {
		if err := os.WriteFile(filepath.Join(proc, "net", name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	rv, err := ReadRendezvousIn(proc, 29500)
	if err != nil {
		t.Fatal(err)
	}
	want := "true [10.0.0.1:40000 10.0.0.2:50000 10.0.0.2:50001 10.0.0.3:53248] [10.0.0.1]"
	if got := fmt.Sprint(rv.Listening, rv.Peers, rv.Local); got != want {
		t.Errorf("got %s, want %s", got, want)
	}
}

// The kernel's own view: a listener and a connection to it on loopback.
func TestReadRendezvousLive(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Skip("no loopback:", err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	c, err := net.Dial("tcp4", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rv, err := ReadRendezvous(port)
	if err != nil {
		t.Fatal(err)
	}
	from := netip.MustParseAddrPort(c.LocalAddr().String())
	if !rv.Listening || len(rv.Peers) != 1 || rv.Peers[0] != from {
		t.Errorf("rendezvous %+v, want listening with one peer %s", rv, from)
	}
}

func TestRejoined(t *testing.T) {
	head := netip.MustParseAddr("10.0.0.1")
	p := netip.MustParseAddrPort
	rv := func(peers ...string) Rendezvous {
		r := Rendezvous{Listening: true, Local: []netip.Addr{head}}
		for _, s := range peers {
			r.Peers = append(r.Peers, p(s))
		}
		return r
	}
	before := rv("10.0.0.1:40000", "10.0.0.2:5000", "10.0.0.3:5000")
	for _, c := range []struct {
		now  Rendezvous
		want string
	}{
		// nobody moved: both old servers hold on
		{before, "0 [10.0.0.2 10.0.0.3]"},
		// .2's old server is gone, nothing new yet
		{rv("10.0.0.1:40000", "10.0.0.3:5000"), "0 [10.0.0.3]"},
		// .2 is back; .3's new server knocks while its old one still holds on
		{rv("10.0.0.1:40001", "10.0.0.2:6000", "10.0.0.3:5000", "10.0.0.3:6000"), "1 [10.0.0.3]"},
		// both back, the head's own new connection is no worker
		{rv("10.0.0.1:40001", "10.0.0.2:6000", "10.0.0.3:6000", "10.0.0.3:6001"), "2 []"},
	} {
		n, holding := Rejoined(before, c.now)
		if got := fmt.Sprint(n, holding); got != c.want {
			t.Errorf("Rejoined(%v) = %s, want %s", c.now.Peers, got, c.want)
		}
	}
}

func TestProfileOf(t *testing.T) {
	args := map[string][]string{
		"cutlass": {"--attention-backend", "triton", "--fp4-gemm-backend", "flashinfer_cutlass"},
		"cudnn":   {"--attention-backend=triton", "--fp4-gemm-backend", "flashinfer_cudnn", "--enable-metrics"},
		"twin":    {"--attention-backend", "triton", "--fp4-gemm-backend", "flashinfer_cudnn", "--enable-metrics"},
		"tp":      {"--tp", "16"},
	}
	for _, c := range []struct {
		info  map[string]any
		cands []string
		want  string
	}{
		{map[string]any{"attention_backend": "triton", "fp4_gemm_runner_backend": "flashinfer_cutlass", "tp_size": 16.0}, []string{"cudnn", "cutlass"}, "cutlass"},
		{map[string]any{"attention_backend": "triton", "fp4_gemm_runner_backend": "flashinfer_cudnn", "enable_metrics": true}, []string{"cutlass", "cudnn"}, "cudnn"},
		// a flag without a value needs the field true
		{map[string]any{"attention_backend": "triton", "fp4_gemm_runner_backend": "flashinfer_cudnn", "enable_metrics": false}, []string{"cutlass", "cudnn"}, ""},
		// two candidates that the head's arguments cannot tell apart
		{map[string]any{"attention_backend": "triton", "fp4_gemm_runner_backend": "flashinfer_cudnn", "enable_metrics": true}, []string{"cudnn", "twin"}, ""},
		// an alias is read as its field: tp_size 16 says --tp 16
		{map[string]any{"tp_size": 16.0}, []string{"tp"}, "tp"},
		// the flag's own name is no field of SGLang's: fp4_gemm_backend says nothing
		{map[string]any{"attention_backend": "triton", "fp4_gemm_backend": "flashinfer_cutlass"}, []string{"cudnn", "cutlass"}, ""},
	} {
		if got := ProfileOf(c.info, c.cands, args); got != c.want {
			t.Errorf("ProfileOf(%v, %v) = %q, want %q", c.info, c.cands, got, c.want)
		}
	}
}

// The fake's head answers /server_info from its launch line; the worker reads the
// profile it runs from it.
func TestServerInfoFromTheFake(t *testing.T) {
	srv := httptest.NewServer(fakesglang.New(fakesglang.Options{ServerArgs: fakesglang.ServerArgsOf(
		[]string{"--model-path", "/m", "--attention-backend", "triton", "--fp4-gemm-backend", "flashinfer_cudnn"})}))
	defer srv.Close()
	info, err := ServerInfo(context.Background(), srv.Client(), srv.URL+"/")
	if err != nil {
		t.Fatal(err)
	}
	args := map[string][]string{"a": {"--fp4-gemm-backend", "flashinfer_cutlass"}, "b": {"--fp4-gemm-backend", "flashinfer_cudnn"}}
	if p := ProfileOf(info, []string{"a", "b"}, args); p != "b" {
		t.Errorf("profile %q from %v, want b", p, info)
	}
	srv404 := httptest.NewServer(fakesglang.New(fakesglang.Options{}))
	defer srv404.Close()
	if _, err := ServerInfo(context.Background(), srv404.Client(), srv404.URL); err == nil || !strings.Contains(err.Error(), "the head's /get_server_info answered HTTP 404") {
		t.Errorf("err %v, want HTTP 404 from the old name too", err)
	}
	// A head whose group does not serve answers 500: that is its answer, the old name is
	// not asked.
	var asked []string
	srv500 := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked = append(asked, r.URL.Path)
		http.Error(w, "NCCL error", http.StatusInternalServerError)
	}))
	defer srv500.Close()
	_, err = ServerInfo(context.Background(), srv500.Client(), srv500.URL)
	var st *StatusError
	if !errors.As(err, &st) || st.Code != 500 || fmt.Sprint(asked) != "[/server_info]" {
		t.Errorf("err %v, asked %v: want HTTP 500 from /server_info alone", err, asked)
	}
}

func TestDifferences(t *testing.T) {
	info := fakesglang.ServerArgsOf([]string{"--model-path", "/m", "--nnodes", "2", "--node-rank", "0",
		"--attention-backend", "triton", "--enable-metrics", "--fake-join-timeout", "60s"})
	// the worker's own line: its rank differs by design, the fake's own flag has no field
	same := []string{"--model-path", "/m", "--nnodes", "2", "--node-rank", "1", "--attention-backend=triton", "--enable-metrics", "--fake-join-timeout", "30s"}
	if d := Differences(info, same); len(d) != 0 {
		t.Errorf("differences %v of one group's command lines", d)
	}
	other := []string{"--model-path", "/m2", "--nnodes", "2", "--node-rank", "1", "--attention-backend", "flashinfer"}
	want := "[--model-path: the head runs /m, this node /m2 --attention-backend: the head runs triton, this node flashinfer]"
	if d := Differences(info, other); fmt.Sprint(d) != want {
		t.Errorf("differences %v, want %s", d, want)
	}
}
