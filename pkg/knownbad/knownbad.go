// Package knownbad is a versioned table of known-bad combinations of Python packages, GPU
// architecture and server flags (each row with its reason, its fix and its source), and
// the check of a recipe's pins or an environment's installed distributions against it.
package knownbad

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
)

// TableVersion is the table's version: raised whenever a row is added, changed or removed.
const TableVersion = "2026-12.2"

// Package is a condition on one installed or pinned package.
type Package struct {
	// Names are the distribution names that count (any one), e.g. nvidia-cudnn-cu12 and
	// nvidia-cudnn-cu13.
	Names []string `json:"names"`
	// Range is the versions that are bad, e.g. ">=9.21".
	Range string `json:"range"`
}

// Flag is a condition on the server's launch line: the flag Name with a value that starts
// with ValuePrefix ("" for any value, or a bare flag).
type Flag struct {
	Name        string `json:"name"`
	ValuePrefix string `json:"value_prefix,omitempty"`
}

// Row is one known-bad combination: every condition that is set must hold.
type Row struct {
	// ID names the row in refusals and in `sglprov known-bad`.
	ID string `json:"id"`
	// Packages must all be present (pinned or installed) in a bad version.
	Packages []Package `json:"packages,omitempty"`
	// ComputeCapabilityMajor is the GPU architecture's major compute capability (12 for
	// sm_120 and sm_121); 0 for any.
	ComputeCapabilityMajor int `json:"compute_capability_major,omitempty"`
	// Flags must all be on one launch line (the base arguments and one profile's).
	Flags []Flag `json:"flags,omitempty"`
	// Reason says what goes wrong; Fix what to pin or set instead.
	Reason string `json:"reason"`
	Fix    string `json:"fix"`
	// Sources are the upstream issues, pull requests or releases the row rests on.
	Sources []string `json:"sources"`
	// Quotes are what the sources say, quoted, that the row rests on.
	Quotes []string `json:"quotes"`
	// Checked says how far the row's facts were verified, and what was not.
	Checked string `json:"checked"`
}

