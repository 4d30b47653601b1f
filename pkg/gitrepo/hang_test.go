package gitrepo

import (
	"context"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// blackHole accepts connections and never answers, as a git server that hangs.
func blackHole(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return l.Addr().String()
}

const pin = "0123456789abcdef0123456789abcdef01234567"

// TestCloneOfAServerThatHangsIsKilled: a git:// server that accepts the connection and
// sends nothing (git has no timeout of its own there) is given up after the stall bound,
// the whole git process group killed, with an error that says so.
func TestCloneOfAServerThatHangsIsKilled(t *testing.T) {
	addr := blackHole(t)
	dst := filepath.Join(t.TempDir(), "tree")
	start := time.Now()
	err := CloneWith(context.Background(), "git://"+addr+"/repo.git", dst, pin, CloneOptions{Stall: time.Second})
	if err == nil || !strings.Contains(err.Error(), "wrote nothing under") || !strings.Contains(err.Error(), "killed it") {
		t.Fatalf("CloneWith = %v, want the stall named", err)
	}
	if took := time.Since(start); took > 15*time.Second {
		t.Errorf("the hanging clone was killed after %s, want a few seconds", took)
	}
}

// TestCloneRefusesTransportHelpers: git's transport-helper syntax (fd::3 reads a file
// descriptor, ext:: runs a command) is refused by git at once, not waited on.
func TestCloneRefusesTransportHelpers(t *testing.T) {
	for _, u := range []string{"fd::3", "ext::sh -c true"} {
		start := time.Now()
		err := CloneWith(context.Background(), u, filepath.Join(t.TempDir(), "tree"), pin, CloneOptions{Stall: 30 * time.Second})
		if err == nil || !strings.Contains(err.Error(), "not allowed") {
			t.Errorf("CloneWith(%q) = %v, want the transport refused", u, err)
		}
		if took := time.Since(start); took > 10*time.Second {
			t.Errorf("CloneWith(%q) took %s", u, took)
		}
	}
}

// TestCloneTimeout: a child that runs past the timeout is killed, saying so.
func TestCloneTimeout(t *testing.T) {
	addr := blackHole(t)
	start := time.Now()
	err := CloneWith(context.Background(), "git://"+addr+"/repo.git", filepath.Join(t.TempDir(), "tree"), pin, CloneOptions{Stall: time.Minute, Timeout: time.Second})
	if err == nil || !strings.Contains(err.Error(), "ran past 1s") {
		t.Fatalf("CloneWith = %v, want the timeout named", err)
	}
	if took := time.Since(start); took > 15*time.Second {
		t.Errorf("took %s", took)
	}
}
