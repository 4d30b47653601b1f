package fatbin

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func fixture(name string) string { return filepath.Join("..", "..", "testdata", "fatbin", name) }

// TestReadFixtures: the entries of libraries nvcc built match what cuobjdump lists for
// them (testdata/fatbin/README.md), and which GPUs can run each follows.
func TestReadFixtures(t *testing.T) {
	for _, tc := range []struct {
		file, summary string
		n             int
		runs          map[string]bool
	}{
		{"sm90.so", "sm_90, compute_90", 3, map[string]bool{"9.0": true, "12.0": true, "8.9": false, "10.0": true}},
		{"sm120a.so", "sm_120", 2, map[string]bool{"12.0": true, "12.1": true, "9.0": false, "10.0": false}},
		{"ptx120.so", "compute_120", 1, map[string]bool{"12.0": true, "12.1": true, "9.0": false}},
	} {
		es, err := ReadFile(fixture(tc.file))
		if err != nil {
			t.Fatal(err)
		}
		if len(es) != tc.n || Summary(es) != tc.summary {
			t.Errorf("%s: %d entries %q, want %d %q", tc.file, len(es), Summary(es), tc.n, tc.summary)
		}
		for cc, want := range tc.runs {
			if got, err := Runs(es, cc); err != nil || got != want {
				t.Errorf("%s on %s: %v %v, want %v", tc.file, cc, got, err, want)
			}
		}
	}
}

func TestReadErrors(t *testing.T) {
	dir := t.TempDir()
	text := filepath.Join(dir, "x.so")
	if err := os.WriteFile(text, []byte("not an elf"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadFile(text); !errors.Is(err, ErrNotELF) {
		t.Errorf("text file: %v", err)
	}
	if _, err := ReadFile(filepath.Join(dir, "none.so")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
	// An ELF without GPU code has no entries.
	if es, err := ReadFile("/proc/self/exe"); err != nil || len(es) != 0 {
		t.Errorf("test binary: %v %v", es, err)
	}
	if _, err := Runs(nil, "12"); err == nil {
		t.Error("compute capability 12 accepted")
	}
}

// container builds a fat binary container of entries (kind, arch, payload bytes).
func container(entries ...[3]int) []byte {
	var body bytes.Buffer
	for _, e := range entries {
		h := make([]byte, 64)
		binary.LittleEndian.PutUint16(h[0:], uint16(e[0]))
		binary.LittleEndian.PutUint16(h[2:], 0x0101)
		binary.LittleEndian.PutUint32(h[4:], 64)
		binary.LittleEndian.PutUint64(h[8:], uint64(e[2]))
		binary.LittleEndian.PutUint32(h[28:], uint32(e[1]))
		body.Write(h)
		body.Write(make([]byte, e[2]))
	}
	hdr := make([]byte, 16)
	binary.LittleEndian.PutUint32(hdr[0:], Magic)
	binary.LittleEndian.PutUint16(hdr[4:], 1)
	binary.LittleEndian.PutUint16(hdr[6:], 16)
	binary.LittleEndian.PutUint64(hdr[8:], uint64(body.Len()))
	return append(hdr, body.Bytes()...)
}

// TestReadContainers: several containers with padding between them are all read; a
// container or entry that claims more bytes than there are is an error, not a panic.
func TestReadContainers(t *testing.T) {
	a := container([3]int{2, 90, 40}, [3]int{1, 90, 24})
	b := container([3]int{2, 120, 8})
	data := append(append(append([]byte{}, a...), make([]byte, 8)...), b...)
	es, err := Read(bytes.NewReader(data), int64(len(data)), MaxEntries)
	if err != nil || Summary(es) != "sm_90, sm_120, compute_90" || len(es) != 3 {
		t.Fatalf("%v %v", es, err)
	}
	bad := container([3]int{2, 90, 40})
	binary.LittleEndian.PutUint64(bad[16+8:], 1<<40)
	if _, err := Read(bytes.NewReader(bad), int64(len(bad)), MaxEntries); err == nil || !strings.Contains(err.Error(), "run past") {
		t.Errorf("oversized entry: %v", err)
	}
	short := container([3]int{2, 90, 40})[:50]
	if _, err := Read(bytes.NewReader(short), int64(len(short)), MaxEntries); err == nil {
		t.Error("truncated container read")
	}
	if _, err := Read(bytes.NewReader(a), int64(len(a)), 1); err == nil {
		t.Error("entry limit not enforced")
	}
}
