// Package systemd is the systemd step kind: it renders the SGLang server's unit from a
// template and a backend profile, installs it through a service manager (systemd over
// D-Bus, offline files under --root, or a supervised child process) and starts it. It
// implements engine.ServiceStep, through which the smoke gate tries the candidate
// profiles in turn.
package systemd

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/service"
	"github.com/sglprov/sglprov/pkg/switchover"
)

// Spec is a systemd step's recipe body.
type Spec struct {
	// Unit is the unit's name, e.g. "sglang-qwen.service".
	Unit string `yaml:"unit"`
	// Template is the unit template, a path relative to the recipe's folder; empty for the
	// shipped templates/sglang.service.tmpl.
	Template string `yaml:"template"`
	// Profiles are the candidate backend profiles, in the order to try them; the ones that
	// match the host's GPUs and the model's quantization are candidates.
	Profiles []string `yaml:"profiles"`
	// Args are server arguments after the profile's (e.g. --quantization, --tp).
	Args []string `yaml:"args"`
	// Env is the server's environment; it wins over the profile's on the same name.
	Env map[string]string `yaml:"env"`
	// User runs the server ("" for root).
	User string `yaml:"user"`
	// Manager is "systemd" (the default) or "exec" (a supervised child process, for hosts
	// without systemd). Under --root the unit is written offline whatever this says.
	Manager string `yaml:"manager"`
	// Command is the argv prefix that starts the server
	// (default: /opt/sglang/.venv/bin/python -m sglang.launch_server).
	Command []string `yaml:"command"`
	// ModelPath is the served model's folder (--model-path), unless Args set it. It is
	// passed to the server as written (it may also be a hub repository id).
	ModelPath string `yaml:"model_path"`
	// Port and Host are where the server listens (30000 and 127.0.0.1 by default), unless
	// Args set them.
	Port string `yaml:"port"`
	Host string `yaml:"host"`
	// WorkingDirectory is the server's working directory; a relative one is resolved
	// against the recipe's folder.
	WorkingDirectory string `yaml:"working_directory"`
	// NeedsCommands are the programs the server execs itself (FlashInfer's run-time kernel
	// compiles run ninja and nvcc); before the server starts, each must resolve under the
	// unit's own PATH. Unset: DefaultNeedsCommands; an empty list checks none.
	NeedsCommands *[]string `yaml:"needs_commands"`
	// Stage is where a switch gates a candidate before it serves: "port" (a free side
	// port: the served port refuses connections meanwhile and never answers with a
	// candidate that did not pass; the model loads twice) or "served" (the served port
	// itself: one load, for a node its drain hook takes out of the router). Unset: "port",
	// or "served" when the recipe has drain hooks (on_unhealthy, on_healthy) or runs
	// across nodes. A first install is gated on the served port either way.
	Stage string `yaml:"stage"`
}

// Defaults of a spec.
const (
	DefaultPort = 30000
	DefaultHost = "127.0.0.1"
)

// Kind returns the systemd step kind.
func Kind() engine.Kind {
	return engine.KindOf(New)
}

var unitNameRE = regexp.MustCompile(`^[A-Za-z0-9:_.@\\-]+\.service$`)

// check validates the spec and returns the port.
func (s *Spec) check() (int, error) {
	if s.Unit == "" {
		return 0, fmt.Errorf("unit is required (e.g. sglang.service)")
	}
	if !unitNameRE.MatchString(s.Unit) || len(s.Unit) > 255 {
		return 0, fmt.Errorf("unit %q is not a valid service unit name (letters, digits, :_.@- and a .service suffix)", s.Unit)
	}
	switch s.Manager {
	case "", service.KindSystemd, service.KindExec:
	default:
		return 0, fmt.Errorf("manager %q is not one of systemd, exec", s.Manager)
	}
	if st := switchover.Staging(s.Stage); !st.Valid() {
		return 0, fmt.Errorf("stage %q is not one of port, served", s.Stage)
	}
	seen := map[string]bool{}
	for _, p := range s.Profiles {
		if p == "" {
			return 0, fmt.Errorf("profiles: an empty profile name")
		}
		if seen[p] {
			return 0, fmt.Errorf("profiles: %q is listed twice", p)
		}
		seen[p] = true
	}
	port := DefaultPort
	if s.Port != "" {
		p, err := strconv.Atoi(strings.TrimSpace(s.Port))
		if err != nil || p < 1 || p > 65535 {
			return 0, fmt.Errorf("port %q is not a TCP port number", s.Port)
		}
		port = p
	}
	if len(s.Command) > 0 {
		if err := service.CheckExecutable(s.Command[0]); err != nil {
			return 0, fmt.Errorf("command: %w", err)
		}
	}
	if s.ModelPath == "" && !hasFlag(s.Args, "--model-path", "--model") {
		return 0, fmt.Errorf("model_path is required (or --model-path in args)")
	}
	lists := map[string][]string{"args": s.Args, "command": s.Command}
	for name, l := range lists {
		for i, a := range l {
			if err := service.CheckValue(fmt.Sprintf("%s[%d] %q", name, i, a), a); err != nil {
				return 0, err
			}
		}
	}
	if s.NeedsCommands != nil {
		for i, c := range *s.NeedsCommands {
			if strings.TrimSpace(c) == "" || strings.ContainsAny(c, " \t\n") || (strings.Contains(c, "/") && !strings.HasPrefix(c, "/")) {
				return 0, fmt.Errorf("needs_commands[%d] %q is not a program name or an absolute path", i, c)
			}
		}
	}
	for k, v := range s.Env {
		if _, err := service.EnvAssignment(k, v); err != nil {
			return 0, fmt.Errorf("env: %w", err)
		}
	}
	for name, v := range map[string]string{"user": s.User, "model_path": s.ModelPath, "host": s.Host, "working_directory": s.WorkingDirectory} {
		if err := service.CheckValue(fmt.Sprintf("%s %q", name, v), v); err != nil {
			return 0, err
		}
	}
	return port, nil
}

// hasFlag reports whether args set one of the flags, as "--flag value" or "--flag=value".
func hasFlag(args []string, flags ...string) bool {
	_, ok := flagValue(args, flags...)
	return ok
}

// flagValue returns the value args give any of flags (switchover.FlagValue: the last
// occurrence wins, as with the server's argument parser).
func flagValue(args []string, flags ...string) (string, bool) {
	return switchover.FlagValue(args, flags...)
}
