package smoke

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/gatedswitch"
	"github.com/sglprov/sglprov/pkg/gatespec"
	"github.com/sglprov/sglprov/pkg/switchover"
	"github.com/sglprov/sglprov/test/fakesglang"
)

// sglangServerInfo is a head's /server_info as SGLang writes it: every ServerArgs field
// under its own name (fp4_gemm_runner_backend for --fp4-gemm-backend, tp_size for --tp,
// cuda_graph_max_bs_decode for the deprecated --cuda-graph-max-bs), in Python's JSON
// forms (ints whole, floats as repr writes them, lists as lists), with fields no flag set
// and the scheduler's info beside them.
func sglangServerInfo(fp4 string) string {
	return `{"model_path": "default", "tokenizer_path": "default", "served_model_name": "qwen", "host": "0.0.0.0", "port": 30000,
 "nnodes": 2, "node_rank": 0, "dist_init_addr": "10.77.0.1:20000", "tp_size": 16, "pp_size": 1, "dp_size": 1, "ep_size": 1,
 "attention_backend": "triton", "moe_runner_backend": "flashinfer_cutlass", "fp4_gemm_runner_backend": "` + fp4 + `",
 "fp8_gemm_runner_backend": "auto", "quantization": "modelopt_fp4", "kv_cache_dtype": "fp8_e4m3", "mem_fraction_static": 0.8,
 "cuda_graph_max_bs_decode": 64, "cuda_graph_max_bs_prefill": null, "cuda_graph_bs_decode": [1, 2, 4, 8],
 "context_length": 1000000, "chunked_prefill_size": 8192, "max_running_requests": 64, "disable_custom_all_reduce": true,
 "enable_flashinfer_allreduce_fusion": false, "reasoning_parser": "qwen3", "tool_call_parser": "qwen3_coder",
 "max_total_num_tokens": 1048576, "internal_states": [{"avg_spec_accept_length": null}], "version": "0.5.20"}`
}

// TestWorkerGateReadsSGLangsFieldNames: a worker's gate against a head whose /server_info
// speaks as SGLang does (its field names, its number forms): the worker running the same
// launch passes, though it writes 0.80, 1e6 as 1000000 and --cuda-graph-bs as four
// words; a head running another FP4 GEMM backend is refused, naming the flag.
func TestWorkerGateReadsSGLangsFieldNames(t *testing.T) {
	line := []string{"/venv/bin/python", "-m", "sglang.launch_server", "--model-path", "default", "--host", "0.0.0.0",
		"--port", "30000", "--nnodes", "2", "--node-rank", "1", "--dist-init-addr", "10.77.0.1:20000", "--tp", "16",
		"--quantization", "modelopt_fp4", "--kv-cache-dtype", "fp8_e4m3", "--mem-fraction-static", "0.80",
		"--cuda-graph-max-bs", "64", "--cuda-graph-bs", "1", "2", "4", "8", "--max-running-requests", "64",
		"--context-length", "1000000", "--chunked-prefill-size", "8192", "--disable-custom-all-reduce",
		"--served-model-name", "qwen", "--reasoning-parser", "qwen3", "--tool-call-parser", "qwen3_coder",
		"--attention-backend", "triton", "--moe-runner-backend", "flashinfer_cutlass", "--fp4-gemm-backend", "flashinfer_cutlass"}
	for _, c := range []struct {
		name, headFP4, oldPath string
		want                   string
	}{
		{name: "the same launch", headFP4: "flashinfer_cutlass"},
		{name: "the same launch, asked by the old name", headFP4: "flashinfer_cutlass", oldPath: "/get_server_info"},
		{name: "another FP4 backend", headFP4: "flashinfer_cudnn",
			want: "--fp4-gemm-backend: the head runs flashinfer_cudnn, this node flashinfer_cutlass"},
	} {
		t.Run(c.name, func(t *testing.T) {
			chat := fakesglang.New(fakesglang.Options{Model: "qwen", ModelPath: "default"})
			var asked []string
			head := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				infoPath := "/server_info"
				if c.oldPath != "" {
					infoPath = c.oldPath // a server of before the rename: /server_info is 404
				}
				switch r.URL.Path {
				case "/server_info", "/get_server_info":
					asked = append(asked, r.URL.Path)
					if r.URL.Path != infoPath {
						http.NotFound(w, r)
						return
					}
					w.Header().Set("Content-Type", "application/json")
					_, _ = w.Write([]byte(sglangServerInfo(c.headFP4)))
				default:
					chat.ServeHTTP(w, r)
				}
			}))
			defer head.Close()
			own := ownServer(t, head.URL, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
			svc := &groupWorker{fakeService: newFakeService(t, []string{""}, map[string]fakesglang.Mode{"": fakesglang.ModeGood})}
			env, _ := newEnv(t, map[string]engine.Step{"svc": svc})
			env.Nodes = headNodes(t, head.URL, 20*time.Second)
			cfg, err := gatespec.GateConfig(testSpec(own.URL), gatespec.Overrides{}, nil)
			if err != nil {
				t.Fatal(err)
			}
			cfg.Failed = func(context.Context) (bool, string, error) { return false, "", nil }
			run := gatedswitch.WorkerGate(env, svc)
			res, err := run(context.Background(), cfg, switchover.Server{Args: line})
			if c.want == "" {
				if err != nil || res == nil || !res.Pass {
					t.Fatalf("the same launch: %v %+v", err, res)
				}
			} else if !errors.Is(err, exitcode.ErrGate) || !strings.Contains(err.Error(), c.want) ||
				strings.Contains(err.Error(), "--mem-fraction-static") || strings.Contains(err.Error(), "--cuda-graph") {
				t.Fatalf("another FP4 backend: %v, want only %q", err, c.want)
			}
			if c.oldPath != "" && strings.Join(asked, " ") != "/server_info /get_server_info" {
				t.Errorf("asked %v: want /server_info, then the old name", asked)
			}
		})
	}
}
