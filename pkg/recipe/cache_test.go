package recipe_test

import (
	"strings"
	"testing"

	"github.com/sglprov/sglprov/pkg/recipe"
)

func TestCacheBlock(t *testing.T) {
	const head = `apiVersion: sglprov/v1
name: t
vars:
  cache_oci: ""
  push: "false"
steps:
  - name: s
    command: {argv: [true]}
`
	cases := []struct {
		name, block string
		sets        []string
		want        recipe.CacheConfig
		on          bool
		problem     string // a validation problem, with its position
	}{
		{name: "none", block: ""},
		{name: "plain", block: "cache:\n  oci: reg.internal:5000/fleet/sglprov\n  push: true\n  plain_http: false\n",
			want: recipe.CacheConfig{OCI: "reg.internal:5000/fleet/sglprov", Push: true}, on: true},
		{name: "templated", block: "cache:\n  oci: \"{{ .vars.cache_oci }}\"\n  push: \"{{ .vars.push }}\"\n",
			sets: []string{"cache_oci=127.0.0.1:5000/f", "push=true"},
			want: recipe.CacheConfig{OCI: "127.0.0.1:5000/f", Push: true}, on: true},
		{name: "empty oci turns it off", block: "cache:\n  oci: \"{{ .vars.cache_oci }}\"\n  push: true\n"},
		{name: "pins", block: "cache:\n  oci: r/f\n  digests: [\"sha256:" + strings.Repeat("a", 64) + "\"]\n",
			want: recipe.CacheConfig{OCI: "r/f", Digests: []string{"sha256:" + strings.Repeat("a", 64)}}, on: true},
		{name: "missing oci", block: "cache:\n  push: true\n", problem: "t.yaml:10:3: cache.oci is required"},
		{name: "bad bool", block: "cache:\n  oci: r/f\n  push: maybe\n", problem: `t.yaml:11:9: want true or false, not "maybe" (at cache.push)`},
		{name: "bad pin", block: "cache:\n  oci: r/f\n  digests: [abc]\n", problem: `t.yaml:11:12: want a manifest digest "sha256:<64 hex>", not "abc" (at cache.digests[0])`},
		{name: "unknown field", block: "cache:\n  oci: r/f\n  tls: false\n", problem: `t.yaml:11:3: unknown field "tls" (known: digests, min_rate, oci, plain_http, push) (at cache.tls)`},
		{name: "min rate", block: "cache:\n  oci: r/f\n  min_rate: 1MiB/s\n", want: recipe.CacheConfig{OCI: "r/f", MinRate: 1 << 20}, on: true},
		{name: "min rate off", block: "cache:\n  oci: r/f\n  min_rate: \"0\"\n", want: recipe.CacheConfig{OCI: "r/f", MinRate: -1}, on: true},
		{name: "bad min rate", block: "cache:\n  oci: r/f\n  min_rate: fast\n", problem: `t.yaml:11:13: want a rate such as "64KiB/s"`},
		{name: "facts are not for the cache", block: "cache:\n  oci: \"{{ .gpu.name }}/x\"\n", problem: `the cache block sees .vars only`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, err := recipe.Parse("t.yaml", []byte(head+c.block), testKinds(), c.sets)
			if c.problem != "" {
				if err == nil || !strings.Contains(err.Error(), c.problem) {
					t.Fatalf("problems:\n%v\nwant %q", err, c.problem)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			d, err := r.NewData(nil)
			if err != nil {
				t.Fatal(err)
			}
			got, on, err := r.CacheConfig(d)
			if err != nil || on != c.on || got.OCI != c.want.OCI || got.Push != c.want.Push || got.PlainHTTP != c.want.PlainHTTP || got.MinRate != c.want.MinRate || strings.Join(got.Digests, ",") != strings.Join(c.want.Digests, ",") {
				t.Errorf("CacheConfig = %+v, %v, %v; want %+v, %v", got, on, err, c.want, c.on)
			}
		})
	}
}

func TestStepWithout(t *testing.T) {
	text := `apiVersion: sglprov/v1
name: t
vars:
  jobs: "4"
  arg: "x"
steps:
  - name: s
    command: {argv: ["{{ .vars.arg }}"], dir: "/d/{{ .vars.jobs }}", env: {MAX_JOBS: "{{ .vars.jobs }}", CC: gcc}}
`
	r, err := recipe.Parse("t.yaml", []byte(text), testKinds(), nil)
	if err != nil {
		t.Fatal(err)
	}
	s := r.Steps[0]
	w := s.Without("dir", "env.MAX_JOBS", "env.NOPE", "nope.x")
	if strings.Contains(w.BodyText(), "MAX_JOBS") || strings.Contains(w.BodyText(), "dir:") || !strings.Contains(w.BodyText(), "CC: gcc") {
		t.Errorf("body without dir and env.MAX_JOBS:\n%s", w.BodyText())
	}
	if got := strings.Join(r.ExpandRefs(w), ","); got != "vars.arg" {
		t.Errorf("refs = %s, want vars.arg alone", got)
	}
	if !strings.Contains(s.BodyText(), "MAX_JOBS") || strings.Join(s.Refs, ",") != "vars.arg,vars.jobs" {
		t.Errorf("the step itself changed: %s %v", s.BodyText(), s.Refs)
	}
	if s.Without() != s {
		t.Error("Without() copies the step")
	}
}
