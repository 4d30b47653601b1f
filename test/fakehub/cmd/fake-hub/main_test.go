package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestPortFileRenameFails: when the port file cannot be put in place (its path is a
// folder that is not empty), fake-hub says so and exits 1 instead of serving while the
// caller waits for a file that never appears.
func TestPortFileRenameFails(t *testing.T) {
	dir := t.TempDir()
	portFile := filepath.Join(dir, "port")
	if err := os.MkdirAll(filepath.Join(portFile, "busy"), 0o755); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	code := make(chan int, 1)
	go func() { code <- run([]string{"--dir", t.TempDir(), "--port-file", portFile}, &stdout, &stderr) }()
	select {
	case c := <-code:
		if c != 1 || !strings.Contains(stderr.String(), "writing port file") {
			t.Errorf("exit %d, stderr %q; want 1 and the port file named", c, stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("fake-hub still serves after failing to write its port file")
	}
}
