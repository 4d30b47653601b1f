package steps_test

import (
	"encoding/json"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/sglprov/sglprov/pkg/multinode"
	"github.com/sglprov/sglprov/pkg/sglargs"
)

// upstreamField is what SGLang's ServerArgs calls each flag the shipped recipes give and
// the type of its value, written out here apart from sglargs.Table (read in
// python/sglang/srt/server_args.py; see docs/sglang-flags.md), so that a wrong row of the
// table fails.
var upstreamField = map[string]struct{ field, kind string }{
	"--attention-backend":                  {"attention_backend", "str"},
	"--moe-runner-backend":                 {"moe_runner_backend", "str"},
	"--fp4-gemm-backend":                   {"fp4_gemm_runner_backend", "str"},
	"--quantization":                       {"quantization", "str"},
	"--kv-cache-dtype":                     {"kv_cache_dtype", "str"},
	"--mem-fraction-static":                {"mem_fraction_static", "float"},
	"--cuda-graph-max-bs":                  {"cuda_graph_max_bs_decode", "int"},
	"--cuda-graph-max-bs-decode":           {"cuda_graph_max_bs_decode", "int"},
	"--max-running-requests":               {"max_running_requests", "int"},
	"--context-length":                     {"context_length", "int"},
	"--chunked-prefill-size":               {"chunked_prefill_size", "int"},
	"--disable-custom-all-reduce":          {"disable_custom_all_reduce", "bool"},
	"--served-model-name":                  {"served_model_name", "str"},
	"--reasoning-parser":                   {"reasoning_parser", "str"},
	"--tool-call-parser":                   {"tool_call_parser", "str"},
	"--tp":                                 {"tp_size", "int"},
	"--tp-size":                            {"tp_size", "int"},
	"--dp-size":                            {"dp_size", "int"},
	"--ep-size":                            {"ep_size", "int"},
	"--enable-flashinfer-allreduce-fusion": {"enable_flashinfer_allreduce_fusion", "bool"},
	"--trust-remote-code":                  {"trust_remote_code", "bool"},
	"--model-path":                         {"model_path", "str"},
	"--host":                               {"host", "str"},
	"--port":                               {"port", "int"},
}

// pythonJSON is the value as SGLang's /server_info writes it (Python's json of the field).
func pythonJSON(t *testing.T, kind, text string) string {
	t.Helper()
	switch kind {
	case "bool":
		return "true"
	case "int":
		n, err := strconv.ParseInt(text, 10, 64)
		if err != nil {
			t.Fatalf("%q is no int", text)
		}
		return strconv.FormatInt(n, 10)
	case "float":
		f, err := strconv.ParseFloat(text, 64)
		if err != nil {
			t.Fatalf("%q is no float", text)
		}
		s := strconv.FormatFloat(f, 'g', -1, 64)
		if !strings.ContainsAny(s, ".e") {
			s += ".0"
		}
		return s
	}
	b, _ := json.Marshal(text)
	return string(b)
}

// otherJSON is another value of the same kind.
func otherJSON(kind, text string) string {
	switch kind {
	case "bool":
		return "false"
	case "int":
		n, _ := strconv.ParseInt(text, 10, 64)
		return strconv.FormatInt(n+1, 10)
	case "float":
		f, _ := strconv.ParseFloat(text, 64)
		return strconv.FormatFloat(f+0.01, 'g', -1, 64)
	}
	b, _ := json.Marshal(text + "_other")
	return string(b)
}

// TestShippedProfilesFlagsByServerArgsField: for every flag of every profile of every
// shipped recipe (with the service step's own arguments), the table knows its ServerArgs
// field; a head whose server info reports SGLang's field with the value in Python's JSON
// form runs "the same launch", and a head that reports another value for that one flag is
// named as running another.
func TestShippedProfilesFlagsByServerArgsField(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "..", "recipes", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no shipped recipes: %v", err)
	}
	checked := 0
	for _, f := range files {
		r := loadShipped(t, filepath.Base(f))
		data, err := r.NewData(map[string]any{"gpu": map[string]any{"count": 8}})
		if err != nil {
			t.Fatal(err)
		}
		var stepArgs []string
		for _, st := range r.Steps {
			if st.Kind != "systemd" {
				continue
			}
			var body struct {
				Args []string `yaml:"args"`
			}
			if err := st.Render(data, &body); err != nil {
				t.Fatalf("%s: step %s: %v", filepath.Base(f), st.Name, err)
			}
			stepArgs = append(stepArgs, body.Args...)
		}
		for name, p := range r.Profiles {
			line := append(append([]string{"--model-path", "/m", "--host", "0.0.0.0", "--port", "30000"}, p.Args...), stepArgs...)
			settings := sglargs.Parse(line)
			for _, s := range settings {
				if strings.HasPrefix(s.Name, "--fake-") {
					continue // the demo recipes' fake server's own flags
				}
				t.Run(filepath.Base(f)+"/"+name+"/"+s.Name, func(t *testing.T) {
					up, ok := upstreamField[s.Name]
					if !ok {
						t.Fatalf("%s is given by a shipped recipe but not written out here: read its ServerArgs field and add it", s.Name)
					}
					if !s.Known {
						t.Fatalf("%s is not in sglargs.Table", s.Name)
					}
					if s.Flag.Fields[len(s.Flag.Fields)-1] != up.field || string(s.Flag.Kind) != up.kind {
						t.Fatalf("table: %s is %v %s; SGLang's field is %s %s", s.Name, s.Flag.Fields, s.Flag.Kind, up.field, up.kind)
					}
					// The head's info: every flag of the line under SGLang's field, in
					// Python's JSON forms.
					head := func(change string) map[string]any {
						var parts []string
						for _, o := range settings {
							u, ok := upstreamField[o.Name]
							if !ok {
								continue
							}
							v := pythonJSON(t, u.kind, strings.Join(o.Values, " "))
							if o.Name == s.Name && change != "" {
								v = change
							}
							b, _ := json.Marshal(u.field)
							parts = append(parts, string(b)+": "+v)
						}
						var info map[string]any
						if err := json.Unmarshal([]byte("{"+strings.Join(parts, ", ")+"}"), &info); err != nil {
							t.Fatal(err)
						}
						return info
					}
					if d := multinode.Differences(head(""), line); len(d) != 0 {
						t.Errorf("the head runs this line, yet: %v", d)
					}
					d := multinode.Differences(head(otherJSON(up.kind, strings.Join(s.Values, " "))), line)
					if len(d) != 1 || !strings.HasPrefix(d[0], s.Name+": the head runs ") {
						t.Errorf("the head runs another %s: differences %v", s.Name, d)
					}
					checked++
				})
			}
		}
	}
	if checked < 20 {
		t.Errorf("only %d flags checked", checked)
	}
}
