package recipe_test

import (
	"strings"
	"testing"
	"time"

	"github.com/sglprov/sglprov/pkg/recipe"
)

// TestNodesBlock: a nodes block's keys come from vars (--set per node); validate refuses an
// inconsistent group with the field's file:line:col.
func TestNodesBlock(t *testing.T) {
	const head = `apiVersion: sglprov/v1
name: t
vars:
  node_rank: "0"
  head_addr: ""
steps:
  - name: s
    command: {argv: [true]}
`
	const block = "nodes:\n  count: 2\n  rank: \"{{ .vars.node_rank }}\"\n  head: \"{{ .vars.head_addr }}:20000\"\n"
	cases := []struct {
		name, block string
		sets        []string
		want        recipe.NodesConfig
		problem     string
	}{
		{name: "worker from --set", block: block, sets: []string{"node_rank=1", "head_addr=10.0.0.1"},
			want: recipe.NodesConfig{Count: 2, Rank: 1, HeadHost: "10.0.0.1", HeadPort: 20000, JoinTimeout: recipe.DefaultJoinTimeout}},
		{name: "head with tp", block: block + "  tp: 16\n  gpus_per_node: 8\n  join_timeout: 5m\n", sets: []string{"head_addr=10.0.0.1"},
			want: recipe.NodesConfig{Count: 2, HeadHost: "10.0.0.1", HeadPort: 20000, TP: 16, GPUsPerNode: 8, JoinTimeout: 5 * time.Minute}},
		{name: "ipv6 head", block: block, sets: []string{"head_addr=[fd00::1]"},
			want: recipe.NodesConfig{Count: 2, HeadHost: "fd00::1", HeadPort: 20000, JoinTimeout: recipe.DefaultJoinTimeout}},
		{name: "rank out of range", block: block, sets: []string{"node_rank=2", "head_addr=10.0.0.1"},
			problem: "t.yaml:11:9: nodes.rank 2 is out of range: a group of 2 nodes has ranks 0 to 1 (at nodes.rank)"},
		{name: "missing head address", block: block,
			problem: `t.yaml:12:9: nodes.head ":20000" has no host: give rank 0's address`},
		{name: "no head at all", block: "nodes:\n  count: 2\n  rank: 0\n",
			problem: "t.yaml:10:3: nodes.head is required: rank 0's address and rendezvous port"},
		{name: "tp does not divide", block: block + "  tp: 3\n", sets: []string{"head_addr=10.0.0.1"},
			problem: "t.yaml:13:7: tp 3 × pp 1 = 3 GPUs do not divide over 2 nodes"},
		{name: "tp is not nodes times gpus", block: block + "  tp: 8\n  gpus_per_node: 8\n", sets: []string{"head_addr=10.0.0.1"},
			problem: "t.yaml:13:7: tp 8 × pp 1 = 8 GPUs, but 2 nodes × gpus_per_node 8 = 16: set tp to 16"},
		{name: "pp makes up", block: block + "  tp: 8\n  pp: 2\n  gpus_per_node: 8\n", sets: []string{"head_addr=10.0.0.1"},
			want: recipe.NodesConfig{Count: 2, HeadHost: "10.0.0.1", HeadPort: 20000, TP: 8, PP: 2, GPUsPerNode: 8, JoinTimeout: recipe.DefaultJoinTimeout}},
		{name: "one node", block: "nodes:\n  count: 1\n  rank: 0\n  head: a:1\n", problem: "t.yaml:10:10: nodes.count is 1"},
		{name: "rank not a number", block: block, sets: []string{"node_rank=first", "head_addr=h"},
			problem: `nodes.rank must be a whole number of at least 0, not "first"`},
		{name: "bad interface", block: block + "  interface: \"eth 0\"\n", sets: []string{"head_addr=h"},
			problem: `t.yaml:13:14: nodes.interface "eth 0" is not a network interface name`},
		{name: "facts are not for the nodes block", block: "nodes:\n  count: \"{{ .gpu.count }}\"\n  rank: 0\n  head: a:1\n",
			problem: "the nodes block sees .vars only"},
		{name: "unknown key", block: block + "  ranks: 2\n", problem: `unknown field "ranks"`},
		// a head a worker cannot reach from another host
		{name: "unspecified head", block: block, sets: []string{"node_rank=1", "head_addr=0.0.0.0"},
			problem: `t.yaml:12:9: nodes.head "0.0.0.0:20000": 0.0.0.0 means any address, which is where a server listens, not where a worker can reach it`},
		{name: "unspecified ipv6 head", block: block, sets: []string{"head_addr=[::]"},
			problem: `nodes.head "[::]:20000": :: means any address`},
		{name: "loopback head", block: block, sets: []string{"node_rank=1", "head_addr=127.0.0.1"},
			problem: `t.yaml:12:9: nodes.head "127.0.0.1:20000" is a loopback address: a worker on another host would reach itself, not rank 0; give rank 0's address on the network the nodes share, or set nodes.one_host: true`},
		{name: "localhost head", block: block, sets: []string{"head_addr=localhost"}, problem: `nodes.head "localhost:20000" is a loopback address`},
		{name: "ipv6 loopback head", block: block, sets: []string{"head_addr=[::1]"}, problem: `nodes.head "[::1]:20000" is a loopback address`},
		{name: "loopback head of a group said to be on one host", block: block + "  one_host: true\n", sets: []string{"node_rank=1", "head_addr=127.0.0.1"},
			want: recipe.NodesConfig{Count: 2, Rank: 1, HeadHost: "127.0.0.1", HeadPort: 20000, JoinTimeout: recipe.DefaultJoinTimeout, OneHost: true}},
		{name: "one_host not a bool", block: block + "  one_host: maybe\n", sets: []string{"head_addr=10.0.0.1"}, problem: `nodes.one_host "maybe" is not true or false`},
		{name: "unspecified head even on one host", block: block + "  one_host: true\n", sets: []string{"head_addr=0.0.0.0"}, problem: `0.0.0.0 means any address`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, err := recipe.Parse("t.yaml", []byte(head+c.block), testKinds(), c.sets)
			if c.problem != "" {
				if err == nil || !strings.Contains(err.Error(), c.problem) {
					t.Fatalf("problems:\n%v\nwant %q", err, c.problem)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			d, err := r.NewData(nil)
			if err != nil {
				t.Fatal(err)
			}
			got, on, err := r.NodesConfig(d)
			if err != nil || !on || got != c.want {
				t.Errorf("NodesConfig = %+v, %v, %v; want %+v", got, on, err, c.want)
			}
		})
	}
}

// TestNodesFromFacts: a rank whose var needs the host's facts is checked when rendered,
// with the field's position.
func TestNodesFromFacts(t *testing.T) {
	text := `apiVersion: sglprov/v1
name: t
vars:
  node_rank: "{{ .gpu.count }}"
nodes:
  count: 2
  rank: "{{ .vars.node_rank }}"
  head: 10.0.0.1:20000
steps:
  - name: s
    command: {argv: [true]}
`
	r, err := recipe.Parse("t.yaml", []byte(text), testKinds(), nil)
	if err != nil {
		t.Fatal(err)
	}
	d, err := r.NewData(map[string]any{"gpu": map[string]any{"count": 4}})
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = r.NodesConfig(d)
	if err == nil || !strings.Contains(err.Error(), "t.yaml:7:9: nodes.rank 4 is out of range") {
		t.Fatalf("err = %v", err)
	}
}
