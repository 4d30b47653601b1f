package multinode

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/sglprov/sglprov/pkg/procnet"
)

// Rendezvous is what the head's kernel says of the group's rendezvous port
// (--dist-init-addr): whether something listens there (the head's server holds torch's
// TCPStore, or the fake its meeting point) and the connections the other processes hold to
// it. Every rank's processes keep a connection to the store for as long as they run, so a
// worker's server that dies drops its connections, and a new one that starts opens new
// ones, whether or not the head's server can take it in.
type Rendezvous struct {
	// Listening is true while a socket listens on the port.
	Listening bool
	// Peers are the remote ends of the established connections to the port, sorted.
	Peers []netip.AddrPort
	// Local are the addresses of this host that the connections reached (the head's own
	// processes that connect to its store come from one of them).
	Local []netip.Addr
}

// ReadRendezvous reads the rendezvous port's sockets from /proc/net/tcp and tcp6: the
// network namespace of the calling process, the head's own.
func ReadRendezvous(port int) (Rendezvous, error) {
	return ReadRendezvousIn("/proc", port)
}

// ReadRendezvousIn is ReadRendezvous with /proc at proc.
func ReadRendezvousIn(proc string, port int) (Rendezvous, error) {
	var rv Rendezvous
	if port < 1 || port > 65535 {
		return rv, fmt.Errorf("rendezvous port %d: want 1 to 65535", port)
	}
	local := map[netip.Addr]bool{}
	for _, name := range []string{"tcp", "tcp6"} {
		path := filepath.Join(proc, "net", name)
		f, err := os.Open(path)
		if errors.Is(err, fs.ErrNotExist) {
			continue // no IPv6
		}
		if err != nil {
			return rv, fmt.Errorf("reading the rendezvous sockets: %w", err)
		}
		err = parseSockets(io.LimitReader(f, 64<<20), uint16(port), &rv, local)
		f.Close()
		if err != nil {
			return rv, fmt.Errorf("reading %s: %w", path, err)
		}
	}
	sort.Slice(rv.Peers, func(i, j int) bool { return rv.Peers[i].Compare(rv.Peers[j]) < 0 })
	for a := range local {
		rv.Local = append(rv.Local, a)
	}
	sort.Slice(rv.Local, func(i, j int) bool { return rv.Local[i].Less(rv.Local[j]) })
	return rv, nil
}

// TCP states in /proc/net/tcp.
const (
	tcpEstablished = "01"
	tcpListen      = "0A"
)

// parseSockets adds the sockets of one /proc/net/tcp{,6} file on local port to rv.
// Addresses are the kernel's 32-bit words in host order, little endian on the hosts
// sglprov runs on (x86-64, arm64).
func parseSockets(r io.Reader, port uint16, rv *Rendezvous, local map[netip.Addr]bool) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 4096), 4096)
	first := true
	for sc.Scan() {
		if first { // the header
			first = false
			continue
		}
		f := strings.Fields(sc.Text())
		if len(f) < 4 || (f[3] != tcpEstablished && f[3] != tcpListen) {
			continue
		}
		la, err := procnet.ParseAddrPort(f[1])
		if err != nil {
			return fmt.Errorf("local address %q: %w", f[1], err)
		}
		if la.Port() != port {
			continue
		}
		if f[3] == tcpListen {
			rv.Listening = true
			continue
		}
		ra, err := procnet.ParseAddrPort(f[2])
		if err != nil {
			return fmt.Errorf("remote address %q: %w", f[2], err)
		}
		rv.Peers = append(rv.Peers, netip.AddrPortFrom(ra.Addr().Unmap(), ra.Port()))
		local[la.Addr().Unmap()] = true
	}
	return sc.Err()
}

// Rejoined says whether the workers of a broken group have all started again, judged by the
// head's rendezvous now against before (read when the group was found broken): a worker
// is told by its address; it has started again when it holds a connection it did not hold
// before and none of its old ones (its old server still runs while one is left). The
// head's own connections (from its local addresses) are not workers'. It returns how many
// workers have started again, and the addresses of those whose old server still holds on.
func Rejoined(before, now Rendezvous) (restarted int, holding []netip.Addr) {
	own := map[netip.Addr]bool{}
	for _, a := range append(append([]netip.Addr(nil), before.Local...), now.Local...) {
		own[a] = true
	}
	old := map[netip.AddrPort]bool{}
	for _, p := range before.Peers {
		old[p] = true
	}
	fresh, stale := map[netip.Addr]bool{}, map[netip.Addr]bool{}
	for _, p := range now.Peers {
		if own[p.Addr()] {
			continue
		}
		if old[p] {
			stale[p.Addr()] = true
		} else {
			fresh[p.Addr()] = true
		}
	}
	for a := range fresh {
		if !stale[a] {
			restarted++
		}
	}
	for a := range stale {
		holding = append(holding, a)
	}
	sort.Slice(holding, func(i, j int) bool { return holding[i].Less(holding[j]) })
	return restarted, holding
}
