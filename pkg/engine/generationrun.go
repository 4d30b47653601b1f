package engine

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"syscall"

	"github.com/sglprov/sglprov/pkg/generation"
	"github.com/sglprov/sglprov/pkg/logval"
)

// beginGeneration records that the run builds into its generation.
func (e *Engine) beginGeneration() error {
	g := e.gen
	if g == nil || g.store == nil {
		return nil
	}
	var err error
	if ps, ok := g.store.(keyPartsStore); ok && g.parts != nil {
		err = ps.BeginWith(g.info.Key, g.parts)
	} else {
		err = g.store.Begin(g.info.Key)
	}
	if err != nil {
		return err
	}
	// A record that names another generation than the installed unit runs (a switch
	// killed after its promotion) is repaired before anything is freed.
	if ob, ok := g.store.(observerStore); ok {
		msg, err := ob.Repair()
		switch {
		case err != nil:
			e.log.Warn("recording the generation the installed unit runs", "err", err)
		case msg != "":
			e.log.Warn("generation: " + msg)
			g.repaired = msg
		}
	}
	if g.info.Serving != g.info.Key && g.kept() {
		e.log.Info("generation", "back_to", generation.Short(g.info.Key), "kept", "passed before: its step records are kept, nothing is built again", "serving", shortOr(g.info.Serving, "none"), "dir", g.info.Dir)
	} else if g.info.Serving != g.info.Key {
		e.log.Info("generation", "building", generation.Short(g.info.Key), "serving", shortOr(g.info.Serving, "none"), "dir", g.info.Dir)
		// Before a build, the recipe's failed generations go (never the serving one, the
		// kept ones, the one being built, nor one another state dir's record lists): a
		// new pin after a failed one does not find the disk full of it.
		if pr, ok := g.store.(pruner); ok {
			p, err := pr.PruneKeeping(g.info.Key, false)
			switch {
			case err != nil:
				e.log.Warn("freeing failed generations", "err", err)
			case p != nil && len(p.Freed) > 0:
				e.log.Info("generation", "freed", p.Describe(logval.Format))
				g.freedEarly = p
			}
		}
	}
	return nil
}

// pruner is implemented by a GenerationStore that can free the generations beyond the kept
// ones (pkg/generation's Store).
type pruner interface {
	PruneKeeping(building string, dryRun bool) (*generation.Pruned, error)
}

// gcPruner is implemented by a GenerationStore that prunes as `sglprov gc` does
// (pkg/generation's Store).
type gcPruner interface {
	Prune(dryRun bool) (*generation.Pruned, error)
}

// noSpaceHint adds to the error of a generation step that ran out of disk space (ENOSPC,
// or "No space left on device" in its error or the tail of its log) what `sglprov gc`
// would free in the recipe's generations.
func (e *Engine) noSpaceHint(step string, runErr error, logPath string) error {
	g := e.gen
	if g == nil || g.store == nil || !slices.Contains(g.steps, step) || !noSpace(runErr, logPath) {
		return runErr
	}
	hint := "`sglprov gc` frees the generations beyond the kept ones (`sglprov gc --dry-run` lists them)"
	// What gc would free is what its own prune frees (gc --dry-run): the generation this
	// run half built is among it, since gc keeps no generation being built.
	if pr, ok := g.store.(gcPruner); ok {
		if p, err := pr.Prune(true); err == nil && p != nil {
			if len(p.Freed) > 0 {
				freed := make([]string, 0, len(p.Freed))
				for _, f := range p.Freed {
					freed = append(freed, generation.Short(f.Key))
				}
				hint = fmt.Sprintf("`sglprov gc` would free %s of generations (%d of them: %s; `sglprov gc --dry-run` lists them and the part files it frees)", logval.Format(p.Bytes), len(p.Freed), strings.Join(freed, ", "))
			} else {
				hint = fmt.Sprintf("`sglprov gc` would free no generation (%s are kept: lower generations.keep to free more; gc also frees weights' part files and orphans, see `sglprov gc --dry-run`)", strings.Join(shortKeys(p.Kept), ", "))
			}
		}
	}
	return fmt.Errorf("%w\nthe disk of %s is full: %s", runErr, g.info.Dir, hint)
}

func shortKeys(keys []string) []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = generation.Short(k)
	}
	return out
}

// noSpaceText is how a child process says ENOSPC.
const noSpaceText = "No space left on device"

// noSpaceLogTail is how much of a step's log noSpace reads, from its end.
const noSpaceLogTail = 64 << 10

