// Package sglargs is the one table of the SGLang server flags sglprov renders or compares:
// each flag's spellings, the ServerArgs field it sets (the name SGLang's /server_info
// reports it under, which is not always the flag's: --fp4-gemm-backend sets
// fp4_gemm_runner_backend), its value's type and what was read to know it. The unit
// renderer finds a flag by any of its spellings through it, a worker compares its command
// line with the head's server info through it (values by type: 0.80 is 0.8, 1000000 is
// 1e+06, "--cuda-graph-bs 1 2 4 8" is [1, 2, 4, 8]), and the fake server reports a launch
// line under the same fields. docs/sglang-flags.md is the table in prose; a test keeps the
// two alike. The package imports nothing of sglprov.
package sglargs

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Kind is the type of a flag's value as SGLang's ServerArgs declares it.
type Kind string

// The kinds of value a flag takes.
const (
	// String is a str field (a choice, a path, a name).
	String Kind = "str"
	// Int is an int field.
	Int Kind = "int"
	// Float is a float field.
	Float Kind = "float"
	// Bool is a bool field set by a flag without a value (store_true).
	Bool Kind = "bool"
	// IntList is a List[int] field given as several values after the flag (nargs="+").
	IntList Kind = "list[int]"
)

// Flag is one SGLang flag.
type Flag struct {
	// Name is the flag's main spelling ("--fp4-gemm-backend").
	Name string
	// Aliases are the other spellings SGLang takes for the same field ("--tp" for
	// --tp-size, through argparse's prefix matching where noted in Source).
	Aliases []string
	// Fields are the ServerArgs fields the flag sets, in the order they are looked up in
	// a server's info: the first one the info has is the flag's (a flag that moved to
	// another field in a later series lists both).
	Fields []string
	// Kind is the type of the value.
	Kind Kind
	// Source is what was read to know the field and the type: the file and commit, or
	// "not verified" and why.
	Source string
	// Deprecated, when set, says that a later SGLang keeps the flag only as a deprecated
	// alias, and of what.
	Deprecated string
	// Default is the value the dataclass declares for the field (nil: None, or a value
	// the server computes at start, which the fake reports as null).
	Default any
}

// Names returns the flag's spellings, its main one first.
func (f Flag) Names() []string { return append([]string{f.Name}, f.Aliases...) }

// The sources read. The pinned commits (cf4465f3a8be, 94602c9c2b7c) were not readable
// here: the store keeps server_args.py of sgl-project/sglang at one commit only, the
// newest, and the repository (1.2 GB) is past what can be brought over.
const (
	srcMain     = "python/sglang/srt/server_args.py, sgl-project/sglang stored version 001067fffe33 (the dataclass series, late 2026): "
	srcArgparse = "; the argparse series (2025 to early 2026) read in stored copies of its server_args.py (commit not named by the store): "
	srcPins     = "; not verified at the pins cf4465f3a8be and 94602c9c2b7c (not stored, repository too large to bring over)"
)

