package multinode

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// sysfs writes a fixture sysfs: links name -> "operstate mtu", RDMA ports dev/port ->
// "state|link_layer".
func sysfs(t *testing.T, links map[string]string, rdma map[string]string) string {
	t.Helper()
	root := t.TempDir()
	write := func(p, v string) {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for name, v := range links {
		st, mtu, _ := strings.Cut(v, " ")
		write(filepath.Join(root, "class/net", name, "operstate"), st)
		write(filepath.Join(root, "class/net", name, "mtu"), mtu)
	}
	for devPort, v := range rdma {
		st, ll, _ := strings.Cut(v, "|")
		dev, port, _ := strings.Cut(devPort, "/")
		write(filepath.Join(root, "class/infiniband", dev, "ports", port, "state"), st)
		write(filepath.Join(root, "class/infiniband", dev, "ports", port, "link_layer"), ll)
	}
	return root
}

func fixedRoute(local, iface string) (func(net.IP) (net.IP, error), func(net.IP) (string, error)) {
	return func(net.IP) (net.IP, error) { return net.ParseIP(local), nil },
		func(net.IP) (string, error) { return iface, nil }
}

func TestDerive(t *testing.T) {
	worker := Group{Count: 2, Rank: 1, HeadHost: "10.77.0.1", HeadPort: 20000}
	cases := []struct {
		name    string
		g       Group
		links   map[string]string
		rdma    map[string]string
		set     map[string]string
		held    map[int]string
		addrs   []string
		env     map[string]string
		problem string
		reason  string
	}{
		{name: "socket interface from the route", g: worker, links: map[string]string{"eth1": "up 9000"},
			env:    map[string]string{"NCCL_SOCKET_IFNAME": "eth1", "GLOO_SOCKET_IFNAME": "eth1"},
			reason: "route lookup, not a reachability check: the kernel routes to the head 10.77.0.1 through eth1 (this node's address 10.77.0.2, link up, MTU 9000); it does not say that the head answers"},
		// rank 0: the head's address must be this node's own
		{name: "head address not this node's", g: Group{Count: 2, Rank: 0, HeadHost: "10.77.0.9", HeadPort: 20000}, links: map[string]string{"eth1": "up 1500"},
			addrs:   []string{"127.0.0.1", "10.77.0.1"},
			problem: "this node is the head (rank 0), but the head address 10.77.0.9 is not one of its addresses (127.0.0.1, 10.77.0.1): the workers would dial another host"},
		{name: "head address this node's", g: Group{Count: 2, Rank: 0, HeadHost: "10.77.0.1", HeadPort: 20000}, links: map[string]string{"eth1": "up 1500"},
			env:    map[string]string{"NCCL_SOCKET_IFNAME": "eth1", "GLOO_SOCKET_IFNAME": "eth1"},
			reason: "the head 10.77.0.1 is this node: its address on eth1 (link up, MTU 1500)"},
		{name: "link down", g: worker, links: map[string]string{"eth1": "down 1500"},
			problem: "interface eth1, the route to the head 10.77.0.1, is down"},
		{name: "recipe names another interface", g: Group{Count: 2, Rank: 1, HeadHost: "10.77.0.1", HeadPort: 20000, Interface: "eth0"},
			links:   map[string]string{"eth1": "up 1500", "eth0": "up 1500"},
			problem: "nodes.interface eth0 does not reach the head 10.77.0.1: the kernel routes it through eth1"},
		{name: "recipe names no such interface", g: Group{Count: 2, Rank: 1, HeadHost: "10.77.0.1", HeadPort: 20000, Interface: "ens9"},
			links:   map[string]string{"eth1": "up 1500"},
			problem: "nodes.interface ens9 does not exist on this node (the head 10.77.0.1 is reached through eth1)"},
		{name: "recipe env names another interface", g: worker, links: map[string]string{"eth1": "up 1500"},
			set:     map[string]string{"NCCL_SOCKET_IFNAME": "eth0"},
			problem: "the recipe sets NCCL_SOCKET_IFNAME=eth0, but the head 10.77.0.1 is reached through eth1"},
		{name: "recipe env prefix kept", g: worker, links: map[string]string{"eth1": "up 1500"},
			set: map[string]string{"NCCL_SOCKET_IFNAME": "eth"},
			env: map[string]string{"GLOO_SOCKET_IFNAME": "eth1"}, reason: "NCCL_SOCKET_IFNAME=eth: set by the recipe, kept"},
		{name: "ib present: never NCCL_IB_DISABLE=1", g: worker, links: map[string]string{"eth1": "up 1500"},
			rdma: map[string]string{"mlx5_0/1": "4: ACTIVE|InfiniBand"}, set: map[string]string{"NCCL_IB_DISABLE": "1"},
			env:    map[string]string{"NCCL_SOCKET_IFNAME": "eth1", "GLOO_SOCKET_IFNAME": "eth1", "NCCL_IB_DISABLE": "0"},
			reason: "NCCL_IB_DISABLE=0: the recipe's NCCL_IB_DISABLE=1 would send the cross-node traffic over TCP sockets although mlx5_0 (InfiniBand) is active"},
		{name: "roce down: sockets", g: worker, links: map[string]string{"eth1": "up 1500"},
			rdma: map[string]string{"mlx5_0/1": "1: DOWN|Ethernet"}, set: map[string]string{"NCCL_IB_DISABLE": "1"},
			env:    map[string]string{"NCCL_SOCKET_IFNAME": "eth1", "GLOO_SOCKET_IFNAME": "eth1"},
			reason: "RDMA device(s) mlx5_0 have no active port"},
		{name: "head port held", g: Group{Count: 2, Rank: 0, HeadHost: "10.77.0.1", HeadPort: 20000, DPAttention: true}, links: map[string]string{"eth1": "up 1500"},
			held:    map[int]string{20003: "pid 42 (python3)"},
			problem: "port 20003, which the head needs for the group (ports 20000-20006 (the rendezvous and the 6 above it that DP attention opens)), is held by pid 42 (python3)"},
		{name: "rendezvous held", g: Group{Count: 2, Rank: 0, HeadHost: "10.77.0.1", HeadPort: 20000}, links: map[string]string{"eth1": "up 1500"},
			held:    map[int]string{20000: "pid 42 (python3)"},
			problem: "port 20000, which the head needs for the group (port 20000 (the rendezvous)), is held by pid 42 (python3)"},
		// without DP attention SGLang's head uses ipc:// sockets above the rendezvous: a
		// process on rendezvous+3 is no problem
		{name: "port above the rendezvous held without DP attention", g: Group{Count: 2, Rank: 0, HeadHost: "10.77.0.1", HeadPort: 20000},
			links: map[string]string{"eth1": "up 1500"}, held: map[int]string{20003: "pid 42 (python3)"},
			env:    map[string]string{"NCCL_SOCKET_IFNAME": "eth1", "GLOO_SOCKET_IFNAME": "eth1"},
			reason: "head port 20000 (the rendezvous) checked"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			la, io := fixedRoute("10.77.0.2", "eth1")
			h := Host{SysRoot: sysfs(t, c.links, c.rdma), LocalAddr: la, InterfaceOf: io,
				PortHolder: func(p int) (string, error) { return c.held[p], nil }}
			addrs := c.addrs
			if addrs == nil {
				addrs = []string{"127.0.0.1", c.g.HeadHost}
			}
			h.Addrs = func() ([]net.IP, error) {
				var ips []net.IP
				for _, a := range addrs {
					ips = append(ips, net.ParseIP(a))
				}
				return ips, nil
			}
			d := Derive(h.Inspect(context.Background(), c.g), c.set)
			all := strings.Join(d.Problems, "\n")
			if c.problem == "" && all != "" {
				t.Fatalf("problems: %s", all)
			}
			if !strings.Contains(all, c.problem) {
				t.Fatalf("problems:\n%s\nwant %q", all, c.problem)
			}
			if c.problem != "" {
				return
			}
			if len(d.Env) != len(c.env) {
				t.Errorf("env = %v, want %v", d.Env, c.env)
			}
			for k, v := range c.env {
				if d.Env[k] != v {
					t.Errorf("env = %v, want %v", d.Env, c.env)
				}
			}
			if r := strings.Join(d.Reasons, "\n"); !strings.Contains(r, c.reason) {
				t.Errorf("reasons:\n%s\nwant %q", r, c.reason)
			}
		})
	}
}

