package recipe

import (
	"fmt"
	"net"
	"regexp"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Nodes is the recipe's nodes block: one model served by SGLang across several hosts
// (--nnodes, --node-rank, --dist-init-addr). Every node applies the same recipe with its
// own rank; the fields may use templates over the vars ({{ .vars.node_rank }}), which
// cloud-init's instance metadata or --set give each node.
type Nodes struct {
	// Count is the number of nodes in the group (at least 2).
	Count string `yaml:"count" json:"count"`
	// Rank is this node's rank, 0 (the head, which serves the API) to count-1.
	Rank string `yaml:"rank" json:"rank"`
	// Head is rank 0's address and rendezvous port, "10.0.0.1:20000" ("[fd00::1]:20000"):
	// SGLang's --dist-init-addr.
	Head string `yaml:"head" json:"head"`
	// TP and PP are the tensor and pipeline parallel sizes over all the nodes' GPUs
	// (default: tp = count × the GPUs of this host, pp = 1).
	TP string `yaml:"tp" json:"tp,omitempty"`
	PP string `yaml:"pp" json:"pp,omitempty"`
	// GPUsPerNode is the GPUs each node gives the server; when set, tp × pp must be
	// count × gpus_per_node.
	GPUsPerNode string `yaml:"gpus_per_node" json:"gpus_per_node,omitempty"`
	// Interface is the network interface that must reach the head (default: the one the
	// kernel routes the head's address through).
	Interface string `yaml:"interface" json:"interface,omitempty"`
	// JoinTimeout bounds how long a worker waits for the group to serve (default 20m).
	JoinTimeout string `yaml:"join_timeout" json:"join_timeout,omitempty"`
	// OneHost is "true" when every node of the group runs on one host (containers or
	// network namespaces sharing its GPUs): only then may head be a loopback address.
	OneHost string `yaml:"one_host" json:"one_host,omitempty"`

	nodes map[string]*yaml.Node
	pos   Pos
}

// NodesConfig is a rendered, checked nodes block.
type NodesConfig struct {
	// Count and Rank are the group's size and this node's rank.
	Count, Rank int
	// HeadHost and HeadPort are rank 0's address and rendezvous port.
	HeadHost string
	HeadPort int
	// TP and PP are the parallel sizes (0: not set; TP then defaults to count × GPUs).
	TP, PP int
	// GPUsPerNode is 0 when not set.
	GPUsPerNode int
	// Interface is the interface the recipe names ("" for the route's).
	Interface string
	// JoinTimeout bounds a worker's wait for the group.
	JoinTimeout time.Duration
	// OneHost is set when the recipe says every node runs on one host.
	OneHost bool
}

// DefaultJoinTimeout is how long a worker waits for the group to serve by default.
const DefaultJoinTimeout = 20 * time.Minute

// Head returns the rendezvous address, HOST:PORT (SGLang's --dist-init-addr).
func (c NodesConfig) Head() string {
	return net.JoinHostPort(c.HeadHost, strconv.Itoa(c.HeadPort))
}

// IsHead reports whether this node is rank 0, the one that serves the API.
func (c NodesConfig) IsHead() bool { return c.Rank == 0 }

var ifnameRE = regexp.MustCompile(`^[A-Za-z0-9_.:@-]{1,15}$`)

var nodesFields = []string{"count", "rank", "head", "tp", "pp", "gpus_per_node", "interface", "join_timeout", "one_host"}

// parseNodes reads the nodes block; values without templates are checked at once.
func (p *parser) parseNodes(n *yaml.Node, r *Recipe) {
	var nd Nodes
	if !p.decodeStrict(n, "nodes", &nd) {
		return
	}
	nd.pos = Pos{File: p.file, Line: n.Line, Col: n.Column}
	nd.nodes = map[string]*yaml.Node{}
	for _, f := range nodesFields {
		at := nodeAt(n, f)
		nd.nodes[f] = at
		refs, bad := templateRefs(nd.field(f))
		if bad != nil {
			p.addf(at, "nodes."+f, "bad template: %v", bad)
			continue
		}
		for _, ref := range refs {
			if !strings.HasPrefix(ref, "vars.") {
				p.addf(at, "nodes."+f, "template refers to %q: the nodes block sees .vars only", ref)
			}
		}
		p.checkRefs(at, "nodes."+f, refs, r)
	}
	for _, f := range []string{"count", "rank", "head"} {
		if strings.TrimSpace(nd.field(f)) == "" && nd.nodes[f] == nil {
			p.addf(n, "nodes."+f, "nodes.%s is required: %s", f, nodesHelp[f])
		}
	}
	r.Nodes = &nd
}

// nodesHelp says, for each required field, what to give.
var nodesHelp = map[string]string{
	"count": "the number of nodes in the group, e.g. count: 2",
	"rank":  "this node's rank, 0 for the head, e.g. rank: \"{{ .vars.node_rank }}\" with --set node_rank=1 on the second node",
	"head":  "rank 0's address and rendezvous port, e.g. head: \"{{ .vars.head_addr }}:20000\" with --set head_addr=10.0.0.1",
}

// field returns the nodes block's field by its YAML name, as written.
func (nd *Nodes) field(name string) string {
	switch name {
	case "count":
		return nd.Count
	case "rank":
		return nd.Rank
	case "head":
		return nd.Head
	case "tp":
		return nd.TP
	case "pp":
		return nd.PP
	case "gpus_per_node":
		return nd.GPUsPerNode
	case "interface":
		return nd.Interface
	case "join_timeout":
		return nd.JoinTimeout
	case "one_host":
		return nd.OneHost
	}
	return ""
}

// checkNodes checks the nodes block with the vars as the recipe and --set give them, so
// that an inconsistent group (a rank out of range, a tp that does not divide over the
// nodes, no head) is refused by validate with the field's position. A field whose vars
// need the host's facts is checked when it is rendered (NodesConfig).
func (p *parser) checkNodes(r *Recipe) {
	if r.Nodes == nil {
		return
	}
	d, err := r.NewData(nil)
	if err != nil {
		d = nil
	}
	_, probs := r.Nodes.resolve(d)
	for _, pr := range probs {
		p.addf(r.Nodes.at(pr.field), "nodes."+pr.field, "%s", pr.msg)
	}
}

// nodesProblem is a problem with one field of the nodes block.
type nodesProblem struct{ field, msg string }

// at returns the node of field, for a problem's position (the block's own when the field is not written).
func (nd *Nodes) at(field string) *yaml.Node {
	if n := nd.nodes[field]; n != nil {
		return n
	}
	return &yaml.Node{Line: nd.pos.Line, Column: nd.pos.Col}
}

// resolve renders the block with d (nil: only fields without templates) and checks it.
func (nd *Nodes) resolve(d Data) (NodesConfig, []nodesProblem) {
	v := nd.renderValues(d)
	count, countOK := v.count()
	v.rank(count, countOK)
	v.oneHost()
	v.head()
	v.parallelism(count, countOK)
	v.iface()
	v.joinTimeout()
	return v.c, v.probs
}

// nodesValues are a nodes block's fields as rendered, while resolve checks them into c.
type nodesValues struct {
	// known are the fields rendered (a template without d is not); vals their values,
	// trimmed.
	known map[string]bool
	vals  map[string]string
	c     NodesConfig
	probs []nodesProblem
}

// renderValues renders each field with d's vars (nil d: only the fields without templates).
func (nd *Nodes) renderValues(d Data) *nodesValues {
	v := &nodesValues{known: map[string]bool{}, vals: map[string]string{}}
	for _, field := range nodesFields {
		raw := nd.field(field)
		if strings.Contains(raw, "{{") {
			if d == nil {
				continue
			}
			out, err := render(raw, Data{"vars": d["vars"], budgetKey: d[budgetKey]})
			if err != nil {
				v.bad(field, "rendering %q: %v", raw, err)
				continue
			}
			raw = out
		}
		v.known[field] = true
		v.vals[field] = strings.TrimSpace(raw)
	}
	return v
}

// bad records a problem with field.
func (v *nodesValues) bad(field, format string, args ...any) {
	v.probs = append(v.probs, nodesProblem{field, fmt.Sprintf(format, args...)})
}

// val returns field's rendered value ("" when empty or not rendered).
func (v *nodesValues) val(field string) string { return v.vals[field] }

// num reads field as a whole number of at least min; ok is false when it is empty or is
// not one (a problem then).
func (v *nodesValues) num(field string, min int) (int, bool) {
	s := v.val(field)
	if s == "" {
		return 0, false
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < min {
		v.bad(field, "nodes.%s must be a whole number of at least %d, not %q", field, min, s)
		return 0, false
	}
	return n, true
}

// count checks the group's size (2 or more) and returns it.
func (v *nodesValues) count() (count int, ok bool) {
	switch s := v.val("count"); {
	case !v.known["count"]:
	case s == "":
		v.bad("count", "nodes.count is empty: %s", nodesHelp["count"])
	case s == "1":
		v.bad("count", "nodes.count is 1: a single node needs no nodes block; drop it")
	default:
		count, ok = v.num("count", 2)
		v.c.Count = count
	}
	return count, ok
}

// rank checks this node's rank, within the group's size when that is known.
func (v *nodesValues) rank(count int, countOK bool) {
	rank, rankOK := v.num("rank", 0)
	if v.known["rank"] && v.val("rank") == "" {
		v.bad("rank", "nodes.rank is empty: %s", nodesHelp["rank"])
	}
	if rankOK {
		v.c.Rank = rank
		if countOK && rank >= count {
			v.bad("rank", "nodes.rank %d is out of range: a group of %d nodes has ranks 0 to %d", rank, count, count-1)
		}
	}
}

// oneHost reads one_host, true or false (empty: false).
func (v *nodesValues) oneHost() {
	switch s := strings.ToLower(v.val("one_host")); s {
	case "", "false":
	case "true":
		v.c.OneHost = true
	default:
		v.bad("one_host", "nodes.one_host %q is not true or false", v.val("one_host"))
	}
}

// head checks rank 0's HOST:PORT: a host a worker can reach (no unspecified address, and
// no loopback unless every node runs on one host) and a TCP port.
func (v *nodesValues) head() {
	head := v.val("head")
	if head == "" {
		if v.known["head"] {
			v.bad("head", "nodes.head is empty: %s", nodesHelp["head"])
		}
		return
	}
	host, port, err := net.SplitHostPort(head)
	pn, perr := strconv.Atoi(port)
	ip := net.ParseIP(strings.TrimSuffix(strings.SplitN(host, "%", 2)[0], "."))
	switch {
	case err != nil:
		v.bad("head", "nodes.head %q is not HOST:PORT (rank 0's address and rendezvous port, e.g. 10.0.0.1:20000; [fd00::1]:20000 for IPv6)", head)
	case host == "" || strings.ContainsAny(host, " /"):
		v.bad("head", "nodes.head %q has no host: give rank 0's address, e.g. 10.0.0.1:20000", head)
	case perr != nil || pn < 1 || pn > 65535:
		v.bad("head", "nodes.head %q: port %q is not a TCP port (1 to 65535)", head, port)
	case ip != nil && ip.IsUnspecified():
		v.bad("head", "nodes.head %q: %s means any address, which is where a server listens, not where a worker can reach it (a worker would dial itself): give rank 0's address on the network the nodes share, e.g. 10.0.0.1:%d", head, host, pn)
	case !v.c.OneHost && (ip != nil && ip.IsLoopback() || strings.EqualFold(strings.TrimSuffix(host, "."), "localhost")):
		v.bad("head", "nodes.head %q is a loopback address: a worker on another host would reach itself, not rank 0; give rank 0's address on the network the nodes share, or set nodes.one_host: true when every node runs on this one host", head)
	default:
		v.c.HeadHost, v.c.HeadPort = host, pn
	}
}

// parallelism reads tp, pp and gpus_per_node, and checks that tp × pp GPUs divide over
// the group's nodes (and make count × gpus_per_node, when that is given).
func (v *nodesValues) parallelism(count int, countOK bool) {
	tp, tpOK := v.num("tp", 1)
	pp, ppOK := v.num("pp", 1)
	gpn, gpnOK := v.num("gpus_per_node", 1)
	if tpOK {
		v.c.TP = tp
	}
	if ppOK {
		v.c.PP = pp
	}
	if gpnOK {
		v.c.GPUsPerNode = gpn
	}
	if !ppOK {
		pp = 1
	}
	if !tpOK || !countOK {
		return
	}
	switch world := tp * pp; {
	case world%count != 0:
		v.bad("tp", "tp %d × pp %d = %d GPUs do not divide over %d nodes: every node runs the same number of GPUs; make tp × pp a multiple of %d", tp, pp, world, count, count)
	case gpnOK && world != count*gpn:
		v.bad("tp", "tp %d × pp %d = %d GPUs, but %d nodes × gpus_per_node %d = %d: set tp to %d (or pp)", tp, pp, world, count, gpn, count*gpn, count*gpn/pp)
	}
}

// iface checks the network interface's name.
func (v *nodesValues) iface() {
	s := v.val("interface")
	if s == "" {
		return
	}
	if !ifnameRE.MatchString(s) {
		v.bad("interface", "nodes.interface %q is not a network interface name (e.g. eth0, ens5, ib0)", s)
		return
	}
	v.c.Interface = s
}

// joinTimeout reads join_timeout, a duration up to 24h (empty: DefaultJoinTimeout).
func (v *nodesValues) joinTimeout() {
	v.c.JoinTimeout = DefaultJoinTimeout
	s := v.val("join_timeout")
	if s == "" {
		return
	}
	t, err := time.ParseDuration(s)
	if err != nil || t <= 0 || t > 24*time.Hour {
		v.bad("join_timeout", "nodes.join_timeout %q is not a duration between 0 and 24h, e.g. 20m", s)
		return
	}
	v.c.JoinTimeout = t
}

// NodesConfig renders the recipe's nodes block with d (its vars) and checks it; ok is
// false when the recipe has none. A problem is an error naming the field's position.
func (r *Recipe) NodesConfig(d Data) (c NodesConfig, ok bool, err error) {
	if r.Nodes == nil {
		return NodesConfig{}, false, nil
	}
	if d == nil {
		d = Data{}
	}
	c, probs := r.Nodes.resolve(d)
	if len(probs) > 0 {
		var ps Problems
		for _, pr := range probs {
			at := r.Nodes.at(pr.field)
			ps = append(ps, Problem{Pos: Pos{File: r.Nodes.pos.File, Line: at.Line, Col: at.Column}, Path: "nodes." + pr.field, Msg: pr.msg})
		}
		return c, true, ps
	}
	return c, true, nil
}
