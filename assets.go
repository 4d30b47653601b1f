// Package sglprov holds the files shipped inside the sglprov binary: the source patches,
// the unit templates and the recipes, so that a recipe copied alone onto a node can name
// them as "builtin:patches/...", "builtin:templates/..." and "builtin:recipes/...".
package sglprov

import "embed"

// Assets are the shipped files, by their path in the source tree.
//
//go:embed patches templates/*.tmpl templates/*.service recipes
var Assets embed.FS