// Table is every flag sglprov renders or compares.
var Table = []Flag{
	{Name: "--model-path", Aliases: []string{"--model"}, Fields: []string{"model_path"}, Kind: String,
		Source: srcMain + "model_path with aliases=[\"--model\"]" + srcPins},
	{Name: "--host", Default: "127.0.0.1", Fields: []string{"host"}, Kind: String,
		Source: srcMain + "host: str = \"127.0.0.1\"" + srcPins},
	{Name: "--port", Default: int64(30000), Fields: []string{"port"}, Kind: Int,
		Source: srcMain + "port: int = 30000" + srcPins},
	{Name: "--nnodes", Default: int64(1), Fields: []string{"nnodes"}, Kind: Int,
		Source: srcMain + "nnodes: int = 1" + srcArgparse + "--nnodes type=int" + srcPins},
	{Name: "--node-rank", Default: int64(0), Fields: []string{"node_rank"}, Kind: Int,
		Source: srcMain + "node_rank: int = 0" + srcArgparse + "--node-rank type=int" + srcPins},
	{Name: "--dist-init-addr", Aliases: []string{"--nccl-init-addr"}, Fields: []string{"dist_init_addr"}, Kind: String,
		Source: srcMain + "dist_init_addr with aliases=[\"--nccl-init-addr\"]" + srcArgparse + "\"--dist-init-addr\", \"--nccl-init-addr\"" + srcPins},
	{Name: "--tp-size", Default: int64(1), Aliases: []string{"--tp", "--tensor-parallel-size"}, Fields: []string{"tp_size"}, Kind: Int,
		Source: srcMain + "tp_size: int with aliases=[\"--tensor-parallel-size\"]; --tp by argparse's prefix matching (the only option beginning --tp)" + srcPins},
	{Name: "--pp-size", Default: int64(1), Aliases: []string{"--pipeline-parallel-size"}, Fields: []string{"pp_size"}, Kind: Int,
		Source: srcMain + "pp_size: int with aliases=[\"--pipeline-parallel-size\"]" + srcPins},
	{Name: "--dp-size", Default: int64(1), Aliases: []string{"--data-parallel-size"}, Fields: []string{"dp_size"}, Kind: Int,
		Source: srcMain + "dp_size: int with aliases=[\"--data-parallel-size\"]" + srcArgparse + "\"--data-parallel-size\", \"--dp-size\"" + srcPins},
	{Name: "--ep-size", Default: int64(1), Aliases: []string{"--ep", "--expert-parallel-size"}, Fields: []string{"ep_size"}, Kind: Int,
		Source: srcMain + "ep_size: int with aliases=[\"--expert-parallel-size\", \"--ep\"]" + srcArgparse + "\"--expert-parallel-size\", \"--ep-size\"" + srcPins},
	{Name: "--quantization", Fields: []string{"quantization"}, Kind: String,
		Source: srcMain + "quantization: Optional[str], choices=QUANTIZATION_CHOICES (modelopt_fp4 among them)" + srcPins},
	{Name: "--kv-cache-dtype", Default: "auto", Fields: []string{"kv_cache_dtype"}, Kind: String,
		Source: srcMain + "kv_cache_dtype: str = \"auto\"" + srcPins},
	{Name: "--mem-fraction-static", Fields: []string{"mem_fraction_static"}, Kind: Float,
		Source: srcMain + "mem_fraction_static: Optional[float]" + srcPins},
	{Name: "--max-running-requests", Fields: []string{"max_running_requests"}, Kind: Int,
		Source: srcMain + "max_running_requests: Optional[int]" + srcPins},
	{Name: "--context-length", Fields: []string{"context_length"}, Kind: Int,
		Source: srcMain + "context_length: Optional[int], type_parser=human_readable_int" + srcPins},
	{Name: "--chunked-prefill-size", Fields: []string{"chunked_prefill_size"}, Kind: Int,
		Source: srcMain + "chunked_prefill_size: Optional[int]" + srcPins},
	{Name: "--cuda-graph-max-bs", Fields: []string{"cuda_graph_max_bs", "cuda_graph_max_bs_decode"}, Kind: Int,
		Source:     srcMain + "no cuda_graph_max_bs field; \"--cuda-graph-max-bs\" is DeprecatedAliasStoreAction dest=\"cuda_graph_max_bs_decode\"" + srcArgparse + "--cuda-graph-max-bs type=int, field cuda_graph_max_bs" + srcPins,
		Deprecated: "a deprecated alias of --cuda-graph-max-bs-decode in the dataclass series (it sets the decode graphs' limit only)"},
	{Name: "--cuda-graph-max-bs-decode", Fields: []string{"cuda_graph_max_bs_decode"}, Kind: Int,
		Source: srcMain + "cuda_graph_max_bs_decode: Optional[int] (the decode graphs' largest batch; the v0.5.21 recipe's pin e00930c5 names it after sglang#38265, not read at that commit)"},
	{Name: "--cuda-graph-bs", Fields: []string{"cuda_graph_bs", "cuda_graph_bs_decode"}, Kind: IntList,
		Source:     srcMain + "\"--cuda-graph-bs\" type=int nargs=\"+\" is DeprecatedAliasStoreAction dest=\"cuda_graph_bs_decode\"" + srcArgparse + "--cuda-graph-bs type=int nargs=\"+\", field cuda_graph_bs" + srcPins,
		Deprecated: "a deprecated alias of --cuda-graph-bs-decode in the dataclass series"},
	{Name: "--disable-custom-all-reduce", Default: false, Fields: []string{"disable_custom_all_reduce"}, Kind: Bool,
		Source: srcMain + "disable_custom_all_reduce: bool = False" + srcArgparse + "store_true" + srcPins},
	{Name: "--served-model-name", Fields: []string{"served_model_name"}, Kind: String,
		Source: srcMain + "served_model_name: Optional[str]" + srcPins},
	{Name: "--reasoning-parser", Fields: []string{"reasoning_parser"}, Kind: String,
		Source: srcMain + "reasoning_parser: Optional[str], registered in add_cli_args with choices from ReasoningParser.DetectorMap" + srcPins},
	{Name: "--tool-call-parser", Fields: []string{"tool_call_parser"}, Kind: String,
		Source: srcMain + "tool_call_parser: Optional[str], registered in add_cli_args with choices from FunctionCallParser.ToolCallParserEnum" + srcPins},
	{Name: "--attention-backend", Fields: []string{"attention_backend"}, Kind: String,
		Source: srcMain + "attention_backend: Optional[str], choices=ATTENTION_BACKEND_CHOICES" + srcArgparse + "--attention-backend type=str" + srcPins},
	{Name: "--moe-runner-backend", Default: "auto", Fields: []string{"moe_runner_backend"}, Kind: String,
		Source: srcMain + "moe_runner_backend: str = \"auto\", choices=MOE_RUNNER_BACKEND_CHOICES" + srcPins},
	{Name: "--fp4-gemm-backend", Default: "auto", Fields: []string{"fp4_gemm_runner_backend"}, Kind: String,
		Source: srcMain + "fp4_gemm_runner_backend: A[str, Arg(cli_name=\"--fp4-gemm-backend\", choices=FP4_GEMM_RUNNER_BACKEND_CHOICES)] = \"auto\"" + srcArgparse + "parser.add_argument(\"--fp4-gemm-backend\", dest=\"fp4_gemm_runner_backend\")" + srcPins},
	{Name: "--enable-flashinfer-allreduce-fusion", Default: false, Fields: []string{"enable_flashinfer_allreduce_fusion"}, Kind: Bool,
		Source:     srcMain + "enable_flashinfer_allreduce_fusion: A[bool, Arg(no_cli=True)]; \"--enable-flashinfer-allreduce-fusion\" action=\"store_true\" registered in add_cli_args" + srcPins,
		Deprecated: "deprecated in the dataclass series: use --flashinfer-allreduce-fusion-backend=auto (field flashinfer_allreduce_fusion_backend)"},
	{Name: "--trust-remote-code", Default: false, Fields: []string{"trust_remote_code"}, Kind: Bool,
		Source: srcMain + "trust_remote_code: bool = False" + srcPins},
}

