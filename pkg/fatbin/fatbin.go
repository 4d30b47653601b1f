// Package fatbin reads which GPU architectures a CUDA shared library carries code for, as
// the CUDA loader sees them: the fat binaries in its ELF .nv_fatbin section (and
// __nv_relfatbin), each a header (magic 0xBA55ED50) and entries of SASS (an ELF cubin for
// one sm_XY, sm_XYa or sm_XYf) or PTX (for a virtual compute_XY, compute_XYa or
// compute_XYf). A cubin's architecture and variant are read from the cubin itself (its ELF
// header and the target ptxas recorded in it), a PTX entry's from its `.target` line; an
// entry's payload compressed by nvcc (zstd) is decompressed, bounded. No cuobjdump runs.
package fatbin

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"github.com/klauspost/compress/zstd"
)

// Magic is a fat binary container's first four bytes (little-endian).
const Magic = 0xBA55ED50

// Entry kinds, as Entry.Kind names them.
const (
	KindSASS = "sass"
	KindPTX  = "ptx"
)

// Variants of an architecture, as Entry.Variant names them.
const (
	// VariantPlain is code for sm_XY / compute_XY: SASS runs on X.Y and later minors of
	// major X; PTX is compiled by the driver for X.Y and every later architecture.
	VariantPlain = ""
	// VariantArch is arch-specific code (sm_XYa / compute_XYa): it runs on X.Y alone.
	VariantArch = "a"
	// VariantFamily is family-specific code (sm_XYf / compute_XYf): it runs on X.Y and the
	// later minors of major X.
	VariantFamily = "f"
)

// Limits of a read, so that a corrupt or hostile file costs bounded time and memory.
const (
	// MaxEntries is the most entries read from one library.
	MaxEntries = 1 << 20
	// MaxScanGap is the most bytes skipped between containers looking for the next one.
	MaxScanGap = 1 << 16
	// MaxPayload is the most bytes one entry's code may have, compressed or not.
	MaxPayload = 256 << 20
	// MaxPTXHead is how far into a PTX text its `.target` line is looked for.
	MaxPTXHead = 64 << 10
	// MaxNote is the most bytes of a cubin's tool note read.
	MaxNote = 64 << 10
)

// Sections are the ELF sections fat binaries live in.
var Sections = []string{".nv_fatbin", "__nv_relfatbin"}

// Entry is one code object of a fat binary.
type Entry struct {
	// Kind is KindSASS or KindPTX.
	Kind string
	// Arch is the architecture number: 90 for sm_90 / compute_90, 120 for sm_120a.
	Arch int
	// Variant is VariantPlain, VariantArch or VariantFamily.
	Variant string
}

// String is "sm_120a" for SASS, "compute_90" for PTX.
func (e Entry) String() string {
	if e.Kind == KindPTX {
		return "compute_" + strconv.Itoa(e.Arch) + e.Variant
	}
	return "sm_" + strconv.Itoa(e.Arch) + e.Variant
}

// ErrNotELF is returned for a file that is not an ELF object.
var ErrNotELF = errors.New("not an ELF file")

// ErrNotRegular is returned for a path that is not a regular file (a FIFO, a device, a
// folder): it is never read, so that a FIFO cannot block the caller.
var ErrNotRegular = errors.New("not a regular file")

// ReadFile returns every entry of the fat binaries in the ELF file at path, in file order;
// none for a library without GPU code. The path is opened without blocking and read only
// when it is a regular file.
func ReadFile(path string) ([]Entry, error) {
	raw, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	defer raw.Close()
	st, err := raw.Stat()
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("reading %s: %w (%s)", path, ErrNotRegular, st.Mode().Type())
	}
	var ident [4]byte
	if _, err := io.ReadFull(raw, ident[:]); err != nil || string(ident[:]) != elf.ELFMAG {
		return nil, fmt.Errorf("reading %s: %w", path, ErrNotELF)
	}
	f, err := elf.NewFile(raw)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w: %w", path, ErrNotELF, err)
	}
	defer f.Close()
	var out []Entry
	for _, name := range Sections {
		sec := f.Section(name)
		if sec == nil || sec.Type == elf.SHT_NOBITS {
			continue
		}
		var r io.ReaderAt = sec
		size := int64(sec.Size)
		if sec.Flags&elf.SHF_COMPRESSED != 0 {
			// debug/elf leaves a compressed section's ReaderAt unset; its Open
			// decompresses as it reads.
			rs := sec.Open()
			n, err := rs.Seek(0, io.SeekEnd)
			if err != nil {
				return nil, fmt.Errorf("reading %s: compressed section %s: %w", path, name, err)
			}
			r, size = &seekReaderAt{rs: rs}, n
		}
		es, err := Read(r, size, MaxEntries-len(out))
		if err != nil {
			return nil, fmt.Errorf("reading %s section %s: %w", path, name, err)
		}
		out = append(out, es...)
	}
	return out, nil
}

