package switchover

import (
	"context"
	"net"
	"strconv"
	"strings"
)

// Progress is told when a switch starts (served: the address its clients reach, the
// served port of the unit switched, "host:port") and when it ends (served ""): the daemon
// says a switch is in progress, and /healthz answers from the served port meanwhile.
type Progress func(unit, served string)

type progressKey struct{}

// WithProgress returns ctx whose switches tell p when they start and end.
func WithProgress(ctx context.Context, p Progress) context.Context {
	return context.WithValue(ctx, progressKey{}, p)
}

// progressOf returns the Progress of ctx (nil: none).
func progressOf(ctx context.Context) Progress {
	p, _ := ctx.Value(progressKey{}).(Progress)
	return p
}

// ServedAddr returns where srv's clients reach it, as a dial address: its host (a
// wildcard, 0.0.0.0 or ::, is reached on loopback) and its port.
func ServedAddr(srv Server) string {
	host := strings.TrimSuffix(strings.TrimPrefix(srv.Host, "["), "]")
	switch host {
	case "", "0.0.0.0":
		host = "127.0.0.1"
	case "::":
		host = "::1"
	}
	return net.JoinHostPort(host, strconv.Itoa(srv.Port))
}

// servedAddr returns the address the switch's clients reach: the served port of its first
// candidate that names one, else of what serves before ("" when none is known).
func (t *txn) servedAddr() string {
	for _, c := range t.s.Candidates {
		if c.Err != nil {
			continue
		}
		if srv, err := Identify(t.s.Unit, c.Content); err == nil {
			return ServedAddr(srv)
		}
	}
	for _, p := range t.res.Previous {
		return ServedAddr(p)
	}
	return ""
}
