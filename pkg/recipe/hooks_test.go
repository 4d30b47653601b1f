package recipe_test

import (
	"strings"
	"testing"
	"time"

	"github.com/sglprov/sglprov/pkg/recipe"
)

// Drain and undrain hooks: an argv with templates, rendered with the recipe's data; a
// default timeout; each mistake a problem at its position.
func TestHooks(t *testing.T) {
	base := `apiVersion: sglprov/v1
name: t
vars:
  port: "30000"
steps:
  - name: s
    command: {argv: ["true"]}
`
	r, err := recipe.Parse("t.yaml", []byte(base+`on_unhealthy:
  argv: [lb, drain, "{{ .vars.port }}"]
on_healthy:
  argv: [lb, undrain]
  timeout: 5s
`), testKinds(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.OnUnhealthy == nil || r.OnUnhealthy.Timeout != recipe.DefaultHookTimeout || r.OnHealthy.Timeout != 5*time.Second {
		t.Fatalf("hooks: %+v %+v", r.OnUnhealthy, r.OnHealthy)
	}
	d, err := r.NewData(nil)
	if err != nil {
		t.Fatal(err)
	}
	argv, err := r.OnUnhealthy.RenderArgv(d)
	if err != nil || strings.Join(argv, " ") != "lb drain 30000" {
		t.Errorf("rendered argv %q, %v", argv, err)
	}
	for _, tc := range []struct{ name, hook, want string }{
		{"no argv", "on_unhealthy: {timeout: 5s}\n", "t.yaml:8:15: on_unhealthy needs an argv"},
		{"string, not a mapping", "on_healthy: lb undrain\n", "t.yaml:8:13:"},
		{"timeout too long", "on_healthy: {argv: [lb], timeout: 1h}\n", "on_healthy.timeout must be between 0 and 10m0s"},
		{"unknown var", "on_healthy: {argv: [lb, \"{{ .vars.nope }}\"]}\n", `unknown var "nope"`},
		{"unknown field", "on_healthy: {argv: [lb], shell: true}\n", "shell"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := recipe.Parse("t.yaml", []byte(base+tc.hook), testKinds(), nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want %q", err, tc.want)
			}
		})
	}
}
