package steps_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/sglprov/sglprov/pkg/recipe"
	"github.com/sglprov/sglprov/pkg/steps"
)

// TestTwoNodeRecipe: the two-node recipe the docs plan is valid for each rank, and a rank
// out of range is refused at its position.
func TestTwoNodeRecipe(t *testing.T) {
	file := filepath.Join("..", "..", "testdata", "multinode", "deepseek-v3-2x8-h100.yaml")
	for _, rank := range []string{"0", "1"} {
		r, err := recipe.Load(file, steps.Specs(steps.Registry()), []string{"node_rank=" + rank, "head_addr=10.0.0.1"})
		if err != nil {
			t.Fatalf("rank %s: %v", rank, err)
		}
		d, err := r.NewData(nil)
		if err != nil {
			t.Fatal(err)
		}
		c, ok, err := r.NodesConfig(d)
		if err != nil || !ok || c.Head() != "10.0.0.1:20000" || c.TP != 16 || c.GPUsPerNode != 8 {
			t.Errorf("rank %s: %+v, %v, %v", rank, c, ok, err)
		}
	}
	_, err := recipe.Load(file, steps.Specs(steps.Registry()), []string{"node_rank=2", "head_addr=10.0.0.1"})
	if err == nil || !strings.Contains(err.Error(), "deepseek-v3-2x8-h100.yaml:17:9: nodes.rank 2 is out of range") {
		t.Errorf("rank 2: %v", err)
	}
}
