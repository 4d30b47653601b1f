// Package portowner finds who listens on a TCP port: the listening sockets from
// /proc/net/tcp and /proc/net/tcp6, the processes that hold them (the socket's inode among
// /proc/PID/fd), and the systemd unit each process runs in (from /proc/PID/cgroup). It
// reads only /proc, so it sees the sockets of the caller's network namespace, and the
// processes of other users only when run as root.
package portowner

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/sglprov/sglprov/pkg/procnet"
)

// Listener is a socket listening on the port and one process that holds it.
type Listener struct {
	// Addr is the local address the socket listens on.
	Addr netip.AddrPort
	// Inode is the socket's inode number.
	Inode uint64
	// PID is a process that holds the socket; 0 when none could be read (a process of
	// another user, read without root).
	PID int
	// Command is the process's name (/proc/PID/comm).
	Command string
	// Cgroup is the process's cgroup path (the unified hierarchy's, else systemd's v1
	// name=systemd hierarchy's).
	Cgroup string
	// Unit is the system manager's unit of that cgroup (UnitOf); "" when the process is
	// in none (a container's root cgroup, a process outside systemd).
	Unit string
	// UserUnit is, for a process of a user's service manager (Unit is user@UID.service),
	// its unit there (UserUnitOf); "" otherwise.
	UserUnit string
}

// String describes the listener for a message, e.g. "pid 4242 (python3, unit
// sglang-a.service) listening on 127.0.0.1:30000".
func (l Listener) String() string {
	if l.PID == 0 {
		return fmt.Sprintf("a process sglprov cannot see (socket inode %d; run as root to name it) listening on %s", l.Inode, l.Addr)
	}
	who := l.Command
	switch {
	case l.UserUnit != "":
		who += ", user unit " + l.UserUnit + " of " + l.Unit
	case l.Unit != "":
		who += ", unit " + l.Unit
	case l.Cgroup != "":
		who += ", cgroup " + l.Cgroup + ", in no systemd unit"
	}
	return fmt.Sprintf("pid %d (%s) listening on %s", l.PID, who, l.Addr)
}

// Conflicts reports whether a server binding host on the listener's port would collide
// with it: the same address, or either of them the wildcard. A host that is not an IP
// address ("localhost", a name) is taken to collide.
func (l Listener) Conflicts(host string) bool {
	ip, err := netip.ParseAddr(strings.Trim(host, "[]"))
	if err != nil {
		return true
	}
	have := l.Addr.Addr().Unmap()
	ip = ip.Unmap()
	return ip.IsUnspecified() || have.IsUnspecified() || ip == have
}

// Lookup returns the sockets listening on TCP port and the processes that hold them,
// reading /proc.
func Lookup(port int) ([]Listener, error) {
	return LookupIn("/proc", port)
}

// LookupIn is Lookup with /proc at proc. A socket no readable process holds is returned
// once with PID 0; a socket held by several processes (inherited across fork) once per
// process.
func LookupIn(proc string, port int) ([]Listener, error) {
	if port < 1 || port > 65535 {
		return nil, fmt.Errorf("port %d: want 1 to 65535", port)
	}
	socks := map[uint64]netip.AddrPort{}
	var order []uint64
	for _, name := range []string{"tcp", "tcp6"} {
		f, err := os.Open(filepath.Join(proc, "net", name))
		if errors.Is(err, fs.ErrNotExist) {
			continue // no IPv6
		}
		if err != nil {
			return nil, fmt.Errorf("reading the listening sockets: %w", err)
		}
		found, err := listening(io.LimitReader(f, 64<<20), uint16(port))
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", filepath.Join(proc, "net", name), err)
		}
		for _, s := range found {
			if _, ok := socks[s.inode]; !ok {
				order = append(order, s.inode)
			}
			socks[s.inode] = s.addr
		}
	}
	if len(socks) == 0 {
		return nil, nil
	}
	holders, err := holders(proc, socks)
	if err != nil {
		return nil, err
	}
	var out []Listener
	for _, ino := range order {
		pids := holders[ino]
		if len(pids) == 0 {
			out = append(out, Listener{Addr: socks[ino], Inode: ino})
			continue
		}
		for _, pid := range pids {
			l := Listener{Addr: socks[ino], Inode: ino, PID: pid}
			l.Command = readSmall(filepath.Join(proc, strconv.Itoa(pid), "comm"))
			if b, err := readLimited(filepath.Join(proc, strconv.Itoa(pid), "cgroup"), 64<<10); err == nil {
				l.Cgroup = CgroupPath(b)
				l.Unit = UnitOf(l.Cgroup)
				l.UserUnit = UserUnitOf(l.Cgroup)
			}
			out = append(out, l)
		}
	}
	return out, nil
}

type socket struct {
	addr  netip.AddrPort
	inode uint64
}

// listening parses /proc/net/tcp{,6} and returns the sockets in state LISTEN (0A) on port.
// Addresses are written as the kernel's 32-bit words in host order, which is little
// endian on the hosts sglprov runs on (x86-64, arm64).
func listening(r io.Reader, port uint16) ([]socket, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 4096), 4096)
	var out []socket
	first := true
	for sc.Scan() {
		if first { // the header
			first = false
			continue
		}
		f := strings.Fields(sc.Text())
		if len(f) < 10 || f[3] != "0A" {
			continue
		}
		hostHex, portHex, ok := strings.Cut(f[1], ":")
		if !ok {
			return nil, fmt.Errorf("local address %q is not HEX:PORT", f[1])
		}
		p, err := strconv.ParseUint(portHex, 16, 16)
		if err != nil {
			return nil, fmt.Errorf("local address %q: %w", f[1], err)
		}
		if uint16(p) != port {
			continue
		}
		ip, err := procnet.ParseAddr(hostHex)
		if err != nil {
			return nil, fmt.Errorf("local address %q: %w", f[1], err)
		}
		ino, err := strconv.ParseUint(f[9], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("inode %q: %w", f[9], err)
		}
		out = append(out, socket{addr: netip.AddrPortFrom(ip, port), inode: ino})
	}
	return out, sc.Err()
}

