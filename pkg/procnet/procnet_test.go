package procnet

import (
	"net/netip"
	"strings"
	"testing"
)

func TestParseAddrPort(t *testing.T) {
	tests := []struct {
		in, want, err string
	}{
		{"0100007F:7530", "127.0.0.1:30000", ""},
		{"00000000:0016", "0.0.0.0:22", ""},
		{"00000000000000000000000001000000:1F90", "[::1]:8080", ""},
		{"0000000000000000FFFF00000100007F:7531", "[::ffff:127.0.0.1]:30001", ""},
		{"0100007F", "", "not HEX:PORT"},
		{"0100007F:XYZ", "", "reading the port"},
		{"01007F:0016", "", "address of 6 hex digits"},
		{"0100007G:0016", "", "reading the address"},
	}
	for _, tt := range tests {
		got, err := ParseAddrPort(tt.in)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("ParseAddrPort(%q) = %v, %v; want error %q", tt.in, got, err, tt.err)
			}
			continue
		}
		if err != nil || got != netip.MustParseAddrPort(tt.want) {
			t.Errorf("ParseAddrPort(%q) = %v, %v; want %s", tt.in, got, err, tt.want)
		}
	}
}
