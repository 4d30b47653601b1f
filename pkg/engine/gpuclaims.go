package engine

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

// OwnedGPU is the Owned kind of a GPU a recipe's server runs on (its UUID, or "index N").
const OwnedGPU = "gpu"

// claimsGPUs reports whether the recipe runs a server (a step owns a unit): such a recipe
// claims the GPUs it sees.
func (e *Engine) claimsGPUs(owned []Owned) bool {
	return e.opts.Facts != nil && slices.ContainsFunc(owned, func(o Owned) bool { return o.Kind == OwnedUnit })
}

// gpuClaims returns the GPUs this recipe claims: those it sees once a run of it passed
// (its server serves there), else those an earlier run recorded. A recipe whose server
// never passed claims none, so that a failed switch does not lock the node.
func (e *Engine) gpuClaims(owned []Owned) []Owned {
	var out []Owned
	if e.served && e.claimsGPUs(owned) {
		for _, id := range e.opts.Facts.IDs() {
			out = append(out, Owned{Kind: OwnedGPU, Path: id})
		}
		return out
	}
	for _, o := range e.state.Owns {
		if o.Kind == OwnedGPU {
			out = append(out, o)
		}
	}
	return out
}

// Replacer is implemented by a step that takes over the services of the recipes its
// recipe replaces (the systemd step): AppliesReplaces reports whether it stops them before
// its own server starts. Under a service manager that cannot (exec, offline) it does not,
// and the replaced recipes' servers keep their GPUs.
type Replacer interface {
	AppliesReplaces(env *Env) bool
}

// ReplacesApplied reports whether the recipe's replaces: is carried out in this run: it
// names recipes and a step of it stops their services (Replacer). Only then are the
// replaced recipes' servers on the GPUs expected (the busy check, the GPU claims).
func (e *Engine) ReplacesApplied() bool {
	if len(e.opts.Recipe.Replaces) == 0 {
		return false
	}
	for _, n := range e.nodes {
		if r, ok := n.impl.(Replacer); ok && r.AppliesReplaces(e.env(n, nil, "")) {
			return true
		}
	}
	return false
}

// GPUConflicts refuses a recipe whose server would share a GPU with another recipe's on
// this node (both claim all GPUs unless requires.gpu.devices gives them some), unless the
// recipe replaces that one and a step of it stops that one's service (ReplacesApplied).
// The error is ErrHost and names the GPUs, the other recipe and the ways out.
func (e *Engine) GPUConflicts() error {
	if e.opts.IgnoreState || !e.claimsGPUs(e.owns()) || e.opts.Root != "" && e.opts.Root != "/" {
		return nil
	}
	f, err := LoadStates(e.opts.StateDir)
	if err != nil {
		return err
	}
	mine := e.opts.Facts.IDs()
	replacing := e.ReplacesApplied()
	var problems []string
	names := make([]string, 0, len(f.Recipes))
	for name := range f.Recipes {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		replaced := slices.Contains(e.opts.Recipe.Replaces, name)
		if name == e.opts.Recipe.Name || replaced && replacing {
			continue
		}
		var shared []string
		for _, o := range f.Recipes[name].Owns {
			if o.Kind == OwnedGPU && slices.Contains(mine, o.Path) {
				shared = append(shared, o.Path)
			}
		}
		if len(shared) > 0 {
			p := fmt.Sprintf("recipe %s serves on %s", name, strings.Join(shared, ", "))
			if replaced {
				p += " (this recipe replaces it, but its service manager cannot stop that recipe's server: replaces: is not applied under the exec manager; stop it with sglprov remove -f)"
			}
			problems = append(problems, p)
		}
	}
	if len(problems) == 0 {
		return nil
	}
	return fmt.Errorf("%w: this recipe's server would share GPUs with another recipe's: %s; give the recipes requires.gpu.devices that do not overlap, add replaces: [RECIPE] to switch the node over, or sglprov remove -f the other recipe",
		ErrHost, strings.Join(problems, "; "))
}
