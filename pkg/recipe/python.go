package recipe

import (
	"path/filepath"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Python is the recipe's python block: the lock its Python steps install. The Python
// steps are the command steps whose argv is INTERPRETER -m pip install ...; with a lock,
// each installs exactly the lock's wheels (pip install --require-hashes --no-deps -r) and
// its editable folders (-e), and its fingerprint is the lock's digest, not its argv's
// requirements.
type Python struct {
	// Lock is the lock file (JSON, as `sglprov pylock -f RECIPE` writes it), relative to the
	// recipe's folder.
	Lock string `yaml:"lock" json:"lock"`
}

// parsePython reads the python block.
func (p *parser) parsePython(n *yaml.Node, r *Recipe) {
	var py Python
	if !p.decodeStrict(n, "python", &py) {
		return
	}
	switch {
	case strings.TrimSpace(py.Lock) == "":
		p.addf(nodeAt(n, "lock"), "python.lock", "python.lock is required: the lock file `sglprov pylock -f RECIPE` writes (e.g. python.lock.json)")
		return
	case strings.Contains(py.Lock, "{{"):
		p.addf(nodeAt(n, "lock"), "python.lock", "python.lock is a file name, not a template")
		return
	case filepath.IsAbs(py.Lock):
		p.addf(nodeAt(n, "lock"), "python.lock", "python.lock %q: give a path relative to the recipe's folder, so that the lock travels with the recipe", py.Lock)
		return
	}
	r.Python = &py
}
