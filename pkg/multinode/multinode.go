// Package multinode is the per-node preflight of a server that spans several nodes (SGLang's
// --nnodes, --node-rank, --dist-init-addr): which interface reaches the group's head, its
// link state and MTU, the RDMA devices, the ports the head must have free, and the NCCL and
// Gloo environment derived from those facts, as package nccl derives a single node's from
// its peer-path facts.
//
// The route is the kernel's own: a UDP socket connected to the head's address (no packet
// is sent) gets the source address the kernel chose, and the interface holding that
// address is the one the traffic leaves by. No netlink and no child process are used. The
// link and RDMA facts are read from sysfs (Host.SysRoot, so that tests and plans can run on
// fixtures). The package imports nothing of sglprov's engine.
package multinode

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Group is a node's view of its group.
type Group struct {
	// Count and Rank are the group's size and this node's rank (0: the head).
	Count, Rank int
	// HeadHost and HeadPort are rank 0's address and rendezvous port (--dist-init-addr).
	HeadHost string
	HeadPort int
	// Interface is the interface the recipe says must reach the head ("": the route's).
	Interface string
	// DPAttention is set when the launch line has --enable-dp-attention: SGLang then also
	// opens DPAttentionPorts ports above the rendezvous port on the head.
	DPAttention bool
}

// Head returns the rendezvous address, HOST:PORT.
func (g Group) Head() string { return net.JoinHostPort(g.HeadHost, strconv.Itoa(g.HeadPort)) }

// DPAttentionPorts is how many ports above the rendezvous port SGLang's head opens for the
// group with DP attention: PortArgs.init_new in python/sglang/srt/server_args.py
// (sgl-project/sglang stored version 001067fffe33) takes port_base = dist_init_port + 1
// and binds the tokenizer (port_base), detokenizer (+1), rpc (+2), metrics (+3), the
// scheduler input (+4) and the load collector (+5) over TCP only when enable_dp_attention
// is set; otherwise those sockets are ipc:// files and the head listens, for the group, on
// the rendezvous port alone (torch.distributed's TCPStore at --dist-init-addr).
const DPAttentionPorts = 6

// PortSpan is how many ports above the rendezvous port the head needs (0 without DP
// attention).
func (g Group) PortSpan() int {
	if g.DPAttention {
		return DPAttentionPorts
	}
	return 0
}

// HeadPorts returns the fixed TCP ports the head listens on for the group: the rendezvous
// port and, with DP attention, the DPAttentionPorts above it. NCCL's and Gloo's own ports
// are ephemeral (see EphemeralPorts) and are not among them.
func (g Group) HeadPorts() []int {
	out := []int{g.HeadPort}
	for i := 1; i <= g.PortSpan(); i++ {
		out = append(out, g.HeadPort+i)
	}
	return out
}

// HeadPortsText names the head's fixed ports for messages: "port 20000 (the rendezvous)"
// or "ports 20000-20006 (the rendezvous and DP attention's six above it)".
func (g Group) HeadPortsText() string {
	if g.PortSpan() == 0 {
		return fmt.Sprintf("port %d (the rendezvous)", g.HeadPort)
	}
	return fmt.Sprintf("ports %d-%d (the rendezvous and the %d above it that DP attention opens)", g.HeadPort, g.HeadPort+g.PortSpan(), g.PortSpan())
}

// EphemeralPorts says which ports NCCL and Gloo (torch.distributed's CPU groups) use
// between the nodes: neither has a fixed port nor a setting for one. Each rank listens on
// a port the kernel picks from net.ipv4.ip_local_port_range (NCCL's bootstrap and socket
// transport connect to each other's, NVIDIA/nccl#388; Gloo's pairs likewise), so that
// range must be open between the nodes in both directions, or the range narrowed (sysctl
// net.ipv4.ip_local_port_range) to one the firewall opens. procRoot is the proc mount (""
// for /proc); the read is bounded.
func EphemeralPorts(procRoot string) string {
	if procRoot == "" {
		procRoot = "/proc"
	}
	v, err := readSmall(filepath.Join(procRoot, "sys", "net", "ipv4", "ip_local_port_range"))
	lo, hi, ok := strings.Cut(strings.Join(strings.Fields(v), " "), " ")
	if err != nil || !ok {
		return "NCCL and Gloo listen on ephemeral ports (net.ipv4.ip_local_port_range) on every node: that range must be open between the nodes both ways"
	}
	return fmt.Sprintf("NCCL and Gloo listen on ephemeral ports on every node (net.ipv4.ip_local_port_range, %s-%s on this node; neither has a port setting): that range must be open between the nodes both ways, or narrowed with that sysctl to one the firewall opens", lo, hi)
}

// Link is what sysfs says about a network interface.
type Link struct {
	// Name is the interface's name; Exists is false when sysfs has no such interface.
	Name   string
	Exists bool
	// State is operstate ("up", "down", "unknown", ...); MTU its MTU (0: not read).
	State string
	MTU   int
}

