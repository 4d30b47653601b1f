package multinode

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
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
