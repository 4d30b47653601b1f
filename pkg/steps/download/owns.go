package download

import "github.com/sglprov/sglprov/pkg/engine"

// Owns names the step's destination folder (engine.Owner): sglprov remove --weights
// deletes it, and gc frees its part files.
func (s *Step) Owns(env *engine.Env) []engine.Owned {
	return []engine.Owned{{Kind: engine.OwnedWeights, Path: env.Path(s.spec.Dest)}}
}
