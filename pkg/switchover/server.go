package switchover

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/sglprov/sglprov/pkg/service"
)

// DefaultPort is the port SGLang listens on without --port.
const DefaultPort = 30000

// Server is the server a unit runs, as the gate must find it on the port: a server that
// lists another model name or loaded another model path is not this unit's (another
// server answers on the port).
type Server struct {
	// Unit is the unit's name; Profile the profile it was rendered with, when known.
	Unit    string `json:"unit"`
	Profile string `json:"profile,omitempty"`
	// ServedModel is the name /v1/models must list: --served-model-name, else the model
	// path, as SGLang defaults it.
	ServedModel string `json:"served_model,omitempty"`
	// ModelPath is the model the server loads (--model-path), which SGLang's
	// /get_model_info reports.
	ModelPath string `json:"model_path,omitempty"`
	// Host and Port are where it listens (--host, --port; SGLang's defaults when unset).
	Host string `json:"host,omitempty"`
	Port int    `json:"port"`
	// Listens is set when the unit names --host or --port: Host and Port are then where a
	// gate reaches it, rather than the recipe's gate URL.
	Listens bool `json:"-"`
	// Args are the server's arguments after the command, as its ExecStart= says: a worker
	// of a multi-node group checks that its head runs the same.
	Args []string `json:"-"`
}

// Label names the server in messages: its profile, else its unit.
func (s Server) Label() string {
	if s.Profile != "" {
		return s.Profile
	}
	return s.Unit
}

// Identify reads the server a unit runs from its ExecStart= (systemd's quoting, the
// unit's Environment= expanded): the served model name, the model path and the port.
func Identify(unit string, content []byte) (Server, error) {
	svc, err := service.ReadService(unit, content, "/var/cache")
	if err != nil {
		return Server{}, fmt.Errorf("reading the server of %s: %w", unit, err)
	}
	srv := Server{Unit: unit, Port: DefaultPort, Host: "127.0.0.1"}
	args := svc.Argv
	if len(args) > 0 {
		args = args[1:]
	}
	srv.Args = args
	srv.ModelPath, _ = FlagValue(args, "--model-path", "--model")
	srv.ServedModel = srv.ModelPath
	if v, ok := FlagValue(args, "--served-model-name"); ok && v != "" {
		srv.ServedModel = v
	}
	if v, ok := FlagValue(args, "--host"); ok && v != "" {
		srv.Host, srv.Listens = v, true
	}
	if v, ok := FlagValue(args, "--port"); ok {
		p, err := strconv.Atoi(v)
		if err != nil || p <= 0 || p > 65535 {
			return Server{}, fmt.Errorf("reading the server of %s: --port %q is not a port", unit, v)
		}
		srv.Port, srv.Listens = p, true
	}
	return srv, nil
}

// FlagValue returns the last value of any of flags in args ("--f v" or "--f=v", the last
// occurrence winning, as with the server's argument parser) and whether one was given.
func FlagValue(args []string, flags ...string) (string, bool) {
	val, found := "", false
	for i := 0; i < len(args); i++ {
		for _, f := range flags {
			switch {
			case args[i] == f:
				found, val = true, ""
				if i+1 < len(args) {
					val = args[i+1]
				}
			case strings.HasPrefix(args[i], f+"="):
				found, val = true, strings.TrimPrefix(args[i], f+"=")
			}
		}
	}
	return val, found
}

// maxUnitBytes bounds a unit file read back.
const maxUnitBytes = 1 << 20

// readUnit reads a unit file, at most maxUnitBytes.
func readUnit(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxUnitBytes+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxUnitBytes {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, maxUnitBytes)
	}
	return b, nil
}
