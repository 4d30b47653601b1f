package engine

import (
	"fmt"
	"slices"

	"github.com/sglprov/sglprov/pkg/gpu"
	"github.com/sglprov/sglprov/pkg/recipe"
)

// FactsChanged lists the host facts that differ from the ones recorded by the last run,
// e.g. "driver.version 580.95.05 -> 590.44.01".
func (e *Engine) FactsChanged() []string {
	cur := e.factsMap()
	var out []string
	for _, k := range sortedKeys(cur) {
		if old, ok := e.state.Facts[k]; ok && old != cur[k] {
			out = append(out, fmt.Sprintf("%s %s -> %s", k, old, cur[k]))
		}
	}
	return out
}

func (e *Engine) factsMap() map[string]string {
	return e.facts
}

// recordedFacts returns the facts recorded in the state and compared between runs.
func recordedFacts(f *gpu.Facts) map[string]string {
	out := map[string]string{}
	if f == nil {
		return out
	}
	data := recipe.Data(f.TemplateData())
	for _, k := range recipe.FactNames() {
		if v := data.Lookup(k); v != "" {
			out[k] = v
		}
	}
	return out
}

// saveState records the current state (every step's data included) atomically.
func (e *Engine) saveState() error {
	e.state.Version = StateVersion
	e.state.Recipe = e.opts.Recipe.Name
	e.state.Updated = e.opts.Now().UTC()
	for name, rec := range e.state.Steps {
		if d := e.store.Data(name); d != nil {
			rec.Data = d
		}
	}
	for _, v := range e.vertices {
		if e.state.Steps[v.step.Name] == nil && e.store.Data(v.step.Name) != nil {
			e.state.Steps[v.step.Name] = &StepRecord{Result: ResultFailed, Data: e.store.Data(v.step.Name)}
		}
	}
	owns := e.owns()
	for _, o := range e.state.Owns {
		// What the recipe stopped naming (a renamed unit, a moved dest, generations turned
		// off) is not forgotten: it becomes an orphan, which gc and remove free.
		if !slices.ContainsFunc(owns, func(x Owned) bool { return x.Kind == o.Kind && x.Path == o.Path }) {
			e.state.Orphan(o)
		}
	}
	e.state.Owns = owns
	return e.state.Save(e.opts.StateDir)
}

// declared returns what the recipe's steps say they install (Owner), whether or not they
// ran: a recipe with a server claims GPUs before its first run.
func (e *Engine) declared() []Owned {
	var out []Owned
	for _, v := range e.vertices {
		if o, ok := v.impl.(Owner); ok {
			out = append(out, o.Owns(e.env(v, nil, ""))...)
		}
	}
	return out
}

// owns returns what the recipe's steps install on the node (Owner) and its generations.
// A step is taken at its word once it succeeded (in this run or an earlier one); before
// that only what it lists as written is (a download's files), beside what earlier records
// name for it: a step that failed before it installed anything owns nothing new.
func (e *Engine) owns() []Owned {
	var out []Owned
	for _, v := range e.vertices {
		o, ok := v.impl.(Owner)
		if !ok {
			continue
		}
		succeeded := false
		if rec := e.state.Steps[v.step.Name]; rec != nil && rec.Result == ResultOK {
			succeeded = true
		}
		var mine []Owned
		for _, x := range o.Owns(e.env(v, nil, "")) {
			x.Step = v.step.Name
			if succeeded || x.Listed {
				mine = append(mine, x)
			}
		}
		for _, x := range e.state.Owns {
			if x.Step == v.step.Name && !slices.ContainsFunc(mine, func(y Owned) bool { return y.Kind == x.Kind && y.Path == x.Path }) && !succeeded {
				mine = append(mine, x)
			}
		}
		out = append(out, mine...)
	}
	out = append(out, e.gpuClaims(out)...)
	if e.gen != nil {
		out = append(out, Owned{Kind: OwnedGenerations, Path: HostPath(e.opts.Root, e.opts.Recipe.GenerationsDir()), Keep: e.opts.Recipe.KeepGenerations()})
	}
	return out
}
