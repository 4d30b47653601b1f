package build

import (
	"context"
	"strings"

	"github.com/sglprov/sglprov/pkg/engine"
)

// GenerationKey returns the toolchain probes that decide the build and that can be asked
// before its generation is built (engine.GenerationKeyer): nvcc and the custom probes on
// the host. A probe whose program lies inside the generation (the venv's python and torch)
// is left out: it does not exist yet, and its generation's text already names it. A new
// nvcc therefore builds a new generation beside the serving one, never into it.
func (s *Step) GenerationKey(ctx context.Context, env *engine.Env) (map[string]string, error) {
	vars := s.buildEnv(env, 0, false)
	environ := environ(vars)
	dir := s.dir(env)
	parts := map[string]string{}
	for _, p := range s.probes() {
		argv := p.argv
		if env.Generation != nil && strings.HasPrefix(env.Path(argv[0]), env.Path(env.Generation.Dir)) {
			continue
		}
		if p.name == "toolchain.nvcc" && argv[0] == "nvcc" {
			if _, a, ok := findNVCC(dir, environ); ok {
				argv = a
			}
		}
		parts[p.name] = s.probe(ctx, dir, environ, argv)
	}
	return parts, nil
}
