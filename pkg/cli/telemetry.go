package cli

import (
	"context"
	"encoding/json"
	"net/url"
	"strings"
	"time"

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
	r, lerr := c.loadRecipe()
	if lerr != nil {
		return nil // a recipe that does not load has no node to describe: the error says why
	}
	m := daemon.NewApplyMetrics()
	m.ObserveApply(r.Name, rep, err)
	m.SetNodeInfo(nodeInfoOf(ctx, stdio, c, r))
	return m.WriteTextfile(path)
}

// nodeInfoOf reads sglprov_node_info's labels: the recipe's service step (unit, model,
// served name) rendered with the host's facts where the recipe uses them, the profile the
// state records as installed, and the SGLang commit the recipe pins. What cannot be read
// stays "".
func nodeInfoOf(ctx context.Context, stdio IO, c *common, r *recipe.Recipe) daemon.NodeInfo {
	info := daemon.NodeInfo{Recipe: r.Name, SGLangCommit: r.Vars["sglang_commit"]}
	var fd map[string]any
	if r.NeedsFacts() {
		if f, err := gpu.Detect(ctx, stdio.Getenv); err == nil {
			fd = f.TemplateData()
		}
	}
	data, err := r.NewData(fd)
	if err != nil {
		return info
	}
	for _, s := range r.Steps {
		switch s.Kind {
		case "systemd":
			var spec struct {
				Unit      string   `yaml:"unit"`
				ModelPath string   `yaml:"model_path"`
				Args      []string `yaml:"args"`
			}
			if info.Unit != "" || s.Render(data, &spec) != nil {
				continue
			}
			info.Unit, info.Model = spec.Unit, spec.ModelPath
			for i, a := range spec.Args {
				if a == "--served-model-name" && i+1 < len(spec.Args) {
					info.ServedName = spec.Args[i+1]
				} else if v, ok := strings.CutPrefix(a, "--served-model-name="); ok {
					info.ServedName = v
				}
			}
			info.Profile = activeProfile(c.stateDirPath(), r.Name, s.Name)
		case "smoke":
			var spec struct {
				Model string `yaml:"model"`
			}
			if s.Render(data, &spec) == nil && spec.Model != "" && info.ServedName == "" {
				info.ServedName = spec.Model
			}
		case "source":
			var spec struct {
				URL string `yaml:"url"`
				Ref string `yaml:"ref"`
			}
			if info.SGLangCommit != "" || s.Render(data, &spec) != nil || !strings.Contains(strings.ToLower(spec.URL), "sglang") {
				continue
			}
			info.SGLangCommit = spec.Ref
			if info.SGLangCommit == "" {
				if u, err := url.Parse(strings.TrimPrefix(spec.URL, "git::")); err == nil {
					info.SGLangCommit = u.Query().Get("ref")
				}
			}
		}
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

// activeProfile is the profile recipe's state records as installed by its service step.
func activeProfile(stateDir, recipe, step string) string {
	st, err := engine.LoadRecipeState(stateDir, recipe)
	if err != nil || st.Steps[step] == nil {
		return ""
	}
	var data struct {
		Active string `json:"active"`
	}
	_ = json.Unmarshal(st.Steps[step].Data, &data)
	return data.Active
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
