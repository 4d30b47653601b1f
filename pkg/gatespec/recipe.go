package gatespec

import (
	"fmt"
	"net"
	neturl "net/url"
	"strings"

	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/gate"
	"github.com/sglprov/sglprov/pkg/recipe"
)

// RecipeSpec renders the smoke step of recipe r (the one named step, else the first) into
// the gate's spec; file names the recipe in errors. facts returns the host's GPU facts'
// template data, asked only when the step or a var it expands uses them. A worker of a
// multi-node group asks the head: its own server's health says nothing.
func RecipeSpec(r *recipe.Recipe, file, step string, facts func() (map[string]any, error)) (*Spec, error) {
	var st *recipe.Step
	var names []string
	for _, s := range r.Steps {
		if s.Kind != "smoke" {
			continue
		}
		names = append(names, s.Name)
		if st == nil && (step == "" || s.Name == step) {
			st = s
		}
	}
	if st == nil {
		if step != "" {
			return nil, fmt.Errorf("%w: recipe %s has no smoke step %q (smoke steps: %s)", exitcode.ErrUsage, file, step, strings.Join(names, ", "))
		}
		return nil, fmt.Errorf("%w: recipe %s has no smoke step", exitcode.ErrUsage, file)
	}
	data, err := stepData(r, st, facts)
	if err != nil {
		return nil, err
	}
	var spec Spec
	if err := st.Render(data, &spec); err != nil {
		return nil, fmt.Errorf("%w: %v", exitcode.ErrUsage, err)
	}
	if group, ok, err := r.NodesConfig(data); err != nil {
		return nil, fmt.Errorf("%w: %v", exitcode.ErrUsage, err)
	} else if ok {
		if spec.URL, err = HeadURL(spec.URL, &group); err != nil {
			return nil, err
		}
	}
	return &spec, nil
}

// stepData returns the template data for step st: the vars, and the GPU facts when the
// step or a var needs them.
func stepData(r *recipe.Recipe, st *recipe.Step, facts func() (map[string]any, error)) (recipe.Data, error) {
	needFacts := false
	for _, ref := range r.ExpandRefs(st) {
		if !strings.HasPrefix(ref, "vars.") {
			needFacts = true
		}
	}
	if !needFacts {
		if data, err := r.NewData(nil); err == nil {
			return data, nil
		}
	}
	fd, err := facts()
	if err != nil {
		return nil, fmt.Errorf("facts for the templates of step %q: %w", st.Name, err)
	}
	data, err := r.NewData(fd)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", exitcode.ErrUsage, err)
	}
	return data, nil
}

// HeadURL returns the address a worker of group n asks in place of url: the same scheme,
// port and path at the head's host. Every node applies the same recipe, so the head's API
// listens on the port the smoke url names; a worker's own server only answers SGLang's
// dummy /health (always 200), which says nothing about the group. On the head, and with
// no group, it returns url as it is.
func HeadURL(url string, n *recipe.NodesConfig) (string, error) {
	if n == nil || n.IsHead() {
		return url, nil
	}
	u, err := neturl.Parse(url)
	if err != nil {
		return "", fmt.Errorf("%w: the smoke url is not a URL (%s): give http://HOST:PORT", exitcode.ErrUsage, gate.RedactErr(err))
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"https": "443"}[u.Scheme]
		if port == "" {
			port = "80"
		}
	}
	u.Host = net.JoinHostPort(n.HeadHost, port)
	return u.String(), nil
}
