package engine

import (
	"context"
	"slices"
	"strings"

	"github.com/sglprov/sglprov/pkg/cache"
)

// NeedsMade is a step whose fingerprint reads what its needs make: a build's source tree,
// which its source and patch steps fetch and patch. MadeByNeeds names those parts of its
// fingerprint. Before its needs ran (a fresh node's plan) they are not there to read, so
// the step's artifact in the fleet cache carries a second tag, its pinned key, that plan
// can compute (pinnedKey).
type NeedsMade interface {
	MadeByNeeds() []string
}

// pinnedKey is a step's key in the fleet cache as a plan that has not run its needs can
// compute it: its fingerprint's parts less those its needs make (NeedsMade), with the
// pinned key of each need in their place (a source step's pinned commit, a patch step's
// patches, and what they need in turn). partsOf gives a step's fingerprint parts (nil when
// unknown). "" for a step that is no NeedsMade, has no needs, or a need whose parts are
// unknown.
func (e *Engine) pinnedKey(v *vertex, parts map[string]string, partsOf func(step string) map[string]string) string {
	if _, ok := v.impl.(NeedsMade); !ok || len(v.needs) == 0 || parts == nil {
		return ""
	}
	return pinnedOf(v, parts, partsOf)
}

// pinnedOf is pinnedKey's recursion: a step's parts less those its needs make, and its
// needs' keys.
func pinnedOf(v *vertex, parts map[string]string, partsOf func(string) map[string]string) string {
	var made []string
	if nm, ok := v.impl.(NeedsMade); ok {
		made = nm.MadeByNeeds()
	}
	key := map[string]string{"pinned": "1"}
	for k, val := range parts {
		if !slices.Contains(made, k) {
			key[k] = val
		}
	}
	for _, d := range v.needs {
		dp := partsOf(d.step.Name)
		if dp == nil {
			return ""
		}
		k := pinnedOf(d, dp, partsOf)
		if k == "" {
			return ""
		}
		key["need:"+d.step.Name] = k
	}
	return fingerprintOf(key)
}

// planPinned looks up, in plan, the artifact of a step whose needs run first under its
// pinned key (pinnedKey): nil when there is none to ask or the registry has none.
func (e *Engine) planPinned(ctx context.Context, v *vertex, parts map[string]string, planned map[string]map[string]string) *lookup {
	key := e.pinnedKey(v, parts, func(s string) map[string]string { return planned[s] })
	if key == "" {
		return nil
	}
	a, err := e.opts.Cache.Lookup(ctx, key)
	if err != nil || a == nil {
		return nil
	}
	return &lookup{a, nil}
}

// pinnedNote is what plan adds to the reason of a step found under its pinned key.
func pinnedNote(v *vertex) string {
	var needs []string
	for _, d := range v.needs {
		needs = append(needs, d.step.Name)
	}
	return " (found by the pinned inputs of " + strings.Join(needs, ", ") + "; apply takes it once the tree they make matches)"
}

// tagPinned gives the artifact digest the step just published or found under its
// fingerprint a second tag, its pinned key (pinnedKey, from the records of its needs),
// so that a fresh node's plan finds it before its needs ran. A tag that exists is left
// as it is; a failure is a warning.
func (e *Engine) tagPinned(ctx context.Context, v *vertex, env *Env, slot CacheSlot, digest string) {
	t, ok := slot.Cache.(cache.Tagger)
	if !ok || digest == "" {
		return
	}
	key := e.pinnedKey(v, slot.parts, func(s string) map[string]string {
		if r := e.currentRecord(s); r != nil && r.Result == ResultOK {
			return r.Parts
		}
		return nil
	})
	if key == "" || key == slot.Tag {
		return
	}
	a, err := slot.Cache.Lookup(ctx, key)
	if err != nil || a != nil {
		return
	}
	if err := t.Tag(ctx, digest, key); err != nil {
		env.Log.Warn("the cache's artifact could not be tagged with its pinned key: a fresh node's plan will not say it comes from the cache", "err", err)
		return
	}
	env.Log.Debug("tagged with its pinned key", "artifact", digest, "tag", shortDigest(key))
}
