package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/node"
	"github.com/sglprov/sglprov/pkg/refusal"
)

// planOptions are plan's flags.
type planOptions struct {
	recipeFlags
	json, detailed        bool
	only, force, textfile string
}

// parsePlan parses plan's command line into its options.
func parsePlan(stdio IO, args []string) (*planOptions, error) {
	var o planOptions
	fs := newFlags("plan", stdio)
	o.register(fs, stdio)
	fs.jsonFlags(&o.json, "print the plan as JSON")
	fs.StringVar(&o.only, "only", "", "plan just these steps, `STEP[,STEP]`")
	fs.StringVar(&o.force, "force", "", "plan these steps as forced, `STEP[,STEP]`")
	fs.BoolVar(&o.detailed, "detailed-exitcode", false, "exit 7 when the plan has steps to run and nothing else is wrong (0: nothing to do), as terraform plan -detailed-exitcode does with its 2, which is bad usage here")
	fs.StringVar(&o.textfile, "textfile", "", "when the plan refuses the recipe (exit 4 or 6), write the refusal as metrics to `FILE` for node_exporter's textfile collector")
	return &o, parse(fs, args)
}

// planRun plans the recipe (node.Recipe.Plan) and prints the plan; a refusal writes the
// textfile.
func planRun(ctx context.Context, stdio IO, o *planOptions) error {
	n, err := o.node(stdio)
	if err != nil {
		return err
	}
	p, pd, err := n.Plan(ctx, node.PlanOptions{Only: splitList(o.only), Force: splitList(o.force)})
	if pd.DaemonPid > 0 && pd.Running == 0 && !o.json {
		// A daemon between its applies: the state is at rest.
		fmt.Fprintf(stdio.Stdout, "the sglprov daemon, pid %d, watches this node\n", pd.DaemonPid)
	}
	if p == nil {
		if o.json && pd.Refused {
			// No plan could be made, but the refusal is still the answer, as data.
			writePlanJSON(stdio, &engine.Plan{Recipe: pd.Recipe, Steps: []engine.PlannedStep{}, ApplyRunning: pd.Running}, err, err)
		}
	} else {
		err = printPlan(stdio, o, p, pd, err)
	}
	if engine.Refused(err) {
		if terr := n.WriteRunTextfile(ctx, o.textfile, nil, err); terr != nil {
			fmt.Fprintf(stdio.Stderr, "sglprov plan: writing the metrics textfile: %v\n", terr)
		}
	}
	return err
}

// printPlan prints p (as JSON under --json); its error is plan's, from planErr.
func printPlan(stdio IO, o *planOptions, p *engine.Plan, pd node.Planned, planErr error) error {
	if o.json {
		p.ApplyRunning = pd.Running
		res := changesPending(o, p, planErr)
		if err := writePlanJSON(stdio, p, planErr, res); err != nil {
			return err
		}
		return res
	}
	switch {
	case pd.Running > 0:
		fmt.Fprintf(stdio.Stdout, "an apply is running, pid %d: this plan is the state as it stands now\n", pd.Running)
	case pd.Running < 0:
		fmt.Fprintln(stdio.Stdout, "an apply is running: this plan is the state as it stands now")
	}
	fmt.Fprintf(stdio.Stdout, "Plan for %s:\n", p.Recipe)
	if p.Generation != nil {
		fmt.Fprintf(stdio.Stdout, "  generation: %s\n", p.Generation)
	}
	for _, f := range p.FactsChanged {
		fmt.Fprintf(stdio.Stdout, "  host fact changed: %s\n", f)
	}
	for _, r := range p.Commands {
		fmt.Fprintf(stdio.Stdout, "  command %s\n", r)
	}
	w := tabwriter.NewWriter(stdio.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "  STEP\tKIND\tACTION\tREASON")
	runs := 0
	for _, s := range p.Steps {
		action := "skip"
		if s.Run {
			action = "run"
			runs++
		}
		fmt.Fprintf(w, "  %s\t%s\t%s\t%s\n", s.Name, s.Kind, action, s.Reason)
	}
	w.Flush()
	for _, s := range p.Steps {
		for i, d := range s.Details {
			if i == 0 {
				fmt.Fprintf(stdio.Stdout, "  %s:\n", s.Name)
			}
			fmt.Fprintf(stdio.Stdout, "    %s\n", d)
		}
	}
	fmt.Fprintf(stdio.Stdout, "%d of %d steps would run.\n", runs, len(p.Steps))
	return changesPending(o, p, planErr)
}

// ExitChanges is plan's exit code under --detailed-exitcode when steps would run.
const ExitChanges = 7

// errChanges carries ExitChanges.
var errChanges = &exitError{code: ExitChanges, msg: "changes pending"}

// exitError is an exit code with nothing more to print.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

// changesPending is planErr, or with --detailed-exitcode and no other error, errChanges
// when a step of p would run.
func changesPending(o *planOptions, p *engine.Plan, planErr error) error {
	if planErr != nil || !o.detailed {
		return planErr
	}
	for _, s := range p.Steps {
		if s.Run {
			return reported(errChanges)
		}
	}
	return nil
}

// writePlanJSON prints p as plan --json does, with the exit code of res (plan's result)
// and, when planErr refuses the host, every reason (refusal.Collect).
func writePlanJSON(stdio IO, p *engine.Plan, planErr, res error) error {
	p.ExitCode = exitCodeOf(res)
	p.Refusals = refusal.Collect(planErr)
	enc := json.NewEncoder(stdio.Stdout)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false) // ">=580", as the recipe says
	if err := enc.Encode(p); err != nil {
		return fmt.Errorf("writing the plan: %w", err)
	}
	return nil
}

func splitList(s string) []string {
	var out []string
	for _, x := range strings.Split(s, ",") {
		if x = strings.TrimSpace(x); x != "" {
			out = append(out, x)
		}
	}
	return out
}