// Usable reports whether traffic can leave by the link: it exists and is not down
// ("unknown" is what loopback and some virtual links report while they carry traffic).
func (l Link) Usable() bool {
	return l.Exists && l.State != "down" && l.State != "lowerlayerdown" && l.State != "notpresent"
}

// RDMAPort is one port of an RDMA device.
type RDMAPort struct {
	// Port is its number; State e.g. "4: ACTIVE"; LinkLayer "InfiniBand" or "Ethernet"
	// (RoCE).
	Port, State, LinkLayer string
}

// Active reports whether the port is up.
func (p RDMAPort) Active() bool { return strings.Contains(p.State, "ACTIVE") }

// RDMADevice is an InfiniBand or RoCE device (/sys/class/infiniband/NAME).
type RDMADevice struct {
	Name  string
	Ports []RDMAPort
}

// Active reports whether one of the device's ports is up.
func (d RDMADevice) Active() bool {
	for _, p := range d.Ports {
		if p.Active() {
			return true
		}
	}
	return false
}

// Fabric names the link layers of the device's active ports ("InfiniBand", "RoCE").
func (d RDMADevice) Fabric() string {
	seen := map[string]bool{}
	var out []string
	for _, p := range d.Ports {
		name := p.LinkLayer
		if name == "Ethernet" {
			name = "RoCE"
		}
		if name != "" && !seen[name] {
			seen[name] = true
			out = append(out, name)
		}
	}
	return strings.Join(out, "/")
}

// PortUse is one head port and who listens on it.
type PortUse struct {
	Port int
	// Holder names the process that listens there ("" when the port is free).
	Holder string
}

// Facts are one node's facts about reaching its group.
type Facts struct {
	Group Group
	// HeadIP is the head's address as resolved; RouteErr says why no route was found.
	HeadIP   string
	RouteErr string
	// Local is this node's source address towards the head; Link the interface it is on.
	Local string
	Link  Link
	// Wanted is the interface the recipe names, when it names one (its link facts).
	Wanted *Link
	// RDMA are the host's RDMA devices.
	RDMA []RDMADevice
	// Ports are the head's ports and their holders (on rank 0 only).
	Ports []PortUse
	// Addrs are this node's own addresses (on rank 0 only: the head's address must be one
	// of them); nil when they were not read.
	Addrs []string
}

// Host is where the facts are read from.
type Host struct {
	// SysRoot is the sysfs mount ("" for /sys).
	SysRoot string
	// LocalAddr returns the source address the kernel uses towards ip (default: a UDP
	// socket connected to ip; nothing is sent).
	LocalAddr func(ip net.IP) (net.IP, error)
	// InterfaceOf returns the interface that holds the address ip (default: net.Interfaces).
	InterfaceOf func(ip net.IP) (string, error)
	// Lookup resolves a host name, bounded by ctx (default: the system resolver).
	Lookup func(ctx context.Context, host string) ([]net.IP, error)
	// PortHolder names who listens on a TCP port ("" when none); nil: ports are not checked.
	PortHolder func(port int) (string, error)
	// Addrs returns this node's addresses (default: net.InterfaceAddrs).
	Addrs func() ([]net.IP, error)
}

func (h Host) sys(parts ...string) string {
	root := h.SysRoot
	if root == "" {
		root = "/sys"
	}
	return filepath.Join(append([]string{root}, parts...)...)
}

// Inspect gathers the facts of g on this host; resolving the head's name is bounded by
// ctx and 5 s.
func (h Host) Inspect(ctx context.Context, g Group) Facts {
	f := Facts{Group: g}
	ip, err := h.resolve(ctx, g.HeadHost)
	if err != nil {
		f.RouteErr = err.Error()
	} else {
		f.HeadIP = ip.String()
		local, iface, err := h.route(ip)
		if err != nil {
			f.RouteErr = err.Error()
		} else {
			f.Local = local.String()
			f.Link = h.link(iface)
		}
	}
	if g.Interface != "" {
		l := h.link(g.Interface)
		f.Wanted = &l
	}
	f.RDMA = h.rdma()
	if g.Rank == 0 {
		f.Addrs = h.addrs()
	}
	if g.Rank == 0 && h.PortHolder != nil {
		for _, p := range g.HeadPorts() {
			who, err := h.PortHolder(p)
			if err != nil {
				who = "unknown (" + err.Error() + ")"
			}
			f.Ports = append(f.Ports, PortUse{Port: p, Holder: who})
		}
	}
	return f
}

