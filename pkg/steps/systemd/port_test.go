package systemd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/portowner"
	"github.com/sglprov/sglprov/pkg/service"
)

// TestPortHeldByForeignProcessRefused: a real socket listening on the unit's port, held by
// this test process (its own cgroup, not the unit's), makes the step refuse before it
// installs or starts anything, naming the pid, with exit code 5.
func TestPortHeldByForeignProcessRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	for _, kind := range []string{service.KindSystemd, service.KindExec} {
		t.Run(kind, func(t *testing.T) {
			env := testEnv(t, "rtx-pro-6000-x8.json")
			spec := qwenSpec()
			spec.Port = strconv.Itoa(port)
			s := newStep(t, spec)
			fm := withFake(t, env)
			fm.kind = kind
			err := s.Run(context.Background(), env)
			var held *PortHeldError
			if !errors.As(err, &held) || exitcode.Of(err) != exitcode.ExitLocked {
				t.Fatalf("Run: %v (exit %d), want a PortHeldError, exit 5", err, exitcode.Of(err))
			}
			want := fmt.Sprintf("not starting sglang-qwen.service: port %d is held by pid %d (", port, os.Getpid())
			if !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "which is not this unit's server") {
				t.Errorf("error %q lacks %q", err, want)
			}
			if ops := fm.take(); len(ops) != 0 {
				t.Errorf("the manager was asked %v", ops)
			}
			if _, err := os.Stat(fm.UnitPath(spec.Unit)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("unit file written: %v", err)
			}
		})
	}
}

// TestPortOwnUnitOrOtherAddress: the unit's own server on the port (a restart frees it), a
// listener on another address, and an offline manager start the unit; a listener in
// another unit is refused naming that unit and how to stop it.
func TestPortOwnUnitOrOtherAddress(t *testing.T) {
	at := func(a string, pid int, unit string) portowner.Listener {
		return portowner.Listener{Addr: netip.MustParseAddrPort(a), PID: pid, Command: "python3", Unit: unit}
	}
	tests := []struct {
		name, kind string
		held       []portowner.Listener
		want       string // "" when the unit starts
	}{
		{"free", service.KindSystemd, nil, ""},
		{"own unit", service.KindSystemd, []portowner.Listener{at("127.0.0.1:30000", 4242, "sglang-qwen.service")}, ""},
		{"other address", service.KindSystemd, []portowner.Listener{at("10.0.0.5:30000", 4242, "nginx.service")}, ""},
		{"fake manager checks nothing", "fake", []portowner.Listener{at("0.0.0.0:30000", 4242, "nginx.service")}, ""},
		{"other unit on the wildcard", service.KindSystemd, []portowner.Listener{at("0.0.0.0:30000", 4242, "sglang-a.service")},
			"port 30000 is held by pid 4242 (python3, unit sglang-a.service) listening on 0.0.0.0:30000, which is not this unit's server: stop it (systemctl disable --now sglang-a.service)"},
		{"unseen holder", service.KindSystemd, []portowner.Listener{{Addr: netip.MustParseAddrPort("127.0.0.1:30000"), Inode: 77}},
			"held by a process sglprov cannot see (socket inode 77; run as root to name it)"},
		{"exec: not our child", service.KindExec, []portowner.Listener{at("127.0.0.1:30000", 1, "")}, "held by pid 1 (python3)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := testEnv(t, "rtx-pro-6000-x8.json")
			s := newStep(t, qwenSpec())
			fm := withFake(t, env)
			fm.kind = tt.kind
			var asked []int
			s.lookupPort = func(port int) ([]portowner.Listener, error) {
				asked = append(asked, port)
				return tt.held, nil
			}
			err := s.Run(context.Background(), env)
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) || exitcode.Of(err) != exitcode.ExitLocked {
				t.Errorf("Run: %v, want %q (exit 5)", err, tt.want)
			}
			if len(asked) != 1 || asked[0] != 30000 {
				t.Errorf("asked about ports %v", asked)
			}
		})
	}
}

// TestPortHeldByUserUnitOfTheSameName: a process of a user's service manager, in a user
// unit named as the recipe's system unit, listens on the port (read from a /proc tree by
// portowner). It is not the unit's server: the step refuses, naming the user unit and the
// user manager it runs under.
func TestPortHeldByUserUnitOfTheSameName(t *testing.T) {
	proc := t.TempDir()
	for _, d := range []string{"net", "4242/fd"} {
		if err := os.MkdirAll(filepath.Join(proc, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, data := range map[string]string{
		"net/tcp": "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n" +
			"   0: 0100007F:7530 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 777 1 0 100 0 0 10 0\n",
		"4242/comm":   "python3\n",
		"4242/cgroup": "0::/user.slice/user-1000.slice/user@1000.service/app.slice/sglang-qwen.service\n",
	} {
		if err := os.WriteFile(filepath.Join(proc, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("socket:[777]", filepath.Join(proc, "4242/fd/3")); err != nil {
		t.Fatal(err)
	}
	env := testEnv(t, "rtx-pro-6000-x8.json")
	s := newStep(t, qwenSpec())
	fm := withFake(t, env)
	fm.kind = service.KindSystemd
	s.lookupPort = func(port int) ([]portowner.Listener, error) { return portowner.LookupIn(proc, port) }
	err := s.Run(context.Background(), env)
	want := "port 30000 is held by pid 4242 (python3, user unit sglang-qwen.service of user@1000.service) listening on 127.0.0.1:30000, which is not this unit's server: stop it (systemctl --user disable --now sglang-qwen.service"
	if err == nil || !strings.Contains(err.Error(), want) || exitcode.Of(err) != exitcode.ExitLocked {
		t.Errorf("Run: %v, want %q (exit 5)", err, want)
	}
}

// TestServedModel: the served name is --served-model-name when the args set it, else the
// model path (SGLang's default); the path is the model path.
func TestServedModel(t *testing.T) {
	env := testEnv(t, "rtx-pro-6000-x8.json")
	s := newStep(t, qwenSpec())
	name, path, err := s.ServedModel(env)
	if err != nil || name != "/var/lib/sglprov/models/Qwen3.5-397B-A17B-NVFP4" || path != name {
		t.Errorf("%q %q %v", name, path, err)
	}
	spec := qwenSpec()
	spec.Args = append(spec.Args, "--served-model-name", "qwen3.5")
	s = newStep(t, spec)
	if name, path, err := s.ServedModel(env); err != nil || name != "qwen3.5" || path != "/var/lib/sglprov/models/Qwen3.5-397B-A17B-NVFP4" {
		t.Errorf("%q %q %v", name, path, err)
	}
}
