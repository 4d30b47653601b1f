// Command gen writes pkg/recipe/fielddocs_gen.go, the descriptions of the recipes' JSON
// Schema (make schema runs it): go run ./internal/fielddocs/gen from the module's folder.
package main

import (
	"fmt"
	"os"

	"github.com/sglprov/sglprov/internal/fielddocs"
)

func main() {
	out, err := fielddocs.Generate(fielddocs.Module, ".", "recipe", fielddocs.RecipeRoots())
	if err != nil {
		fmt.Fprintln(os.Stderr, "fielddocs:", err)
		os.Exit(1)
	}
	if err := os.WriteFile("pkg/recipe/fielddocs_gen.go", out, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "fielddocs:", err)
		os.Exit(1)
	}
}
