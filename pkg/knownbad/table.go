package knownbad

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// WriteTable prints rows as `sglprov known-bad` shows them: a line per row (its id,
// packages, GPUs and flags), then each row's reason, fix, sources and when it was checked.
func WriteTable(w io.Writer, rows []Row) error {
	fmt.Fprintf(w, "known-bad combinations, table %s (validate checks the recipe's pins; plan and apply the installed packages)\n\n", TableVersion)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tPACKAGES\tGPU\tFLAGS")
	for _, r := range rows {
		var pk, fl []string
		for _, p := range r.Packages {
			pk = append(pk, strings.Join(p.Names, "|")+p.Range)
		}
		for _, f := range r.Flags {
			fl = append(fl, strings.TrimSpace(f.Name+" "+f.ValuePrefix+"*"))
		}
		gpuCol := "any"
		if r.ComputeCapabilityMajor != 0 {
			gpuCol = fmt.Sprintf("sm_%dx", r.ComputeCapabilityMajor)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.ID, orDash(strings.Join(pk, ", ")), gpuCol, orDash(strings.Join(fl, " ")))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range rows {
		fmt.Fprintf(w, "\n%s\n  why:     %s\n  fix:     %s\n  source:  %s\n", r.ID, r.Reason, r.Fix, strings.Join(r.Sources, ", "))
		for _, q := range r.Quotes {
			fmt.Fprintf(w, "  says:    %s\n", q)
		}
		fmt.Fprintf(w, "  checked: %s\n", r.Checked)
	}
	return nil
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
