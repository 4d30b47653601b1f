package fatbin

import (
	"bytes"
	"compress/zlib"
	"debug/elf"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
)

func fixture(name string) string { return filepath.Join("..", "..", "testdata", "fatbin", name) }

// TestReadFixtures: the entries of libraries nvcc 13.0 built (testdata/fatbin/README.md)
// are read in file order as ptxas and nvcc made them, SASS and PTX, plain, arch-specific
// (a), family-specific (f) and zstd-compressed, and which GPUs run each follows: Hopper
// (9.0), the RTX PRO 6000 (12.0), the GB10 (12.1), and 8.9, 10.0 and 13.0 beside them.
func TestReadFixtures(t *testing.T) {
	for _, tc := range []struct {
		file    string
		entries string // in file order
		summary string
		runs    map[string]bool
	}{
		{"sm90.so", "sm_90 compute_90 sm_90", "sm_90, compute_90",
			map[string]bool{"8.9": false, "9.0": true, "10.0": true, "12.0": true, "12.1": true}},
		// compute_90a is not compiled by the driver for any other architecture.
		{"sm90a.so", "sm_90a compute_90a sm_90a", "sm_90a, compute_90a",
			map[string]bool{"8.9": false, "9.0": true, "10.0": false, "12.0": false, "12.1": false}},
		{"sm120.so", "sm_120 sm_120", "sm_120",
			map[string]bool{"9.0": false, "10.0": false, "12.0": true, "12.1": true, "13.0": false}},
		{"sm120a.so", "sm_120a sm_120a", "sm_120a",
			map[string]bool{"9.0": false, "10.0": false, "12.0": true, "12.1": false}},
		{"sm120a-compressed.so", "sm_120a sm_120a", "sm_120a",
			map[string]bool{"9.0": false, "12.0": true, "12.1": false}},
		{"sm120f.so", "sm_120f sm_120f", "sm_120f",
			map[string]bool{"9.0": false, "10.0": false, "12.0": true, "12.1": true, "13.0": false}},
		{"sm121a.so", "sm_121a sm_121a", "sm_121a",
			map[string]bool{"9.0": false, "12.0": false, "12.1": true}},
		{"ptx120.so", "compute_120", "compute_120",
			map[string]bool{"9.0": false, "12.0": true, "12.1": true, "13.0": true}},
		{"ptx120a.so", "compute_120a", "compute_120a",
			map[string]bool{"9.0": false, "12.0": true, "12.1": false, "13.0": false}},
		{"ptx120f.so", "compute_120f", "compute_120f",
			map[string]bool{"9.0": false, "12.0": true, "12.1": true, "13.0": false}},
	} {
		es, err := ReadFile(fixture(tc.file))
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range es {
			got = append(got, e.String())
		}
		if strings.Join(got, " ") != tc.entries || Summary(es) != tc.summary {
			t.Errorf("%s: entries %q (%q), want %q (%q)", tc.file, got, Summary(es), tc.entries, tc.summary)
		}
		for cc, want := range tc.runs {
			if got, err := Runs(es, cc); err != nil || got != want {
				t.Errorf("%s on %s: %v %v, want %v", tc.file, cc, got, err, want)
			}
		}
	}
}

