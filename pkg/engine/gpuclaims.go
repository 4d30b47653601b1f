package engine

import (
	"slices"

	"github.com/sglprov/sglprov/pkg/gpuclaim"
	"github.com/sglprov/sglprov/pkg/ownership"
)

// OwnedGPU is the Owned kind of a GPU a recipe's server runs on (its UUID, or "index N").
const OwnedGPU = ownership.KindGPU

// claimsGPUs reports whether the recipe runs a server (a step owns a unit) on a host with
// GPUs: such a recipe claims the GPUs it sees.
func (e *Engine) claimsGPUs(owned []Owned) bool {
	return len(e.seenGPUs()) > 0 && slices.ContainsFunc(owned, func(o Owned) bool { return o.Kind == OwnedUnit })
}

// seenGPUs returns the IDs of the GPUs the recipe's server sees: those of its facts (its
// requires.gpu.devices, else every GPU), or, for a recipe that loads no facts (it names no
// GPU need), every GPU of the host (NodeGPUs): nothing hides any from its server.
func (e *Engine) seenGPUs() []string {
	if e.opts.Facts != nil {
		return e.opts.Facts.IDs()
	}
	return e.opts.NodeGPUs
}

// gpuClaims returns the GPUs this recipe claims: those it sees once a run of it passed
// (its server serves there), else those an earlier run recorded. A recipe whose server
// never passed claims none, so that a failed switch does not lock the node.
func (e *Engine) gpuClaims(owned []Owned) []Owned {
	var out []Owned
	if e.served && e.claimsGPUs(owned) {
		for _, id := range e.seenGPUs() {
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
	for _, v := range e.vertices {
		if r, ok := v.impl.(Replacer); ok && r.AppliesReplaces(e.env(v, nil, "")) {
			return true
		}
	}
	return false
}

// GPUConflicts refuses a recipe whose server would share a GPU with another recipe's on
// this node (both claim all GPUs unless requires.gpu.devices gives them some), unless the
// recipe replaces that one and a step of it stops that one's service (ReplacesApplied).
// The error is exitcode.ErrHost and names the GPUs, the other recipe and the ways out
// (gpuclaim.Conflicts).
func (e *Engine) GPUConflicts() error {
	if e.opts.IgnoreState || !e.claimsGPUs(e.declared()) || e.opts.Root != "" && e.opts.Root != "/" {
		return nil
	}
	return gpuclaim.Conflicts(e.claimRequest(), stateLedger{})
}

// claimRequest is this run's claim: the GPUs its server sees, from its state dir.
func (e *Engine) claimRequest() gpuclaim.Request {
	return gpuclaim.Request{Dir: e.opts.ClaimsDir, StateDir: gpuclaim.AbsStateDir(e.opts.StateDir), Recipe: e.opts.Recipe.Name,
		GPUs: e.seenGPUs(), Replaces: e.opts.Recipe.Replaces, Replacing: e.ReplacesApplied()}
}

// stateLedger reads the GPUs the recipes of a state dir record from its state file.
type stateLedger struct{}

// RecordedGPUs returns the GPUs (OwnedGPU records) of every recipe of stateDir.
func (stateLedger) RecordedGPUs(stateDir string) (map[string][]string, error) {
	f, err := LoadStates(stateDir)
	if err != nil {
		return nil, err
	}
	out := make(map[string][]string, len(f.Recipes))
	for name, st := range f.Recipes {
		var gpus []string
		for _, o := range st.Owns {
			if o.Kind == OwnedGPU {
				gpus = append(gpus, o.Path)
			}
		}
		out[name] = gpus
	}
	return out, nil
}

// recordNodeClaim writes (or, when the recipe claims no GPU, removes) this recipe's claim
// in ClaimsDir.
func (e *Engine) recordNodeClaim() error {
	if e.opts.ClaimsDir == "" || e.opts.IgnoreState {
		return nil
	}
	var gpus []string
	for _, o := range e.gpuClaims(e.owns()) {
		gpus = append(gpus, o.Path)
	}
	return gpuclaim.Record(e.opts.ClaimsDir, gpuclaim.AbsStateDir(e.opts.StateDir), e.opts.Recipe.Name, gpus)
}

// claimPending checks the GPU claims (GPUConflicts) and, when the recipe runs a server on
// GPUs and a node-wide claims folder is kept, writes this run's pending claim, both under
// the claims folder's lock (gpuclaim.Hold). The pending claim is held until
// releasePending.
func (e *Engine) claimPending() error {
	if e.opts.ClaimsDir == "" || e.opts.IgnoreState || !e.claimsGPUs(e.declared()) || e.opts.Root != "" && e.opts.Root != "/" {
		return e.GPUConflicts()
	}
	p, err := gpuclaim.Hold(e.claimRequest(), stateLedger{}, func(msg string, err error) { e.log.Warn(msg, "err", err) })
	if err != nil {
		return err
	}
	e.pending = p
	return nil
}

// releasePending removes this run's pending claim and lets go of it: by then the run wrote
// its claim (it passed) or claims nothing new (it failed).
func (e *Engine) releasePending() {
	e.pending.Release()
	e.pending = nil
}