// Defaults returns the fields of the table's flags with the values a server started
// without them reports (Default; null where the server computes it), each under its
// field in the newest series the table knows (its last): what a fake server reports for the flags a launch line does not give.
func Defaults() map[string]any {
	out := map[string]any{}
	for _, f := range Table {
		out[f.Fields[len(f.Fields)-1]] = f.Default
	}
	return out
}

// Lookup returns the table's flag spelled name ("--tp", "--fp4-gemm-backend"); ok is false
// for a flag the table does not hold.
func Lookup(name string) (Flag, bool) {
	for _, f := range Table {
		for _, n := range f.Names() {
			if n == name {
				return f, true
			}
		}
	}
	return Flag{}, false
}

// Spellings returns every spelling of the flag spelled name (name alone for a flag the
// table does not hold).
func Spellings(name string) []string {
	if f, ok := Lookup(name); ok {
		return f.Names()
	}
	return []string{name}
}

// Setting is one flag as a command line gives it.
type Setting struct {
	// Name is the spelling the line uses; Flag its table entry (zero when the table does
	// not hold it: its field is then its name with "_" for "-", as argparse derives it).
	Name string
	Flag Flag
	// Known is true when the table holds the flag.
	Known bool
	// Values are the values given (none for a flag without one, several for a list).
	Values []string
}

// Fields returns the fields the setting may be reported under, in lookup order.
func (s Setting) Fields() []string {
	if s.Known {
		return s.Flag.Fields
	}
	return []string{strings.ReplaceAll(strings.TrimPrefix(s.Name, "--"), "-", "_")}
}

// Text is the setting's value as the line gives it ("set" for a flag without one).
func (s Setting) Text() string {
	if len(s.Values) == 0 {
		return "set"
	}
	return strings.Join(s.Values, " ")
}

// Parse reads the flags of a command line: "--name value", "--name=value", a flag without
// a value, and a list flag's several values ("--cuda-graph-bs 1 2 4 8"). Words that
// follow no flag (the interpreter, "-m", the module) are skipped.
func Parse(args []string) []Setting {
	var out []Setting
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "--") || a == "--" {
			continue
		}
		name, val, hasVal := strings.Cut(a, "=")
		f, known := Lookup(name)
		s := Setting{Name: name, Flag: f, Known: known}
		switch {
		case hasVal:
			s.Values = []string{val}
			if known && f.Kind == IntList {
				s.Values = strings.Fields(val)
			}
		case known && f.Kind == Bool:
		case known && f.Kind == IntList:
			for i+1 < len(args) && !strings.HasPrefix(args[i+1], "--") {
				s.Values = append(s.Values, args[i+1])
				i++
			}
		case i+1 < len(args) && !strings.HasPrefix(args[i+1], "--"):
			s.Values = []string{args[i+1]}
			i++
		}
		out = append(out, s)
	}
	return out
}

