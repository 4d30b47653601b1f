package fakehub

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"

	"github.com/sglprov/sglprov/pkg/safetensors"
)

// expertsPerShard is the number of FP4 experts written to each shard.
const expertsPerShard = 4

// GenerateModel writes a small NVFP4-style model into dir: shards safetensors files of
// about bytesPerShard bytes each (one decoder layer per shard: a BF16 norm, experts whose
// down_proj weights are FP4 packed two to a U8, with F8_E4M3 block scales and an F32
// global scale), model.safetensors.index.json, config.json, tokenizer.json and
// tokenizer_config.json. The content is deterministic.
func GenerateModel(dir string, shards int, bytesPerShard int64) error {
	if shards < 1 {
		return fmt.Errorf("generating model: %d shards, want at least 1", shards)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("generating model: %w", err)
	}
	const inter = 128 // intermediate size: a U8 row holds inter/2 FP4 values, inter/16 scales
	rowBytes := int64(inter/2 + inter/16)
	hidden := (bytesPerShard / (expertsPerShard * rowBytes)) / 16 * 16
	hidden = max(hidden, 16)
	weightMap := map[string]string{}
	var total int64
	rng := rand.NewChaCha8([32]byte{'s', 'g', 'l', 'p', 'r', 'o', 'v'})
	for s := 0; s < shards; s++ {
		name := fmt.Sprintf("model-%05d-of-%05d.safetensors", s+1, shards)
		pre := fmt.Sprintf("model.layers.%d.", s)
		tensors := []safetensors.Tensor{
			{Name: pre + "input_layernorm.weight", DType: "BF16", Shape: []int64{hidden}},
		}
		for e := 0; e < expertsPerShard; e++ {
			ep := fmt.Sprintf("%smlp.experts.%d.down_proj.", pre, e)
			tensors = append(tensors,
				safetensors.Tensor{Name: ep + "weight", DType: "U8", Shape: []int64{hidden, inter / 2}},
				safetensors.Tensor{Name: ep + "weight_scale", DType: "F8_E4M3", Shape: []int64{hidden, inter / 16}},
				safetensors.Tensor{Name: ep + "weight_scale_2", DType: "F32", Shape: []int64{}},
				safetensors.Tensor{Name: ep + "input_scale", DType: "F32", Shape: []int64{}},
			)
		}
		n, err := writeShard(filepath.Join(dir, name), tensors, rng)
		if err != nil {
			return fmt.Errorf("generating model: %w", err)
		}
		total += n
		for _, t := range tensors {
			weightMap[t.Name] = name
		}
	}
	index := map[string]any{"metadata": map[string]any{"total_size": total}, "weight_map": weightMap}
	config := map[string]any{
		"architectures":         []string{"Qwen3MoeForCausalLM"},
		"model_type":            "qwen3_moe",
		"hidden_size":           hidden,
		"moe_intermediate_size": inter,
		"num_hidden_layers":     shards,
		"num_experts":           expertsPerShard,
		"torch_dtype":           "bfloat16",
		"quantization_config": map[string]any{
			"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16,
		},
	}
	tokenizer := map[string]any{
		"version": "1.0",
		"model":   map[string]any{"type": "BPE", "vocab": map[string]int{"!": 0, "a": 1, "b": 2}, "merges": []string{}},
	}
	tokCfg := map[string]any{"tokenizer_class": "Qwen2Tokenizer", "eos_token": "<|im_end|>", "model_max_length": 262144}
	for name, v := range map[string]any{
		safetensors.IndexFile: index, "config.json": config, "tokenizer.json": tokenizer, "tokenizer_config.json": tokCfg,
	} {
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return fmt.Errorf("generating model: encoding %s: %w", name, err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), append(b, '\n'), 0o644); err != nil {
			return fmt.Errorf("generating model: %w", err)
		}
	}
	return nil
}

// writeShard writes one safetensors file with random data and returns its data size.
func writeShard(path string, tensors []safetensors.Tensor, rng *rand.ChaCha8) (int64, error) {
	hdr, err := safetensors.EncodeHeader(map[string]string{"format": "pt"}, tensors)
	if err != nil {
		return 0, err
	}
	f, err := os.Create(path)
	if err != nil {
		return 0, err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	if _, err := w.Write(hdr); err != nil {
		f.Close()
		return 0, err
	}
	data := tensors[len(tensors)-1].End
	if _, err := io.CopyN(w, rng, data); err != nil {
		f.Close()
		return 0, err
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return 0, err
	}
	if err := f.Close(); err != nil {
		return 0, err
	}
	return data, nil
}
