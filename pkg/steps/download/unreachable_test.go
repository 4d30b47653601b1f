package download

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sglprov/sglprov/pkg/engine"
)

// TestUnreachableHubIsNotSilent: a hub whose host name does not resolve is said at once,
// as an error naming the host and HF_ENDPOINT, and each wait of the retries that follow
// is logged at info with what, why, how long and the budget left, until the budget ends;
// no ten minutes of silence.
func TestUnreachableHubIsNotSilent(t *testing.T) {
	dir := t.TempDir()
	log := &syncBuffer{}
	env := engine.NewTestEnv(dir, log)
	env.StepName = "weights"
	spec := Spec{Dest: filepath.Join(dir, "m"), HF: &HFSpec{Repo: repo, Revision: strings.Repeat("a", 40)}, NoProgressTimeout: "2s"}
	env.NetworkRetryFor = 2 * time.Second
	st, err := New(spec)
	if err != nil {
		t.Fatal(err)
	}
	st.getenv = func(k string) string {
		if k == "HF_ENDPOINT" {
			return "http://no-such-hub.invalid"
		}
		return ""
	}
	st.retryWait = 200 * time.Millisecond
	start := time.Now()
	err = st.Run(context.Background(), env)
	if err == nil || !strings.Contains(err.Error(), "no-such-hub.invalid") {
		t.Fatalf("Run = %v, want a failure naming the host", err)
	}
	if took := time.Since(start); took > 30*time.Second {
		t.Errorf("took %s with a 2s budget", took)
	}
	out := log.String()
	lines := strings.Split(out, "\n")
	first := -1
	for i, l := range lines {
		if strings.Contains(l, "does not resolve") {
			first = i
			break
		}
	}
	if first < 0 || !strings.Contains(lines[first], "ERRO") || !strings.Contains(lines[first], "no-such-hub.invalid") || !strings.Contains(lines[first], "HF_ENDPOINT") {
		t.Fatalf("no error line naming the host and HF_ENDPOINT at the first failure:\n%s", out)
	}
	if n := strings.Count(out, "does not resolve"); n != 1 {
		t.Errorf("the DNS failure was said %d times, want once:\n%s", n, out)
	}
	if n := strings.Count(out, "waiting for the network"); n < 2 || !strings.Contains(out, "budget_left") {
		t.Errorf("%d waits logged, want each wait with the budget left:\n%s", n, out)
	}
}

// TestPlainURLDNSFailureNamesNoHub: a plain-URL download whose host does not resolve is
// said at once too, as an error naming the host, without HF_ENDPOINT.
func TestPlainURLDNSFailureNamesNoHub(t *testing.T) {
	dir := t.TempDir()
	log := &syncBuffer{}
	env := engine.NewTestEnv(dir, log)
	env.StepName = "weights"
	spec := Spec{Dest: filepath.Join(dir, "m"), NoProgressTimeout: "1s",
		Files: []FileSpec{{URL: "http://no-such-files.invalid/w.bin", Path: "w.bin", SHA256: strings.Repeat("0", 64)}}}
	st, err := New(spec)
	if err != nil {
		t.Fatal(err)
	}
	st.getenv = func(string) string { return "" }
	st.freeSpace = func(string) (uint64, error) { return 1 << 40, nil }
	if err := st.Run(context.Background(), env); err == nil {
		t.Fatal("Run succeeded")
	}
	out := log.String()
	if !strings.Contains(out, "host name does not resolve") || !strings.Contains(out, "no-such-files.invalid") {
		t.Errorf("the DNS failure was not said:\n%s", out)
	}
	if strings.Contains(out, "HF_ENDPOINT") {
		t.Errorf("a plain-URL download was told about HF_ENDPOINT:\n%s", out)
	}
}
