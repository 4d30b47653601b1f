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

var nodesHelp = map[string]string{
	"count": "the number of nodes in the group, e.g. count: 2",
	"rank":  "this node's rank, 0 for the head, e.g. rank: \"{{ .vars.node_rank }}\" with --set node_rank=1 on the second node",
	"head":  "rank 0's address and rendezvous port, e.g. head: \"{{ .vars.head_addr }}:20000\" with --set head_addr=10.0.0.1",
}

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

type nodesProblem struct{ field, msg string }

func (nd *Nodes) at(field string) *yaml.Node {
	if n := nd.nodes[field]; n != nil {
		return n
	}
	return &yaml.Node{Line: nd.pos.Line, Column: nd.pos.Col}
}

// resolve renders the block with d (nil: only fields without templates) and checks it.
func (nd *Nodes) resolve(d Data) (NodesConfig, []nodesProblem) {
	var c NodesConfig
	var probs []nodesProblem
	bad := func(field, format string, args ...any) {
		probs = append(probs, nodesProblem{field, fmt.Sprintf(format, args...)})
	}
	known := map[string]bool{}
	vals := map[string]string{}
	for _, field := range nodesFields {
		raw := nd.field(field)
		if strings.Contains(raw, "{{") {
			if d == nil {
				continue
			}
			out, err := render(raw, Data{"vars": d["vars"], budgetKey: d[budgetKey]})
			if err != nil {
				bad(field, "rendering %q: %v", raw, err)
				continue
			}
			raw = out
		}
		known[field] = true
		vals[field] = strings.TrimSpace(raw)
	}
	val := func(field string) string { return vals[field] }
	num := func(field string, min int) (int, bool) {
		v := val(field)
		if v == "" {
			return 0, false
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < min {
			bad(field, "nodes.%s must be a whole number of at least %d, not %q", field, min, v)
			return 0, false
		}
		return n, true
	}
	var count int
	countOK := false
	switch v := val("count"); {
	case !known["count"]:
	case v == "":
		bad("count", "nodes.count is empty: %s", nodesHelp["count"])
	case v == "1":
		bad("count", "nodes.count is 1: a single node needs no nodes block; drop it")
	default:
		count, countOK = num("count", 2)
		c.Count = count
	}
	rank, rankOK := num("rank", 0)
	if known["rank"] && val("rank") == "" {
		bad("rank", "nodes.rank is empty: %s", nodesHelp["rank"])
	}
	if rankOK {
		c.Rank = rank
		if countOK && rank >= count {
			bad("rank", "nodes.rank %d is out of range: a group of %d nodes has ranks 0 to %d", rank, count, count-1)
		}
	}
	switch v := strings.ToLower(val("one_host")); v {
	case "", "false":
	case "true":
		c.OneHost = true
	default:
		bad("one_host", "nodes.one_host %q is not true or false", val("one_host"))
	}
	if head := val("head"); head != "" {
		host, port, err := net.SplitHostPort(head)
		pn, perr := strconv.Atoi(port)
		ip := net.ParseIP(strings.TrimSuffix(strings.SplitN(host, "%", 2)[0], "."))
		switch {
		case err != nil:
			bad("head", "nodes.head %q is not HOST:PORT (rank 0's address and rendezvous port, e.g. 10.0.0.1:20000; [fd00::1]:20000 for IPv6)", head)
		case host == "" || strings.ContainsAny(host, " /"):
			bad("head", "nodes.head %q has no host: give rank 0's address, e.g. 10.0.0.1:20000", head)
		case perr != nil || pn < 1 || pn > 65535:
			bad("head", "nodes.head %q: port %q is not a TCP port (1 to 65535)", head, port)
		case ip != nil && ip.IsUnspecified():
			bad("head", "nodes.head %q: %s means any address, which is where a server listens, not where a worker can reach it (a worker would dial itself): give rank 0's address on the network the nodes share, e.g. 10.0.0.1:%d", head, host, pn)
		case !c.OneHost && (ip != nil && ip.IsLoopback() || strings.EqualFold(strings.TrimSuffix(host, "."), "localhost")):
			bad("head", "nodes.head %q is a loopback address: a worker on another host would reach itself, not rank 0; give rank 0's address on the network the nodes share, or set nodes.one_host: true when every node runs on this one host", head)
		default:
			c.HeadHost, c.HeadPort = host, pn
		}
	} else if known["head"] {
		bad("head", "nodes.head is empty: %s", nodesHelp["head"])
	}
	tp, tpOK := num("tp", 1)
	pp, ppOK := num("pp", 1)
	gpn, gpnOK := num("gpus_per_node", 1)
	if tpOK {
		c.TP = tp
	}
	if ppOK {
		c.PP = pp
	}
	if gpnOK {
		c.GPUsPerNode = gpn
	}
	if !ppOK {
		pp = 1
	}
	if tpOK && countOK {
		switch world := tp * pp; {
		case world%count != 0:
			bad("tp", "tp %d × pp %d = %d GPUs do not divide over %d nodes: every node runs the same number of GPUs; make tp × pp a multiple of %d", tp, pp, world, count, count)
		case gpnOK && world != count*gpn:
			bad("tp", "tp %d × pp %d = %d GPUs, but %d nodes × gpus_per_node %d = %d: set tp to %d (or pp)", tp, pp, world, count, gpn, count*gpn, count*gpn/pp)
		}
	}
	if v := val("interface"); v != "" {
		if !ifnameRE.MatchString(v) {
			bad("interface", "nodes.interface %q is not a network interface name (e.g. eth0, ens5, ib0)", v)
		} else {
			c.Interface = v
		}
	}
	c.JoinTimeout = DefaultJoinTimeout
	if v := val("join_timeout"); v != "" {
		t, err := time.ParseDuration(v)
		if err != nil || t <= 0 || t > 24*time.Hour {
			bad("join_timeout", "nodes.join_timeout %q is not a duration between 0 and 24h, e.g. 20m", v)
		} else {
			c.JoinTimeout = t
		}
	}
	return c, probs
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