// Table returns the known-bad combinations.
func Table() []Row {
	return []Row{
		{
			ID:                     "cudnn-fp4-gemm-nan",
			Packages:               []Package{{Names: []string{"flashinfer-python"}, Range: "<0.6.9"}},
			ComputeCapabilityMajor: 12,
			Flags: []Flag{{Name: "--quantization", ValuePrefix: "modelopt_fp4"},
				{Name: "--fp4-gemm-backend", ValuePrefix: "flashinfer_cudnn"}},
			Reason: "FlashInfer's cuDNN FP4 GEMM returns sparse NaN/Inf at some shapes under SGLang prefill: FlashInfer " +
				"keyed its cuDNN graph cache and its autotuner's tactics on different size buckets, so a tactic tuned " +
				"for one graph ran on another (a FlashInfer bug, whatever the cuDNN version)",
			Fix:     "--fp4-gemm-backend flashinfer_cutlass, or a FlashInfer release with flashinfer#3192 (merged 2026-04-27, after 0.6.8.post1)",
			Sources: []string{"https://github.com/flashinfer-ai/flashinfer/pull/3192"},
			Quotes: []string{"flashinfer#3192 (\"fix cudnn sm120 nan\", merged 2026-04-27): \"flashinfer.mm_fp4(..., backend=\\\"cudnn\\\") " +
				"produced sparse NaN/Inf (typically a few values out of millions) at specific shapes (e.g. M=2001, K=2688, " +
				"N=10304) under sglang prefill workloads\"; \"a tactic that was profiled on graph A could be silently " +
				"applied to graph B at runtime\""},
			Checked: "flashinfer#3192 read. The range ends where the sources show the fix absent: v0.6.8 was tagged " +
				"2026-04-15 and flashinfer#3123 (\"bump version to 0.6.9\", 2026-04-20) lists \"API changes since " +
				"v0.6.8.post1\", both before the merge; whether 0.6.9 or 0.6.10 carries it was not verified. The " +
				"SM12x condition is the PR's title; other architectures not verified",
		},
		{
			ID:                     "cutlass-dsl-4.5.0-sm12x",
			Packages:               []Package{{Names: []string{"nvidia-cutlass-dsl"}, Range: "==4.5.0"}},
			ComputeCapabilityMajor: 12,
			Reason: "nvidia-cutlass-dsl 4.5.0 lowers nvvm.mma.block_scale to PTX that is wrong on sm_120a/sm_121a: " +
				"NVFP4 MoE answers garbage (\"!!!!!!\")",
			Fix:     "nvidia-cutlass-dsl 4.5.1 or later",
			Sources: []string{"https://github.com/NVIDIA/cutlass/issues/3227"},
			Quotes: []string{"cutlass#3227 (\"`nvidia-cutlass-dsl` 4.5.0: `nvvm.mma.block_scale` lowering produces PTX rejected " +
				"by ptxas (sm_120/120f/121a)\"), 2026-05-19: \"4.5.0 + `--moe-backend cutlass` → garbage output (the original " +
				"`!!!!!!!` / Unicode noise signature)\", \"4.5.1 + `--moe-backend cutlass` → coherent output\", \"the fix covers " +
				"both ArchTags\" (sm_120a and sm_121a)"},
			Checked: "cutlass#3227 read: 4.5.0 garbage, 4.5.1 coherent, on sm_120a and sm_121a (under vLLM; the DSL is the same package SGLang's FlashInfer kernels use)",
		},
		{
			ID:                     "trtllm-mla-attention-sm12x",
			ComputeCapabilityMajor: 12,
			Flags:                  []Flag{{Name: "--attention-backend", ValuePrefix: "trtllm_mla"}},
			Reason: "the trtllm_mla attention backend runs FlashInfer's TensorRT-LLM-gen FMHA, whose runner accepts " +
				"sm_100 and sm_103 only: \"Unsupported architecture\" on SM12x",
			Fix: "another --attention-backend (triton, flashinfer) on SM12x",
			Sources: []string{"https://github.com/flashinfer-ai/flashinfer/issues/3263",
				"https://github.com/sgl-project/sglang/issues/40558"},
			Quotes: []string{"flashinfer#3263 (\"TllmGenFmhaRunner rejects SM120 in TRTLLM DeepSeek ragged prefill path\"): " +
				"\"FLASHINFER_CHECK(mSM == kSM_100 || mSM == kSM_103, \\\"Unsupported architecture\\\")\", reproduced " +
				"\"through SGLang 0.5.10's TRTLLM MLA prefill path on RTX PRO 6000\"",
				"sglang#40558 (2026-09-21, sm_120): \"Error in function 'TllmGenFmhaRunner' at " +
					".../flashinfer/trtllm/fmha/fmhaRunner.cuh:37: Unsupported architecture\", with \"Using FP8 KV cache\""},
			Checked: "both read. sglang#40558 is an FP8 KV cache on the trtllm path of a DSA model (its backends chosen by " +
				"SGLang, so no flag of this row need be on its line); the check stands at a September 2026 FlashInfer. " +
				"Not covered: trtllm DSA backends picked automatically (sglang#40286, SM121), which no launch line shows",
		},
	}
}

// Facts are what a check compares the table against.
type Facts struct {
	// Packages are distribution versions by name (any spelling; see Normalize).
	Packages map[string]string
	// Also are further versions of a name installed more than once (Duplicates); each is
	// judged too.
	Also map[string][]string
	// ComputeCapabilities are the GPUs' ("12.0"); none: any architecture matches.
	ComputeCapabilities []string
	// LaunchLines are the server's possible launch lines (base arguments with each
	// profile's).
	LaunchLines [][]string
}

// Match is a row that holds, with what made it hold.
type Match struct {
	Row Row
	// What is the facts that matched, e.g. "nvidia-cudnn-cu13 9.21.0.48, flashinfer-python 0.6.8, sm_120".
	What string
}

// Check returns the rows that hold for f, in table order. A package row holds only when
// every package it names is known in a bad version.
func Check(f Facts) ([]Match, error) {
	pkgs := map[string][]string{}
	for n, v := range f.Packages {
		pkgs[Normalize(n)] = append(pkgs[Normalize(n)], v)
	}
	for n, vs := range f.Also {
		pkgs[Normalize(n)] = append(pkgs[Normalize(n)], vs...)
	}
	var out []Match
	for _, row := range Table() {
		what, ok, err := holds(row, pkgs, f)
		if err != nil {
			return nil, fmt.Errorf("known-bad row %s: %w", row.ID, err)
		}
		if ok {
			out = append(out, Match{Row: row, What: strings.Join(what, ", ")})
		}
	}
	return out, nil
}

