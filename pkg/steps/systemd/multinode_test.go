package systemd

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/multinode"
	"github.com/sglprov/sglprov/pkg/portowner"
	"github.com/sglprov/sglprov/pkg/recipe"
	"github.com/sglprov/sglprov/pkg/service"
)

// routeVia stands in for the kernel: the head is reached through iface, which is up, and
// link holds the other interfaces sysfs shows.
func routeVia(iface string, links ...string) func(*engine.Env, multinode.Group) multinode.Facts {
	return func(_ *engine.Env, g multinode.Group) multinode.Facts {
		f := multinode.Facts{Group: g, HeadIP: g.HeadHost, Local: "10.77.0.2",
			Link: multinode.Link{Name: iface, Exists: true, State: "up", MTU: 1500}}
		if g.Interface != "" {
			w := multinode.Link{Name: g.Interface}
			for _, l := range append(links, iface) {
				if l == g.Interface {
					w = multinode.Link{Name: l, Exists: true, State: "up", MTU: 1500}
				}
			}
			f.Wanted = &w
		}
		return f
	}
}

// TestGroupCommandLine: a node of a two-node group renders --nnodes, --node-rank,
// --dist-init-addr and --tp over both nodes' GPUs, with the group's socket interface in
// its environment, and plan says so.
func TestGroupCommandLine(t *testing.T) {
	env := testEnv(t, "rtx-pro-6000-x8.json")
	env.Nodes = &recipe.NodesConfig{Count: 2, Rank: 1, HeadHost: "10.77.0.1", HeadPort: 20000}
	s := newStep(t, qwenSpec())
	s.groupFacts = routeVia("eth1")
	d, err := s.data(env, "sm120-fp4-cutlass")
	if err != nil {
		t.Fatal(err)
	}
	argv := strings.Join(d.Argv(), " ")
	if !strings.Contains(argv, "--nnodes 2 --node-rank 1 --dist-init-addr 10.77.0.1:20000 --tp 16") || strings.Contains(argv, "--tp 8") {
		t.Errorf("command line: %s", argv)
	}
	got := unitEnv(t, s, env)
	if got["NCCL_SOCKET_IFNAME"] != "eth1" || got["GLOO_SOCKET_IFNAME"] != "eth1" {
		t.Errorf("unit env: %v", got)
	}
	plan := strings.Join(s.Describe(env), "\n")
	for _, want := range []string{"group: node rank 1 of 2 (worker), rendezvous 10.77.0.1:20000",
		"group NCCL: NCCL_SOCKET_IFNAME=eth1: the interface that reaches the head", "group NCCL: no RDMA device"} {
		if !strings.Contains(plan, want) {
			t.Errorf("plan lacks %q:\n%s", want, plan)
		}
	}

	// On the head, plan names who holds the group's ports: the rendezvous alone without
	// DP attention (SGLang's other sockets are ipc:// files then), the six above it with.
	env.Nodes = &recipe.NodesConfig{Count: 2, Rank: 0, HeadHost: "10.77.0.1", HeadPort: 20000}
	s.lookupPort = func(p int) ([]portowner.Listener, error) {
		if p == 20005 {
			return []portowner.Listener{{PID: 7, Command: "redis-server", Addr: netip.MustParseAddrPort("0.0.0.0:20005")}}, nil
		}
		return nil, nil
	}
	plan = strings.Join(s.Describe(env), "\n")
	for _, want := range []string{"group: the head's port 20000 (the rendezvous): free now",
		"group: between the nodes open the head's port 20000 (the rendezvous); NCCL and Gloo listen on ephemeral ports"} {
		if !strings.Contains(plan, want) {
			t.Errorf("head plan lacks %q:\n%s", want, plan)
		}
	}
	dpa := qwenSpec()
	dpa.Args = append(dpa.Args, "--enable-dp-attention")
	sd := newStep(t, dpa)
	sd.groupFacts, sd.lookupPort = s.groupFacts, s.lookupPort
	if plan := strings.Join(sd.Describe(env), "\n"); !strings.Contains(plan, "group: the head needs ports 20000-20006 (the rendezvous and the 6 above it that DP attention opens): port 20005 is held by pid 7 (redis-server) listening on 0.0.0.0:20005") {
		t.Errorf("head plan with DP attention:\n%s", plan)
	}
	sd.lookupPort = func(int) ([]portowner.Listener, error) { return nil, nil }
	if plan := strings.Join(sd.Describe(env), "\n"); !strings.Contains(plan, "group: the head's ports 20000-20006 (the rendezvous and the 6 above it that DP attention opens): free now") {
		t.Errorf("head plan with DP attention:\n%s", plan)
	}
	env.Nodes = &recipe.NodesConfig{Count: 2, Rank: 1, HeadHost: "10.77.0.1", HeadPort: 20000}

	// The flags are the nodes block's: args that set them are refused.
	spec := qwenSpec()
	spec.Args = append(spec.Args, "--node-rank", "0")
	s2 := newStep(t, spec)
	s2.groupFacts = s.groupFacts
	if _, err := s2.data(env, "sm120-fp4-cutlass"); !errors.Is(err, exitcode.ErrUsage) || !strings.Contains(err.Error(), "args set --node-rank") {
		t.Errorf("args with --node-rank: %v", err)
	}
	// ... in any of SGLang's spellings (--nccl-init-addr is --dist-init-addr).
	spec = qwenSpec()
	spec.Args = append(spec.Args, "--nccl-init-addr", "10.0.0.9:1234")
	s2 = newStep(t, spec)
	s2.groupFacts = s.groupFacts
	if _, err := s2.data(env, "sm120-fp4-cutlass"); !errors.Is(err, exitcode.ErrUsage) || !strings.Contains(err.Error(), "args set --nccl-init-addr") {
		t.Errorf("args with --nccl-init-addr: %v", err)
	}
	// A node with fewer GPUs than its share is refused with exit 4.
	env.Nodes.TP = 32
	if _, err := s.data(env, "sm120-fp4-cutlass"); !errors.Is(err, exitcode.ErrHost) || !strings.Contains(err.Error(), "needs 16 GPUs on each node; this node has 8") {
		t.Errorf("tp 32 over 2 nodes of 8: %v", err)
	}
}

