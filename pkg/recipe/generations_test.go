package recipe

import (
	"strings"
	"testing"
)

func TestGenerationsAndReplaces(t *testing.T) {
	const base = "apiVersion: sglprov/v1\nname: b\n%s\nsteps:\n  - name: s\n    fake: {path: \"%s\"}\n"
	specs := KindSpecs{"fake": func() any {
		return &struct {
			Path string `yaml:"path"`
		}{}
	}}
	parse := func(top, path string) (*Recipe, error) {
		return Parse("r.yaml", []byte(strings.Replace(strings.Replace(base, "%s", top, 1), "%s", path, 1)), specs, nil)
	}
	r, err := parse("generations: {dir: /srv/gens, keep: 3}\nreplaces: [a, c]", "{{ .generation.dir }}/src")
	if err != nil {
		t.Fatal(err)
	}
	if r.GenerationsDir() != "/srv/gens/b" || r.KeepGenerations() != 3 || !r.UsesGenerations() || strings.Join(r.Replaces, ",") != "a,c" {
		t.Errorf("parsed: dir %s keep %d uses %v replaces %v", r.GenerationsDir(), r.KeepGenerations(), r.UsesGenerations(), r.Replaces)
	}
	if r.NeedsFacts() {
		t.Errorf("a recipe whose only reference is .generation.dir needs GPU facts")
	}
	r, err = parse("", "/opt/src")
	if err != nil || r.UsesGenerations() || r.KeepGenerations() != DefaultKeepGenerations || r.GenerationsDir() != DefaultGenerationsDir+"/b" {
		t.Errorf("defaults: %v %v %d %s", err, r != nil && r.UsesGenerations(), r.KeepGenerations(), r.GenerationsDir())
	}
	for _, tc := range []struct{ top, path, want string }{
		{"replaces: [b]", "/x", "cannot replace itself"},
		{"replaces: [a, a]", "/x", "listed twice"},
		{"generations: {keep: -1}", "/x", "at least 1"},
		{"generations: {dir: relative}", "/x", "absolute folder"},
		{"", "{{ .generation.key }}", `a generation has only "generation.dir"`},
	} {
		_, err := parse(tc.top, tc.path)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q %q: %v, want %q", tc.top, tc.path, err, tc.want)
		}
	}
}
