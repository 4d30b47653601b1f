package logval

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/sglprov/sglprov/pkg/exitcode"
)

// TestNewLoggerFunc: json and logfmt records carry whole timestamps and the level filters;
// an unknown format or level is a usage error naming its flag.
func TestNewLoggerFunc(t *testing.T) {
	nl, err := NewLoggerFunc("json", "warn")
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	l := nl(&b)
	l.Info("dropped")
	l.Warn("kept", "k", 1)
	if out := b.String(); strings.Contains(out, "dropped") || !strings.Contains(out, `"msg":"kept"`) || !strings.Contains(out, `"time":"`) {
		t.Errorf("json at warn: %q", out)
	}
	if _, err := NewLoggerFunc("yaml", "info"); !errors.Is(err, exitcode.ErrUsage) || !strings.Contains(err.Error(), "--log-format") {
		t.Errorf("format yaml: %v", err)
	}
	if _, err := NewLoggerFunc("text", "loud"); !errors.Is(err, exitcode.ErrUsage) || !strings.Contains(err.Error(), "--log-level") {
		t.Errorf("level loud: %v", err)
	}
}