// holders maps each socket inode to the processes that have it open, from the links in
// /proc/PID/fd; processes that vanish or cannot be read are skipped.
func holders(proc string, socks map[uint64]netip.AddrPort) (map[uint64][]int, error) {
	entries, err := os.ReadDir(proc)
	if err != nil {
		return nil, fmt.Errorf("listing processes: %w", err)
	}
	out := map[uint64][]int{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 {
			continue
		}
		dir := filepath.Join(proc, e.Name(), "fd")
		fds, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			link, err := os.Readlink(filepath.Join(dir, fd.Name()))
			if err != nil {
				continue
			}
			num, ok := strings.CutPrefix(link, "socket:[")
			if !ok {
				continue
			}
			ino, err := strconv.ParseUint(strings.TrimSuffix(num, "]"), 10, 64)
			if err != nil {
				continue
			}
			if _, want := socks[ino]; want {
				out[ino] = append(out[ino], pid)
			}
		}
	}
	return out, nil
}

// CgroupPath returns the cgroup path of a /proc/PID/cgroup file: the unified hierarchy's
// ("0::PATH"), else the v1 name=systemd hierarchy's; "" when it has neither.
func CgroupPath(cgroup []byte) string {
	var v1, v2 string
	for _, line := range strings.Split(string(cgroup), "\n") {
		id, rest, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		ctrl, path, ok := strings.Cut(rest, ":")
		if !ok {
			continue
		}
		switch {
		case id == "0" && ctrl == "":
			v2 = path
		case ctrl == "name=systemd":
			v1 = path
		}
	}
	// On a hybrid host the unified hierarchy may be unused ("/") while systemd's v1
	// hierarchy has the unit.
	if v2 != "" && (v2 != "/" || v1 == "") {
		return v2
	}
	return v1
}

// UnitOf returns the unit of the system's service manager that a cgroup path belongs to,
// "" when there is none. It reads the path as systemd lays it out (and as systemd's own
// cg_path_get_unit does): from the root, any number of slices ("/system.slice",
// "/system.slice/system-getty.slice", a unit's own Slice=), then the unit, then whatever
// the unit made below it ("/system.slice/sglang.service/payload" is sglang.service). Only
// that first unit is the system manager's: a user manager is itself a system unit
// (user@1000.service) and its units live below it, so
// "/user.slice/user-1000.slice/user@1000.service/app.slice/sglang.service" is
// user@1000.service, never the system unit sglang.service; nor is a unit of a container's
// systemd below its host unit ("/machine.slice/systemd-nspawn@c.service/payload/...").
// The same holds for a cgroup v1 name=systemd path, which has the same layout.
func UnitOf(path string) string {
	unit, _ := unitAt(path)
	return unit
}

// UserUnitOf returns the unit of a user's service manager that a cgroup path belongs to:
// below a system unit user@UID.service, again slices then a unit
// ("/user.slice/user-1000.slice/user@1000.service/app.slice/x.service" is x.service);
// "" for any other path.
func UserUnitOf(path string) string {
	unit, rest := unitAt(path)
	if !strings.HasPrefix(unit, "user@") || !strings.HasSuffix(unit, ".service") {
		return ""
	}
	u, _ := unitAt(rest)
	return u
}

// unitAt skips the slices at the top of path and returns the unit that follows them and
// the path below that unit; "" when the first component after the slices is no unit that
// can hold processes.
func unitAt(path string) (unit, rest string) {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	for i, p := range parts {
		// systemd prefixes a component that could clash with the cgroup file system's
		// own names with "_".
		p = strings.TrimPrefix(p, "_")
		if strings.HasSuffix(p, ".slice") && len(p) > len(".slice") {
			continue
		}
		if !isUnitName(p) {
			return "", ""
		}
		return p, "/" + strings.Join(parts[i+1:], "/")
	}
	return "", ""
}

// isUnitName reports whether name is a unit of a type whose processes have a cgroup of
// their own: NAME.service, .scope, .socket, .mount or .swap.
func isUnitName(name string) bool {
	dot := strings.LastIndexByte(name, '.')
	if dot <= 0 {
		return false
	}
	switch name[dot+1:] {
	case "service", "scope", "socket", "mount", "swap":
		return true
	}
	return false
}

func readLimited(path string, n int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, n))
}

func readSmall(path string) string {
	b, err := readLimited(path, 256)
	if err != nil {
		return ""
	}
	return string(bytes.TrimSpace(b))
}

// DescendsFrom reports whether process pid is a child, grandchild, ... of ancestor,
// following the parents in /proc/PID/stat (at most 128 generations).
func DescendsFrom(pid, ancestor int) bool {
	return descendsFrom("/proc", pid, ancestor)
}

func descendsFrom(proc string, pid, ancestor int) bool {
	for range 128 {
		if pid <= 1 {
			return false
		}
		stat, err := readLimited(filepath.Join(proc, strconv.Itoa(pid), "stat"), 4096)
		if err != nil {
			return false
		}
		// "PID (COMM) STATE PPID ...": COMM may hold spaces and parentheses.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 {
			return false
		}
		f := strings.Fields(string(stat[i+1:]))
		if len(f) < 2 {
			return false
		}
		ppid, err := strconv.Atoi(f[1])
		if err != nil {
			return false
		}
		if ppid == ancestor {
			return true
		}
		pid = ppid
	}
	return false
}