// Find returns the value a server's info reports for the setting and the field it is
// under; ok is false when the info has none of its fields.
func (s Setting) Find(info map[string]any) (v any, field string, ok bool) {
	for _, f := range s.Fields() {
		if v, ok := info[f]; ok {
			return v, f, true
		}
	}
	return nil, "", false
}

// Same reports whether got, a value of a server's info (as encoding/json decodes it into
// an any: float64, string, bool, []any, nil), is the setting's value, compared by type:
// numbers as numbers (0.80 is 0.8, 1000000 is 1e+06), lists element by element, a flag
// without a value as true.
func (s Setting) Same(got any) bool {
	kind := s.Flag.Kind
	if !s.Known {
		kind = kindOf(got, s.Values)
	}
	switch kind {
	case Bool:
		b, isBool := got.(bool)
		if len(s.Values) == 0 {
			return isBool && b
		}
		want, err := strconv.ParseBool(s.Values[0])
		return isBool && err == nil && b == want
	case Int, Float:
		if len(s.Values) != 1 {
			return false
		}
		return sameNumber(got, s.Values[0])
	case IntList:
		list, ok := got.([]any)
		if !ok || len(list) != len(s.Values) {
			return false
		}
		for i, v := range list {
			if !sameNumber(v, s.Values[i]) {
				return false
			}
		}
		return true
	}
	if len(s.Values) != 1 {
		return false
	}
	str, ok := got.(string)
	if !ok {
		// A field the table calls a string that the server reports otherwise: compare
		// its text (a server of another series).
		return fmt.Sprint(got) == s.Values[0]
	}
	return str == s.Values[0]
}

// kindOf guesses a flag's kind the table does not hold from the server's value.
func kindOf(got any, values []string) Kind {
	switch got.(type) {
	case bool:
		return Bool
	case float64, int, int64:
		return Float
	case []any:
		return IntList
	}
	if len(values) == 0 {
		return Bool
	}
	return String
}

// sameNumber reports whether got is a number equal to text's.
func sameNumber(got any, text string) bool {
	want, err := strconv.ParseFloat(strings.TrimSpace(text), 64)
	if err != nil {
		return false
	}
	var g float64
	switch v := got.(type) {
	case float64:
		g = v
	case int:
		g = float64(v)
	case int64:
		g = float64(v)
	case json.Number:
		if g, err = v.Float64(); err != nil {
			return false
		}
	case string:
		if g, err = strconv.ParseFloat(v, 64); err != nil {
			return false
		}
	default:
		return false
	}
	if g == want {
		return true
	}
	// Python's repr of a float and Go's parse of its text may differ in the last bit.
	return math.Abs(g-want) <= 1e-12*math.Max(math.Abs(g), math.Abs(want))
}

// Report is a setting's value as SGLang's /server_info reports it, under its first field:
// numbers as JSON numbers (an Int as a whole number, a Float as a float), a list as a
// list, a flag without a value as true. ok is false for a value that is not of the flag's
// type (SGLang would refuse the line).
func (s Setting) Report() (field string, v any, ok bool) {
	field = s.Fields()[0]
	kind := s.Flag.Kind
	if !s.Known {
		kind = guessKind(s.Values)
	}
	switch kind {
	case Bool:
		return field, true, len(s.Values) == 0
	case Int:
		if len(s.Values) != 1 {
			return field, nil, false
		}
		n, err := strconv.ParseInt(s.Values[0], 10, 64)
		return field, n, err == nil
	case Float:
		if len(s.Values) != 1 {
			return field, nil, false
		}
		f, err := strconv.ParseFloat(s.Values[0], 64)
		if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
			return field, nil, false
		}
		return field, PythonFloat(f), true
	case IntList:
		list := make([]any, 0, len(s.Values))
		for _, v := range s.Values {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return field, nil, false
			}
			list = append(list, n)
		}
		return field, list, len(list) > 0
	}
	if len(s.Values) != 1 {
		return field, nil, false
	}
	return field, s.Values[0], true
}

// guessKind is the kind of a flag the table does not hold, from its values.
func guessKind(values []string) Kind {
	if len(values) == 0 {
		return Bool
	}
	if len(values) == 1 {
		if _, err := strconv.ParseInt(values[0], 10, 64); err == nil {
			return Int
		}
	}
	return String
}

// PythonFloat is f as Python's json module writes a float: its repr, so that a whole
// number keeps its ".0" (0.8 is "0.8", 1 is "1.0", 1e16 is "1e+16").
func PythonFloat(f float64) json.Number {
	if f == math.Trunc(f) && math.Abs(f) < 1e16 {
		return json.Number(strconv.FormatFloat(f, 'f', -1, 64) + ".0")
	}
	return json.Number(strconv.FormatFloat(f, 'g', -1, 64))
}
