package recipe

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Cache is the recipe's cache block: the fleet's OCI registry repository that build outputs
// and downloaded files are pulled from and, on nodes that push, published to. It is not
// part of any step's fingerprint. Its fields may use templates ({{ .vars.x }}), so that one
// recipe serves the node that pushes and those that only pull.
type Cache struct {
	// OCI is the repository prefix, "registry.internal:5000/fleet/sglprov".
	OCI string `yaml:"oci" json:"oci"`
	// Push is "true" on the node that publishes what it builds and downloads (default
	// false: pull only).
	Push string `yaml:"push" json:"push,omitempty"`
	// PlainHTTP speaks HTTP rather than HTTPS to the registry (loopback addresses may
	// always use plain HTTP).
	PlainHTTP string `yaml:"plain_http" json:"plain_http,omitempty"`
	// Digests, when set, is the only artifacts (manifest digests, "sha256:<hex>") a node
	// takes from the registry: a pin list for locked-down fleets.
	Digests []string `yaml:"digests" json:"digests,omitempty"`
	// MinRate is the slowest a blob may come from the registry, per connection, measured
	// over 30 s: "64KiB/s" (the default), "1MiB/s", or "0" for no minimum. A registry
	// slower than that (a trickle that never stalls) is given up for the run and the origin
	// (the hub, or the build) takes over.
	MinRate string `yaml:"min_rate" json:"min_rate,omitempty"`

	pos Pos
}

// CacheConfig is a rendered cache block.
type CacheConfig struct {
	// OCI is the repository, "host[:port]/path".
	OCI string
	// Push and PlainHTTP as in Cache.
	Push, PlainHTTP bool
	// Digests is the pin list.
	Digests []string
	// MinRate is min_rate in bytes per second (0: not set, the cache's default; -1: no
	// minimum).
	MinRate int64
}

var digestRE = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

func (p *parser) parseCache(n *yaml.Node, r *Recipe) {
	var c Cache
	if !p.decodeStrict(n, "cache", &c) {
		return
	}
	c.pos = Pos{File: p.file, Line: n.Line, Col: n.Column}
	if strings.TrimSpace(c.OCI) == "" {
		p.addf(n, "cache.oci", "cache.oci is required: the registry repository, e.g. registry.internal:5000/fleet/sglprov")
	}
	for _, f := range []struct {
		name, val string
	}{{"oci", c.OCI}, {"push", c.Push}, {"plain_http", c.PlainHTTP}, {"min_rate", c.MinRate}} {
		at := nodeAt(n, f.name)
		refs, bad := templateRefs(f.val)
		if bad != nil {
			p.addf(at, "cache."+f.name, "bad template: %v", bad)
			continue
		}
		if len(refs) > 0 {
			for _, ref := range refs {
				if !strings.HasPrefix(ref, "vars.") {
					p.addf(at, "cache."+f.name, "template refers to %q: the cache block sees .vars only", ref)
				}
			}
			p.checkRefs(at, "cache."+f.name, refs, r)
			continue
		}
		if f.name == "min_rate" && f.val != "" {
			if _, err := ParseRate(f.val); err != nil {
				p.addf(at, "cache.min_rate", "%v", err)
			}
			continue
		}
		if f.name != "oci" && f.val != "" {
			if _, err := strconv.ParseBool(f.val); err != nil {
				p.addf(at, "cache."+f.name, "want true or false, not %q", f.val)
			}
		}
	}
	for i, d := range c.Digests {
		if !digestRE.MatchString(d) {
			p.addf(nodeAt(n, "digests"), fmt.Sprintf("cache.digests[%d]", i), "want a manifest digest \"sha256:<64 hex>\", not %q", d)
		}
	}
	r.Cache = &c
}

// CacheConfig renders the recipe's cache block with d (its vars); ok is false when the
// recipe has none, or its oci renders to nothing.
func (r *Recipe) CacheConfig(d Data) (cfg CacheConfig, ok bool, err error) {
	c := r.Cache
	if c == nil {
		return CacheConfig{}, false, nil
	}
	vars := Data{"vars": d["vars"]}
	field := func(name, v string) (string, error) {
		out, err := render(v, vars)
		if err != nil {
			return "", fmt.Errorf("%s: rendering cache.%s: %w", c.pos, name, err)
		}
		return strings.TrimSpace(out), nil
	}
	boolean := func(name, v string) (bool, error) {
		s, err := field(name, v)
		if err != nil || s == "" {
			return false, err
		}
		b, err := strconv.ParseBool(s)
		if err != nil {
			return false, fmt.Errorf("%s: cache.%s: want true or false, not %q", c.pos, name, s)
		}
		return b, nil
	}
	if cfg.OCI, err = field("oci", c.OCI); err != nil {
		return cfg, true, err
	}
	if cfg.OCI == "" {
		// A template that renders to nothing turns the cache off: one recipe for nodes
		// with and without it (--set cache_oci=...).
		return CacheConfig{}, false, nil
	}
	if cfg.Push, err = boolean("push", c.Push); err != nil {
		return cfg, true, err
	}
	if cfg.PlainHTTP, err = boolean("plain_http", c.PlainHTTP); err != nil {
		return cfg, true, err
	}
	cfg.Digests = append([]string(nil), c.Digests...)
	rate, err := field("min_rate", c.MinRate)
	if err != nil {
		return cfg, true, err
	}
	if rate != "" {
		n, err := ParseRate(rate)
		if err != nil {
			return cfg, true, fmt.Errorf("%s: cache.min_rate: %w", c.pos, err)
		}
		cfg.MinRate = n
		if n == 0 {
			cfg.MinRate = -1
		}
	}
	return cfg, true, nil
}

var rateRE = regexp.MustCompile(`^([0-9]+(?:\.[0-9]+)?)\s*(B|KiB|MiB|GiB|KB|MB|GB|kB)?(?:/s)?$`)

// ParseRate parses a rate in bytes per second: "64KiB/s", "1.5MiB/s", "500000" (bytes),
// "0" (none). Units are B, KiB, MiB, GiB (powers of 1024) and KB (or kB), MB, GB (of 1000).
func ParseRate(s string) (int64, error) {
	m := rateRE.FindStringSubmatch(strings.TrimSpace(s))
	if m == nil {
		return 0, fmt.Errorf("want a rate such as \"64KiB/s\" or \"1MiB/s\" (\"0\" for no minimum), not %q", s)
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return 0, fmt.Errorf("rate %q: %w", s, err)
	}
	mult := map[string]float64{"": 1, "B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "KB": 1e3, "kB": 1e3, "MB": 1e6, "GB": 1e9}[m[2]]
	n := v * mult
	if n > 1<<40 {
		return 0, fmt.Errorf("rate %q is more than 1 TiB/s", s)
	}
	return int64(n), nil
}
