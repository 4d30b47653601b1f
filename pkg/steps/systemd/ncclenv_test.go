package systemd

import (
	"strings"
	"testing"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/nccl"
	"github.com/sglprov/sglprov/pkg/recipe"
	"github.com/sglprov/sglprov/pkg/service"
)

// peerFacts is an nccl.Source with set facts, standing in for the host-fitness checks.
type peerFacts nccl.Facts

func (p peerFacts) PeerPathFacts() (nccl.Facts, bool) { return nccl.Facts(p), true }

// unitEnv renders the step's unit for its first profile and returns its Environment=.
func unitEnv(t *testing.T, s *Step, env *engine.Env) map[string]string {
	t.Helper()
	p, err := s.pick(env)
	if err != nil {
		t.Fatal(err)
	}
	unit, err := s.render(env, p)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := service.ReadService(s.spec.Unit, unit, "/var/cache")
	if err != nil {
		t.Fatal(err)
	}
	return svc.Env
}

// TestNCCLEnvFromPeerFacts: with no peer-path facts the unit sets no NCCL_P2P_* and plan
// says NCCL decides; facts that say peer paths are blocked set NCCL_P2P_DISABLE=1 with the
// reason in plan; a level the recipe sets itself is kept.
func TestNCCLEnvFromPeerFacts(t *testing.T) {
	env := testEnv(t, "rtx-pro-6000-x8.json")
	s := newStep(t, qwenSpec())
	got := unitEnv(t, s, env)
	for _, k := range []string{"NCCL_P2P_DISABLE", "NCCL_P2P_LEVEL"} {
		if v, ok := got[k]; ok {
			t.Errorf("without facts the unit sets %s=%s", k, v)
		}
	}
	if plan := strings.Join(s.Describe(env), "\n"); !strings.Contains(plan, "NCCL: no NCCL_P2P_* set: NCCL chooses") {
		t.Errorf("plan does not say NCCL decides:\n%s", plan)
	}

	s.peerFacts = func(*engine.Env) nccl.Source {
		return peerFacts{PeerPath: nccl.Blocked, Detail: "ACS enabled on bridge 0000:16:02.0 above GPU 2"}
	}
	if v := unitEnv(t, s, env)["NCCL_P2P_DISABLE"]; v != "1" {
		t.Errorf("blocked peer paths: NCCL_P2P_DISABLE=%q, want 1", v)
	}
	if plan := strings.Join(s.Describe(env), "\n"); !strings.Contains(plan, "NCCL: NCCL_P2P_DISABLE=1: GPU peer-to-peer is blocked on this host (ACS enabled on bridge 0000:16:02.0 above GPU 2)") {
		t.Errorf("plan does not give the reason for NCCL_P2P_DISABLE:\n%s", plan)
	}

	spec := qwenSpec()
	spec.Env = map[string]string{"NCCL_P2P_LEVEL": "PHB"}
	s2 := newStep(t, spec)
	s2.peerFacts = s.peerFacts
	got = unitEnv(t, s2, env)
	if got["NCCL_P2P_LEVEL"] != "PHB" || got["NCCL_P2P_DISABLE"] != "" {
		t.Errorf("the recipe's own level: NCCL_P2P_LEVEL=%q NCCL_P2P_DISABLE=%q, want PHB and unset", got["NCCL_P2P_LEVEL"], got["NCCL_P2P_DISABLE"])
	}
}

// TestProfileGPUCounts: a profile with gpu_counts matches only hosts with one of those GPU
// counts, and says why it was passed over.
func TestProfileGPUCounts(t *testing.T) {
	env := testEnv(t, "rtx-pro-6000-x8.json")
	env.Profiles["sm120-tp4-dp2"] = recipe.Profile{
		Match: recipe.ProfileMatch{ComputeCapability: "12.0", Quantization: "modelopt_fp4", GPUCounts: []int{8}},
		Args:  []string{"--tp", "4", "--dp-size", "2"},
	}
	spec := qwenSpec()
	spec.Profiles = []string{"sm120-tp4-dp2", "sm120-fp4-cutlass"}
	s := newStep(t, spec)
	if c := s.Candidates(env); len(c) != 2 || c[0] != "sm120-tp4-dp2" {
		t.Fatalf("8 GPUs: candidates %v, want the tp4 x dp2 profile first", c)
	}
	d, err := s.data(env, "sm120-tp4-dp2")
	if err != nil {
		t.Fatal(err)
	}
	argv := strings.Join(d.Argv(), " ")
	if !strings.Contains(argv, "--tp 4 --dp-size 2") || strings.Contains(argv, "--tp 8") {
		t.Errorf("tp4 x dp2 command line: %s", argv)
	}
	env.Facts.GPUs = env.Facts.GPUs[:4]
	if c := s.Candidates(env); len(c) != 1 || c[0] != "sm120-fp4-cutlass" {
		t.Errorf("4 GPUs: candidates %v, want sm120-fp4-cutlass only", c)
	}
	why, err := s.mismatch(env, "sm120-tp4-dp2", env.Profiles["sm120-tp4-dp2"])
	if err != nil || why != "sm120-tp4-dp2 is for 8 GPUs (this host has 4)" {
		t.Errorf("mismatch = %q, %v", why, err)
	}
}

// TestNCCLEnvFromFitnessFacts: the host-fitness facts of the fixtures reach the unit. The
// unfit host's P2P is blocked (NODE/SYS pairs chipset_not_supported, ACS redirecting, the
// IOMMU translating): NCCL_P2P_DISABLE=1 with those reasons in plan. The fit host's pairs
// all work: nothing is set and plan says why.
func TestNCCLEnvFromFitnessFacts(t *testing.T) {
	env := testEnv(t, "rtx-pro-6000-x8-unfit.json")
	s := newStep(t, qwenSpec())
	if v := unitEnv(t, s, env)["NCCL_P2P_DISABLE"]; v != "1" {
		t.Errorf("unfit host: NCCL_P2P_DISABLE=%q, want 1", v)
	}
	plan := strings.Join(s.Describe(env), "\n")
	for _, want := range []string{"NCCL_P2P_DISABLE=1: GPU peer-to-peer is blocked on this host", "GPU 0 <-> GPU 2 (NODE): P2P read chipset_not_supported",
		"PCIe bridge 0000:16:02.0", "the IOMMU translates"} {
		if !strings.Contains(plan, want) {
			t.Errorf("plan lacks %q:\n%s", want, plan)
		}
	}
	env = testEnv(t, "rtx-pro-6000-x8-fit.json")
	s = newStep(t, qwenSpec())
	if _, ok := unitEnv(t, s, env)["NCCL_P2P_DISABLE"]; ok {
		t.Error("fit host: NCCL_P2P_DISABLE set")
	}
	if plan := strings.Join(s.Describe(env), "\n"); !strings.Contains(plan, "works on this host (NVML: P2P read and write OK between all 28 pairs)") {
		t.Errorf("fit host plan:\n%s", plan)
	}
}
