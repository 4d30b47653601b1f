package steps_test

import (
	"strings"
	"testing"

	"github.com/sglprov/sglprov/pkg/recipe"
	"github.com/sglprov/sglprov/pkg/steps"
)

// The registry's recipe warnings name each hub download whose revision is a branch or tag,
// prefixed with its step; a pinned commit says nothing.
func TestRegistryWarnings(t *testing.T) {
	const body = `apiVersion: sglprov/v1
name: warn
vars: {rev: main}
steps:
  - name: moving
    download: {dest: /tmp/a, hf: {repo: org/model, revision: "{{ .vars.rev }}"}}
  - name: pinned
    download: {dest: /tmp/b, hf: {repo: org/model, revision: 0368c1b3233414cd4a617b8ff9515e25752dc16c}}
`
	r, err := recipe.Parse("warn.yaml", []byte(body), steps.Specs(steps.Registry()), nil)
	if err != nil {
		t.Fatal(err)
	}
	w := steps.Registry().Warnings(r)
	if len(w) != 1 || !strings.HasPrefix(w[0], `step moving: revision "main" of org/model is a branch or tag`) {
		t.Errorf("Registry().Warnings = %q, want one warning for step moving", w)
	}
}
