package download

import (
	"fmt"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/hub"
	"github.com/sglprov/sglprov/pkg/recipe"
)

// RevisionWarning says why a hub download's revision does not pin its files ("" for a
// 40-hex commit): a branch or tag moves when the repository's owner pushes, so hosts
// provisioned a week apart can serve different weights. It names the command that prints
// the commit to pin.
func RevisionWarning(repo, rev string) string {
	if rev == "" {
		rev = "main"
	}
	if hub.IsCommit(rev) {
		return ""
	}
	return fmt.Sprintf("revision %q of %s is a branch or tag, not a commit: it moves when the repository does, "+
		"so hosts provisioned at different times can get different weights; pin the 40-hex commit it names now "+
		"(curl -s https://huggingface.co/api/models/%s/revision/%s | python3 -c 'import json,sys; print(json.load(sys.stdin)[\"sha\"])')",
		rev, repo, repo, rev)
}

// Describe warns, for plan (in the step's details), when the download's revision is a
// branch or tag.
func (s *Step) Describe(env *engine.Env) []string {
	if s.spec.HF == nil {
		return nil
	}
	if w := RevisionWarning(s.spec.HF.Repo, s.spec.HF.Revision); w != "" {
		// Said once, in plan's details under the step, not again as a log line.
		return []string{"warning: " + w}
	}
	return nil
}

// RevisionWarnings returns, for validate, a warning for each hub download of r whose
// revision is a branch or tag, prefixed with the step's name. A step whose body cannot be
// rendered from the recipe's vars alone (it uses GPU facts) is left to plan.
func RevisionWarnings(r *recipe.Recipe) []string {
	data, err := r.NewData(nil)
	if err != nil {
		return nil
	}
	var out []string
	for _, st := range r.Steps {
		if st.Kind != "download" {
			continue
		}
		var body struct {
			HF *struct {
				Repo     string `yaml:"repo"`
				Revision string `yaml:"revision"`
			} `yaml:"hf"`
		}
		if err := st.Render(data, &body); err != nil || body.HF == nil {
			continue
		}
		if w := RevisionWarning(body.HF.Repo, body.HF.Revision); w != "" {
			out = append(out, "step "+st.Name+": "+w)
		}
	}
	return out
}