// TestFixtureLayout: what the readings above rest on, in nvcc's own bytes. The cubins of
// sm_120, sm_120a and sm_120f carry the same e_flags (no accelerator or family bit), so the
// target ptxas recorded in each and the entry header's flags are what tell them apart; the
// compressed library's cubins are zstd payloads.
func TestFixtureLayout(t *testing.T) {
	eflags := func(name string) []uint32 {
		var out []uint32
		for _, e := range fixtureEntries(t, name) {
			out = append(out, binary.LittleEndian.Uint32(e.payload[48:]))
		}
		return out
	}
	want := []uint32{0x05007802, 0x06007802}
	for _, name := range []string{"sm120.so", "sm120a.so", "sm120f.so"} {
		if got := eflags(name); len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
			t.Errorf("%s: e_flags %#x, want %#x", name, got, want)
		}
	}
	for name, bit := range map[string]uint64{"sm120.so": 0, "sm120a.so": flagVariantArch, "sm120f.so": flagVariantFamily,
		"ptx120a.so": flagVariantArch, "ptx120f.so": flagVariantFamily, "sm90a.so": flagVariantArch} {
		for _, e := range fixtureEntries(t, name) {
			if f := binary.LittleEndian.Uint64(e.hdr[40:]); f&(flagVariantArch|flagVariantFamily) != bit {
				t.Errorf("%s: entry flags %#x, want variant bits %#x", name, f, bit)
			}
		}
	}
	for _, e := range fixtureEntries(t, "sm120a-compressed.so") {
		if f := binary.LittleEndian.Uint64(e.hdr[40:]); f&flagCompressedZstd == 0 || !bytes.HasPrefix(e.payload, []byte{0x28, 0xb5, 0x2f, 0xfd}) {
			t.Errorf("sm120a-compressed.so: entry flags %#x, payload % x...: not zstd", f, e.payload[:4])
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
	if _, err := Runs([]Entry{{Kind: KindSASS}}, "12.0"); err == nil {
		t.Error("an entry of architecture 0 judged")
	}
}

// TestReadFIFO: a FIFO named like a library is refused at once, never opened blocking.
func TestReadFIFO(t *testing.T) {
	p := filepath.Join(t.TempDir(), "ops.so")
	if err := syscall.Mkfifo(p, 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := ReadFile(p); done <- err }()
	select {
	case err := <-done:
		if !errors.Is(err, ErrNotRegular) || !strings.Contains(err.Error(), p) {
			t.Errorf("FIFO: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("reading a FIFO blocked")
	}
}

// rawEntry is one entry of a fixture's fat binary: its header and payload bytes.
type rawEntry struct{ hdr, payload []byte }

// fixtureEntries returns the entries of a fixture library's .nv_fatbin, as nvcc wrote them.
func fixtureEntries(t testing.TB, name string) []rawEntry {
	t.Helper()
	f, err := elf.Open(fixture(name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b, err := f.Section(".nv_fatbin").Data()
	if err != nil {
		t.Fatal(err)
	}
	var out []rawEntry
	for pos := 0; pos+16 <= len(b); {
		if binary.LittleEndian.Uint32(b[pos:]) != Magic {
			pos += 8
			continue
		}
		end := pos + 16 + int(binary.LittleEndian.Uint64(b[pos+8:]))
		for p := pos + 16; p+64 <= end; {
			hs := int(binary.LittleEndian.Uint32(b[p+4:]))
			n := int(binary.LittleEndian.Uint64(b[p+8:]))
			out = append(out, rawEntry{append([]byte{}, b[p:p+hs]...), append([]byte{}, b[p+hs:p+hs+n]...)})
			p += hs + n
		}
		pos = end
	}
	return out
}

// plain returns an entry's payload uncompressed (and the entry marked so).
func plain(t testing.TB, e rawEntry) rawEntry {
	t.Helper()
	flags := binary.LittleEndian.Uint64(e.hdr[40:])
	if flags&flagCompressedZstd == 0 {
		return e
	}
	n := binary.LittleEndian.Uint32(e.hdr[16:])
	d, _ := zstd.NewReader(nil)
	defer d.Close()
	out, err := d.DecodeAll(e.payload[:n], nil)
	if err != nil {
		t.Fatal(err)
	}
	h := append([]byte{}, e.hdr...)
	binary.LittleEndian.PutUint64(h[40:], flags&^flagCompressedZstd)
	binary.LittleEndian.PutUint32(h[16:], 0)
	return withPayload(rawEntry{h, nil}, out)
}

// withPayload sets an entry's payload, padded to 8 bytes as nvcc pads it.
func withPayload(e rawEntry, p []byte) rawEntry {
	h := append([]byte{}, e.hdr...)
	padded := append(append([]byte{}, p...), make([]byte, (8-len(p)%8)%8)...)
	binary.LittleEndian.PutUint64(h[8:], uint64(len(padded)))
	return rawEntry{h, padded}
}

// edit returns an entry whose payload has old replaced by new (same length kept by caller).
func edit(t testing.TB, e rawEntry, old, new string) rawEntry {
	t.Helper()
	if !bytes.Contains(e.payload, []byte(old)) {
		t.Fatalf("payload lacks %q", old)
	}
	return withPayload(e, bytes.Replace(e.payload, []byte(old), []byte(new), -1))
}

// setFlags sets a cubin's EI_ABIVERSION and e_flags.
func setFlags(e rawEntry, abi byte, flags uint32) rawEntry {
	p := append([]byte{}, e.payload...)
	p[8] = abi
	binary.LittleEndian.PutUint32(p[48:], flags)
	return rawEntry{e.hdr, p}
}

// setVersion sets a cubin's e_version.
func setVersion(e rawEntry, v uint32) rawEntry {
	p := append([]byte{}, e.payload...)
	binary.LittleEndian.PutUint32(p[20:], v)
	return rawEntry{e.hdr, p}
}

// containerOf builds one fat binary container of entries.
func containerOf(es ...rawEntry) []byte {
	var body bytes.Buffer
	for _, e := range es {
		body.Write(e.hdr)
		body.Write(e.payload)
	}
	hdr := make([]byte, 16)
	binary.LittleEndian.PutUint32(hdr[0:], Magic)
	binary.LittleEndian.PutUint16(hdr[4:], 1)
	binary.LittleEndian.PutUint16(hdr[6:], 16)
	binary.LittleEndian.PutUint64(hdr[8:], uint64(body.Len()))
	return append(hdr, body.Bytes()...)
}

// setEntryFlags sets an entry header's flags.
func setEntryFlags(e rawEntry, flags uint64) rawEntry {
	h := append([]byte{}, e.hdr...)
	binary.LittleEndian.PutUint64(h[40:], flags)
	return rawEntry{h, e.payload}
}

// TestVariants: what no library in testdata/fatbin shows, derived from nvcc's entries
// there with bytes changed as other toolkits or tools would write them (the real libraries'
// readings are TestReadFixtures'): each source of a variant alone (the cubin's note, the
// entry header's flags, e_flags' accelerator bit in both ELF layouts, the PTX .target line),
// a toolkit's own e_version, and a cubin without any, which reads as plain.
func TestVariants(t *testing.T) {
	sm90 := fixtureEntries(t, "sm90.so")        // SASS sm_90, PTX compute_90 (zstd), SASS sm_90
	sm120a := fixtureEntries(t, "sm120a.so")    // SASS sm_120a, twice
	sm120f := fixtureEntries(t, "sm120f.so")[1] // SASS sm_120f
	ptx120 := fixtureEntries(t, "ptx120.so")[0] // PTX compute_120 (zstd)
	ptx120a := fixtureEntries(t, "ptx120a.so")[0]
	cubin90, cubin120a := sm90[2], sm120a[1]
	noNote := func(e rawEntry) rawEntry { return edit(t, e, ".note.nv.tkinfo", ".note.nv.tkinfX") }
	plainHdr := func(e rawEntry) rawEntry {
		return setEntryFlags(e, binary.LittleEndian.Uint64(e.hdr[40:])&^(flagVariantArch|flagVariantFamily))
	}
	for _, tc := range []struct {
		name    string
		entries []rawEntry
		summary string
		runs    map[string]bool
	}{
		// A toolkit's own number in e_version (CUDA 12.9 writes 129), which debug/elf alone refuses.
		{"sm_120a cubin, e_version 129", []rawEntry{setVersion(cubin120a, 129)}, "sm_120a", map[string]bool{"12.0": true, "12.1": false}},
		// The note alone: entry headers without variant flags.
		{"sm_120a by the note", []rawEntry{plainHdr(cubin120a)}, "sm_120a", map[string]bool{"12.0": true, "12.1": false}},
		{"sm_120f by the note", []rawEntry{plainHdr(sm120f)}, "sm_120f", map[string]bool{"12.0": true, "12.1": true, "9.0": false}},
		// The entry header alone: cubins without a note.
		{"sm_120a by the entry header", []rawEntry{noNote(cubin120a)}, "sm_120a", map[string]bool{"12.0": true, "12.1": false}},
		{"sm_120f by the entry header", []rawEntry{noNote(sm120f)}, "sm_120f", map[string]bool{"12.0": true, "12.1": true}},
		// e_flags alone, CUDA 12.8+'s layout (ELF ABI 8): SM in bits 8-15, 0x8 = "a".
		{"sm_120a by e_flags", []rawEntry{setFlags(plainHdr(noNote(cubin120a)), 8, 0x06007808)}, "sm_120a", map[string]bool{"12.0": true, "12.1": false}},
		// None of them: the flags ptxas 13.0 wrote into every sm_120 cubin (0x06007802) read as
		// plain sm_120.
		{"no note, no header flag, no accelerator bit", []rawEntry{setFlags(plainHdr(noNote(cubin120a)), 8, 0x06007802)}, "sm_120", map[string]bool{"12.0": true, "12.1": true}},
		// The ABI before it (7): SM in the low byte, 0x800 = "a".
		{"sm_90a by old e_flags", []rawEntry{setFlags(noNote(cubin90), 7, 0x0500_0d5a)}, "sm_90a", map[string]bool{"9.0": true, "12.0": false}},
		{"sm_90 by old e_flags", []rawEntry{setFlags(noNote(cubin90), 7, 0x0500_055a)}, "sm_90", map[string]bool{"9.0": true, "12.0": false}},
		// The PTX .target line alone.
		{"compute_120a by .target", []rawEntry{plainHdr(ptx120a)}, "compute_120a", map[string]bool{"12.0": true, "12.1": false}},
	} {
		data := containerOf(tc.entries...)
		es, err := Read(bytes.NewReader(data), int64(len(data)), MaxEntries)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if Summary(es) != tc.summary {
			t.Errorf("%s: %q, want %q", tc.name, Summary(es), tc.summary)
		}
		for cc, want := range tc.runs {
			if got, err := Runs(es, cc); err != nil || got != want {
				t.Errorf("%s on %s: %v %v, want %v", tc.name, cc, got, err, want)
			}
		}
	}
	// An entry header that marks both variants is a clear error.
	both := setEntryFlags(cubin120a, 0x11|flagVariantArch|flagVariantFamily)
	if data := containerOf(both); true {
		if _, err := Read(bytes.NewReader(data), int64(len(data)), MaxEntries); err == nil || !strings.Contains(err.Error(), "both arch-specific and family-specific") {
			t.Errorf("both variant flags: %v", err)
		}
	}
	// An entry of another kind is skipped, whatever its flags; the cubin after it is read.
	other := setEntryFlags(cubin120a, 0x11|flagVariantArch|flagVariantFamily)
	binary.LittleEndian.PutUint16(other.hdr[0:], 0x40)
	if data := containerOf(other, cubin120a); true {
		if es, err := Read(bytes.NewReader(data), int64(len(data)), MaxEntries); err != nil || len(es) != 1 || Summary(es) != "sm_120a" {
			t.Errorf("another kind of entry: %v %v", es, err)
		}
	}
	// Architecture 0 (a cubin whose e_flags name none, PTX without a target and a header
	// of 0) is a clear error, never a verdict.
	zeroPTX := edit(t, plain(t, ptx120), ".target sm_120\n", ".targex sm_120\n")
	binary.LittleEndian.PutUint32(zeroPTX.hdr[28:], 0)
	for name, e := range map[string]rawEntry{
		"cubin":    setFlags(cubin120a, 8, 0x06000002),
		"PTX":      zeroPTX,
		"mismatch": setFlags(cubin120a, 8, 0x06005a02),
	} {
		data := containerOf(e)
		if _, err := Read(bytes.NewReader(data), int64(len(data)), MaxEntries); err == nil {
			t.Errorf("%s of architecture 0 or a mismatch: read", name)
		}
	}
	garbage := withPayload(cubin120a, []byte("not a cubin at all, longer than sixty-four bytes of text, surely."))
	if data := containerOf(garbage); true {
		if _, err := Read(bytes.NewReader(data), int64(len(data)), MaxEntries); err == nil || !strings.Contains(err.Error(), "not a 64-bit CUDA ELF cubin") {
			t.Errorf("garbage cubin: %v", err)
		}
	}
}

// TestReadCompressedSection: a library whose .nv_fatbin section is an ELF compressed
// section (SHF_COMPRESSED, zlib) is read through the decompressor, not panicked on.
func TestReadCompressedSection(t *testing.T) {
	b, err := os.ReadFile(fixture("sm120a.so"))
	if err != nil {
		t.Fatal(err)
	}
	f, err := elf.NewFile(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	sec := f.Section(".nv_fatbin")
	data, err := sec.Data()
	if err != nil {
		t.Fatal(err)
	}
	var z bytes.Buffer
	chdr := make([]byte, 24) // Elf64_Chdr: type, reserved, size, alignment
	binary.LittleEndian.PutUint32(chdr[0:], uint32(elf.COMPRESS_ZLIB))
	binary.LittleEndian.PutUint64(chdr[8:], uint64(len(data)))
	binary.LittleEndian.PutUint64(chdr[16:], 8)
	z.Write(chdr)
	w := zlib.NewWriter(&z)
	w.Write(data)
	w.Close()
	if z.Len() > len(data) {
		t.Fatalf("compressed %d > %d", z.Len(), len(data))
	}
	copy(b[sec.Offset:], z.Bytes())
	// Find the section header of .nv_fatbin and set SHF_COMPRESSED and the new size; as
	// a loaded (SHF_ALLOC) section, which the ELF rules forbid, it is a clear error; as a
	// section of an object (not loaded) it is read.
	shoff := binary.LittleEndian.Uint64(b[0x28:])
	shentsize := uint64(binary.LittleEndian.Uint16(b[0x3a:]))
	var h []byte
	for i := range f.Sections {
		if f.Sections[i] == sec {
			h = b[shoff+uint64(i)*shentsize:]
		}
	}
	binary.LittleEndian.PutUint64(h[8:], binary.LittleEndian.Uint64(h[8:])|uint64(elf.SHF_COMPRESSED))
	binary.LittleEndian.PutUint64(h[32:], uint64(z.Len()))
	p := filepath.Join(t.TempDir(), "ops.so")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadFile(p); err == nil || !strings.Contains(err.Error(), "compressed section .nv_fatbin") {
		t.Errorf("compressed loaded section: %v", err)
	}
	binary.LittleEndian.PutUint64(h[8:], binary.LittleEndian.Uint64(h[8:])&^uint64(elf.SHF_ALLOC))
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	es, err := ReadFile(p)
	if err != nil || Summary(es) != "sm_120a" || len(es) != 2 {
		t.Fatalf("compressed section: %v %v", es, err)
	}
}

// container builds a fat binary container of entries (kind, arch, payload bytes) whose
// payloads are zeros: the layout alone.
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
	cubin := fixtureEntries(t, "sm90.so")[2]
	ptx := fixtureEntries(t, "sm90.so")[1]
	a := containerOf(cubin, ptx)
	b := containerOf(fixtureEntries(t, "sm120a.so")[0])
	data := append(append(append([]byte{}, a...), make([]byte, 8)...), b...)
	es, err := Read(bytes.NewReader(data), int64(len(data)), MaxEntries)
	if err != nil || Summary(es) != "sm_90, sm_120a, compute_90" || len(es) != 3 {
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
	// A corrupt zstd payload (nvcc's compressed cubin with bytes overwritten) is an error
	// naming the decompression.
	broken := fixtureEntries(t, "sm120a-compressed.so")[1]
	copy(broken.payload[8:], "corrupt!")
	if d := containerOf(broken); true {
		if _, err := Read(bytes.NewReader(d), int64(len(d)), MaxEntries); err == nil || !strings.Contains(err.Error(), "decompressing") {
			t.Errorf("corrupt compressed cubin: %v", err)
		}
	}
}

// TestReadOlderCompression: an entry compressed with NVIDIA's older LZ77 variant (flag
// 0x2000 or 0x1000) is read from its header (architecture, and the variant its flags mark),
// not decompressed; one of architecture 0 is an error.
func TestReadOlderCompression(t *testing.T) {
	for _, flag := range []uint64{0x2000, 0x1000} {
		c := container([3]int{2, 90, 40}, [3]int{1, 90, 24})
		for _, off := range []int{16, 16 + 64 + 40} {
			binary.LittleEndian.PutUint64(c[off+40:], 0x11|flag)
		}
		es, err := Read(bytes.NewReader(c), int64(len(c)), MaxEntries)
		if err != nil || Summary(es) != "sm_90, compute_90" {
			t.Errorf("flag %#x: %v %v", flag, es, err)
		}
		for _, off := range []int{16, 16 + 64 + 40} {
			binary.LittleEndian.PutUint64(c[off+40:], 0x11|flag|flagVariantArch)
		}
		if es, err := Read(bytes.NewReader(c), int64(len(c)), MaxEntries); err != nil || Summary(es) != "sm_90a, compute_90a" {
			t.Errorf("flag %#x, arch-specific: %v %v", flag, es, err)
		}
		f := container([3]int{2, 120, 40}, [3]int{1, 120, 24})
		for _, off := range []int{16, 16 + 64 + 40} {
			binary.LittleEndian.PutUint64(f[off+40:], 0x11|flag|flagVariantFamily)
		}
		if es, err := Read(bytes.NewReader(f), int64(len(f)), MaxEntries); err != nil || Summary(es) != "sm_120f, compute_120f" {
			t.Errorf("flag %#x, family-specific: %v %v", flag, es, err)
		}
		zero := container([3]int{2, 0, 40})
		binary.LittleEndian.PutUint64(zero[16+40:], 0x11|flag)
		if _, err := Read(bytes.NewReader(zero), int64(len(zero)), MaxEntries); err == nil || !strings.Contains(err.Error(), "architecture 0") {
			t.Errorf("flag %#x, architecture 0: %v", flag, err)
		}
	}
}

// BenchmarkReadCompressedCubins: 3,000 entries (about libtorch_cuda's count), each nvcc's
// zstd-compressed sm_120a cubin (testdata/fatbin/sm120a-compressed.so), read with their notes.
func BenchmarkReadCompressedCubins(b *testing.B) {
	e := fixtureEntries(b, "sm120a-compressed.so")[1]
	var es []rawEntry
	for range 3000 {
		es = append(es, e)
	}
	data := containerOf(es...)
	b.ResetTimer()
	for b.Loop() {
		got, err := Read(bytes.NewReader(data), int64(len(data)), MaxEntries)
		if err != nil || len(got) != 3000 || got[0].Variant != VariantArch {
			b.Fatal(err)
		}
	}
}
