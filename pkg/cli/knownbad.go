package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/gpu"
	"github.com/sglprov/sglprov/pkg/knownbad"
	"github.com/sglprov/sglprov/pkg/recipe"
)

// runKnownBad is `sglprov known-bad`: the table of known-bad combinations that validate
// checks a recipe's pins against, and plan and apply the installed packages.
func runKnownBad(ctx context.Context, stdio IO, args []string) error {
	var asJSON bool
	fs := newFlags("known-bad", stdio)
	fs.BoolVar(&asJSON, "json", false, "print the table as JSON")
	if err := parse(fs, args); err != nil {
		return err
	}
	rows := knownbad.Table()
	if asJSON {
		enc := json.NewEncoder(stdio.Stdout)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false)
		if err := enc.Encode(struct {
			Version string         `json:"version"`
			Rows    []knownbad.Row `json:"rows"`
		}{knownbad.TableVersion, rows}); err != nil {
			return fmt.Errorf("writing the table: %w", err)
		}
		return nil
	}
	fmt.Fprintf(stdio.Stdout, "known-bad combinations, table %s (validate checks the recipe's pins; plan and apply the installed packages)\n\n", knownbad.TableVersion)
	w := tabwriter.NewWriter(stdio.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "ID\tPACKAGES\tGPU\tFLAGS")
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
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", r.ID, orDash(strings.Join(pk, ", ")), gpuCol, orDash(strings.Join(fl, " ")))
	}
	w.Flush()
	for _, r := range rows {
		fmt.Fprintf(stdio.Stdout, "\n%s\n  why:     %s\n  fix:     %s\n  source:  %s\n  checked: %s\n",
			r.ID, r.Reason, r.Fix, strings.Join(r.Sources, ", "), r.Checked)
	}
	return nil
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// knownBadPins checks the recipe's pins (every name==version in its rendered steps: the
// pip constraints, the pinned installs) with its service steps' launch lines and the GPUs
// of facts against the known-bad table. A combination in it is a usage error (exit 2)
// naming the row, its reason and its fix.
func knownBadPins(r *recipe.Recipe, facts *gpu.Facts) error {
	var fd map[string]any
	if facts != nil {
		fd = facts.TemplateData()
	}
	data, err := r.NewData(fd)
	if err != nil {
		return fmt.Errorf("%w: %w", exitcode.ErrUsage, err)
	}
	f := knownbad.Facts{Packages: map[string]string{}}
	for _, st := range r.Steps {
		var body any
		if err := st.Render(data, &body); err != nil {
			return fmt.Errorf("%w: step %s: %w", exitcode.ErrUsage, st.Name, err)
		}
		var texts []string
		strs(body, &texts)
		for n, v := range knownbad.Pins(texts) {
			f.Packages[n] = v
		}
		if st.Kind == "systemd" {
			f.LaunchLines = append(f.LaunchLines, launchLines(r, body)...)
		}
	}
	if facts != nil {
		for _, g := range facts.GPUs {
			f.ComputeCapabilities = append(f.ComputeCapabilities, g.ComputeCapability)
		}
	}
	m, err := knownbad.Check(f)
	if err != nil || len(m) == 0 {
		return err
	}
	return fmt.Errorf("%w: %w", exitcode.ErrUsage, &knownbad.Error{Where: "the recipe's pins and launch lines", Matches: m})
}

// launchLines returns a service step's arguments alone and with each profile it lists.
func launchLines(r *recipe.Recipe, body any) [][]string {
	m, _ := body.(map[string]any)
	var base []string
	strs(m["args"], &base)
	lines := [][]string{base}
	var profiles []string
	strs(m["profiles"], &profiles)
	for _, p := range profiles {
		if prof, ok := r.Profiles[p]; ok {
			lines = append(lines, append(append([]string(nil), prof.Args...), base...))
		}
	}
	return lines
}

// strs appends every string in v (a decoded YAML value) to out.
func strs(v any, out *[]string) {
	switch x := v.(type) {
	case string:
		*out = append(*out, x)
	case []any:
		for _, e := range x {
			strs(e, out)
		}
	case map[string]any:
		for _, e := range x {
			strs(e, out)
		}
	}
}

// knownBadInstalled runs each service step's check of what its environment holds (plan),
// joined.
func knownBadInstalled(e *engine.Engine) error {
	return e.KnownBad()
}