// TestGroupPreflight: a worker told to use an interface that does not reach the head is
// not started, the error names the interface, the route and the rendezvous; the head does
// not start while another process holds one of its group ports, nor with a loopback API.
func TestGroupPreflight(t *testing.T) {
	env := testEnv(t, "rtx-pro-6000-x8.json")
	env.Nodes = &recipe.NodesConfig{Count: 2, Rank: 1, HeadHost: "10.77.0.1", HeadPort: 20000, Interface: "eth0"}
	s := newStep(t, qwenSpec())
	s.groupFacts = routeVia("eth1", "eth0")
	fm := &fakeManager{dir: t.TempDir()}
	env.NewManager = func(context.Context, service.Options) (service.Manager, error) { return fm, nil }
	err := s.Run(context.Background(), env)
	if !errors.Is(err, exitcode.ErrHost) || !strings.Contains(err.Error(), "node rank 1 cannot join the group (rendezvous 10.77.0.1:20000): nodes.interface eth0 does not reach the head 10.77.0.1: the kernel routes it through eth1") {
		t.Fatalf("wrong interface: %v", err)
	}
	if ops := fm.take(); len(ops) != 0 {
		t.Errorf("the worker's server was started: %v", ops)
	}

	env.Nodes = &recipe.NodesConfig{Count: 2, Rank: 0, HeadHost: "10.77.0.1", HeadPort: 20000}
	if err := s.Run(context.Background(), env); !errors.Is(err, exitcode.ErrUsage) || !strings.Contains(err.Error(), "the head's server would listen on 127.0.0.1") {
		t.Fatalf("head on loopback: %v", err)
	}
	spec := qwenSpec()
	spec.Host = "0.0.0.0"
	h := newStep(t, spec)
	h.groupFacts = routeVia("eth1")
	fm.kind = service.KindSystemd
	h.lookupPort = func(p int) ([]portowner.Listener, error) {
		if p == 20000 {
			return []portowner.Listener{{PID: 42, Command: "python3", Unit: "other.service", Addr: netip.MustParseAddrPort("0.0.0.0:20000")}}, nil
		}
		return nil, nil
	}
	err = h.Run(context.Background(), env)
	if !errors.Is(err, exitcode.ErrLocked) || !strings.Contains(err.Error(), "port 20000, which the head needs for the group (port 20000 (the rendezvous) at 10.77.0.1)") {
		t.Fatalf("head port held: %v", err)
	}
	h.lookupPort = func(int) ([]portowner.Listener, error) { return nil, nil }
	if err := h.Run(context.Background(), env); err != nil {
		t.Fatalf("head with free ports: %v", err)
	}
}

// TestGroupPortClash: a rendezvous port that is the server's API port, or with DP
// attention one of the six ports above the rendezvous, is refused by validate (Check) and
// plan (the unit's data) on any host, with exit 2.
func TestGroupPortClash(t *testing.T) {
	env := testEnv(t, "rtx-pro-6000-x8.json")
	s := newStep(t, qwenSpec())
	s.groupFacts = routeVia("eth1")
	for _, c := range []struct {
		name string
		head int
		dpa  bool
		want string
	}{
		{"rendezvous is the API port", 30000, false, "nodes.head 10.77.0.1:30000: the rendezvous port is the server's API port (--port 30000)"},
		{"DP attention port is the API port", 29997, true, "nodes.head 10.77.0.1:29997: port 30000, which the head's DP attention opens (ports 29997-30003"},
		{"without DP attention the ports above are free", 29997, false, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			env.Nodes = &recipe.NodesConfig{Count: 2, Rank: 1, HeadHost: "10.77.0.1", HeadPort: c.head}
			spec := qwenSpec()
			if c.dpa {
				spec.Args = append(spec.Args, "--enable-dp-attention")
			}
			st := newStep(t, spec)
			st.groupFacts = s.groupFacts
			checkErr := st.Check(env)
			_, dataErr := st.data(env, "sm120-fp4-cutlass")
			for what, err := range map[string]error{"validate": checkErr, "plan": dataErr} {
				if c.want == "" {
					if err != nil {
						t.Errorf("%s: %v", what, err)
					}
					continue
				}
				if !errors.Is(err, exitcode.ErrUsage) || !strings.Contains(err.Error(), c.want) {
					t.Errorf("%s: %v, want %q", what, err, c.want)
				}
			}
		})
	}
}