// seekReaderAt reads a decompressing stream at offsets by seeking it; the reads of this
// package go forwards, so the stream is decompressed about once.
type seekReaderAt struct{ rs io.ReadSeeker }

func (s *seekReaderAt) ReadAt(p []byte, off int64) (int, error) {
	if _, err := s.rs.Seek(off, io.SeekStart); err != nil {
		return 0, err
	}
	return io.ReadFull(s.rs, p)
}

// Read returns the entries of the fat binary containers in r (size bytes, a .nv_fatbin
// section's contents), at most limit of them. Containers follow one another, 8-byte
// aligned, with at most MaxScanGap bytes of padding between them.
func Read(r io.ReaderAt, size int64, limit int) ([]Entry, error) {
	var out []Entry
	var hdr [16]byte
	pos := int64(0)
	for pos+16 <= size {
		if _, err := r.ReadAt(hdr[:], pos); err != nil {
			return out, fmt.Errorf("reading a header at %#x: %w", pos, err)
		}
		if binary.LittleEndian.Uint32(hdr[0:]) != Magic {
			// Padding between containers: step to the next 8-byte boundary.
			next, err := nextMagic(r, pos, size)
			if err != nil || next < 0 {
				return out, err
			}
			pos = next
			continue
		}
		hsize := int64(binary.LittleEndian.Uint16(hdr[6:]))
		fatSize := binary.LittleEndian.Uint64(hdr[8:])
		if hsize < 16 || fatSize > uint64(size) || pos+hsize+int64(fatSize) > size {
			return out, fmt.Errorf("container at %#x: header size %d and size %d run past the section's %d bytes", pos, hsize, fatSize, size)
		}
		end := pos + hsize + int64(fatSize)
		es, err := readEntries(r, pos+hsize, end, limit-len(out))
		out = append(out, es...)
		if err != nil {
			return out, fmt.Errorf("container at %#x: %w", pos, err)
		}
		pos = end
	}
	return out, nil
}

// nextMagic returns the offset of the next container's magic after pos (8-byte aligned),
// or -1 when the rest holds none within MaxScanGap.
func nextMagic(r io.ReaderAt, pos, size int64) (int64, error) {
	var w [4]byte
	start := pos
	for p := (pos + 8) &^ 7; p+16 <= size && p-start <= MaxScanGap; p += 8 {
		if _, err := r.ReadAt(w[:], p); err != nil {
			return -1, fmt.Errorf("reading at %#x: %w", p, err)
		}
		if binary.LittleEndian.Uint32(w[:]) == Magic {
			return p, nil
		}
	}
	return -1, nil
}

// Entry header flags (the u64 at offset 40) that say how the payload is compressed: zstd
// (what nvcc 13.0 writes, testdata/fatbin), or NVIDIA's own LZ77 variant of older toolkits
// (0x1000, 0x2000), which is not decompressed here: such an entry is read from its header.
const (
	flagCompressedLZ4  = 0x1000 | 0x2000
	flagCompressedZstd = 0x8000
)

// Entry header flags that mark the variant, as nvcc 13.0 writes them for SASS and PTX alike
// (testdata/fatbin): 0x100000 for sm_XYa / compute_XYa, 0x200000 for sm_XYf / compute_XYf,
// neither for plain code.
const (
	flagVariantArch   = 0x100000
	flagVariantFamily = 0x200000
)

// headerVariant returns the variant an entry header's flags mark.
func headerVariant(flags uint64) (string, error) {
	switch flags & (flagVariantArch | flagVariantFamily) {
	case flagVariantArch:
		return VariantArch, nil
	case flagVariantFamily:
		return VariantFamily, nil
	case 0:
		return VariantPlain, nil
	}
	return "", fmt.Errorf("entry flags %#x mark the code both arch-specific and family-specific", flags)
}

