// Package procnet reads the addresses of Linux's /proc/net/tcp and /proc/net/tcp6 tables,
// where a socket's address is its bytes in hex, in host order by 32-bit word, and its port
// is hex after a colon ("0100007F:7530" is 127.0.0.1:30000).
package procnet

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// ParseAddrPort reads one address column of the table ("HEX:PORT").
func ParseAddrPort(s string) (netip.AddrPort, error) {
	h, p, ok := strings.Cut(s, ":")
	if !ok {
		return netip.AddrPort{}, errors.New("not HEX:PORT")
	}
	port, err := strconv.ParseUint(p, 16, 16)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("reading the port: %w", err)
	}
	a, err := ParseAddr(h)
	if err != nil {
		return netip.AddrPort{}, err
	}
	return netip.AddrPortFrom(a, uint16(port)), nil
}

// ParseAddr reads the address part of a column: 8 hex digits (IPv4) or 32 (IPv6).
func ParseAddr(h string) (netip.Addr, error) {
	if len(h) != 8 && len(h) != 32 {
		return netip.Addr{}, fmt.Errorf("address of %d hex digits", len(h))
	}
	b := make([]byte, 0, 16)
	for i := 0; i < len(h); i += 8 {
		w, err := strconv.ParseUint(h[i:i+8], 16, 32)
		if err != nil {
			return netip.Addr{}, fmt.Errorf("reading the address: %w", err)
		}
		b = append(b, byte(w), byte(w>>8), byte(w>>16), byte(w>>24))
	}
	a, _ := netip.AddrFromSlice(b)
	return a, nil
}
