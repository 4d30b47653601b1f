// Package patch is the patch step kind: it applies a series of unified diffs (git format)
// to a source tree. Every hunk of every file of every patch is applied in memory first,
// without fuzz and at the exact positions the hunks name; files are written only when the
// whole series applies. A patch that is already applied is recognised (it applies in
// reverse) and left alone; a conflict names the patch, file, hunk and first differing line
// and changes nothing. In a git checkout, a hunk whose lines moved is merged three-way from
// the preimage blob the diff's index line names. Files are staged in one folder in the tree
// and renamed into place after a journal is written, so that a killed run is finished by
// the next (see journal.go), under a lock in that folder that keeps two runs from writing
// one tree at once (lock.go). Every patch is parsed whole when it is read (parse.go); a
// patch may make symbolic links inside the tree, and the modes it gives are bounded.
package patch

import (
	"fmt"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/exitcode"
)

// Spec is the recipe body of a patch step.
type Spec struct {
	// Dir is the tree the patches apply to (a host path; a relative one is resolved against
	// the recipe's folder).
	Dir string `yaml:"dir"`
	// Series is the series file, relative to the recipe's folder: one patch file name a
	// line (relative to the series file's folder), blank lines and `#` comments allowed.
	Series string `yaml:"series"`
}

// Kind returns the patch step kind for the registry.
func Kind() engine.Kind {
	return engine.KindOf(New)
}

// New builds a patch step from its spec.
func New(name string, spec Spec) (*Step, error) {
	if spec.Dir == "" {
		return nil, fmt.Errorf("patch: dir is required: %w", exitcode.ErrUsage)
	}
	if spec.Series == "" {
		return nil, fmt.Errorf("patch: series is required: %w", exitcode.ErrUsage)
	}
	return &Step{name: name, spec: spec}, nil
}

// Step applies a patch series to a tree.
type Step struct {
	name string
	spec Spec
}
