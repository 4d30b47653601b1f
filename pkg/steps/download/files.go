package download

import "github.com/sglprov/sglprov/pkg/engine"

// ReadFiles checks the hub token file the step names, as validate reads the recipe's
// files: one that is not there, or that others may read, is refused (exit 2).
func (s *Step) ReadFiles(env *engine.Env) error {
	if s.spec.HF == nil || s.spec.HF.TokenFile == "" {
		return nil
	}
	return engine.AtField("hf.token_file", engine.CheckSecretFile("hf.token_file", env.Path(s.spec.HF.TokenFile), env.InsecurePermissions))
}
