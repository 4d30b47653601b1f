package gatedswitch

import (
	"context"
	"net"
	"strings"
	"testing"

	"github.com/sglprov/sglprov/pkg/switchover"
)

// TestServerURL: the unit's host and port replace the recipe URL's, a wildcard host is
// reached on loopback, and the scheme, credentials and path stay.
func TestServerURL(t *testing.T) {
	for _, tt := range []struct {
		base string
		srv  switchover.Server
		want string
	}{
		{"http://127.0.0.1:30000/", switchover.Server{Host: "0.0.0.0", Port: 30001, Listens: true}, "http://127.0.0.1:30001/"},
		{"https://u:p@localhost:30000/api", switchover.Server{Host: "::", Port: 8000, Listens: true}, "https://u:p@[::1]:8000/api"},
		{"http://127.0.0.1:30000", switchover.Server{Host: "10.0.0.7", Port: 30000, Listens: true}, "http://10.0.0.7:30000"},
		{"http://127.0.0.1:31000", switchover.Server{Host: "127.0.0.1", Port: 30000}, "http://127.0.0.1:31000"},
	} {
		if got := ServerURL(tt.base, tt.srv); got != tt.want {
			t.Errorf("ServerURL(%q, %+v) = %q, want %q", tt.base, tt.srv, got, tt.want)
		}
	}
}

// TestProbeRendezvous: a rendezvous that listens, and one that refuses, are told apart.
func TestProbeRendezvous(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if got := probeRendezvous(context.Background(), addr); !strings.Contains(got, "accepts connections now: the head runs") {
		t.Errorf("listening: %s", got)
	}
	ln.Close()
	if got := probeRendezvous(context.Background(), addr); !strings.Contains(got, "nothing listens at the rendezvous "+addr) {
		t.Errorf("closed: %s", got)
	}
}