// readEntries reads the entries from pos to end. An entry header is at least 64 bytes:
// kind (u16: 1 PTX, 2 or 0x10 ELF), a version (u16), the header's size (u32), the
// payload's size (u64), at offset 28 the architecture (u32), at 40 flags (u64: 0x8000
// zstd-compressed payload, 0x2000 LZ4; 0x100000 arch-specific, 0x200000 family-specific
// code), at 16 a compressed payload's size without its padding (u32), at 56 the
// uncompressed size (u64); the payload follows the header and the next entry the payload.
func readEntries(r io.ReaderAt, pos, end int64, limit int) ([]Entry, error) {
	var out []Entry
	var h [64]byte
	for pos+64 <= end {
		if len(out) >= limit {
			return out, fmt.Errorf("more than %d entries", MaxEntries)
		}
		if _, err := r.ReadAt(h[:], pos); err != nil {
			return out, fmt.Errorf("reading an entry at %#x: %w", pos, err)
		}
		kind := binary.LittleEndian.Uint16(h[0:])
		hsize := int64(binary.LittleEndian.Uint32(h[4:]))
		payload := binary.LittleEndian.Uint64(h[8:])
		arch := int(binary.LittleEndian.Uint32(h[28:]))
		packed := uint64(binary.LittleEndian.Uint32(h[16:]))
		flags := binary.LittleEndian.Uint64(h[40:])
		full := binary.LittleEndian.Uint64(h[56:])
		if hsize < 64 || payload > uint64(end-pos) || pos+hsize+int64(payload) > end {
			return out, fmt.Errorf("entry at %#x: header size %d and payload %d run past the container", pos, hsize, payload)
		}
		// A compressed payload's own size (the rest is padding to 8 bytes).
		code := payload
		if flags&(flagCompressedZstd|flagCompressedLZ4) != 0 && packed > 0 && packed <= payload {
			code = packed
		}
		if kind != 1 && kind != 2 && kind != 0x10 {
			// Neither PTX nor a cubin: skipped.
			pos += hsize + int64(payload)
			continue
		}
		var e Entry
		variant, err := headerVariant(flags)
		if err != nil {
			return out, fmt.Errorf("entry at %#x: %w", pos, err)
		}
		switch kind {
		case 1:
			e, err = readPTX(io.NewSectionReader(r, pos+hsize, int64(code)), flags, arch, variant)
		case 2, 0x10:
			e, err = readSASS(io.NewSectionReader(r, pos+hsize, int64(code)), flags, full, arch, variant)
		}
		if err != nil {
			return out, fmt.Errorf("entry at %#x: %w", pos, err)
		}
		out = append(out, e)
		pos += hsize + int64(payload)
	}
	return out, nil
}

// payloadReader returns a reader of an entry's code, decompressed; a payload in NVIDIA's
// older LZ77 variant is not decompressed: nil, and the caller reads the entry header alone
// (its architecture, and the variant its flags mark).
func payloadReader(p *io.SectionReader, flags uint64) (io.Reader, func(), error) {
	switch {
	case flags&flagCompressedZstd != 0:
		d, err := zstd.NewReader(p, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(MaxPayload))
		if err != nil {
			return nil, nil, fmt.Errorf("decompressing the payload: %w", err)
		}
		return io.LimitReader(d, MaxPayload), d.Close, nil
	case flags&flagCompressedLZ4 != 0:
		return nil, func() {}, nil
	}
	return io.LimitReader(p, MaxPayload), func() {}, nil
}

// targetRE finds a PTX module's target directive: `.target sm_120a`.
var targetRE = regexp.MustCompile(`(?m)^\s*\.target\s+sm_([0-9]+)([af]?)\b`)

// readPTX reads a PTX entry's architecture and variant from its `.target` line (the
// header's number and variant, hdrVariant, when the payload cannot be decompressed).
func readPTX(p *io.SectionReader, flags uint64, arch int, hdrVariant string) (Entry, error) {
	e := Entry{Kind: KindPTX, Arch: arch, Variant: hdrVariant}
	rd, done, err := payloadReader(p, flags)
	if err != nil {
		return e, err
	}
	defer done()
	if rd != nil {
		head, err := io.ReadAll(io.LimitReader(rd, MaxPTXHead))
		if err != nil {
			return e, fmt.Errorf("reading PTX: %w", err)
		}
		m := targetRE.FindSubmatch(head)
		if m == nil {
			return e, fmt.Errorf("PTX (header architecture %d) has no .target sm_XY line in its first %d bytes", arch, MaxPTXHead)
		}
		n, _ := strconv.Atoi(string(m[1]))
		if arch != 0 && n != arch {
			return e, fmt.Errorf("PTX .target sm_%d%s but its header says %d", n, m[2], arch)
		}
		e.Arch, e.Variant = n, string(m[2])
	}
	if e.Arch == 0 {
		return e, errors.New("PTX for architecture 0: the fat binary is corrupt or from an unknown compiler")
	}
	return e, nil
}

