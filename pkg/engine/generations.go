package engine

import (
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/sglprov/sglprov/pkg/generation"
	"github.com/sglprov/sglprov/pkg/recipe"
	"github.com/sglprov/sglprov/pkg/service"
)

// GenerationStore is what the engine asks of the store of a recipe's generations
// (pkg/generation's Store): the folder of one, the one that serves, and recording that one
// is being built or passed. It is not the daemon's rung that rolls a node back to its
// previous generation.
type GenerationStore interface {
	// Serving returns the key of the last generation that passed ("" when none has).
	Serving() string
	// Begin records that this run builds into the generation with key.
	Begin(key string) error
	// Steps returns the step records kept with the generation when it passed.
	Steps(key string) map[string]json.RawMessage
	// Passed records that the generation passed, with its steps' records, makes it the
	// serving one and removes the generations beyond the kept ones.
	Passed(key string, steps map[string]json.RawMessage) (*generation.Pruned, error)
}

// GenerationInfo tells a step which generation this run builds and which one serves.
type GenerationInfo struct {
	// Key is the generation this run builds into; Dir its folder (the node's path).
	Key, Dir string
	// Serving is the generation that last passed ("" when none has).
	Serving string
	// InPlaceServes is set when no generation serves because a roll back put back the tree
	// a migration to generations moved aside from the roots (the generations record's
	// in_place).
	InPlaceServes bool
}

// GenerationReport is what a run says about generations.
type GenerationReport struct {
	// Building is the generation this run built into; Serving the one that serves at the
	// end of the run.
	Building string `json:"building"`
	Serving  string `json:"serving,omitempty"`
	// Pruned says what was kept and freed once Building passed.
	Pruned *generation.Pruned `json:"pruned,omitempty"`
	// Note is the sentence the summary prints.
	Note string `json:"note"`
}

// genState is the engine's view of the generation of one run.
type genState struct {
	info  GenerationInfo
	steps []string // the generation steps, in file order
	store GenerationStore
	// parts are the named digests of the key; changed the names of those that differ
	// from the serving generation's (when it recorded its own), for plan's reasons.
	parts   map[string]string
	changed []string
	// served is set when the run's generation has served (it passed, or the installed unit
	// runs it): no generation step writes into it.
	served bool
	// repaired says how the record was repaired to name the generation the installed unit
	// runs ("" when it named it already).
	repaired string
	// promoted is set once a switch in this run promoted a unit of this generation: it
	// was recorded as passed then (Engine.promoted). Guarded by the engine's mu.
	promoted bool
	// freedEarly is what the run freed before it built (failed generations), which the
	// run's note says with what it freed at the end.
	freedEarly *generation.Pruned
}

// rootStore is implemented by a GenerationStore that keeps a link at each of the recipe's
// generation roots pointing into the serving generation (pkg/generation's Store).
type rootStore interface {
	SetRoots(nodeDir string, roots []generation.Root)
}

// inPlaceStore is implemented by a GenerationStore that records whether the trees moved aside
// from the roots serve again (pkg/generation's Store).
type inPlaceStore interface {
	InPlaceServing() *generation.InPlace
}

// observerStore is implemented by a GenerationStore that takes the generation the installed
// unit runs as the serving one, whatever its record says, and can record it (pkg/generation's
// Store).
type observerStore interface {
	Observe(unitFiles ...string) string
	Repair() (string, error)
}

// ServingUnitFiles returns the files of the units owns lists that a restart or a reboot
// starts: /etc/systemd/system/UNIT under root for systemd, the last-known-good copy under
// stateDir for the exec manager. Which generation serves is read from them.
func ServingUnitFiles(root, stateDir string, owns []Owned) []string {
	var out []string
	for _, o := range owns {
		if o.Kind != OwnedUnit || o.Path == "" || strings.ContainsRune(o.Path, '/') {
			continue
		}
		if o.Manager == service.KindExec {
			out = append(out, service.LastKnownGoodPath(stateDir, o.Path))
			continue
		}
		out = append(out, path.Join(HostPath(root, service.SystemUnitDir), o.Path))
	}
	return out
}

// observe takes the generation the recipe's installed unit runs as the serving one (see
// generation.Store.Observe): every prune and roll back of this run keeps it.
func (g *genState) observe(opts Options, st *State) {
	if g == nil || g.store == nil {
		return
	}
	ob, ok := g.store.(observerStore)
	if !ok {
		return
	}
	ob.Observe(ServingUnitFiles(opts.Root, opts.StateDir, st.Owns)...)
	g.info.Serving = g.store.Serving()
	if g.info.Serving != "" {
		g.info.InPlaceServes = false
	}
}

