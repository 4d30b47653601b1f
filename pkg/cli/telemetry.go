package cli

import (
	"context"
	"io"
	"net/url"
	"path/filepath"
	"strings"
	"time"

	"charm.land/log/v2"

	sglprov "github.com/sglprov/sglprov"

	"github.com/sglprov/sglprov/pkg/daemon"
	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/gpu"
	"github.com/sglprov/sglprov/pkg/recipe"
)

// Telemetry without the daemon: a one-shot apply (cloud-init) and a refused plan write the
// node_exporter textfile the daemon writes at every cycle, so that a node no daemon
// watches still shows up in the fleet's Prometheus.

// writeRunTextfile writes the textfile of one run of c's recipe: its outcome (rep may be
// nil when the run was refused before it was recorded) and the node's info. A run refused
// because another holds the lock writes nothing: the file is the holder's.
func writeRunTextfile(ctx context.Context, stdio IO, c *common, path string, rep *engine.Report, err error) error {
	if path == "" || exitcode.Of(err) == exitcode.ExitLocked {
		return nil
	}
	r, lerr := c.loadRecipe(stdio)
	if lerr != nil {
		return nil // a recipe that does not load has no node to describe: the error says why
	}
	m := daemon.NewApplyMetrics()
	m.ObserveApply(r.Name, rep, err)
	m.SetNodeInfo(nodeInfoOf(ctx, stdio, c, r))
	return m.WriteTextfile(path)
}

// nodeInfoOf reads sglprov_node_info's labels: the recipe's service step (its unit, and the
// model and served name under the profile it runs), built with the host's facts where the
// recipe uses them, the profile the state records as installed, and the SGLang commit the
// recipe pins. What cannot be read stays "".
func nodeInfoOf(ctx context.Context, stdio IO, c *common, r *recipe.Recipe) daemon.NodeInfo {
	info := daemon.NodeInfo{Recipe: r.Name, SGLangCommit: r.Vars["sglang_commit"]}
	var facts *gpu.Facts
	if r.NeedsFacts() {
		if f, err := stdio.Factory.Facts(ctx, stdio.Getenv); err == nil {
			facts = f
		}
	}
	dir, err := filepath.Abs(filepath.Dir(c.recipe))
	if err != nil {
		return info
	}
	// The steps only, built as an apply builds them, to ask the service step: no host
	// checks, no logs.
	e, err := stdio.Factory.Engine(engine.Options{Recipe: r, RecipeDir: dir, Registry: stdio.Factory.Registry(), Facts: facts,
		Root: c.root, StateDir: c.stateDirPath(), Builtin: sglprov.Assets,
		NewLogger: func(io.Writer) *log.Logger { return log.New(io.Discard) }})
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
		info.SGLangCommit = sglangCommit(r, facts)
	}
	if info.ServedName == "" {
		// SGLang serves the model under its path unless told otherwise.
		info.ServedName = info.Model
	}
	if rep, err := engine.LatestReport(c.stateDirPath()); err == nil && rep.Recipe == r.Name && rep.Generation != nil {
		info.Generation = rep.Generation.Serving
	}
	if k := servingGeneration(c, r); k != "" {
		// The generations record is the truth after the daemon rolled back.
		info.Generation = k
	}
	return info
}

// sglangCommit is the commit of the recipe's first source step whose URL names sglang
// ("" when none pins one).
func sglangCommit(r *recipe.Recipe, facts *gpu.Facts) string {
	var fd map[string]any
	if facts != nil {
		fd = facts.TemplateData()
	}
	data, err := r.NewData(fd)
	if err != nil {
		return ""
	}
	for _, s := range r.Steps {
		if s.Kind != "source" {
			continue
		}
		var spec struct {
			URL string `yaml:"url"`
			Ref string `yaml:"ref"`
		}
		if s.Render(data, &spec) != nil || !strings.Contains(strings.ToLower(spec.URL), "sglang") {
			continue
		}
		if spec.Ref != "" {
			return spec.Ref
		}
		if u, err := url.Parse(strings.TrimPrefix(spec.URL, "git::")); err == nil {
			return u.Query().Get("ref")
		}
		return ""
	}
	return ""
}

// recordRefusal records a run refused with err before any step ran (exit 4 or 6), so that
// status shows it and exits with its code; any other error is not a refusal and nil is
// returned. The caller holds the state dir's lock.
func recordRefusal(c *common, r *recipe.Recipe, started time.Time, err error) *engine.Report {
	if !engine.Refused(err) {
		return nil
	}
	rep, rerr := engine.RecordRefusal(c.stateDirPath(), r.Name, r.File, started, err)
	if rerr != nil {
		return nil
	}
	return rep
}