func (h Host) resolve(ctx context.Context, host string) (net.IP, error) {
	if ip := net.ParseIP(host); ip != nil {
		return ip, nil
	}
	lookup := h.Lookup
	if lookup == nil {
		lookup = func(ctx context.Context, host string) ([]net.IP, error) {
			return net.DefaultResolver.LookupIP(ctx, "ip", host)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ips, err := lookup(ctx, host)
	if err != nil {
		return nil, fmt.Errorf("resolving the head %q: %w", host, err)
	}
	if len(ips) == 0 {
		return nil, fmt.Errorf("resolving the head %q: no address", host)
	}
	return ips[0], nil
}

// addrs returns this node's addresses as strings, nil when they cannot be read.
func (h Host) addrs() []string {
	list := h.Addrs
	if list == nil {
		list = interfaceAddrs
	}
	ips, err := list()
	if err != nil {
		return nil
	}
	out := []string{}
	for _, ip := range ips {
		out = append(out, ip.String())
	}
	return out
}

// interfaceAddrs returns the addresses of this host's interfaces.
func interfaceAddrs() ([]net.IP, error) {
	as, err := net.InterfaceAddrs()
	if err != nil {
		return nil, err
	}
	var out []net.IP
	for _, a := range as {
		if n, ok := a.(*net.IPNet); ok {
			out = append(out, n.IP)
		}
	}
	return out, nil
}

// notOwnHead is the problem of a head (rank 0) whose nodes.head address is not its own
// ("" when it is, when it is a loopback address, or when the addresses were not read).
func notOwnHead(f Facts) string {
	if f.Group.Rank != 0 || f.Addrs == nil || f.HeadIP == "" {
		return ""
	}
	ip := net.ParseIP(f.HeadIP)
	if ip == nil || ip.IsLoopback() {
		return ""
	}
	for _, a := range f.Addrs {
		if b := net.ParseIP(a); b != nil && b.Equal(ip) {
			return ""
		}
	}
	return fmt.Sprintf("this node is the head (rank 0), but the head address %s is not one of its addresses (%s): the workers would dial another host; set nodes.head to this node's own address, or this node's nodes.rank",
		f.HeadIP, strings.Join(f.Addrs, ", "))
}

// route returns the source address and interface the kernel uses towards ip.
func (h Host) route(ip net.IP) (net.IP, string, error) {
	localAddr, ifaceOf := h.LocalAddr, h.InterfaceOf
	if localAddr == nil {
		localAddr = kernelLocalAddr
	}
	if ifaceOf == nil {
		ifaceOf = interfaceOf
	}
	local, err := localAddr(ip)
	if err != nil {
		return nil, "", fmt.Errorf("no route to the head %s: %w", ip, err)
	}
	iface, err := ifaceOf(local)
	if err != nil {
		return nil, "", fmt.Errorf("finding the interface of %s (this node's address towards the head %s): %w", local, ip, err)
	}
	return local, iface, nil
}

// kernelLocalAddr connects a UDP socket to ip (which sends nothing) and returns the source
// address the kernel chose by its routing tables.
func kernelLocalAddr(ip net.IP) (net.IP, error) {
	c, err := net.DialUDP("udp", nil, &net.UDPAddr{IP: ip, Port: 9})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).IP, nil
}

// interfaceOf returns the interface that holds the address ip.
func interfaceOf(ip net.IP) (string, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return "", err
	}
	for _, i := range ifs {
		addrs, err := i.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.Equal(ip) {
				return i.Name, nil
			}
		}
	}
	return "", fmt.Errorf("no interface holds %s", ip)
}

// readSmall reads a small sysfs file (at most 4 KiB), trimmed.
func readSmall(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 4096))
	return strings.TrimSpace(string(b)), err
}

func (h Host) link(name string) Link {
	l := Link{Name: name}
	if !safeName(name) {
		return l
	}
	dir := h.sys("class", "net", name)
	if _, err := os.Stat(dir); err != nil {
		return l
	}
	l.Exists = true
	l.State, _ = readSmall(filepath.Join(dir, "operstate"))
	if v, err := readSmall(filepath.Join(dir, "mtu")); err == nil {
		l.MTU, _ = strconv.Atoi(v)
	}
	return l
}

func safeName(name string) bool {
	return name != "" && name != "." && name != ".." && !strings.ContainsAny(name, "/\x00")
}

// MaxRDMADevices bounds how many RDMA devices are read.
const MaxRDMADevices = 64

func (h Host) rdma() []RDMADevice {
	ents, err := os.ReadDir(h.sys("class", "infiniband"))
	if err != nil {
		return nil
	}
	var out []RDMADevice
	for _, e := range ents {
		if len(out) == MaxRDMADevices || !safeName(e.Name()) {
			break
		}
		d := RDMADevice{Name: e.Name()}
		ports, _ := os.ReadDir(h.sys("class", "infiniband", e.Name(), "ports"))
		for i, p := range ports {
			if i == 16 {
				break
			}
			dir := h.sys("class", "infiniband", e.Name(), "ports", p.Name())
			st, _ := readSmall(filepath.Join(dir, "state"))
			ll, _ := readSmall(filepath.Join(dir, "link_layer"))
			d.Ports = append(d.Ports, RDMAPort{Port: p.Name(), State: st, LinkLayer: ll})
		}
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
