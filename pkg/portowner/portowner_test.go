package portowner

import (
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestLookupFindsOwnListener: a real socket listening in this process is found on its
// port, held by this process, in this process's own cgroup and unit.
func TestLookupFindsOwnListener(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	got, err := Lookup(port)
	if err != nil {
		t.Fatal(err)
	}
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	wantCgroup := CgroupPath(self)
	var mine *Listener
	for i := range got {
		if got[i].PID == os.Getpid() {
			mine = &got[i]
		}
	}
	if mine == nil {
		t.Fatalf("port %d: %v, want one held by pid %d", port, got, os.Getpid())
	}
	if mine.Addr != netip.MustParseAddrPort(ln.Addr().String()) || mine.Cgroup != wantCgroup ||
		mine.Unit != UnitOf(wantCgroup) || mine.Command == "" || mine.Inode == 0 {
		t.Errorf("%+v; want cgroup %q", *mine, wantCgroup)
	}
	if s := mine.String(); !strings.Contains(s, "pid ") || !strings.Contains(s, "listening on 127.0.0.1:") {
		t.Errorf("String() = %q", s)
	}
	// Once closed, the port is free.
	ln.Close()
	if got, err := Lookup(port); err != nil || len(got) != 0 {
		t.Errorf("after close: %v %v", got, err)
	}
}

// TestLookupIPv6: a listener on [::1] is found through /proc/net/tcp6.
func TestLookupIPv6(t *testing.T) {
	ln, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		t.Skip("no IPv6 loopback:", err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	got, err := Lookup(port)
	if err != nil || len(got) != 1 || got[0].PID != os.Getpid() || got[0].Addr.Addr() != netip.MustParseAddr("::1") {
		t.Errorf("%v %v", got, err)
	}
}

// TestLookupUnseenHolder: a listening socket that no readable process holds is reported
// with PID 0 and says how to see it; sockets not listening or on other ports are not.
func TestLookupUnseenHolder(t *testing.T) {
	proc := t.TempDir()
	if err := os.MkdirAll(filepath.Join(proc, "net"), 0o755); err != nil {
		t.Fatal(err)
	}
	tcp := "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n" +
		"   0: 0100007F:7530 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4242 1 0 100 0 0 10 0\n" +
		"   1: 0100007F:7530 0100007F:9C40 01 00000000:00000000 00:00000000 00000000     0        0 4343 1 0 100 0 0 10 0\n" +
		"   2: 00000000:7531 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4444 1 0 100 0 0 10 0\n"
	tcp6 := "  sl  local_address rem_address st ...\n" +
		"   0: 00000000000000000000000000000000:7530 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4545 1 0 100 0 0 10 0\n"
	for name, data := range map[string]string{"tcp": tcp, "tcp6": tcp6} {
		if err := os.WriteFile(filepath.Join(proc, "net", name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := LookupIn(proc, 30000)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Addr.String() != "127.0.0.1:30000" || got[0].PID != 0 || got[0].Inode != 4242 ||
		got[1].Addr.String() != "[::]:30000" || got[1].Inode != 4545 {
		t.Fatalf("%+v", got)
	}
	if s := got[0].String(); !strings.Contains(s, "cannot see") || !strings.Contains(s, "run as root") {
		t.Errorf("String() = %q", s)
	}
}

func TestCgroupAndUnit(t *testing.T) {
	tests := []struct{ cgroup, path, unit, userUnit string }{
		{"0::/system.slice/sglang-qwen.service\n", "/system.slice/sglang-qwen.service", "sglang-qwen.service", ""},
		{"0::/system.slice/sglang.service/payload\n", "/system.slice/sglang.service/payload", "sglang.service", ""},
		{"0::/user.slice/user-0.slice/session-3.scope\n", "/user.slice/user-0.slice/session-3.scope", "session-3.scope", ""},
		// Nested slices: a template's slice, a unit's own Slice=.
		{"0::/system.slice/system-sglang.slice/sglang@a.service\n", "/system.slice/system-sglang.slice/sglang@a.service", "sglang@a.service", ""},
		{"0::/system.slice/foo.slice/x.service\n", "/system.slice/foo.slice/x.service", "x.service", ""},
		{"0::/gpu.slice/gpu-serve.slice/sglang-qwen.service\n", "/gpu.slice/gpu-serve.slice/sglang-qwen.service", "sglang-qwen.service", ""},
		{"0::/init.scope\n", "/init.scope", "init.scope", ""},
		// A user manager's unit of the same name is not the system unit: the system
		// manager's unit is the user manager itself.
		{"0::/user.slice/user-1000.slice/user@1000.service/app.slice/sglang-qwen.service\n",
			"/user.slice/user-1000.slice/user@1000.service/app.slice/sglang-qwen.service", "user@1000.service", "sglang-qwen.service"},
		{"0::/user.slice/user-1000.slice/user@1000.service/sglang-qwen.service/sub\n",
			"/user.slice/user-1000.slice/user@1000.service/sglang-qwen.service/sub", "user@1000.service", "sglang-qwen.service"},
		{"0::/user.slice/user-1000.slice/user@1000.service/init.scope\n",
			"/user.slice/user-1000.slice/user@1000.service/init.scope", "user@1000.service", "init.scope"},
		// Units below a delegated unit (a container's systemd, a daemon's own groups)
		// belong to that unit.
		{"0::/machine.slice/systemd-nspawn@c.service/payload/system.slice/sglang-qwen.service\n",
			"/machine.slice/systemd-nspawn@c.service/payload/system.slice/sglang-qwen.service", "systemd-nspawn@c.service", ""},
		{"0::/system.slice/docker-0123abcd.scope/system.slice/sglang-qwen.service\n",
			"/system.slice/docker-0123abcd.scope/system.slice/sglang-qwen.service", "docker-0123abcd.scope", ""},
		// Not systemd's layout: no unit, however the path ends.
		{"0::/docker/0123abcd/system.slice/sglang-qwen.service\n", "/docker/0123abcd/system.slice/sglang-qwen.service", "", ""},
		{"0::/../../system.slice/sglang-qwen.service\n", "/../../system.slice/sglang-qwen.service", "", ""},
		{"0::/system.slice\n", "/system.slice", "", ""},
		{"0::/system.slice/sglang-qwen.slice.d\n", "/system.slice/sglang-qwen.slice.d", "", ""},
		// Hybrid: the unified hierarchy unused, systemd's v1 hierarchy names the unit.
		{"12:name=systemd:/system.slice/nginx.service\n11:memory:/x\n0::/\n", "/system.slice/nginx.service", "nginx.service", ""},
		{"12:name=systemd:/user.slice/user-1000.slice/user@1000.service/app.slice/nginx.service\n0::/\n",
			"/user.slice/user-1000.slice/user@1000.service/app.slice/nginx.service", "user@1000.service", "nginx.service"},
		{"9:name=systemd:/\n4:memory:/process_api/4fbe\n0::/\n", "/", "", ""},
		{"", "", "", ""},
	}
	for _, tt := range tests {
		p := CgroupPath([]byte(tt.cgroup))
		if p != tt.path || UnitOf(p) != tt.unit || UserUnitOf(p) != tt.userUnit {
			t.Errorf("%q: path %q unit %q user unit %q, want %q %q %q", tt.cgroup, p, UnitOf(p), UserUnitOf(p), tt.path, tt.unit, tt.userUnit)
		}
	}
}

// TestLookupUserUnitIsNotTheSystemUnit: a process of a user's service manager whose unit
// has the name of a system unit listens on the port; Lookup names the user manager as its
// unit (the system manager's), and the user unit beside it, never the system unit.
func TestLookupUserUnitIsNotTheSystemUnit(t *testing.T) {
	proc := t.TempDir()
	for _, d := range []string{"net", "4242/fd"} {
		if err := os.MkdirAll(filepath.Join(proc, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string]string{
		"net/tcp": "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n" +
			"   0: 00000000:7530 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 777 1 0 100 0 0 10 0\n",
		"4242/comm":   "python3\n",
		"4242/cgroup": "0::/user.slice/user-1000.slice/user@1000.service/app.slice/sglang-qwen.service\n",
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(proc, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("socket:[777]", filepath.Join(proc, "4242/fd/3")); err != nil {
		t.Fatal(err)
	}
	got, err := LookupIn(proc, 30000)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].PID != 4242 || got[0].Unit != "user@1000.service" || got[0].UserUnit != "sglang-qwen.service" {
		t.Fatalf("%+v; want pid 4242 in unit user@1000.service, user unit sglang-qwen.service", got)
	}
	if s := got[0].String(); !strings.Contains(s, "user unit sglang-qwen.service of user@1000.service") {
		t.Errorf("String() = %q", s)
	}
}

func TestConflicts(t *testing.T) {
	at := func(a string) Listener { return Listener{Addr: netip.MustParseAddrPort(a)} }
	tests := []struct {
		l    Listener
		host string
		want bool
	}{
		{at("127.0.0.1:30000"), "127.0.0.1", true},
		{at("127.0.0.1:30000"), "0.0.0.0", true},
		{at("0.0.0.0:30000"), "127.0.0.1", true},
		{at("[::]:30000"), "127.0.0.1", true},
		{at("10.0.0.5:30000"), "127.0.0.1", false},
		{at("[::1]:30000"), "127.0.0.1", false},
		{at("[::ffff:127.0.0.1]:30000"), "127.0.0.1", true},
		{at("10.0.0.5:30000"), "localhost", true},
		{at("[::1]:30000"), "[::1]", true},
	}
	for _, tt := range tests {
		if got := tt.l.Conflicts(tt.host); got != tt.want {
			t.Errorf("%s vs %s: %v, want %v", tt.l.Addr, tt.host, got, tt.want)
		}
	}
}

// TestDescendsFrom: a child process of this one descends from it; this process does not
// descend from its child, nor from itself.
func TestDescendsFrom(t *testing.T) {
	cmd := exec.Command("sleep", "5")
	if err := cmd.Start(); err != nil {
		t.Skip("no sleep:", err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	if !DescendsFrom(cmd.Process.Pid, os.Getpid()) {
		t.Error("child does not descend from the test process")
	}
	if DescendsFrom(os.Getpid(), cmd.Process.Pid) || DescendsFrom(os.Getpid(), os.Getpid()) {
		t.Error("the test process descends from its child or itself")
	}
}
