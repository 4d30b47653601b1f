package cli

import (
	"context"
	"encoding/json"
	"errors"
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

func runPlan(ctx context.Context, stdio IO, args []string) error {
	var o planOptions
	fs := newFlags("plan", stdio)
	o.register(fs, stdio)
	fs.jsonFlags(&o.json, "print the plan as JSON")
	fs.StringVar(&o.only, "only", "", "plan just these steps, `STEP[,STEP]`")
	fs.StringVar(&o.force, "force", "", "plan these steps as forced, `STEP[,STEP]`")
	fs.BoolVar(&o.detailed, "detailed-exitcode", false, "exit 7 when the plan has steps to run and nothing else is wrong (0: nothing to do), as terraform plan -detailed-exitcode does with its 2, which is bad usage here")
	fs.StringVar(&o.textfile, "textfile", "", "when the plan refuses the recipe (exit 4 or 6), write the refusal as metrics to `FILE` for node_exporter's textfile collector")
	if err := parse(fs, args); err != nil {
		return err
	}
	err := planBody(ctx, stdio, &o)
	if engine.Refused(err) {
		if terr := writeRunTextfile(ctx, stdio, &o.recipeFlags, o.textfile, nil, err); terr != nil {
			fmt.Fprintf(stdio.Stderr, "sglprov plan: writing the metrics textfile: %v\n", terr)
		}
	}
	return err
}

// planBody prints the plan; its error is plan's.
func planBody(ctx context.Context, stdio IO, o *planOptions) error {
	c, asJSON := &o.recipeFlags, o.json
	// Shared with other readers; an apply that holds the lock is named, and the steps it
	// runs now are shown as running, not as interrupted.
	lock, running, daemonPid, err := node.ReadShared(c.stateDirPath(), stdio.Factory.SharedLock)
	if err != nil {
		return err
	}
	if daemonPid > 0 && running == 0 && !asJSON {
		// A daemon between its applies: the state is at rest.
		fmt.Fprintf(stdio.Stdout, "the sglprov daemon, pid %d, watches this node\n", daemonPid)
	}
	defer lock.Release()
	// A host that falls short still gets its plan: the table and the rendered unit show
	// what apply would do once it is fixed; the problems follow, and the exit is 4.
	b, err := c.buildEngine(ctx, stdio, nil, func(opts *engine.Options) {
		opts.Only, opts.Force = splitList(o.only), splitList(o.force)
		opts.ApplyRunning = running
	})
	if err != nil {
		return err
	}
	host, e := b.host, b.e
	if len(host.short) == 0 || b.err != nil {
		if e, err = b.refuseShort(stdio, c); err != nil {
			if asJSON && engine.Refused(err) {
				// No plan could be made, but the refusal is still the answer, as data.
				name := ""
				if b.r != nil {
					name = b.r.Name
				}
				writePlanJSON(stdio, &engine.Plan{Recipe: name, Steps: []engine.PlannedStep{}, ApplyRunning: running}, err, err)
			}
			return err
		}
	}
	defer e.Close()
	p, planErr := e.Plan(ctx)
	// What the servers' environments hold now, against the known-bad table.
	planErr = errors.Join(planErr, knownBadInstalled(e))
	if len(host.short) > 0 {
		planErr = errors.Join(node.HostProblems(host.short), planErr)
	}
	if p == nil {
		return planErr
	}
	p.Commands = host.commands
	if asJSON {
		p.ApplyRunning = running
		res := changesPending(o, p, planErr)
		if err := writePlanJSON(stdio, p, planErr, res); err != nil {
			return err
		}
		return res
	}
	switch {
	case running > 0:
		fmt.Fprintf(stdio.Stdout, "an apply is running, pid %d: this plan is the state as it stands now\n", running)
	case running < 0:
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
