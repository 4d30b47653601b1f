package gpu

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/sglprov/sglprov/pkg/recipe"
	"github.com/sglprov/sglprov/pkg/refusal"
	"github.com/sglprov/sglprov/pkg/versions"
)

// minCount is the effective least number of GPUs: a recipe that says anything about GPUs
// needs at least one.
func minCount(g recipe.GPURequirements) int {
	if g.MinCount == 0 && (g.ComputeCapability != "" || g.MinMemoryGiB > 0 || g.MinTotalMemoryGiB > 0 || len(g.Counts) > 0) {
		return 1
	}
	return g.MinCount
}

// countRefusal says why a host with n GPUs is refused by Counts ("" when it is not):
// `host has 6 GPUs; this recipe runs on 4 or 8 GPUs only (REASON)`.
func countRefusal(g recipe.GPURequirements, n int) string {
	if len(g.Counts) == 0 || n < minCount(g) {
		return ""
	}
	names := make([]string, len(g.Counts))
	for i, c := range g.Counts {
		if c == n {
			return ""
		}
		names[i] = strconv.Itoa(c)
	}
	list := names[0]
	if len(names) > 1 {
		list = strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
	}
	msg := fmt.Sprintf("host has %s; this recipe runs on %s GPUs only", plural(n, "GPU"), list)
	if g.CountsReason != "" {
		msg += " (" + g.CountsReason + ")"
	}
	return msg
}

// Check returns every way the host falls short of the recipe's requirements r, one message each, nil when it meets
// them all (the sentences of CheckReasons).
func Check(r recipe.Requirements, f *Facts) []string {
	if rs := CheckReasons(r, f); len(rs) > 0 {
		return refusal.Messages(rs)
	}
	return nil
}

// CheckReasons returns every way the host falls short of the recipe's requirements r,
// each with its code and the facts it names, nil when it meets them all. Every GPU must
// match; a message names the GPU, what it has and what the recipe needs:
// `GPU 0 (NVIDIA H200) has compute capability 9.0; this recipe needs 12.0`,
// `host has 1 GPU; this recipe needs at least 8`, `driver 550.54.15 does not satisfy >=575`.
func CheckReasons(r recipe.Requirements, f *Facts) []refusal.Reason {
	var problems []refusal.Reason
	add := func(code string, fields map[string]any, format string, args ...any) {
		problems = append(problems, refusal.New(code, fields, format, args...))
	}
	gpuFields := func(d Device, kv ...any) map[string]any {
		m := map[string]any{"gpu": d.Index, "name": d.Name, "uuid": d.UUID}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1]
		}
		return m
	}

	if need := minCount(r.GPU); f.Count() < need {
		add(refusal.GPUCount, map[string]any{"have": f.Count(), "need": need}, "host has %s; this recipe needs at least %d", plural(f.Count(), "GPU"), need)
	}
	if msg := countRefusal(r.GPU, f.Count()); msg != "" {
		add(refusal.GPUCounts, map[string]any{"have": f.Count(), "counts": r.GPU.Counts}, "%s", msg)
	}
	if cc := strings.TrimSpace(r.GPU.ComputeCapability); cc != "" {
		rng, err := versions.ParseRange(cc)
		if err != nil {
			add(refusal.Requirement, map[string]any{"field": "requires.gpu.compute_capability"}, "requires.gpu.compute_capability: %v", err)
		} else {
			for _, d := range f.gpus() {
				if !rng.Match(d.ComputeCapability) {
					add(refusal.ComputeCapability, gpuFields(d, "have", d.ComputeCapability, "need", cc),
						"%s has compute capability %s; this recipe needs %s", d.Label(), orUnknown(d.ComputeCapability), cc)
				}
			}
		}
	}
	if need := r.GPU.MinMemoryGiB; need > 0 {
		for _, d := range f.gpus() {
			switch {
			case d.MemoryTotalBytes == 0:
				add(refusal.GPUMemory, gpuFields(d, "have_gib", nil, "need_gib", need), "%s does not report its memory; this recipe needs %s GiB", d.Label(), formatGiB(need))
			case d.MemoryGiB() < need:
				add(refusal.GPUMemory, gpuFields(d, "have_gib", d.MemoryGiB(), "need_gib", need), "%s has %s GiB of memory; this recipe needs %s", d.Label(), formatHave(d.MemoryGiB()), formatGiB(need))
			}
		}
	}
	if need := r.GPU.MinTotalMemoryGiB; need > 0 && f.Count() > 0 {
		total := 0.0
		for _, d := range f.gpus() {
			total += d.MemoryGiB()
		}
		if total < need {
			add(refusal.GPUTotalMemory, map[string]any{"gpus": f.Count(), "have_gib": total, "need_gib": need},
				"host has %s with %s GiB of memory in all; this recipe needs %s GiB", plural(f.Count(), "GPU"), formatHave(total), formatGiB(need))
		}
	}
	driver := ""
	if f != nil {
		driver = f.DriverVersion
	}
	problems = append(problems, checkVersion(refusal.Driver, "driver", driver, r.Driver)...)
	problems = append(problems, checkVersion(refusal.CUDA, "CUDA", f.CUDAVersion(), r.CUDA)...)
	return problems
}

// checkVersion checks one version against a range: `driver 550.54.15 does not satisfy >=575`.
func checkVersion(code, what, have, want string) []refusal.Reason {
	want = strings.TrimSpace(want)
	if want == "" {
		return nil
	}
	rng, err := versions.ParseRange(want)
	if err != nil {
		field := "requires." + strings.ToLower(what)
		return []refusal.Reason{refusal.New(refusal.Requirement, map[string]any{"field": field}, "%s: %v", field, err)}
	}
	fields := map[string]any{"have": have, "need": want}
	if have == "" {
		return []refusal.Reason{refusal.New(code, fields, "%s version is unknown; this recipe needs %s", what, want)}
	}
	if !rng.Match(have) {
		return []refusal.Reason{refusal.New(code, fields, "%s %s does not satisfy %s", what, have, want)}
	}
	return nil
}

// MatchCC reports whether compute capability cc ("12.0") matches expr, a version range
// ("12.0", ">=9.0,<10.0"); profiles use it. A bad expr is a *RangeError.
func MatchCC(expr, cc string) (bool, error) {
	rng, err := versions.ParseRange(expr)
	if err != nil {
		return false, err
	}
	return rng.Match(cc), nil
}

func (f *Facts) gpus() []Device {
	if f == nil {
		return nil
	}
	return f.GPUs
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// formatGiB prints a required amount as written: 90, 79.5.
func formatGiB(v float64) string {
	return strconv.FormatFloat(v, 'f', -1, 64)
}

// formatHave prints a measured amount rounded down to one decimal, so that 79.99 GiB is
// never shown as the 80 it falls short of.
func formatHave(v float64) string {
	return strconv.FormatFloat(float64(int64(v*10))/10, 'f', 1, 64)
}
