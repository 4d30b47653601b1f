// Package fatbin reads which GPU architectures a CUDA shared library carries code for: the
// fat binaries in its ELF .nv_fatbin section (and __nv_relfatbin), each a header (magic
// 0xBA55ED50) and entries of SASS (an ELF cubin for one sm_XY) or PTX (for a virtual
// compute_XY), read from their headers alone (no payload is decompressed, no cuobjdump
// runs).
package fatbin

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
)

// Magic is a fat binary container's first four bytes (little-endian).
const Magic = 0xBA55ED50

// Entry kinds, as Entry.Kind names them.
const (
	KindSASS = "sass"
	KindPTX  = "ptx"
)

// Limits of a read, so that a corrupt or hostile file costs bounded time.
const (
	// MaxEntries is the most entries read from one library.
	MaxEntries = 1 << 20
	// MaxScanGap is the most bytes skipped between containers looking for the next one.
	MaxScanGap = 1 << 16
)

// Sections are the ELF sections fat binaries live in.
var Sections = []string{".nv_fatbin", "__nv_relfatbin"}

// Entry is one code object of a fat binary.
type Entry struct {
	// Kind is KindSASS or KindPTX.
	Kind string
	// Arch is the architecture number: 90 for sm_90 / compute_90, 120 for sm_120.
	Arch int
}

// String is "sm_120" for SASS, "compute_90" for PTX.
func (e Entry) String() string {
	if e.Kind == KindPTX {
		return "compute_" + strconv.Itoa(e.Arch)
	}
	return "sm_" + strconv.Itoa(e.Arch)
}

// ErrNotELF is returned for a file that is not an ELF object.
var ErrNotELF = errors.New("not an ELF file")

// ReadFile returns every entry of the fat binaries in the ELF file at path, in file order;
// none for a library without GPU code.
func ReadFile(path string) ([]Entry, error) {
	raw, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	defer raw.Close()
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
		es, err := Read(sec, int64(sec.Size), MaxEntries-len(out))
		if err != nil {
			return nil, fmt.Errorf("reading %s section %s: %w", path, name, err)
		}
		out = append(out, es...)
	}
	return out, nil
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

// readEntries reads the entry headers from pos to end. An entry header is at least 64
// bytes: kind (u16: 1 PTX, 2 or 0x10 ELF), a version (u16), the header's size (u32), the
// payload's size (u64), then at offset 28 the architecture (u32); the next entry follows
// the payload.
func readEntries(r io.ReaderAt, pos, end int64, limit int) ([]Entry, error) {
	var out []Entry
	var h [32]byte
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
		if hsize < 64 || payload > uint64(end-pos) || pos+hsize+int64(payload) > end {
			return out, fmt.Errorf("entry at %#x: header size %d and payload %d run past the container", pos, hsize, payload)
		}
		switch kind {
		case 1:
			out = append(out, Entry{Kind: KindPTX, Arch: arch})
		case 2, 0x10:
			out = append(out, Entry{Kind: KindSASS, Arch: arch})
		}
		pos += hsize + int64(payload)
	}
	return out, nil
}

// Runs reports whether entries carry code a GPU of compute capability cc ("12.0") can run:
// SASS of the same major version and a minor version no higher, or PTX of an architecture
// no newer (the driver compiles it).
func Runs(entries []Entry, cc string) (bool, error) {
	want, err := ArchOf(cc)
	if err != nil {
		return false, err
	}
	for _, e := range entries {
		switch e.Kind {
		case KindSASS:
			if e.Arch/10 == want/10 && e.Arch%10 <= want%10 {
				return true, nil
			}
		case KindPTX:
			if e.Arch <= want {
				return true, nil
			}
		}
	}
	return false, nil
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

// Summary lists the distinct entries, SASS then PTX, each sorted: "sm_90, sm_100, compute_90";
// "no GPU code" when there are none.
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
		sort.Slice(list, func(i, j int) bool { return list[i].Arch < list[j].Arch })
		for _, e := range list {
			parts = append(parts, e.String())
		}
	}
	if len(parts) == 0 {
		return "no GPU code"
	}
	return strings.Join(parts, ", ")
}
