package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"text/tabwriter"
	"time"

	"github.com/sglprov/sglprov/pkg/engine"
)

func runStatus(ctx context.Context, stdio IO, args []string) error {
	var c common
	var asJSON bool
	fs := newFlags("status", stdio)
	c.register(fs, stdio)
	fs.BoolVar(&asJSON, "json", false, "print the status as JSON")
	if err := parse(fs, args); err != nil {
		return err
	}
	dir := c.stateDirPath()
	st, err := engine.LoadState(dir)
	if err != nil {
		return err
	}
	rep, repErr := engine.LatestReport(dir)
	if asJSON {
		out := struct {
			State  *engine.State  `json:"state"`
			Report *engine.Report `json:"last_run,omitempty"`
		}{st, rep}
		enc := json.NewEncoder(stdio.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	if len(st.Steps) == 0 {
		fmt.Fprintf(stdio.Stdout, "no run recorded in %s\n", dir)
		return nil
	}
	fmt.Fprintf(stdio.Stdout, "recipe %s, state updated %s\n", st.Recipe, st.Updated.Format(time.RFC3339))
	if repErr == nil {
		fmt.Fprintf(stdio.Stdout, "last run: %s at %s, exit %d, took %s\n  report: %s/report.json\n",
			rep.Result, rep.Started.Format(time.RFC3339), rep.ExitCode, rep.Duration.Round(time.Millisecond), rep.Dir)
		fmt.Fprintf(stdio.Stdout, "\n%s", rep.Summary())
		return nil
	}
	names := make([]string, 0, len(st.Steps))
	for n := range st.Steps {
		names = append(names, n)
	}
	sort.Strings(names)
	w := tabwriter.NewWriter(stdio.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "STEP\tRESULT\tSTARTED\tDURATION\tREASON")
	for _, n := range names {
		r := st.Steps[n]
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", n, r.Result, r.Started.Format(time.RFC3339), r.Duration.Round(time.Millisecond), r.Reason)
	}
	return w.Flush()
}