// noSpace reports whether err, or the last noSpaceLogTail bytes of the log at logPath,
// say that a disk was full.
func noSpace(err error, logPath string) bool {
	if errors.Is(err, syscall.ENOSPC) || strings.Contains(err.Error(), noSpaceText) {
		return true
	}
	f, ferr := os.Open(logPath)
	if ferr != nil {
		return false
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Size() > noSpaceLogTail {
		if _, err := f.Seek(-noSpaceLogTail, io.SeekEnd); err != nil {
			return false
		}
	}
	b, _ := io.ReadAll(io.LimitReader(f, noSpaceLogTail))
	return strings.Contains(string(b), noSpaceText)
}

// endGeneration records the run's generation as passed when the run succeeded (and was
// not limited with --only), and says which generation serves.
func (e *Engine) endGeneration(ok bool) *GenerationReport {
	g := e.gen
	if g == nil || g.store == nil {
		return nil
	}
	gr := &GenerationReport{Building: g.info.Key, Serving: g.info.Serving}
	defer func() {
		if g.repaired != "" {
			gr.Note += "; " + g.repaired
		}
	}()
	if ok && e.opts.Root != "" && e.opts.Root != "/" {
		// Under --root nothing was started and no gate ran: the generation is recorded as
		// built, never as passed, so "current" does not flip and it is no roll-back target.
		gr.Note = fmt.Sprintf("generation %s built under --root, not gated: not recorded as passed", generation.Short(g.info.Key))
		if g.info.Serving != "" && g.info.Serving != g.info.Key {
			gr.Note += fmt.Sprintf("; generation %s serves", generation.Short(g.info.Serving))
		}
		return gr
	}
	e.mu.Lock()
	promoted := g.promoted
	e.mu.Unlock()
	if (!ok || len(e.opts.Only) > 0) && !promoted {
		switch {
		case g.info.Serving == g.info.Key:
			gr.Note = fmt.Sprintf("generation %s serves", generation.Short(g.info.Key))
		case g.info.Serving == "" && g.info.InPlaceServes:
			gr.Note = fmt.Sprintf("generation %s has not passed; the in-place tree moved aside serves", generation.Short(g.info.Key))
		case g.info.Serving == "":
			gr.Note = fmt.Sprintf("generation %s has not passed; no generation has passed yet", generation.Short(g.info.Key))
		default:
			gr.Note = fmt.Sprintf("generation %s has not passed; generation %s serves", generation.Short(g.info.Key), generation.Short(g.info.Serving))
		}
		if f := g.freedEarly; f != nil {
			gr.Note += fmt.Sprintf("; freed %s (%s) before building", freedKeys(f.Freed), logval.Format(f.Bytes))
		}
		return gr
	}
	// Recording it again after a promotion is harmless: the same generation serves, with
	// the step records as the run left them.
	pruned, err := e.passGeneration()
	gr.Serving, gr.Pruned = g.info.Key, pruned
	gr.Note = fmt.Sprintf("generation %s serves", generation.Short(g.info.Key))
	if g.info.Serving != "" && g.info.Serving != g.info.Key {
		gr.Note += fmt.Sprintf(" (was %s)", generation.Short(g.info.Serving))
	} else if g.info.Serving == "" && g.info.InPlaceServes {
		gr.Note += " (was the in-place tree moved aside)"
	}
	if f := g.freedEarly; f != nil && pruned != nil {
		// What the run freed before it built is freed by this run too.
		pruned.Freed, pruned.Bytes = append(append([]generation.Freed(nil), f.Freed...), pruned.Freed...), pruned.Bytes+f.Bytes
	}
	if pruned != nil {
		gr.Note += "; " + pruned.Describe(logval.Format)
	}
	if err != nil {
		e.log.Warn("recording the generation", "err", err)
		gr.Note += "; " + err.Error()
	}
	return gr
}

// passGeneration records the run's generation as passed with the step records the engine
// holds now (GenerationStore.Passed).
func (e *Engine) passGeneration() (*generation.Pruned, error) {
	g := e.gen
	steps := map[string]json.RawMessage{}
	e.mu.Lock()
	for _, name := range g.steps {
		if rec := e.state.Steps[name]; rec != nil {
			if b, err := json.Marshal(rec); err == nil {
				steps[name] = b
			}
		}
	}
	e.mu.Unlock()
	return g.store.Passed(g.info.Key, steps)
}

// promoted is Env.Promoted: a switch promoted a unit of the run's generation, whose
// folder its server now reads from. The generation is recorded as passed at once, not
// at the end of the run: a later step that fails, an interrupt or --only would otherwise
// leave the record naming the generation before it as serving, and a gc or the next
// build's prune would remove the folder the installed unit runs from.
func (e *Engine) promoted() error {
	g := e.gen
	if g == nil || g.store == nil || e.opts.Root != "" && e.opts.Root != "/" {
		return nil
	}
	pruned, err := e.passGeneration()
	e.mu.Lock()
	g.promoted = true
	e.mu.Unlock()
	if pruned != nil && len(pruned.Freed) > 0 {
		e.log.Info("generation", "freed", pruned.Describe(logval.Format))
	}
	if err != nil {
		return fmt.Errorf("recording generation %s as serving: %w", generation.Short(g.info.Key), err)
	}
	return nil
}

func shortOr(key, none string) string {
	if key == "" {
		return none
	}
	return generation.Short(key)
}

// GenerationPassed records the engine's generation as passed with the step records the
// engine holds (it becomes the serving one, "current" flips to it, generations beyond the
// kept ones go) and writes the state: after a roll back that passed its gate, the next
// apply knows which generation serves. nil when the recipe keeps no generations.
func (e *Engine) GenerationPassed() (*GenerationReport, error) {
	gr := e.endGeneration(true)
	if gr == nil {
		return nil, nil
	}
	if e.gen != nil {
		e.gen.info.Serving = e.gen.info.Key
	}
	return gr, e.SaveState()
}
