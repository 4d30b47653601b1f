package node_test

import (
	"errors"
	"testing"

	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/node"
	"github.com/sglprov/sglprov/pkg/recipe"
)

// TestLoadEach: the recipes come back in the files' order; two files of one recipe name
// are bad usage naming both files.
func TestLoadEach(t *testing.T) {
	names := map[string]string{"a.yaml": "a", "b.yaml": "b", "a2.yaml": "a"}
	load := func(f string) (*recipe.Recipe, error) { return &recipe.Recipe{Name: names[f]}, nil }
	rs, err := node.LoadEach([]string{"b.yaml", "a.yaml"}, load)
	if err != nil || len(rs) != 2 || rs[0].Name != "b" || rs[1].Name != "a" {
		t.Fatalf("LoadEach = %v, %v; want b then a", rs, err)
	}
	_, err = node.LoadEach([]string{"a.yaml", "b.yaml", "a2.yaml"}, load)
	if !errors.Is(err, exitcode.ErrUsage) || err.Error() != `invalid usage or recipe: a.yaml and a2.yaml are both recipe "a": give each recipe once` {
		t.Errorf("one name twice: %v", err)
	}
}
