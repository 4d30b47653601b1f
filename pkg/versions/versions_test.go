package versions

import (
	"errors"
	"testing"
)

func TestRangeMatch(t *testing.T) {
	tests := []struct {
		name    string
		rng     string
		version string
		want    bool
	}{
		{"exact cc", "12.0", "12.0", true},
		{"exact cc other", "12.0", "9.0", false},
		{"exact cc not minor", "12.0", "12.1", false},
		{"exact major covers all", "580", "580.95.05", true},
		{"exact major other", "580", "590.44.01", false},
		{"exact missing zero", "12", "12.0", true},
		{"eq", "==9.0", "9.0", true},
		{"ne", "!=9.0", "9.0", false},
		{"ne other", "!=9.0", "10.0", true},
		{"ge driver", ">=575", "580.95.05", true},
		{"ge driver too old", ">=575", "550.54.15", false},
		{"ge driver equal", ">=575", "575", true},
		{"ge driver point release", ">=575", "575.51.02", true},
		{"gt", ">575", "575", false},
		{"gt point release", ">575", "575.51.02", true},
		{"ge numeric not lexical", ">=12.8", "12.10", true},
		{"ge cuda", ">=12.8", "13.0", true},
		{"ge cuda too old", ">=12.8", "12.4", false},
		{"le", "<=12.8", "12.8", true},
		{"lt", "<10.0", "10.0", false},
		{"hopper only", ">=9.0,<10.0", "9.0", true},
		{"hopper only blackwell", ">=9.0,<10.0", "12.0", false},
		{"hopper only ada", ">=9.0,<10.0", "8.9", false},
		{"spaces", " >= 9.0 , < 10.0 ", "9.0", true},
		{"leading zeros", ">=580.95.5", "580.95.05", true},
		{"version not numeric", ">=575", "unknown", false},
		{"version empty", ">=575", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := ParseRange(tt.rng)
			if err != nil {
				t.Fatalf("ParseRange(%q): %v", tt.rng, err)
			}
			if got := r.Match(tt.version); got != tt.want {
				t.Errorf("ParseRange(%q).Match(%q) = %v, want %v", tt.rng, tt.version, got, tt.want)
			}
		})
	}
}

func TestParseRangeBadSyntax(t *testing.T) {
	tests := []struct {
		name   string
		rng    string
		offset int
		msg    string
	}{
		{"empty", "", 0, `invalid version range "": empty range at offset 0`},
		{"blank", "  ", 0, `invalid version range "  ": empty range at offset 0`},
		{"empty constraint", ">=9.0,,<10", 6, `invalid version range ">=9.0,,<10": empty constraint at offset 6`},
		{"trailing comma", ">=575,", 6, `invalid version range ">=575,": empty constraint at offset 6`},
		{"operator alone", ">=", 2, `invalid version range ">=": operator ">=" without a version at offset 2`},
		{"reversed operator", "=>9.0", 0, `invalid version range "=>9.0": unknown operator "=" at offset 0`},
		{"tripled operator", ">=>9", 2, `invalid version range ">=>9": unknown operator ">=>" at offset 2`},
		{"letters", ">=abc", 2, `invalid version range ">=abc": version "abc" is not dotted numbers at offset 2`},
		{"sm name", "sm_120", 0, `invalid version range "sm_120": version "sm_120" is not dotted numbers at offset 0`},
		{"double dot", "9..0", 2, `invalid version range "9..0": empty component in version "9..0" at offset 2`},
		{"second constraint", ">=9.0,<1x", 7, `invalid version range ">=9.0,<1x": version "1x" is not dotted numbers at offset 7`},
		{"negative", ">=-1", 2, `invalid version range ">=-1": version "-1" is not dotted numbers at offset 2`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseRange(tt.rng)
			var re *RangeError
			if !errors.As(err, &re) {
				t.Fatalf("ParseRange(%q) = %v, want a *RangeError", tt.rng, err)
			}
			if re.Offset != tt.offset || err.Error() != tt.msg {
				t.Errorf("ParseRange(%q) = %q (offset %d), want %q (offset %d)", tt.rng, err, re.Offset, tt.msg, tt.offset)
			}
		})
	}
}

func TestCompareVersions(t *testing.T) {
	tests := []struct {
		a, b string
		want int
	}{
		{"580.95.05", "575", 1},
		{"12.10", "12.9", 1},
		{"9.0", "9", 0},
		{"8.9", "12.0", -1},
		{"junk", "1.0", -1},
	}
	for _, tt := range tests {
		if got := CompareVersions(tt.a, tt.b); got != tt.want {
			t.Errorf("CompareVersions(%q, %q) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
	}
}

func TestRangeString(t *testing.T) {
	r, err := ParseRange("  >=9.0,<10.0 ")
	if err != nil {
		t.Fatal(err)
	}
	if r.String() != ">=9.0,<10.0" {
		t.Errorf("String = %q", r.String())
	}
	if !(Range{}).Match("anything") {
		t.Errorf("the zero Range must match everything")
	}
}
