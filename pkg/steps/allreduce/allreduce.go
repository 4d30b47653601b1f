// Package allreduce is the all-reduce step kind: host fitness's deep check. It measures
// the all-reduce bus bandwidth over the GPUs the service will use, with the recipe's own
// Python (torch.distributed with NCCL, one process per GPU, bounded in time), reports it
// as nccl-tests does, and fails the run (exit 4) when it is below the recipe's threshold.
// It runs again only when its inputs change: the GPUs, the driver, the interpreter and the
// recipe's settings.
package allreduce

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/safefile"
	"github.com/sglprov/sglprov/pkg/steps/stepexec"
)

//go:embed allreduce.py
var script []byte

// Spec is an all-reduce step's recipe body.
type Spec struct {
	// Python is the interpreter of the service's environment (the venv's bin/python).
	Python string `yaml:"python"`
	// GPUs is how many GPUs take part (the service's tensor-parallel size); 0 means all.
	GPUs int `yaml:"gpus"`
	// SizeMB is the size of the all-reduced buffer in MiB (default 256).
	SizeMB int `yaml:"size_mb"`
	// Iters is the number of timed all-reduces (default 20).
	Iters int `yaml:"iters"`
	// MinBusBWGBps is the least bus bandwidth in GB/s (10^9 bytes); 0 only measures.
	MinBusBWGBps float64 `yaml:"min_busbw_gbps"`
	// Timeout bounds the whole check (default 5m).
	Timeout string `yaml:"timeout"`
	// Env is added to the check's environment (NCCL settings, CUDA_VISIBLE_DEVICES).
	Env map[string]string `yaml:"env"`
}

// Kind returns the all-reduce step kind.
func Kind() engine.Kind {
	k := engine.KindOf(func(name string, s Spec) (*Step, error) {
		if s.Python == "" {
			return nil, fmt.Errorf("allreduce: python must name the service's interpreter: %w", exitcode.ErrUsage)
		}
		if s.GPUs < 0 || s.SizeMB < 0 || s.Iters < 0 || s.MinBusBWGBps < 0 {
			return nil, fmt.Errorf("allreduce: gpus, size_mb, iters and min_busbw_gbps must not be negative: %w", exitcode.ErrUsage)
		}
		timeout := 5 * time.Minute
		if s.Timeout != "" {
			d, err := time.ParseDuration(s.Timeout)
			if err != nil || d <= 0 {
				return nil, fmt.Errorf("allreduce: timeout %q is not a positive duration (5m, 90s): %w", s.Timeout, exitcode.ErrUsage)
			}
			timeout = d
		}
		if s.SizeMB == 0 {
			s.SizeMB = 256
		}
		if s.Iters == 0 {
			s.Iters = 20
		}
		return &Step{spec: s, timeout: timeout}, nil
	})
	k.UsesFacts = true
	return k
}

// Step is an all-reduce step.
type Step struct {
	spec    Spec
	timeout time.Duration
}

// Result is one measurement, as the check writes it and the report shows it.
type Result struct {
	Ranks     int     `json:"ranks"`
	Bytes     int64   `json:"bytes"`
	Iters     int     `json:"iters"`
	TimeS     float64 `json:"time_s"`
	AlgBWGBps float64 `json:"algbw_gbps"`
	BusBWGBps float64 `json:"busbw_gbps"`
	Correct   bool    `json:"correct"`
	Torch     string  `json:"torch"`
	NCCL      string  `json:"nccl"`
	GPU       string  `json:"gpu"`
	// MinBusBWGBps is the threshold it was held to.
	MinBusBWGBps float64 `json:"min_busbw_gbps,omitempty"`
}

type record struct {
	Result Result `json:"result"`
}

// OfflineSkip is why the check does not run under --root: it runs a program on this host's
// GPUs, which are not the root's.
func (s *Step) OfflineSkip() string {
	return "offline (--root): the all-reduce check runs a program on this host's GPUs; not run"
}

// gpus is the number of ranks: the spec's, or every GPU of the host.
func (s *Step) gpus(env *engine.Env) int {
	if s.spec.GPUs > 0 {
		return s.spec.GPUs
	}
	return env.Facts.Count()
}

// Fingerprint is what decides the measurement: the GPUs (their UUIDs and bus ids), the
// driver, the topology, the interpreter (its path, size and time) and the script.
func (s *Step) Fingerprint(_ context.Context, env *engine.Env) (map[string]string, error) {
	fp := map[string]string{"script": fmt.Sprintf("%x", len(script)) + ":" + string(script)}
	if f := env.Facts; f != nil {
		var ids []string
		for _, d := range f.GPUs {
			ids = append(ids, d.UUID+"@"+d.PCIBusID)
		}
		fp["gpus"] = strings.Join(ids, ",")
		fp["driver"] = f.DriverVersion
		topo, _ := json.Marshal(f.Topology)
		fp["topology"] = string(topo)
	}
	py := env.Path(s.spec.Python)
	if st, err := os.Stat(py); err == nil {
		real, _ := filepath.EvalSymlinks(py)
		fp["python"] = fmt.Sprintf("%s %d %d", real, st.Size(), st.ModTime().UnixNano())
	} else {
		fp["python"] = "missing"
	}
	return fp, nil
}