// CUDA ELF header facts (LLVM's llvm/include/llvm/BinaryFormat/ELF.h names them).
const (
	emCUDA = 190
	// abiCUDAV2 is ELFABIVERSION_CUDA_V2 (CUDA 12.8 and later): the SM number in bits
	// 8-15 of e_flags (EF_CUDA_SM_MASK) and EF_CUDA_ACCELERATORS = 0x8 for sm_XYa.
	abiCUDAV2 = 8
	// Before it (ELFABIVERSION_CUDA_V1 = 7) the SM number is the low byte (EF_CUDA_SM)
	// and EF_CUDA_ACCELERATORS_V1 = 0x800 marks sm_90a.
	efAccelV1 = 0x800
	efAccelV2 = 0x8
)

// toolArchRE finds the target ptxas was given, as it records it in the cubin's
// .note.nv.tkinfo: "-arch sm_120a".
var toolArchRE = regexp.MustCompile(`-arch[ =]sm_([0-9]+)([af]?)\b`)

// readSASS reads a cubin's architecture and variant. The architecture is e_flags'; the
// variant is the target ptxas recorded in the cubin's .note.nv.tkinfo when it has one
// (ptxas 13.0 sets no variant bit in e_flags, for sm_90a, sm_120a, sm_120f or sm_121a:
// testdata/fatbin), else the one the entry header marks (hdrVariant), else e_flags'
// accelerator bit. An entry whose payload cannot be decompressed is read from its header.
func readSASS(p *io.SectionReader, flags, full uint64, arch int, hdrVariant string) (Entry, error) {
	e := Entry{Kind: KindSASS, Arch: arch, Variant: hdrVariant}
	rd, done, err := payloadReader(p, flags)
	if err != nil {
		return e, err
	}
	defer done()
	if rd == nil {
		if arch == 0 {
			return e, errors.New("SASS for architecture 0 in an LZ77-compressed entry")
		}
		return e, nil
	}
	var img io.ReaderAt
	var size int64
	if flags&flagCompressedZstd != 0 {
		if full > MaxPayload {
			return e, fmt.Errorf("cubin of %d bytes uncompressed: more than %d", full, MaxPayload)
		}
		b, err := io.ReadAll(rd)
		if err != nil {
			return e, fmt.Errorf("decompressing a cubin: %w", err)
		}
		img, size = bytes.NewReader(b), int64(len(b))
	} else {
		img, size = p, p.Size()
	}
	var eh [64]byte
	if size < 64 {
		return e, fmt.Errorf("cubin of %d bytes: no ELF header", size)
	}
	if _, err := img.ReadAt(eh[:], 0); err != nil {
		return e, fmt.Errorf("reading a cubin's ELF header: %w", err)
	}
	if string(eh[:4]) != elf.ELFMAG || eh[4] != byte(elf.ELFCLASS64) || eh[5] != byte(elf.ELFDATA2LSB) ||
		binary.LittleEndian.Uint16(eh[18:]) != emCUDA {
		return e, fmt.Errorf("SASS entry (header architecture %d) is not a 64-bit CUDA ELF cubin", arch)
	}
	ef := binary.LittleEndian.Uint32(eh[48:])
	var sm int
	var accel bool
	if eh[8] >= abiCUDAV2 {
		sm, accel = int(ef>>8&0xff), ef&efAccelV2 != 0
	} else {
		sm, accel = int(ef&0xff), ef&efAccelV1 != 0
	}
	if sm == 0 {
		return e, fmt.Errorf("cubin for architecture 0 (e_flags %#x, ELF ABI version %d)", ef, eh[8])
	}
	if arch != 0 && sm != arch {
		return e, fmt.Errorf("cubin for sm_%d (e_flags %#x) in an entry for %d", sm, ef, arch)
	}
	e.Arch = sm
	if accel && e.Variant == VariantPlain {
		e.Variant = VariantArch
	}
	if n, v, ok := toolArch(img, size); ok {
		if n != sm {
			return e, fmt.Errorf("cubin for sm_%d (e_flags %#x) says ptxas made it for sm_%d%s", sm, ef, n, v)
		}
		e.Variant = v
	}
	return e, nil
}

// toolArch returns the target in a cubin's .note.nv.tkinfo, if it has one.
func toolArch(img io.ReaderAt, size int64) (int, string, bool) {
	f, err := elf.NewFile(io.NewSectionReader(evCurrentReader{img}, 0, size))
	if err != nil {
		return 0, "", false
	}
	sec := f.Section(".note.nv.tkinfo")
	if sec == nil || sec.Flags&elf.SHF_COMPRESSED != 0 || sec.Type == elf.SHT_NOBITS {
		return 0, "", false
	}
	b, err := io.ReadAll(io.LimitReader(sec.Open(), MaxNote))
	if err != nil {
		return 0, "", false
	}
	m := toolArchRE.FindSubmatch(b)
	if m == nil {
		return 0, "", false
	}
	n, err := strconv.Atoi(string(m[1]))
	return n, string(m[2]), err == nil
}

// evCurrentReader reads a cubin with its e_version (ELF64 header bytes 20-23) read as
// EV_CURRENT: some toolkits write their own number there (129 from CUDA 12.9), which
// debug/elf refuses and the CUDA loader ignores.
type evCurrentReader struct{ r io.ReaderAt }

func (e evCurrentReader) ReadAt(p []byte, off int64) (int, error) {
	n, err := e.r.ReadAt(p, off)
	for i := int64(20); i < 24; i++ {
		if j := i - off; j >= 0 && j < int64(n) {
			p[j] = 0
			if i == 20 {
				p[j] = 1
			}
		}
	}
	return n, err
}

// Fits reports whether one entry carries code a GPU of architecture number gpu (120 for
// 12.0) runs: SASS of sm_XY on X.Y and later minors of X, of sm_XYa on X.Y alone, of
// sm_XYf on X.Y and later minors of X; PTX of compute_XY on X.Y and every later
// architecture (the driver compiles it), of compute_XYa on X.Y alone, of compute_XYf on
// X.Y and later minors of X.
func Fits(e Entry, gpu int) bool {
	if e.Arch <= 0 {
		return false
	}
	sameMajor := e.Arch/10 == gpu/10 && e.Arch%10 <= gpu%10
	switch e.Variant {
	case VariantArch:
		return e.Arch == gpu
	case VariantFamily:
		return sameMajor
	}
	if e.Kind == KindPTX {
		return e.Arch <= gpu
	}
	return sameMajor
}

// Runs reports whether entries carry code a GPU of compute capability cc ("12.0") can run
// (Fits). An entry of architecture 0 is an error.
func Runs(entries []Entry, cc string) (bool, error) {
	want, err := ArchOf(cc)
	if err != nil {
		return false, err
	}
	ok := false
	for _, e := range entries {
		if e.Arch <= 0 {
			return false, fmt.Errorf("%s entry for architecture %d: not a real architecture", e.Kind, e.Arch)
		}
		ok = ok || Fits(e, want)
	}
	return ok, nil
}

// ArchOf is a compute capability's architecture number: "12.0" is 120, "9.0" 90.
func ArchOf(cc string) (int, error) {
	major, minor, ok := strings.Cut(strings.TrimSpace(cc), ".")
	ma, err1 := strconv.Atoi(major)
	mi, err2 := strconv.Atoi(minor)
	if !ok || err1 != nil || err2 != nil || ma < 1 || mi < 0 || mi > 9 {
		return 0, fmt.Errorf("compute capability %q: want MAJOR.MINOR such as 12.0", cc)
	}
	return ma*10 + mi, nil
}

// Summary lists the distinct entries, SASS then PTX, each sorted: "sm_90, sm_120a,
// compute_90"; "no GPU code" when there are none.
func Summary(entries []Entry) string {
	seen := map[Entry]bool{}
	var sass, ptx []Entry
	for _, e := range entries {
		if seen[e] {
			continue
		}
		seen[e] = true
		if e.Kind == KindPTX {
			ptx = append(ptx, e)
		} else {
			sass = append(sass, e)
		}
	}
	var parts []string
	for _, list := range [][]Entry{sass, ptx} {
		sort.Slice(list, func(i, j int) bool {
			if list[i].Arch != list[j].Arch {
				return list[i].Arch < list[j].Arch
			}
			return list[i].Variant < list[j].Variant
		})
		for _, e := range list {
			parts = append(parts, e.String())
		}
	}
	if len(parts) == 0 {
		return "no GPU code"
	}
	return strings.Join(parts, ", ")
}
