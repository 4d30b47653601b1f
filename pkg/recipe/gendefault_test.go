package recipe_test

import (
	"strings"
	"testing"

	"github.com/sglprov/sglprov/pkg/recipe"
)

// The dest of a source step is a generation root by default: the paths under it are
// rewritten, whole paths only and outside template actions; a path the recipe builds
// from pieces is no root; `generations: off` keeps the paths.
func TestDefaultGenerationRoots(t *testing.T) {
	text := `apiVersion: sglprov/v1
name: t
vars:
  src: /opt/sglang
  python: /opt/sglang/.venv/bin/python
  other: /opt/sglang2/x
steps:
  - name: src
    source: {url: "git::https://example.com/x", dest: "{{ .vars.src }}"}
  - name: venv
    command: {argv: [python3, -m, venv, /opt/sglang/.venv], env: {PATH: "/opt/sglang/.venv/bin:/opt/sglang/bin:/usr/bin"}}
`
	r, err := recipe.Parse("t.yaml", []byte(text), testKinds(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if roots := r.GenerationRoots(); len(roots) != 1 || roots[0].Path != "/opt/sglang" || roots[0].Sub != "sglang" {
		t.Fatalf("roots = %+v", roots)
	}
	if r.Vars["python"] != "{{ .generation.dir }}/sglang/.venv/bin/python" || r.Vars["other"] != "/opt/sglang2/x" {
		t.Errorf("vars: python %q, other %q", r.Vars["python"], r.Vars["other"])
	}
	body := r.Step("venv").BodyText()
	if !strings.Contains(body, "{{ .generation.dir }}/sglang/.venv/bin:{{ .generation.dir }}/sglang/bin:/usr/bin") || !r.InGeneration(r.Step("venv")) {
		t.Errorf("venv step not rewritten:\n%s", body)
	}
	// Outside a run the paths are the roots' own (the link).
	d, err := r.NewData(nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := d.Lookup("vars.python"); got != "/opt/sglang/.venv/bin/python" {
		t.Errorf("python outside a run = %q", got)
	}

	off, err := recipe.Parse("t.yaml", []byte(strings.Replace(text, "vars:", "generations: off\nvars:", 1)), testKinds(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(off.GenerationRoots()) != 0 || off.Vars["python"] != "/opt/sglang/.venv/bin/python" {
		t.Errorf("generations: off: roots %v, python %q", off.GenerationRoots(), off.Vars["python"])
	}
	if _, err := recipe.Parse("t.yaml", []byte(strings.Replace(text, "vars:", "generations: sometimes\nvars:", 1)), testKinds(), nil); err == nil || !strings.Contains(err.Error(), `generations must be "off"`) {
		t.Errorf("generations: sometimes: %v", err)
	}
}

// A source step whose dest is a system folder (/usr/src, /mnt, /var/opt, ...) does not make
// it a generation root: the first pass would move that folder aside and put a link there.
func TestSystemFolderIsNoGenerationRoot(t *testing.T) {
	for _, dest := range []string{"/usr/src", "/mnt", "/media", "/var/opt", "/usr/share"} {
		text := `apiVersion: sglprov/v1
name: t
steps:
  - name: src
    source: {url: "git::https://example.com/x", dest: "` + dest + `"}
`
		r, err := recipe.Parse("t.yaml", []byte(text), testKinds(), nil)
		if err != nil {
			t.Fatal(err)
		}
		if roots := r.GenerationRoots(); len(roots) != 0 {
			t.Errorf("dest %s: roots = %+v, want none", dest, roots)
		}
	}
}