// Intact reports whether a measurement is recorded that met the threshold.
func (s *Step) Intact(_ context.Context, env *engine.Env) (bool, string, error) {
	var rec record
	if !env.LoadData(&rec) || rec.Result.Ranks == 0 {
		return false, "no measurement recorded", nil
	}
	if err := s.judge(rec.Result, s.gpus(env)); err != nil {
		return false, err.Error(), nil
	}
	env.Detail("allreduce", rec.Result)
	return true, "", nil
}

// Describe says what plan would measure.
func (s *Step) Describe(env *engine.Env) []string {
	line := fmt.Sprintf("all-reduce of %d MiB over %d GPUs with %s, %d iterations, within %s", s.spec.SizeMB, s.gpus(env), s.spec.Python, s.spec.Iters, s.timeout)
	if s.spec.MinBusBWGBps > 0 {
		line += fmt.Sprintf("; needs a bus bandwidth of at least %s GB/s", fmtGB(s.spec.MinBusBWGBps))
	}
	return []string{line}
}

// Run measures and judges.
func (s *Step) Run(ctx context.Context, env *engine.Env) error {
	n := s.gpus(env)
	if n < 1 {
		return fmt.Errorf("all-reduce check: no GPU to run on: %w", exitcode.ErrHost)
	}
	dir, err := os.MkdirTemp(env.StateDir, ".allreduce-")
	if err != nil {
		return fmt.Errorf("making the all-reduce check's folder: %w", err)
	}
	defer os.RemoveAll(dir)
	py := filepath.Join(dir, "allreduce.py")
	if err := os.WriteFile(py, script, 0o600); err != nil {
		return fmt.Errorf("writing the all-reduce check: %w", err)
	}
	out := filepath.Join(dir, "result.json")
	argv := []string{env.Path(s.spec.Python), py, "--gpus", strconv.Itoa(n), "--bytes", strconv.FormatInt(int64(s.spec.SizeMB)<<20, 10),
		"--iters", strconv.Itoa(s.spec.Iters), "--out", out}
	envList := append(os.Environ(), "PYTHONUNBUFFERED=1")
	keys := make([]string, 0, len(s.spec.Env))
	for k := range s.spec.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		envList = append(envList, k+"="+s.spec.Env[k])
	}
	cctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	if err := stepexec.Exec(cctx, env, env.StepName, argv, dir, envList); err != nil {
		if cctx.Err() == context.DeadlineExceeded && ctx.Err() == nil {
			return fmt.Errorf("all-reduce check over %d GPUs did not finish within %s (an NCCL hang at start is P2P blocked by ACS or the IOMMU: "+
				"see detect's topology): %w", n, s.timeout, err)
		}
		return fmt.Errorf("running the all-reduce check: %w", err)
	}
	b, err := safefile.ReadRegular(out, 64<<10)
	if err != nil {
		return fmt.Errorf("reading the all-reduce result: %w", err)
	}
	var res Result
	if err := json.Unmarshal(b, &res); err != nil {
		return fmt.Errorf("reading the all-reduce result: %w", err)
	}
	res.MinBusBWGBps = s.spec.MinBusBWGBps
	env.Detail("allreduce", res)
	if env.Log != nil {
		env.Log.Info("all-reduce measured", "ranks", res.Ranks, "bytes", res.Bytes, "algbw_gbps", fmtGB(res.AlgBWGBps),
			"busbw_gbps", fmtGB(res.BusBWGBps), "nccl", res.NCCL)
	}
	if err := s.judge(res, n); err != nil {
		return err
	}
	return env.SaveData(record{Result: res})
}

// judge holds a measurement over want GPUs to the threshold. A result over another
// number of ranks measured something else (a rank that never joined, CUDA_VISIBLE_DEVICES
// hiding GPUs): it says nothing of the GPUs the check was to use. With one rank the bus
// bandwidth is 0 by definition (nothing crosses a link): the threshold is then not applied.
func (s *Step) judge(r Result, want int) error {
	if r.Ranks != want {
		return fmt.Errorf("the all-reduce check reported %d ranks, not the %d GPUs it was to run on: it measured other GPUs than the service's (check CUDA_VISIBLE_DEVICES in its env and that every GPU is visible to torch): %w",
			r.Ranks, want, exitcode.ErrHost)
	}
	if !r.Correct {
		return fmt.Errorf("all-reduce over %d GPUs gave wrong sums: a GPU or its link corrupts data (run nccl-tests' all_reduce_perf -c 1 to confirm): %w", r.Ranks, exitcode.ErrHost)
	}
	if s.spec.MinBusBWGBps > 0 && r.Ranks > 1 && r.BusBWGBps < s.spec.MinBusBWGBps {
		return fmt.Errorf("all-reduce bus bandwidth over %d GPUs is %s GB/s (%d MiB, NCCL %s); this recipe needs at least %s GB/s "+
			"(min_busbw_gbps): check detect's topology and P2P, the PCIe links and NCCL_P2P settings: %w",
			r.Ranks, fmtGB(r.BusBWGBps), r.Bytes>>20, r.NCCL, fmtGB(s.spec.MinBusBWGBps), exitcode.ErrHost)
	}
	return nil
}

func fmtGB(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }
