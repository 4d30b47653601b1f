// Package steps lists the step kinds a recipe may use: one explicit registry.
package steps

import (
	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/recipe"
	"github.com/sglprov/sglprov/pkg/steps/allreduce"
	"github.com/sglprov/sglprov/pkg/steps/build"
	"github.com/sglprov/sglprov/pkg/steps/command"
	"github.com/sglprov/sglprov/pkg/steps/download"
	"github.com/sglprov/sglprov/pkg/steps/packages"
	"github.com/sglprov/sglprov/pkg/steps/patch"
	"github.com/sglprov/sglprov/pkg/steps/smoke"
	"github.com/sglprov/sglprov/pkg/steps/source"
	"github.com/sglprov/sglprov/pkg/steps/systemd"
)

// Registry returns every step kind by the key a recipe step uses for it.
func Registry() engine.Registry {
	return engine.Registry{
		"command":  command.Kind(),
		"source":   source.Kind(),
		"patch":    patch.Kind(),
		"build":    build.Kind(),
		"download": withWarnings(download.Kind(), download.RevisionWarnings),
		"packages": packages.Kind(),
		"systemd":  readsGeneration(systemd.Kind()),
		"smoke":    readsGeneration(smoke.Kind()),
		// allreduce is host fitness's deep check: NCCL bus bandwidth over the service's GPUs.
		"allreduce": readsGeneration(allreduce.Kind()),
	}
}

// Specs returns the spec constructors of the registry, for the recipe parser.
func Specs(reg engine.Registry) recipe.KindSpecs {
	out := recipe.KindSpecs{}
	for name, k := range reg {
		out[name] = k.NewSpec
	}
	return out
}

// readsGeneration marks a kind whose steps run what a generation holds (the service's
// unit, checks with its interpreter) and write nothing there: never generation steps.
func readsGeneration(k engine.Kind) engine.Kind {
	k.ReadsGeneration = true
	return k
}

// PythonSteps are the names of r's Python steps, the command steps that install with pip
// (command.PipSteps): what a Python lock is of. Upper layers ask this registry, never a
// kind.
func PythonSteps(r *recipe.Recipe) []string {
	return command.PipSteps(r)
}

// withWarnings gives kind k the warnings validate shows of a recipe's steps of that kind.
func withWarnings(k engine.Kind, w func(r *recipe.Recipe) []string) engine.Kind {
	k.Warnings = w
	return k
}
