package steps_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestREADMEListsEveryShippedRecipe: the README's table of recipes names every file in
// recipes/ with a line of what it is for, and says how to move between the recipes that
// replace each other.
func TestREADMEListsEveryShippedRecipe(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join("..", "..", "recipes", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no shipped recipes: %v", err)
	}
	for _, f := range files {
		link := "](recipes/" + filepath.Base(f) + ")"
		i := strings.Index(string(readme), link)
		if i < 0 {
			t.Errorf("README.md does not list %s", filepath.Base(f))
			continue
		}
		line, _, _ := strings.Cut(string(readme[i:]), "\n")
		if !strings.HasPrefix(line, link+" |") && !strings.Contains(line, " | ") {
			t.Errorf("README.md lists %s without what it is for: %s", filepath.Base(f), line)
		}
	}
	if !strings.Contains(string(readme), "*Moving between the SM120 recipes.*") || !strings.Contains(string(readme), "`replaces:`") {
		t.Error("README.md does not say how to move between the SM120 recipes (replaces:)")
	}
}
