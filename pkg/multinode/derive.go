package multinode

import (
	"errors"
	"fmt"
	"strings"
)

// Decision is the environment derived for the server, why, and what stops the node from
// joining.
type Decision struct {
	// Env holds the variables to add to the server's environment.
	Env map[string]string
	// Reasons say, for plan, what was set or left and why.
	Reasons []string
	// Problems are what keeps this node from joining the group (a wrong interface, a link
	// that is down, no route, a head port held by another process); empty when none.
	Problems []string
}

// Err returns the problems as one error (nil when there are none).
func (d Decision) Err() error {
	if len(d.Problems) == 0 {
		return nil
	}
	return errors.New(strings.Join(d.Problems, "; "))
}

// socketVars are the variables that name the interface of the group's sockets: NCCL's
// bootstrap and socket transport, and Gloo's (torch.distributed's CPU groups).
var socketVars = []string{"NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"}

// Derive returns the group environment of a server whose own environment (the recipe's
// profile and step) is set, from the node's facts f:
//   - NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME name the interface the kernel routes the
//     head's address through, unless the recipe sets them (kept when they match it; a
//     problem when they name another interface);
//   - with an active InfiniBand or RoCE device, NCCL_IB_DISABLE=1 (which sends all
//     cross-node traffic over TCP sockets) is never kept: it becomes 0, with the reason;
//   - a recipe interface that does not exist, is down or is not the route's, no route to
//     the head, and a head port held by another process are problems.
func Derive(f Facts, set map[string]string) Decision {
	d := Decision{Env: map[string]string{}}
	g := f.Group
	role := "worker"
	if g.Rank == 0 {
		role = "head"
	}
	d.reason("node rank %d of %d (%s), rendezvous %s", g.Rank, g.Count, role, g.Head())
	iface := d.route(f)
	if p := notOwnHead(f); p != "" {
		d.Problems = append(d.Problems, p)
	}
	d.wanted(f, iface)
	d.sockets(f, set, iface)
	d.rdma(f, set, iface)
	d.ports(f)
	return d
}

func (d *Decision) reason(format string, args ...any) {
	d.Reasons = append(d.Reasons, fmt.Sprintf(format, args...))
}

func (d *Decision) problem(format string, args ...any) {
	d.Problems = append(d.Problems, fmt.Sprintf(format, args...))
}

// route says how the head is reached and returns the interface the kernel routes it
// through ("" when there is none to use).
func (d *Decision) route(f Facts) string {
	switch {
	case f.RouteErr != "":
		d.Problems = append(d.Problems, f.RouteErr)
		return ""
	case !f.Link.Exists:
		d.problem("the route to the head %s leaves by %s, which sysfs does not show", f.HeadIP, f.Link.Name)
		return ""
	}
	iface := f.Link.Name
	mtu := ""
	if f.Link.MTU > 0 {
		mtu = fmt.Sprintf(", MTU %d", f.Link.MTU)
	}
	if f.Group.Rank == 0 {
		d.reason("the head %s is this node: its address on %s (link %s%s)", f.HeadIP, iface, f.Link.State, mtu)
	} else {
		d.reason("route lookup, not a reachability check: the kernel routes to the head %s through %s (this node's address %s, link %s%s); it does not say that the head answers",
			f.HeadIP, iface, f.Local, f.Link.State, mtu)
	}
	if !f.Link.Usable() {
		d.problem("interface %s, the route to the head %s, is %s: bring it up", iface, f.HeadIP, f.Link.State)
	}
	return iface
}

// wanted checks the recipe's nodes.interface against the route's interface.
func (d *Decision) wanted(f Facts, iface string) {
	w := f.Wanted
	switch {
	case w == nil:
	case !w.Exists:
		d.problem("nodes.interface %s does not exist on this node%s", w.Name, routeHint(iface, f.HeadIP))
	case !w.Usable():
		d.problem("nodes.interface %s is %s: bring it up", w.Name, w.State)
	case iface != "" && w.Name != iface:
		d.problem("nodes.interface %s does not reach the head %s: the kernel routes it through %s; fix the interface or the route",
			w.Name, f.HeadIP, iface)
	}
}

