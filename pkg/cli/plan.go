package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/sglprov/sglprov/pkg/engine"
)

func runPlan(ctx context.Context, stdio IO, args []string) error {
	var c common
	var asJSON bool
	var only, force string
	fs := newFlags("plan", stdio)
	c.register(fs, stdio)
	fs.BoolVar(&asJSON, "json", false, "print the plan as JSON")
	fs.StringVar(&only, "only", "", "plan just these steps, `STEP[,STEP]`")
	fs.StringVar(&force, "force", "", "plan these steps as forced, `STEP[,STEP]`")
	if err := parse(fs, args); err != nil {
		return err
	}
	e, _, err := c.newEngine(ctx, stdio, nil, func(o *engine.Options) {
		o.Only, o.Force = splitList(only), splitList(force)
	})
	if err != nil {
		return err
	}
	defer e.Close()
	p, err := e.Plan(ctx)
	if err != nil {
		return err
	}
	if asJSON {
		enc := json.NewEncoder(stdio.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(p)
	}
	fmt.Fprintf(stdio.Stdout, "Plan for %s:\n", p.Recipe)
	for _, f := range p.FactsChanged {
		fmt.Fprintf(stdio.Stdout, "  host fact changed: %s\n", f)
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
