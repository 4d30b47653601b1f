package daemon

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"charm.land/log/v2"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/gpu"
)

// A driver/library mismatch is logged with "reboot required" once, found by the check
// or by an apply.
func TestRebootRequiredSaidOnce(t *testing.T) {
	for _, tc := range []struct {
		name string
		run  func(d *Loop, n *node)
	}{
		{"check", func(d *Loop, n *node) { n.mismatch = true; d.Check(context.Background()) }},
		{"apply", func(d *Loop, n *node) { d.apply(context.Background(), "start") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := &node{driver: "580.95.05", canaryOK: true}
			o := n.options()
			var buf bytes.Buffer
			o.Log = log.New(&buf)
			if tc.name == "apply" {
				// What the CLI's apply returns: the mismatch's own message, exit 6.
				mismatch := &gpu.MismatchError{ModuleVersion: "580.95.05", LibraryVersion: "590.44.01"}
				o.Apply = func(ctx context.Context) (*engine.Report, error) {
					return nil, rebootError{mismatch.Error()}
				}
			}
			d := New(o)
			tc.run(d, n)
			if d.Health() != RebootRequired {
				t.Fatalf("health %s", d.Health())
			}
			if got := strings.Count(buf.String(), "reboot required"); got != 1 {
				t.Errorf("\"reboot required\" said %d times:\n%s", got, buf.String())
			}
		})
	}
}

// rebootError has its own message and the exit code of exitcode.ErrReboot.
type rebootError struct{ msg string }

func (e rebootError) Error() string { return e.msg }
func (e rebootError) Unwrap() error { return exitcode.ErrReboot }
