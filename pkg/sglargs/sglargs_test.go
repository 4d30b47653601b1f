package sglargs

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// decode returns a JSON value as encoding/json gives it to the comparison.
func decode(t *testing.T, text string) any {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(text), &v); err != nil {
		t.Fatal(err)
	}
	return v
}

func TestSameByType(t *testing.T) {
	for _, c := range []struct {
		line []string
		json string
		same bool
	}{
		{[]string{"--mem-fraction-static", "0.80"}, "0.8", true},
		{[]string{"--mem-fraction-static", "0.8"}, "0.80", true},
		{[]string{"--mem-fraction-static", "0.8"}, "0.81", false},
		{[]string{"--mem-fraction-static", "1"}, "1.0", true},
		{[]string{"--context-length", "1000000"}, "1e+06", true},
		{[]string{"--context-length", "1e+06"}, "1000000", true},
		{[]string{"--context-length", "262144"}, "262145", false},
		{[]string{"--cuda-graph-bs", "1", "2", "4", "8"}, "[1, 2, 4, 8]", true},
		{[]string{"--cuda-graph-bs", "1", "2", "4"}, "[1, 2, 4, 8]", false},
		{[]string{"--cuda-graph-bs", "1", "2", "8", "4"}, "[1, 2, 4, 8]", false},
		{[]string{"--cuda-graph-bs=1 2"}, "[1, 2]", true},
		{[]string{"--disable-custom-all-reduce"}, "true", true},
		{[]string{"--disable-custom-all-reduce"}, "false", false},
		{[]string{"--disable-custom-all-reduce"}, `"true"`, false},
		{[]string{"--fp4-gemm-backend", "flashinfer_cudnn"}, `"flashinfer_cudnn"`, true},
		{[]string{"--fp4-gemm-backend", "flashinfer_cudnn"}, `"flashinfer_cutlass"`, false},
		{[]string{"--tp", "8"}, "8", true},
		{[]string{"--served-model-name", "007"}, `"007"`, true},
		{[]string{"--served-model-name", "007"}, `"7"`, false},
		{[]string{"--fp4-gemm-backend", "flashinfer_cudnn"}, "null", false},
		// a flag the table does not hold: compared by the server's type
		{[]string{"--swa-full-tokens-ratio", "0.50"}, "0.5", true},
		{[]string{"--enable-metrics"}, "true", true},
	} {
		ss := Parse(c.line)
		if len(ss) != 1 {
			t.Fatalf("Parse(%v) = %v", c.line, ss)
		}
		if got := ss[0].Same(decode(t, c.json)); got != c.same {
			t.Errorf("%v against %s: same %v, want %v", c.line, c.json, got, c.same)
		}
	}
}

func TestParse(t *testing.T) {
	ss := Parse([]string{"/venv/bin/python", "-m", "sglang.launch_server", "--tp", "4", "--cuda-graph-bs", "1", "2",
		"--disable-custom-all-reduce", "extra", "--fp4-gemm-backend=flashinfer_cudnn", "--enable-metrics", "--x", "y"})
	var got []string
	for _, s := range ss {
		got = append(got, s.Name+"="+strings.Join(s.Values, ",")+"@"+strings.Join(s.Fields(), "|"))
	}
	want := "--tp=4@tp_size --cuda-graph-bs=1,2@cuda_graph_bs|cuda_graph_bs_decode --disable-custom-all-reduce=@disable_custom_all_reduce " +
		"--fp4-gemm-backend=flashinfer_cudnn@fp4_gemm_runner_backend --enable-metrics=@enable_metrics --x=y@x"
	if strings.Join(got, " ") != want {
		t.Errorf("Parse:\n%s\nwant\n%s", strings.Join(got, " "), want)
	}
}

// A flag that moved to another field is found under whichever the server reports.
func TestFindAcrossSeries(t *testing.T) {
	s := Parse([]string{"--cuda-graph-max-bs", "64"})[0]
	for _, info := range []map[string]any{{"cuda_graph_max_bs": 64.0}, {"cuda_graph_max_bs_decode": 64.0, "cuda_graph_max_bs_prefill": nil}} {
		v, _, ok := s.Find(info)
		if !ok || !s.Same(v) {
			t.Errorf("%v: found %v %v", info, v, ok)
		}
	}
	if _, _, ok := s.Find(map[string]any{"cuda_graph_max_bs_prefill": 64.0}); ok {
		t.Error("found the prefill limit")
	}
}

func TestReportInPythonForms(t *testing.T) {
	for _, c := range []struct {
		line []string
		want string
	}{
		{[]string{"--mem-fraction-static", "0.80"}, `{"mem_fraction_static":0.8}`},
		{[]string{"--mem-fraction-static", "1"}, `{"mem_fraction_static":1.0}`},
		{[]string{"--context-length", "262144"}, `{"context_length":262144}`},
		{[]string{"--cuda-graph-bs", "1", "2"}, `{"cuda_graph_bs":[1,2]}`},
		{[]string{"--fp4-gemm-backend", "flashinfer_cutlass"}, `{"fp4_gemm_runner_backend":"flashinfer_cutlass"}`},
		{[]string{"--trust-remote-code"}, `{"trust_remote_code":true}`},
	} {
		field, v, ok := Parse(c.line)[0].Report()
		b, _ := json.Marshal(map[string]any{field: v})
		if !ok || string(b) != c.want {
			t.Errorf("%v: %s (%v), want %s", c.line, b, ok, c.want)
		}
	}
	if _, _, ok := Parse([]string{"--tp", "four"})[0].Report(); ok {
		t.Error("--tp four reported")
	}
}

// docs/sglang-flags.md is the table in prose: every flag, its fields, its type and its
// deprecation note appear there on the flag's row.
func TestDocsHoldTheTable(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "sglang-flags.md"))
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "| `--") {
			name := strings.Trim(strings.TrimSpace(strings.Split(line, "|")[1]), "`")
			rows[name] = line
		}
	}
	for _, f := range Table {
		row, ok := rows[f.Name]
		if !ok {
			t.Errorf("docs/sglang-flags.md has no row for %s", f.Name)
			continue
		}
		for _, want := range append(append([]string{string(f.Kind)}, f.Fields...), f.Aliases...) {
			if !strings.Contains(row, "`"+want+"`") {
				t.Errorf("the row of %s does not name `%s`: %s", f.Name, want, row)
			}
		}
		if (f.Deprecated != "") != strings.Contains(row, "deprecated") {
			t.Errorf("the row of %s and the table disagree on its deprecation: %s", f.Name, row)
		}
	}
	if len(rows) != len(Table) {
		t.Errorf("docs/sglang-flags.md has %d rows, the table %d", len(rows), len(Table))
	}
}
