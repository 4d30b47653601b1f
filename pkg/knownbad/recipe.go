package knownbad

import (
	"fmt"

	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/recipe"
)

// CheckRecipe checks recipe r's pins (every name==version in its steps rendered with the
// GPU facts' template data fd: the pip constraints, the pinned installs) with its service
// steps' launch lines and the GPUs' compute capabilities ccs against the table. A
// combination in it is a usage error (exit 2) naming the row, its reason and its fix.
func CheckRecipe(r *recipe.Recipe, fd map[string]any, ccs []string) error {
	data, err := r.NewData(fd)
	if err != nil {
		return fmt.Errorf("%w: %w", exitcode.ErrUsage, err)
	}
	f := Facts{Packages: map[string]string{}, ComputeCapabilities: ccs}
	for _, st := range r.Steps {
		var body any
		if err := st.Render(data, &body); err != nil {
			return fmt.Errorf("%w: step %s: %w", exitcode.ErrUsage, st.Name, err)
		}
		var texts []string
		strs(body, &texts)
		for n, v := range Pins(texts) {
			f.Packages[n] = v
		}
		if st.Kind == "systemd" {
			f.LaunchLines = append(f.LaunchLines, launchLines(r, body)...)
		}
	}
	m, err := Check(f)
	if err != nil || len(m) == 0 {
		return err
	}
	return fmt.Errorf("%w: %w", exitcode.ErrUsage, &Error{Where: "the recipe's pins and launch lines", Matches: m})
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
