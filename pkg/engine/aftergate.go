package engine

import (
	"context"
	"sync"
)

// AfterGatePublisher is implemented by Publishers whose artifact must not reach the fleet
// before the server it went into passed its gate (a Python environment and its lock: a
// broken one would be unpacked by every other node). When a gate of the recipe needs such
// a step, directly or through other steps, the engine calls its Publish only once that
// gate passed in this run, and not at all when the gate failed, was skipped or was not
// selected (--only); a later run whose gate passes pushes it then, as for an up-to-date
// step whose artifact the cache lacks. A step that no gate needs publishes after its own
// run, as any Publisher does.
type AfterGatePublisher interface {
	PublishesAfterGate() bool
}

// afterGate holds, for each gate, the pushes that wait for it to pass.
type afterGate struct {
	mu      sync.Mutex
	pending map[*vertex][]*deferredPush
}

// deferredPush is one step's push held until a gate passed; it runs at most once, even
// when several gates need the step.
type deferredPush struct {
	once sync.Once
	run  func(gateEnv *Env)
}

// gatesOf returns the gates of the recipe that need n, directly or through other steps.
func (e *Engine) gatesOf(v *vertex) []*vertex {
	var out []*vertex
	for _, g := range e.vertices {
		if g == v || !isGate(g.impl) {
			continue
		}
		seen := map[*vertex]bool{}
		var needs func(m *vertex) bool
		needs = func(m *vertex) bool {
			for _, d := range m.needs {
				if d == v {
					return true
				}
				if !seen[d] {
					seen[d] = true
					if needs(d) {
						return true
					}
				}
			}
			return false
		}
		if needs(g) {
			out = append(out, g)
		}
	}
	return out
}

// publishOrDefer is publish, held until a gate passed for a step that is an
// AfterGatePublisher and that a gate needs. A step that ran in this run (ResultOK, not
// skipped) has its record name the artifact it pushed.
func (e *Engine) publishOrDefer(ctx context.Context, v *vertex, env *Env, slot CacheSlot, res *StepReport) {
	p, ok := v.impl.(AfterGatePublisher)
	if !ok || !p.PublishesAfterGate() || slot.Cache == nil || slot.Tag == "" || !slot.Cache.CanPush() || res.FromCache != "" {
		e.publish(ctx, v, env, slot, res)
		return
	}
	gates := e.gatesOf(v)
	if len(gates) == 0 {
		e.publish(ctx, v, env, slot, res)
		return
	}
	d := &deferredPush{run: func(gateEnv *Env) {
		// The step's own log is closed by now: what the push says goes to the log of
		// the gate that let it through.
		penv := e.env(v, gateEnv.Out, gateEnv.LogPath)
		e.publish(ctx, v, penv, slot, res)
		if res.Result == ResultOK && res.Pushed != "" {
			digest := res.Pushed
			e.record(v.step.Name, func(r *StepRecord) {
				if r.Result == ResultOK {
					r.Artifact = digest
				}
			})
		}
	}}
	e.afterGate.mu.Lock()
	if e.afterGate.pending == nil {
		e.afterGate.pending = map[*vertex][]*deferredPush{}
	}
	for _, g := range gates {
		e.afterGate.pending[g] = append(e.afterGate.pending[g], d)
	}
	e.afterGate.mu.Unlock()
	env.Log.Info("pushing to the cache once the gate passed", "gate", gates[0].step.Name)
}

// gatePassed runs the pushes held for the gate g, which passed (gateEnv is its Env).
func (e *Engine) gatePassed(g *vertex, gateEnv *Env) {
	if !isGate(g.impl) {
		return
	}
	e.afterGate.mu.Lock()
	ds := e.afterGate.pending[g]
	delete(e.afterGate.pending, g)
	e.afterGate.mu.Unlock()
	for _, d := range ds {
		d.once.Do(func() { d.run(gateEnv) })
	}
}
