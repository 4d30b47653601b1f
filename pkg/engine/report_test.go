package engine_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sglprov/sglprov/pkg/engine"
)

// TestFailuresShowLogTail: a failed step whose error is one line is shown with its log's
// path and last lines; one whose error already has several lines is shown in full.
func TestFailuresShowLogTail(t *testing.T) {
	dir := t.TempDir()
	logPath := filepath.Join(dir, "weights.log")
	var log strings.Builder
	for i := 1; i <= 15; i++ {
		fmt.Fprintf(&log, "line %d\n", i)
	}
	os.WriteFile(logPath, []byte(log.String()), 0o600)
	rep := &engine.Report{Steps: []*engine.StepReport{
		{Name: "ok", Result: engine.ResultOK},
		{Name: "weights", Result: engine.ResultFailed, Error: "fetching x: HTTP 500", Log: logPath},
		{Name: "build", Result: engine.ResultFailed, Error: "make: exit 2; last lines:\n  err A\n  err B"},
	}}
	got := rep.Failures(3)
	want := "weights failed: fetching x: HTTP 500\n  log: " + logPath + "\n  last 3 lines of the log:\n    line 13\n    line 14\n    line 15\n" +
		"build failed: make: exit 2; last lines:\n    err A\n    err B\n"
	if got != want {
		t.Errorf("Failures:\n%s\nwant:\n%s", got, want)
	}
}
