package generation

import (
	"strconv"
	"testing"
)

// TestDescribeWithNothingKept: a prune that kept nothing says so, not "kept ;".
func TestDescribeWithNothingKept(t *testing.T) {
	format := func(n int64) string { return strconv.FormatInt(n, 10) + " B" }
	if got := (&Pruned{Freed: []Freed{{Key: "0123456789abcdef"}}, Bytes: 5}).Describe(format); got != "kept none; freed 0123456789ab (5 B)" {
		t.Errorf("Describe = %q", got)
	}
	if got := (&Pruned{Kept: []string{"0123456789abcdef"}}).Describe(format); got != "kept 0123456789ab; freed nothing" {
		t.Errorf("Describe = %q", got)
	}
}
