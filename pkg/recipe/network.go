package recipe

import (
	"time"

	"go.yaml.in/yaml/v3"
)

// Network is the recipe's network block: the one retry budget of every step that reaches
// the network (the hub's API requests of downloads, git clones of sources).
type Network struct {
	// RetryFor is how long a request that failed in a way a retry can help (a host name
	// that does not resolve yet, a refused or dropped connection, a server error) is tried
	// again, with waits that grow from 1s to 2m, each logged with what it waits for and
	// the budget left, e.g. "3m" ("": 10m).
	RetryFor string `yaml:"retry_for" json:"retry_for,omitempty"`

	retryFor time.Duration
}

// NetworkRetryFor returns the recipe's network.retry_for, or 0 when it sets none (the
// default budget, netretry.DefaultBudget).
func (r *Recipe) NetworkRetryFor() time.Duration {
	if r == nil || r.Network == nil {
		return 0
	}
	return r.Network.retryFor
}

// parseNetwork reads the network block.
func (p *parser) parseNetwork(n *yaml.Node, r *Recipe) {
	var nw Network
	if !p.decodeStrict(n, "network", &nw) {
		return
	}
	if nw.RetryFor != "" {
		d, err := time.ParseDuration(nw.RetryFor)
		if err != nil || d <= 0 {
			p.addf(nodeAt(n, "retry_for"), "network.retry_for", "network.retry_for %q: want a positive duration such as 10m", nw.RetryFor)
			return
		}
		nw.retryFor = d
	}
	r.Network = &nw
}
