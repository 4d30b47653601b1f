package node

import (
	"context"
	"fmt"
	"os"
	"strconv"

	"charm.land/log/v2"

	"github.com/sglprov/sglprov/pkg/daemon"
	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/gpu"
)

// Hook returns the daemon's Hook for n's recipe: it re-reads the recipe (a hook edited on
// disk is the one run), renders the hook's argv with the recipe's data and runs it with
// the node's facts in its environment (HookEnv), within the hook's timeout.
func (n *Recipe) Hook(logger *log.Logger) func(ctx context.Context, hook string, h daemon.Health, reason string) error {
	return func(ctx context.Context, hook string, h daemon.Health, reason string) error {
		r, err := n.Load()
		if err != nil {
			return fmt.Errorf("reading the recipe for its %s hook: %w", hook, err)
		}
		hk := r.OnUnhealthy
		if hook == daemon.HookHealthy {
			hk = r.OnHealthy
		}
		if hk == nil {
			return daemon.ErrNoHook
		}
		var facts *gpu.Facts
		if r.NeedsFacts() {
			facts, _ = n.Facts(ctx)
		}
		var fd map[string]any
		if facts != nil {
			fd = facts.TemplateData()
		}
		data, err := r.NewData(fd)
		if err != nil {
			return fmt.Errorf("rendering the %s hook: %w", hook, err)
		}
		argv, err := hk.RenderArgv(data)
		if err != nil {
			return fmt.Errorf("rendering the %s hook: %w", hook, err)
		}
		logger.Info("running the hook", "hook", hook, "node_health", string(h), "reason", reason, "argv", argv)
		if hook == daemon.HookUnhealthy && r.OnHealthy != nil {
			// Before the drain: a kill between it and the undrain leaves the record, and
			// the next run whose gate passes undrains (engine.UndrainOwed).
			if err := engine.MarkUndrainOwed(n.StateDir, r.Name, reason); err != nil {
				logger.Warn("running the hook", "hook", hook, "err", err)
			}
		}
		env := HookEnv(hook, h, reason, n.Info(ctx, r), facts)
		out, err := daemon.RunHook(ctx, argv, env, hk.Timeout)
		if out != "" {
			logger.Info("hook output", "hook", hook, "output", out)
		}
		if err == nil && hook == daemon.HookHealthy {
			if cerr := engine.ClearUndrainOwed(n.StateDir, r.Name); cerr != nil {
				logger.Warn("running the hook", "hook", hook, "err", cerr)
			}
		}
		return err
	}
}

// HookEnv is what a hook is told of the node, as SGLPROV_* variables: the hook and the
// health that made it run, the node's info (recipe, unit, model, served name, profile,
// SGLang commit), the host's name and its GPU facts.
func HookEnv(hook string, h daemon.Health, reason string, info daemon.NodeInfo, facts *gpu.Facts) []string {
	host, _ := os.Hostname()
	env := []string{
		"SGLPROV_HOOK=" + hook,
		"SGLPROV_NODE_HEALTH=" + string(h),
		"SGLPROV_REASON=" + reason,
		"SGLPROV_RECIPE=" + info.Recipe,
		"SGLPROV_UNIT=" + info.Unit,
		"SGLPROV_MODEL=" + info.Model,
		"SGLPROV_SERVED_NAME=" + info.ServedName,
		"SGLPROV_PROFILE=" + info.Profile,
		"SGLPROV_GENERATION=" + info.Generation,
		"SGLPROV_SGLANG_COMMIT=" + info.SGLangCommit,
		"SGLPROV_HOSTNAME=" + host,
	}
	if facts != nil {
		name := ""
		if facts.Count() > 0 {
			name = facts.GPUs[0].Name
		}
		env = append(env,
			"SGLPROV_GPU_COUNT="+strconv.Itoa(facts.Count()),
			"SGLPROV_GPU_NAME="+name,
			"SGLPROV_COMPUTE_CAPABILITY="+facts.ComputeCapability(),
			"SGLPROV_DRIVER_VERSION="+facts.DriverVersion,
			"SGLPROV_CUDA_VERSION="+facts.CUDAVersion(),
		)
	}
	return env
}
