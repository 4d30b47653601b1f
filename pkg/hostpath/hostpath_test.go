package hostpath

import "testing"

func TestUnder(t *testing.T) {
	tests := []struct{ root, p, want string }{
		{"", "/etc/x", "/etc/x"},
		{"/", "/etc/x", "/etc/x"},
		{"/mnt/img", "/etc/x", "/mnt/img/etc/x"},
		{"/mnt/img", "/etc/../x", "/mnt/img/x"},
		{"/mnt/img", "rel/x", "rel/x"},
	}
	for _, tc := range tests {
		if got := Under(tc.root, tc.p); got != tc.want {
			t.Errorf("Under(%q, %q) = %q, want %q", tc.root, tc.p, got, tc.want)
		}
	}
}
