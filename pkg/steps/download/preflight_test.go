package download

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/fetch"
	"github.com/sglprov/sglprov/test/fakehub"
)

// TestPreflightPlanText: plan's line for a hub download says the bytes still to fetch
// (from the hub's listing) and the free space at dest; after the download nothing is left;
// a part on disk counts as fetched; too little space is an ErrHost problem; an unreachable
// hub is "unknown".
func TestPreflightPlanText(t *testing.T) {
	fx := newFixture(t, fakehub.Options{})
	st := fx.step(t, fx.hfSpec("main"), nil)
	ctx := context.Background()
	var total int64
	for _, n := range fx.srcFiles(t) {
		fi, _ := os.Stat(filepath.Join(fx.src, n))
		total += fi.Size()
	}
	lines, err := st.Preflight(ctx, fx.env)
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`^to fetch: (\S+ \S+) of (\S+ \S+) \(7 files\); free at ` + regexp.QuoteMeta(fx.dest) + `: 1.0 TiB$`)
	m := re.FindStringSubmatch(strings.Join(lines, "\n"))
	if m == nil || m[1] != m[2] {
		t.Fatalf("lines = %q", lines)
	}

	// Too little space: a problem marked for exit 4, with the line still there.
	st.freeSpace = func(string) (uint64, error) { return 1000, nil }
	lines, err = st.Preflight(ctx, fx.env)
	if !errors.Is(err, engine.ErrHost) || !strings.Contains(err.Error(), "not enough free space at "+fx.dest+": ") || !strings.Contains(err.Error(), ", 1000 B free") || len(lines) != 1 {
		t.Errorf("small disk: %q, %v", lines, err)
	}
	// apply refuses it too, before the first byte, with the same exit code.
	if err := st.Run(ctx, fx.env); engine.ExitCode(err) != engine.ExitHost || !strings.Contains(err.Error(), "not enough free space") {
		t.Errorf("Run on a small disk = %v (exit %d), want exit 4", err, engine.ExitCode(err))
	}
	st.freeSpace = func(string) (uint64, error) { return 1 << 40, nil }

	if err := st.Run(ctx, fx.env); err != nil {
		t.Fatal(err)
	}
	lines, _ = st.Preflight(ctx, fx.env)
	if !strings.HasPrefix(lines[0], "to fetch: 0 B of ") {
		t.Errorf("after the download: %q", lines)
	}

	// Half a shard as a part: only the rest is to fetch.
	shard := filepath.Join(fx.dest, "model-00001-of-00003.safetensors")
	b, _ := os.ReadFile(shard)
	os.Remove(shard)
	part := fetch.PartPath(fx.dest, "model-00001-of-00003.safetensors")
	os.MkdirAll(filepath.Dir(part), 0o755)
	os.WriteFile(part, b[:len(b)/2], 0o644)
	lines, _ = st.Preflight(ctx, fx.env)
	want := "to fetch: " + formatLike(int64(len(b)-len(b)/2))
	if !strings.HasPrefix(lines[0], want+" of ") {
		t.Errorf("with a part: %q, want prefix %q", lines, want)
	}

	// No hub: unknown, and no problem.
	spec := fx.hfSpec("main")
	spec.HF.Endpoint = "http://127.0.0.1:1"
	st2 := fx.step(t, spec, nil)
	lines, err = st2.Preflight(ctx, fx.env)
	if err != nil || !strings.HasPrefix(lines[0], "to fetch: unknown (hub not reachable: ") || !strings.HasSuffix(lines[0], "; free at "+fx.dest+": 1.0 TiB") {
		t.Errorf("no hub: %q, %v", lines, err)
	}
}

func formatLike(n int64) string {
	return strings.TrimSpace(fetch.FormatBytes(n))
}