func holds(row Row, pkgs map[string][]string, f Facts) ([]string, bool, error) {
	var what []string
	for _, p := range row.Packages {
		r, err := ParseRange(p.Range)
		if err != nil {
			return nil, false, err
		}
		found := false
		for _, n := range p.Names {
			for _, v := range pkgs[Normalize(n)] {
				pv, err := ParseVersion(v)
				if err != nil {
					continue // a version the table cannot read is not judged
				}
				if r.Contains(pv) && !found {
					found = true
					what = append(what, Normalize(n)+" "+v)
				}
			}
		}
		if !found {
			return nil, false, nil
		}
	}
	if row.ComputeCapabilityMajor != 0 && len(f.ComputeCapabilities) > 0 {
		var arch string
		for _, cc := range f.ComputeCapabilities {
			major, minor, _ := strings.Cut(cc, ".")
			if major == fmt.Sprint(row.ComputeCapabilityMajor) {
				arch = "sm_" + major + minor
				break
			}
		}
		if arch == "" {
			return nil, false, nil
		}
		what = append(what, arch)
	}
	if len(row.Flags) > 0 {
		line := ""
		for _, l := range f.LaunchLines {
			if m := flagsOn(l, row.Flags); m != "" {
				line = m
				break
			}
		}
		if line == "" {
			return nil, false, nil
		}
		what = append(what, line)
	}
	return what, true, nil
}

// flagsOn returns the matching flags of line as text when every flag holds, else "".
func flagsOn(line []string, flags []Flag) string {
	var got []string
	for _, f := range flags {
		found := ""
		for i, a := range line {
			name, val, eq := strings.Cut(a, "=")
			if name != f.Name {
				continue
			}
			if !eq && i+1 < len(line) && !strings.HasPrefix(line[i+1], "--") {
				val = line[i+1]
			}
			if strings.HasPrefix(val, f.ValuePrefix) {
				found = strings.TrimSpace(f.Name + " " + val)
			}
		}
		if found == "" {
			return ""
		}
		got = append(got, found)
	}
	return strings.Join(got, " ")
}

// Error is a refusal: the rows that hold.
type Error struct {
	// Where says what was checked ("the recipe's pins", "the installed packages of /opt/…").
	Where   string
	Matches []Match
}

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "known-bad combination in %s (table %s; `sglprov known-bad` lists it):", e.Where, TableVersion)
	for _, m := range e.Matches {
		fmt.Fprintf(&b, " [%s] %s: %s; fix: %s (%s)", m.Row.ID, m.What, m.Row.Reason, m.Row.Fix,
			strings.Join(m.Row.Sources, ", "))
	}
	return b.String()
}

var normalizeRE = regexp.MustCompile(`[-_.]+`)

// Normalize is a distribution name as PEP 503 compares them: lower case, runs of - _ .
// as one -.
func Normalize(name string) string {
	return normalizeRE.ReplaceAllString(strings.ToLower(strings.TrimSpace(name)), "-")
}

// pinRE is one exact pin in an argument or a constraints line: name==version, with extras
// and environment markers left out.
var pinRE = regexp.MustCompile(`^\s*([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?\s*===?\s*([A-Za-z0-9][A-Za-z0-9.+!_-]*)\s*(?:;.*)?$`)

// Pins returns the exact pins (name==version) among args, by normalized name; a later pin
// of a name wins.
func Pins(args []string) map[string]string {
	out := map[string]string{}
	for _, a := range args {
		if m := pinRE.FindStringSubmatch(a); m != nil {
			out[Normalize(m[1])] = m[2]
		}
	}
	return out
}

// Names returns the packages the table names, sorted: what a check reads from an
// environment.
func Names() []string {
	seen := map[string]bool{}
	for _, r := range Table() {
		for _, p := range r.Packages {
			for _, n := range p.Names {
				seen[Normalize(n)] = true
			}
		}
	}
	out := make([]string, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
