// Package recipe reads sglprov recipes (apiVersion sglprov/v1): strict parsing with
// positions, vars and templating, and validation that reports every problem as
// FILE:LINE:COL: message.
package recipe

// Profile is a named set of server flags and environment, chosen by GPU facts and
// quantization.
type Profile struct {
	// Match says which hosts and models the profile is for.
	Match ProfileMatch `yaml:"match" json:"match"`
	// Args are extra server arguments, e.g. ["--attention-backend", "triton"].
	Args []string `yaml:"args" json:"args,omitempty"`
	// Env are extra environment variables for the server.
	Env map[string]string `yaml:"env" json:"env,omitempty"`
}

// ProfileMatch selects a profile: every field that is set must match.
type ProfileMatch struct {
	// ComputeCapability is an exact capability ("12.0") or a range (">=9.0,<10.0").
	ComputeCapability string `yaml:"compute_capability" json:"compute_capability,omitempty"`
	// Quantization is the server's --quantization value, e.g. "modelopt_fp4": it is
	// compared with the --quantization arg in the service step's args (not read from the
	// model). A step whose profiles all want another quantization than its args give is
	// the recipe's fault (exit 2).
	Quantization string `yaml:"quantization" json:"quantization,omitempty"`
	// Check is a command (argv, no shell) run on the host when the rest matches: the
	// profile matches only if it exits 0; otherwise the last line it printed is the
	// reason it was passed over. For profiles that need what GPU facts cannot tell (a
	// library's support for the architecture, peer access between every pair of GPUs).
	Check []string `yaml:"check" json:"check,omitempty"`
	// GPUCounts, when set, lists the GPU counts the profile is for (a layout such as
	// --tp 4 --dp-size 2 that needs exactly 8 GPUs).
	GPUCounts []int `yaml:"gpu_counts" json:"gpu_counts,omitempty"`
}
