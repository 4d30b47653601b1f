package switchover

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
)

// Staging is where a candidate answers while it is gated.
type Staging string

// The stagings of a switch.
const (
	// StageAuto is StageSidePort, unless the switch has a drain hook (clients are kept
	// away from the served port while it is gated): then StageServed.
	StageAuto Staging = ""
	// StageSidePort gates a candidate on a side port (its unit's ExecStart gets --port
	// of a free port) and moves it to the served port only once it passed there; it is
	// gated again on the served port before it is promoted. The served port answers
	// nothing (connection refused) meanwhile rather than a candidate's answers.
	StageSidePort Staging = "port"
	// StageServed gates a candidate on the served port itself, for a node whose clients
	// are drained during the switch: one load of the model rather than two.
	StageServed Staging = "served"
)

// Valid reports whether st is one of the stagings.
func (st Staging) Valid() bool {
	switch st {
	case StageAuto, StageSidePort, StageServed:
		return true
	}
	return false
}

// WithPort returns the unit content with --port port appended to its ExecStart= (the last
// --port wins, as with the server's argument parser), so that the unit's server listens
// there. A unit whose ExecStart= does not hand its arguments to the server (a shell
// wrapper) is not moved by it: nothing answers on port, and its gate there fails.
func WithPort(unit string, content []byte, port int) ([]byte, error) {
	lines := strings.SplitAfter(string(content), "\n")
	section, at := "", -1
	for i := 0; i < len(lines); i++ {
		trimmed := strings.TrimSpace(lines[i])
		if strings.HasPrefix(trimmed, "[") {
			section = trimmed
			continue
		}
		start := i
		// A continued line (ending in "\") goes on on the next one.
		for i+1 < len(lines) && strings.HasSuffix(strings.TrimRight(lines[i], "\r\n \t"), `\`) {
			i++
		}
		key, value, ok := strings.Cut(strings.TrimSpace(lines[start]), "=")
		if section != "[Service]" || !ok || strings.TrimSpace(key) != "ExecStart" {
			continue
		}
		if strings.TrimSpace(value) == "" && start == i {
			at = -1 // an empty ExecStart= resets the list
			continue
		}
		at = i
	}
	if at < 0 {
		return nil, fmt.Errorf("moving %s to port %d: the unit has no ExecStart=", unit, port)
	}
	body := strings.TrimRight(lines[at], "\r\n")
	lines[at] = body + " --port " + strconv.Itoa(port) + lines[at][len(body):]
	out := []byte(strings.Join(lines, ""))
	srv, err := Identify(unit, out)
	if err != nil {
		return nil, fmt.Errorf("moving %s to port %d: %w", unit, port, err)
	}
	if srv.Port != port {
		return nil, fmt.Errorf("moving %s to port %d: its ExecStart= still names port %d", unit, port, srv.Port)
	}
	return out, nil
}

// FreePort returns a TCP port free on host (the address the server binds: a wildcard
// or one of the node's), chosen by the kernel, and not avoid.
func FreePort(_ context.Context, host string, avoid int) (int, error) {
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	for range 3 {
		ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			return 0, fmt.Errorf("finding a free port on %s: %w", host, err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		if err := ln.Close(); err != nil {
			return 0, fmt.Errorf("finding a free port on %s: %w", host, err)
		}
		if port != avoid {
			return port, nil
		}
	}
	return 0, errors.New("finding a free port on " + host + ": the kernel keeps offering the served port")
}