// TestKernelRoute asks the real kernel for the route to a loopback head: the interface is
// the one that holds 127.0.0.1.
func TestKernelRoute(t *testing.T) {
	lo := ""
	ifs, _ := net.Interfaces()
	for _, i := range ifs {
		if i.Flags&net.FlagLoopback != 0 {
			lo = i.Name
		}
	}
	if lo == "" {
		t.Skip("no loopback interface")
	}
	f := Host{}.Inspect(context.Background(), Group{Count: 2, Rank: 1, HeadHost: "127.0.0.1", HeadPort: 20000})
	if f.RouteErr != "" || f.Link.Name != lo || !f.Link.Exists || f.Local != "127.0.0.1" {
		t.Fatalf("facts = %+v, want the route through %s", f, lo)
	}
}

func TestIfnameMatches(t *testing.T) {
	for _, c := range []struct {
		v, iface string
		want     bool
	}{{"eth", "eth1", true}, {"=eth", "eth1", false}, {"=eth1", "eth1", true}, {"^docker,lo", "eth1", true},
		{"^eth", "eth1", false}, {"ib,eth", "eth0", true}, {"ens5", "eth0", false}} {
		if got := ifnameMatches(c.v, c.iface); got != c.want {
			t.Errorf("ifnameMatches(%q, %q) = %v", c.v, c.iface, got)
		}
	}
}

// TestEphemeralPorts: the hint names the kernel's range NCCL and Gloo take their ports
// from, read from proc; an unreadable range still says what must be open.
func TestEphemeralPorts(t *testing.T) {
	root := t.TempDir()
	p := filepath.Join(root, "sys", "net", "ipv4", "ip_local_port_range")
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte("32768\t60999\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := EphemeralPorts(root); !strings.Contains(got, "32768-60999 on this node") || !strings.Contains(got, "open between the nodes both ways") {
		t.Errorf("hint: %s", got)
	}
	if got := EphemeralPorts(t.TempDir()); !strings.Contains(got, "net.ipv4.ip_local_port_range") {
		t.Errorf("hint without the file: %s", got)
	}
	if g := (Group{HeadPort: 20000}); len(g.HeadPorts()) != 1 {
		t.Errorf("ports without DP attention: %v", g.HeadPorts())
	}
	if g := (Group{HeadPort: 20000, DPAttention: true}); len(g.HeadPorts()) != 7 || g.HeadPorts()[6] != 20006 {
		t.Errorf("ports with DP attention: %v", g.HeadPorts())
	}
}
