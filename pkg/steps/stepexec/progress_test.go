package stepexec

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestMonitor(t *testing.T) {
	m := newMonitor(time.Unix(0, 0), 3)
	for _, chunk := range []string{"-- conf", "ig\n[  5%] Build", "ing C object a.o\r\n", "[2/9] Linking x\rnoise\n",
		"warning: y\n", "tail without newline"} {
		m.feed([]byte(chunk))
	}
	m.flush()
	elapsed, lines, last := m.snapshot(time.Unix(90, 0))
	if elapsed != 90*time.Second || lines != 6 || last != "[2/9] Linking x" {
		t.Errorf("snapshot = %v, %d, %q", elapsed, lines, last)
	}
	if diff := cmp.Diff([]string{"noise", "warning: y", "tail without newline"}, m.tail()); diff != "" {
		t.Errorf("tail (-want +got):\n%s", diff)
	}
	for line, want := range map[string]bool{
		"[ 42%] Building CUDA object x.o": true, "[100%] Built target hello": true, "[123/456] Building CXX object y.o": true,
		"[1/2]": false, "[x] y": false, "  [ 42%] indented": false, "-- [ 1%]": false,
	} {
		if got := progressLine.MatchString(line); got != want {
			t.Errorf("progressLine.MatchString(%q) = %t, want %t", line, got, want)
		}
	}
	long := "[12/456] /usr/local/cuda/bin/nvcc -forward-unknown-to-host-compiler " + strings.Repeat("-DX=1 ", 30) +
		"-c /opt/sglang/sgl-kernel/csrc/gemm/nvfp4_scaled_mm_kernels.cu -o CMakeFiles/x.dir/nvfp4.cu.o"
	linkOnly := "[455/456] : && /usr/bin/g++ " + strings.Repeat("-Wl,x ", 30) + "-o sm100/common_ops.abi3.so x.o"
	for in, want := range map[string]string{
		long:                                 "[12/456] /opt/sglang/sgl-kernel/csrc/gemm/nvfp4_scaled_mm_kernels.cu",
		linkOnly:                             "[455/456] sm100/common_ops.abi3.so",
		"[ 42%] Building CUDA object x.cu.o": "[ 42%] Building CUDA object x.cu.o",
		"[1/9] " + strings.Repeat("y", 200):  "[1/9] " + strings.Repeat("y", maxTarget-6) + "…",
	} {
		if got := target(in); got != want {
			t.Errorf("target(%.40q…) = %q, want %q", in, got, want)
		}
	}
	c := newMonitor(time.Unix(0, 0), 2)
	c.feed([]byte("\x1b[1m\x1b[32m[ 50%] Building C object a.o\x1b[0m\n\x1b[31merror:\x1b[0m boom\n"))
	if _, _, last := c.snapshot(time.Unix(0, 0)); last != "[ 50%] Building C object a.o" {
		t.Errorf("last with colours = %q", last)
	}
	if diff := cmp.Diff([]string{"[ 50%] Building C object a.o", "error: boom"}, c.tail()); diff != "" {
		t.Errorf("tail with colours (-want +got):\n%s", diff)
	}
	if got := truncate("abcdef", 4); got != "abc…" {
		t.Errorf("truncate = %q", got)
	}
}