// servedStore is implemented by a GenerationStore that knows which generations have served
// (pkg/generation's Store).
type servedStore interface {
	Served(key string) bool
}

// readOnly reports whether step is a generation step and the run's generation has served:
// nothing writes into it again.
func (g *genState) readOnly(step string) bool {
	return g != nil && g.served && slices.Contains(g.steps, step)
}

// ErrServedGeneration is the error of a generation step refused because it would write
// into a generation that has served.
var ErrServedGeneration = errors.New("the generation has served and is read-only")

// writeRefusal is the error of step, which would run (for reason) in the run's generation,
// which has served.
func (g *genState) writeRefusal(step, reason string) error {
	return fmt.Errorf("step %s would write into generation %s (%s), which has served: %w; its server reads that folder, so it is used as it is or not at all. An input outside the generation's key changed: change an input of the key (the pin, a patch, a var the step uses) to build a new generation beside it",
		step, generation.Short(g.info.Key), reason, ErrServedGeneration)
}

// explainChanged names, after the generation's folder among a step's changed inputs, the
// inputs of the generation's key that differ from the serving generation's ("kernel.gpu.arch_list"):
// plan says which fact or text made a new generation, not only that its folder moved.
func (g *genState) explainChanged(changed []string) []string {
	if g == nil || len(g.changed) == 0 {
		return changed
	}
	out := make([]string, len(changed))
	for i, c := range changed {
		out[i] = c
		if c == recipe.GenerationDirRef {
			if g.kept() {
				out[i] = c + " (back to kept generation " + generation.Short(g.info.Key) + ": " + strings.Join(g.changed, ", ") + " changed)"
			} else {
				out[i] = c + " (new generation: " + strings.Join(g.changed, ", ") + " changed)"
			}
		}
	}
	return out
}

// kept reports whether the run's generation is one that passed its gate before and is
// kept with its step records (not the serving one): going back to it builds nothing.
func (g *genState) kept() bool {
	return g != nil && g.store != nil && g.info.Key != "" && g.info.Key != g.info.Serving && len(g.store.Steps(g.info.Key)) > 0
}

// passedAt is when the run's kept generation last passed (zero when unknown).
func (g *genState) passedAt() time.Time {
	type lister interface {
		Generations() []generation.Generation
	}
	if l, ok := g.store.(lister); ok {
		for _, x := range l.Generations() {
			if x.Key == g.info.Key {
				return x.Passed
			}
		}
	}
	return time.Time{}
}

// withoutGenerationOnly drops from changed, when the generation's folder changed, the vars
// whose value changed only because it names the generation's folder (a generation root
// var, {{ .vars.src }} rendered into each generation): their text did not change, and
// naming them in every generation step's reason says nothing. old are the step's recorded
// parts, lookup renders a reference now. The folder recorded is recognised among the
// generations kept (the serving one first).
func (g *genState) withoutGenerationOnly(changed []string, old map[string]string, lookup func(string) string) []string {
	if g == nil || g.store == nil || !slices.Contains(changed, recipe.GenerationDirRef) {
		return changed
	}
	oldDir := ""
	for _, k := range append([]string{g.info.Serving}, g.keys()...) {
		if k == "" {
			continue
		}
		if dir := path.Join(path.Dir(g.info.Dir), k); digest(dir) == old[recipe.GenerationDirRef] {
			oldDir = dir
			break
		}
	}
	if oldDir == "" {
		return changed
	}
	out := changed[:0:0]
	for _, c := range changed {
		if strings.HasPrefix(c, "vars.") {
			if v := lookup(c); strings.Contains(v, g.info.Dir) && digest(strings.ReplaceAll(v, g.info.Dir, oldDir)) == old[c] {
				continue
			}
		}
		out = append(out, c)
	}
	return out
}

// keys returns the keys of the generations the store records (nil when it cannot list them).
func (g *genState) keys() []string {
	type lister interface {
		Generations() []generation.Generation
	}
	l, ok := g.store.(lister)
	if !ok {
		return nil
	}
	var out []string
	for _, x := range l.Generations() {
		out = append(out, x.Key)
	}
	return out
}

// freedKeys lists freed generations by short key.
func freedKeys(freed []generation.Freed) string {
	keys := make([]string, 0, len(freed))
	for _, f := range freed {
		keys = append(keys, generation.Short(f.Key))
	}
	return strings.Join(keys, ", ")
}
