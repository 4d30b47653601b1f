// Package refusal carries the reasons a host is refused a recipe (exit 4) as data: each
// with a code a program can switch on, the sentence a person reads, and the facts it
// names (the GPU, what it has, what the recipe needs), so that `plan --json` and the run
// report list every one, not only stderr.
package refusal

import (
	"errors"
	"fmt"
	"strings"

	"github.com/sglprov/sglprov/pkg/exitcode"
)

// Codes of the reasons.
const (
	// GPUCount: fewer GPUs than requires.gpu.min_count (fields have, need).
	GPUCount = "gpu_count"
	// GPUCounts: a GPU count the model does not run on (fields have, counts).
	GPUCounts = "gpu_counts"
	// GPUDevices: requires.gpu.devices names GPUs the host does not have.
	GPUDevices = "gpu_devices"
	// ComputeCapability: a GPU of another compute capability (fields gpu, name, have,
	// need).
	ComputeCapability = "compute_capability"
	// GPUMemory: a GPU with too little memory (fields gpu, name, have_gib, need_gib).
	GPUMemory = "gpu_memory"
	// GPUTotalMemory: too little GPU memory in all (fields have_gib, need_gib).
	GPUTotalMemory = "gpu_total_memory"
	// Driver and CUDA: a driver, or the driver's CUDA, outside the range (fields have,
	// need; have is "" when unknown).
	Driver = "driver"
	CUDA   = "cuda"
	// Requirement: a requirement the recipe states badly (a range that does not parse).
	Requirement = "requirement"
	// Command: a required command missing or too old.
	Command = "command"
	// HostFitness: a GPU that fails a host-fitness check (ECC, MIG, busy, Xid, link).
	HostFitness = "host_fitness"
	// GPUClaim: another recipe's server claims these GPUs (fields recipe, gpus, and
	// state_dir when it was applied with another state dir).
	GPUClaim = "gpu_claim"
	// NVML: the GPUs cannot be read (NVML not loaded): the GPU requirements are unchecked.
	NVML = "nvml"
	// Host: any other way the host falls short (free space, a known-bad environment,
	// NVML), its sentence only.
	Host = "host"
)

// Reason is one way the host falls short of the recipe.
type Reason struct {
	// Code says which kind of reason it is (the constants of this package).
	Code string `json:"code"`
	// Message is the sentence, as stderr prints it.
	Message string `json:"message"`
	// Fields are the facts the reason names, by code.
	Fields map[string]any `json:"fields,omitempty"`
}

// New returns a reason with its sentence made from format and args.
func New(code string, fields map[string]any, format string, args ...any) Reason {
	return Reason{Code: code, Message: fmt.Sprintf(format, args...), Fields: fields}
}

// Messages returns the reasons' sentences.
func Messages(rs []Reason) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.Message
	}
	return out
}

// Of returns reasons of code, one per message, with no fields.
func Of(code string, msgs []string) []Reason {
	out := make([]Reason, len(msgs))
	for i, m := range msgs {
		out[i] = Reason{Code: code, Message: m}
	}
	return out
}

// Error is a refusal (exitcode.ErrHost) that carries its reasons. Head, when set, is the
// sentence before them; its text is Head followed by the reasons joined by "; ", else
// every reason on its own line.
type Error struct {
	Head    string
	Tail    string
	Reasons []Reason
}

func (e *Error) Error() string {
	if e.Head != "" {
		return fmt.Sprintf("%s: %s: %s%s", exitcode.ErrHost, e.Head, strings.Join(Messages(e.Reasons), "; "), e.Tail)
	}
	return fmt.Sprintf("%s:\n  %s", exitcode.ErrHost, strings.Join(Messages(e.Reasons), "\n  "))
}

// Unwrap makes the error an exitcode.ErrHost (exit 4).
func (e *Error) Unwrap() error { return exitcode.ErrHost }

// Collect returns every reason in err's tree (joined errors included): a refusal's own,
// and for each other exit-4 error its sentence with the code Host. nil when err is not
// a refusal.
func Collect(err error) []Reason {
	if err == nil || !errors.Is(err, exitcode.ErrHost) {
		return nil
	}
	var out []Reason
	var walk func(error)
	walk = func(err error) {
		if x, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range x.Unwrap() {
				if errors.Is(e, exitcode.ErrHost) {
					walk(e)
				}
			}
			return
		}
		var re *Error
		if errors.As(err, &re) {
			out = append(out, re.Reasons...)
			return
		}
		msg := strings.TrimSpace(exitcode.Message(err))
		// The class phrase adds nothing beside the reason's own words.
		if m := strings.Replace(msg, exitcode.ErrHost.Error()+": ", "", 1); m != msg {
			msg = m
		} else {
			msg = strings.Replace(msg, exitcode.ErrHost.Error()+":", "", 1)
		}
		msg = strings.TrimSpace(msg)
		out = append(out, Reason{Code: Host, Message: msg})
	}
	walk(err)
	return out
}
