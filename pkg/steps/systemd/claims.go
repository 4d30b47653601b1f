package systemd

import (
	"strconv"

	"github.com/sglprov/sglprov/pkg/engine"
)

// Claims are the unit's name and the port its server listens on: two service steps of one
// recipe with either in common would overwrite one unit, or start a server that cannot
// bind, so the engine refuses them before anything runs.
func (s *Step) Claims() []engine.Claim {
	out := []engine.Claim{{What: "unit " + s.spec.Unit, Field: "unit"}}
	port, field := strconv.Itoa(s.port), "port"
	if v, ok := flagValue(s.spec.Args, "--port"); ok {
		port, field = v, "args"
	}
	return append(out, engine.Claim{What: "port " + port, Field: field})
}
