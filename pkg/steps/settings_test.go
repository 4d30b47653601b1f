package steps_test

import (
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// sglangMemFraction is SGLang's own default for --mem-fraction-static in early 2026
// (ServerArgs._handle_gpu_memory_settings, see docs/sglang-commit.md): gpuMiB less a
// reserve of 512 MiB, 1.5 MiB per chunked-prefill token, 2 MiB per CUDA-graph batch size
// and 1 GiB per 8 ranks (at least 10 GiB on GPUs above 60 GiB), as a share of gpuMiB, rounded
// to three places; then, for a model with a vision encoder, times 0.95 and a factor for the
// encoder's size (its num_hidden_layers attribute, 24 when absent, and hidden_size).
func sglangMemFraction(gpuMiB float64, chunk, graphBS, tp, vitLayers, vitHidden int) float64 {
	reserved := 512 + math.Max(float64(chunk), 2048)*1.5 + float64(graphBS)*2 + float64(tp)/8*1024
	if gpuMiB > 60*1024 {
		reserved = math.Max(reserved, 10*1024)
	}
	f := math.Round((gpuMiB-reserved)/gpuMiB*1000) / 1000
	if vitLayers == 0 {
		return f
	}
	ratio := float64(vitLayers*vitHidden*vitHidden) / float64(24*1024*1024)
	adj := math.Max(0.8, math.Min(1.05, 1-0.1*(ratio-1)))
	return f * 0.95 * adj
}

// TestSM120ServerSettings: the SM120 recipe's memory share leaves at least the reserve that
// SGLang's own heuristic keeps for its chunk and CUDA-graph sizes at --tp 8 on the RTX PRO
// 6000 (96 GB), vision encoder included; no decode batch exceeds the captured graphs; and
// the gate's load case fits in max_running_requests. Its settings are named starting values.
func TestSM120ServerSettings(t *testing.T) {
	r := loadShipped(t, "qwen3.5-397b-a17b-nvfp4-sm120.yaml")
	facts := rtxFacts(t)
	data := templateData(t, r, facts)
	vars := data["vars"].(map[string]string)
	num := func(name string) float64 {
		v, err := strconv.ParseFloat(vars[name], 64)
		if err != nil {
			t.Fatalf("var %s = %q: %v", name, vars[name], err)
		}
		return v
	}
	frac, chunk, graphs, running := num("mem_fraction_static"), int(num("chunked_prefill_size")), int(num("cuda_graph_max_bs")), int(num("max_running_requests"))
	gpuMiB := float64(facts.GPUs[0].MemoryTotalBytes) / (1 << 20)
	// Qwen3.5's vision config names its depth "depth", so SGLang's getattr finds no
	// num_hidden_layers and uses 24; hidden_size is 1152.
	for _, tp := range []int{4, 8} {
		if max := sglangMemFraction(gpuMiB, chunk, graphs, tp, 24, 1152); frac > max+0.005 {
			t.Errorf("mem_fraction_static %.3f at --tp %d is above SGLang's own %.3f for chunk %d and graphs %d", frac, tp, max, chunk, graphs)
		}
	}
	if graphs < running {
		t.Errorf("cuda_graph_max_bs %d < max_running_requests %d: the largest decode batches run without graphs", graphs, running)
	}
	var smoke struct {
		Cases []struct {
			Concurrency int `yaml:"concurrency"`
		} `yaml:"cases"`
	}
	if err := r.Step("smoke").Render(data, &smoke); err != nil {
		t.Fatal(err)
	}
	for _, c := range smoke.Cases {
		if c.Concurrency > running {
			t.Errorf("a smoke case sends %d requests at once, above max_running_requests %d", c.Concurrency, running)
		}
	}
	// tp 4 x dp 2: opt-in, for 8 GPUs only, with the layout in its own arguments.
	p, ok := r.Profiles["sm120-tp4-dp2"]
	if !ok {
		t.Fatal("no sm120-tp4-dp2 profile")
	}
	if !slices.Equal(p.Match.GPUCounts, []int{8}) || !strings.Contains(strings.Join(p.Args, " "), "--tp 4 --dp-size 2") {
		t.Errorf("sm120-tp4-dp2: gpu_counts %v, args %v", p.Match.GPUCounts, p.Args)
	}
}

func TestSGLangMemFraction(t *testing.T) {
	// SGLang's stock values on a 97887 MiB GPU at --tp 8: chunk 8192, graphs up to 512.
	if got := sglangMemFraction(97887, 8192, 512, 8, 0, 0); got != 0.848 {
		t.Errorf("text model: %v, want 0.848", got)
	}
	if got := sglangMemFraction(97887, 8192, 64, 8, 24, 1152); math.Abs(got-0.7926) > 0.0005 {
		t.Errorf("with Qwen3.5's encoder: %v, want about 0.7926", got)
	}
}
