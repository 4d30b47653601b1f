package recipe

import (
	"reflect"
	"testing"
)

// TestUnchecked: validate names what needs the host (the requirements, the required
// commands) and, with a stand-in GPU, each step that uses a GPU fact; the generation's
// folder and vars are no host facts.
func TestUnchecked(t *testing.T) {
	specs := KindSpecs{"fake": func() any {
		return &struct {
			Path string `yaml:"path"`
		}{}
	}}
	r, err := Parse("r.yaml", []byte(`apiVersion: sglprov/v1
name: u
generations: {dir: /srv/gens}
vars: {v: x}
requires:
  gpu: {min_count: 1}
steps:
  - name: gpu
    fake: {path: "/opt/{{ .gpu.count }}"}
  - name: plain
    fake: {path: "{{ .generation.dir }}/{{ .vars.v }}"}
`), specs, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"unchecked, needs the host (plan checks it): requires (the GPUs, driver and CUDA)",
		"unchecked, rendered with a stand-in GPU (no NVML): step gpu (gpu.count)",
	}
	if got := r.Unchecked("no NVML"); !reflect.DeepEqual(got, want) {
		t.Errorf("Unchecked = %q\nwant %q", got, want)
	}
	if got := r.Unchecked(""); !reflect.DeepEqual(got, want[:1]) {
		t.Errorf("without a stand-in: %q, want %q", got, want[:1])
	}
}
