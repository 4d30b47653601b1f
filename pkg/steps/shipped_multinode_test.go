package steps_test

import (
	"net"
	"slices"
	"testing"

	"github.com/sglprov/sglprov/pkg/recipe"
	"github.com/sglprov/sglprov/pkg/steps"
	"github.com/sglprov/sglprov/pkg/steps/build"
)

// TestShippedTwoNodeRecipe: the shipped two-node SM120 recipe is complete and valid as
// shipped and for each rank: a group of 2 nodes of 2 GPUs with --tp 4 over all four, a
// head address that is a real one (not loopback, not unspecified), the kernel, weights,
// service and gate steps with the arch check, explicit host-fitness policies, and the pins
// of the single-node v0.5.21 recipe it is made from.
func TestShippedTwoNodeRecipe(t *testing.T) {
	const file = "qwen3.5-397b-a17b-nvfp4-sm120-2node.yaml"
	for _, sets := range [][]string{nil, {"node_rank=0", "head_addr=10.1.2.3"}, {"node_rank=1", "head_addr=10.1.2.3"}} {
		r, err := recipe.Load("../../recipes/"+file, steps.Specs(steps.Registry()), sets)
		if err != nil {
			t.Fatalf("%v: %v", sets, err)
		}
		d, err := r.NewData(nil)
		if err != nil {
			t.Fatal(err)
		}
		c, ok, err := r.NodesConfig(d)
		if err != nil || !ok || c.Count != 2 || c.TP != 4 || c.GPUsPerNode != 2 || c.HeadPort != 20000 {
			t.Fatalf("%v: %+v %v %v", sets, c, ok, err)
		}
		ip := net.ParseIP(c.HeadHost)
		if ip == nil || ip.IsLoopback() || ip.IsUnspecified() {
			t.Errorf("%v: head %q is not a real node's address", sets, c.HeadHost)
		}
		if len(sets) > 0 && c.Rank != int(sets[0][len("node_rank=")]-'0') {
			t.Errorf("%v: rank %d", sets, c.Rank)
		}
	}
	r := loadShipped(t, file)
	if g := r.Requires.GPU; !slices.Equal(g.Counts, []int{2}) || g.ComputeCapability != "12.0" {
		t.Errorf("requires.gpu: %+v", g)
	}
	for _, check := range recipe.FitnessChecks() {
		if r.Requires.GPU.Policy(check) == "" {
			t.Errorf("fitness %s: no policy", check)
		}
	}
	if err := r.Requires.GPU.ValidatePolicies(); err != nil || r.Requires.GPU.ECC != "refuse" || r.Requires.GPU.P2P != "ignore" {
		t.Errorf("fitness policies: %v %+v", err, r.Requires.GPU)
	}
	kinds := map[string]string{}
	for _, st := range r.Steps {
		kinds[st.Kind] = st.Name
	}
	for _, k := range []string{"build", "download", "systemd", "smoke", "allreduce", "packages"} {
		if kinds[k] == "" {
			t.Errorf("no %s step", k)
		}
	}
	var kernel build.Spec
	if err := r.Step("sglang-kernel").Render(templateData(t, r, rtxFacts(t)), &kernel); err != nil || len(kernel.ArchLibs) != 1 {
		t.Errorf("kernel step: %v %v", err, kernel.ArchLibs)
	}
	var svc struct {
		Host string `yaml:"host"`
	}
	if err := r.Step("sglang-service").Render(templateData(t, r, rtxFacts(t)), &svc); err != nil || svc.Host != "0.0.0.0" {
		t.Errorf("service host %q: %v", svc.Host, err)
	}
	one := loadShipped(t, "qwen3.5-397b-a17b-nvfp4-sm120-sglang-0.5.21.yaml")
	for _, k := range []string{"sglang_version", "sglang_commit", "sglang_kernel", "torch_version", "flashinfer_version", "model_repo", "model_revision"} {
		if r.Vars[k] == "" || r.Vars[k] != one.Vars[k] {
			t.Errorf("var %s: %q, the single-node recipe's %q", k, r.Vars[k], one.Vars[k])
		}
	}
}
