// Package templates holds the unit templates shipped with sglprov, for recipes that name
// none of their own.
package templates

import (
	"embed"
	"fmt"
)

// SGLangService is the name of the default SGLang server unit template.
const SGLangService = "sglang.service.tmpl"

//go:embed *.tmpl
var files embed.FS

// Read returns the shipped template called name.
func Read(name string) ([]byte, error) {
	b, err := files.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("reading shipped template %q: %w", name, err)
	}
	return b, nil
}
