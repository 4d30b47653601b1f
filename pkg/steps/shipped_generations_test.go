package steps_test

import (
	"testing"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/steps"
)

// The shipped recipes build their source tree, venv and kernels inside a generation by
// default (/opt/sglang becomes the link to the serving one); the weights, the service and
// its checks stay outside. The generation's key follows the arch list and not the driver:
// a driver upgrade keeps the generation, a GPU of another architecture makes a new one.
func TestShippedRecipesUseGenerations(t *testing.T) {
	for _, file := range []string{"qwen3.5-397b-a17b-nvfp4-sm120.yaml", "qwen3.5-397b-a17b-nvfp4-sm120-sglang-0.5.20.yaml",
		"qwen3.5-397b-a17b-nvfp4-sm120-sglang-0.5.21.yaml", "qwen3-235b-a22b-fp8-sm90.yaml"} {
		t.Run(file, func(t *testing.T) {
			r := loadShipped(t, file)
			roots := r.GenerationRoots()
			if len(roots) != 1 || roots[0].Path != "/opt/sglang" {
				t.Fatalf("generation roots %+v, want /opt/sglang", roots)
			}
			key := func(driver, cc string) string {
				facts := rtxFacts(t)
				facts.DriverVersion = driver
				for i := range facts.GPUs {
					facts.GPUs[i].ComputeCapability = cc
				}
				e, err := engine.New(engine.Options{Recipe: r, Registry: steps.Registry(), StateDir: t.TempDir(), Facts: facts, IgnoreState: true})
				if err != nil {
					t.Fatal(err)
				}
				var key string
				for _, s := range r.Steps {
					env := e.EnvFor(s.Name)
					inGen := r.InGeneration(s)
					switch {
					case s.Kind == "download" && inGen:
						t.Errorf("step %s (weights) builds into the generation", s.Name)
					case s.Kind == "source" && !inGen:
						t.Errorf("step %s (the source) does not build into the generation", s.Name)
					}
					if env.Generation != nil {
						key = env.Generation.Key
					}
				}
				return key
			}
			k580, k590, k90 := key("580.95.05", "12.0"), key("590.48.01", "12.0"), key("580.95.05", "9.0")
			if k580 == "" || k580 != k590 {
				t.Errorf("a driver upgrade changes the generation: %q -> %q", k580, k590)
			}
			if k90 == k580 {
				t.Errorf("another GPU architecture keeps the generation %q", k580)
			}
		})
	}
}