// sockets names the route's interface for NCCL's and Gloo's sockets, keeping what the
// recipe sets when it matches.
func (d *Decision) sockets(f Facts, set map[string]string, iface string) {
	for _, k := range socketVars {
		if v, ok := set[k]; ok {
			if iface != "" && !ifnameMatches(v, iface) {
				d.problem("the recipe sets %s=%s, but the head %s is reached through %s: the group's sockets would not reach it",
					k, v, f.HeadIP, iface)
			} else {
				d.reason("%s=%s: set by the recipe, kept", k, v)
			}
			continue
		}
		if iface != "" {
			d.Env[k] = iface
			d.reason("%s=%s: the interface that reaches the head", k, iface)
		}
	}
}

// rdma says which transport the cross-node traffic takes, and turns a recipe's
// NCCL_IB_DISABLE=1 off where an RDMA device is active.
func (d *Decision) rdma(f Facts, set map[string]string, iface string) {
	var active []string
	for _, dev := range f.RDMA {
		if dev.Active() {
			active = append(active, dev.Name+" ("+dev.Fabric()+")")
		}
	}
	switch {
	case len(active) > 0 && set["NCCL_IB_DISABLE"] == "1":
		d.Env["NCCL_IB_DISABLE"] = "0"
		d.reason("NCCL_IB_DISABLE=0: the recipe's NCCL_IB_DISABLE=1 would send the cross-node traffic over TCP sockets although %s is active",
			strings.Join(active, ", "))
	case len(active) > 0:
		d.reason("NCCL uses the RDMA device(s) %s; NCCL_IB_HCA and NCCL_IB_GID_INDEX are left to NCCL unless the recipe sets them",
			strings.Join(active, ", "))
	case len(f.RDMA) > 0:
		d.reason("RDMA device(s) %s have no active port: the cross-node traffic goes over TCP sockets on %s", names(f.RDMA), orNone(iface))
	default:
		d.reason("no RDMA device: the cross-node traffic goes over TCP sockets on %s", orNone(iface))
	}
}

// ports reports the head's ports another process holds.
func (d *Decision) ports(f Facts) {
	g := f.Group
	for _, p := range f.Ports {
		if p.Holder != "" {
			d.problem("port %d, which the head needs for the group (%s), is held by %s", p.Port, g.HeadPortsText(), p.Holder)
		}
	}
	if g.Rank == 0 && len(f.Ports) > 0 {
		d.reason("head %s checked", g.HeadPortsText())
	}
}

func routeHint(iface, head string) string {
	if iface == "" {
		return ""
	}
	return fmt.Sprintf(" (the head %s is reached through %s)", head, iface)
}

func orNone(s string) string {
	if s == "" {
		return "the default interface"
	}
	return s
}

func names(ds []RDMADevice) string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.Name
	}
	return strings.Join(out, ", ")
}

// ifnameMatches reports whether an NCCL_SOCKET_IFNAME-style value selects iface: a comma
// list of prefixes, "=" before a list for exact names, "^" for a list that excludes.
func ifnameMatches(v, iface string) bool {
	exact := strings.HasPrefix(v, "=")
	v = strings.TrimPrefix(v, "=")
	exclude := strings.HasPrefix(v, "^")
	v = strings.TrimPrefix(v, "^")
	if strings.HasPrefix(v, "=") {
		exact = true
		v = strings.TrimPrefix(v, "=")
	}
	hit := false
	for _, p := range strings.Split(v, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		if (exact && iface == p) || (!exact && strings.HasPrefix(iface, p)) {
			hit = true
		}
	}
	return hit != exclude
}
