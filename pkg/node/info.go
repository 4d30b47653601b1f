package node

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/sglprov/sglprov/pkg/daemon"
	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/gpu"
	"github.com/sglprov/sglprov/pkg/recipe"
)

// Info reads sglprov_node_info's labels of recipe r (n's, loaded): its service step (its
// unit, and the model and served name under the profile it runs), built with the host's
// facts where the recipe uses them, the profile the state records as installed, the
// generation that serves and the SGLang commit the recipe pins. What cannot be read stays
// "".
func (n *Recipe) Info(ctx context.Context, r *recipe.Recipe) daemon.NodeInfo {
	info := daemon.NodeInfo{Recipe: r.Name, SGLangCommit: r.Vars["sglang_commit"]}
	var facts *gpu.Facts
	if r.NeedsFacts() {
		if f, err := n.Facts(ctx); err == nil {
			facts = f
		}
	}
	// The steps only, built as an apply builds them, to ask the service step.
	e, err := n.Steps(r, facts)
	if err != nil {
		return info
	}
	defer e.Close()
	if svc, ok := e.Service(); ok {
		info.Unit = svc.Step.ServiceName()
		info.Profile = svc.Step.Active(svc.Env)
		if name, path, ok, err := svc.ServedModel(); ok && err == nil {
			info.ServedName, info.Model = name, path
		}
	}
	if info.SGLangCommit == "" {
		info.SGLangCommit = SGLangCommit(e)
	}
	if info.ServedName == "" {
		// SGLang serves the model under its path unless told otherwise.
		info.ServedName = info.Model
	}
	if rep, err := engine.LatestReport(n.StateDir); err == nil && rep.Recipe == r.Name && rep.Generation != nil {
		info.Generation = rep.Generation.Serving
	}
	if k := ServingGeneration(n.Root, n.StateDir, r); k != "" {
		// The generations record is the truth after the daemon rolled back.
		info.Generation = k
	} else if ServesInPlace(n.Root, n.StateDir, r) {
		// No generation serves: the tree a migration moved aside was put back.
		info.Generation = ""
	}
	return info
}

// SGLangCommit is the commit of e's first source step whose URL names sglang ("" when
// none pins one).
func SGLangCommit(e *engine.Engine) string {
	for _, p := range e.SourcePins() {
		if strings.Contains(strings.ToLower(p.URL), "sglang") {
			return p.Commit
		}
	}
	return ""
}

// Inputs returns the digest of what an apply reads that a failed switch could be waiting
// on: the recipe file, the --set values and the GPU facts (when the recipe uses them).
// The daemon tries a change whose switch failed again only once it differs.
func (n *Recipe) Inputs(ctx context.Context) (string, error) {
	h := sha256.New()
	b, err := engine.ReadTrusted(n.File, 4<<20)
	if err != nil {
		return "", fmt.Errorf("reading recipe %s: %w", n.File, err)
	}
	fmt.Fprintf(h, "%d\x00", len(b))
	h.Write(b)
	for _, kv := range n.Sets {
		fmt.Fprintf(h, "set\x00%s\x00", kv)
	}
	r, err := n.Load()
	if err != nil {
		return "", err
	}
	if r.NeedsFacts() {
		f, err := n.Facts(ctx)
		if err != nil {
			return "", fmt.Errorf("reading the GPU facts: %w", err)
		}
		fb, err := json.Marshal(f.TemplateData())
		if err != nil {
			return "", fmt.Errorf("encoding the GPU facts: %w", err)
		}
		h.Write(fb)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
