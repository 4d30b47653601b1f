package cli

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/sglprov/sglprov/pkg/exitcode"
)

// TestValidateRefusesGroupsThatCannotMeet: validate of the two-node example refuses, with
// exit 2, a worker whose head is an unspecified address (it would dial itself), a
// loopback head of a group not said to be on one host, and a rendezvous port that is the
// server's API port; a group said to be on one host may use loopback.
func TestValidateRefusesGroupsThatCannotMeet(t *testing.T) {
	file := filepath.Join(repoRoot(t), "testdata", "multinode", "deepseek-v3-2x8-h100.yaml")
	env := map[string]string{"SGLPROV_GPU_FIXTURE": filepath.Join(repoRoot(t), "testdata", "gpu", "h100-x8.json")}
	if code, _, stderr := run(t, env, "validate", "-f", file, "--set", "node_rank=1", "--set", "head_addr=10.0.0.1"); code != 0 {
		t.Fatalf("a reachable head: exit %d: %s", code, stderr)
	}
	for _, c := range []struct {
		sets []string
		want string
	}{
		{[]string{"head_addr=0.0.0.0"}, `nodes.head "0.0.0.0:20000": 0.0.0.0 means any address`},
		{[]string{"head_addr=[::]"}, `nodes.head "[::]:20000": :: means any address`},
		{[]string{"head_addr=127.0.0.1"}, `nodes.head "127.0.0.1:20000" is a loopback address`},
		{[]string{"head_addr=10.0.0.1", "rendezvous_port=30000"}, "nodes.head 10.0.0.1:30000: the rendezvous port is the server's API port (--port 30000)"},
	} {
		args := []string{"validate", "-f", file, "--set", "node_rank=1"}
		for _, s := range c.sets {
			args = append(args, "--set", s)
		}
		code, _, stderr := run(t, env, args...)
		if code != exitcode.ExitUsage || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, want %d with %q: %s", c.sets, code, exitcode.ExitUsage, c.want, stderr)
		}
	}
}
