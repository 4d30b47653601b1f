// Package safetensors checks safetensors weight files without reading their data: the
// header parses, every tensor's bytes lie inside the data section without overlapping,
// their count agrees with the dtype and shape, and the data section ends where the file
// does. CheckIndex checks a sharded model's index against its shards.
package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// MaxHeaderSize bounds the JSON header (100 MiB, as the reference implementation does).
const MaxHeaderSize = 100 << 20

// IndexFile is the name of a sharded model's index.
const IndexFile = "model.safetensors.index.json"

// dtypeBits are the sizes of the dtypes whose size is known, in bits.
var dtypeBits = map[string]int{
	"BOOL": 8, "U8": 8, "I8": 8, "F8_E4M3": 8, "F8_E5M2": 8, "F8_E8M0": 8,
	"I16": 16, "U16": 16, "F16": 16, "BF16": 16,
	"I32": 32, "U32": 32, "F32": 32,
	"I64": 64, "U64": 64, "F64": 64, "C64": 64,
	"F4": 4, "F6_E2M3": 6, "F6_E3M2": 6,
}

// DTypeBits returns the size of one element of dtype in bits, and whether it is known.
// Unknown dtypes are accepted by the checks; only their byte counts go unchecked.
func DTypeBits(dtype string) (int, bool) {
	b, ok := dtypeBits[dtype]
	return b, ok
}

// Tensor is one tensor of a header.
type Tensor struct {
	// Name is the tensor's name.
	Name string
	// DType is its element type as written ("BF16", "F8_E4M3", "U8", ...).
	DType string
	// Shape is its shape; an empty shape is a scalar.
	Shape []int64
	// Begin and End are its byte offsets within the data section, End exclusive.
	Begin, End int64
}

// Header is a parsed safetensors header.
type Header struct {
	// Size is the JSON header's length in bytes; the data section starts at 8+Size.
	Size int64
	// Metadata is the optional __metadata__ map.
	Metadata map[string]string
	// Tensors are the tensors sorted by their begin offset.
	Tensors []Tensor
	// DataSize is the length of the data section the tensors cover.
	DataSize int64
}

// Names returns the tensors' names as a set.
func (h *Header) Names() map[string]bool {
	m := make(map[string]bool, len(h.Tensors))
	for _, t := range h.Tensors {
		m[t.Name] = true
	}
	return m
}

type rawTensor struct {
	DType       string          `json:"dtype"`
	Shape       []int64         `json:"shape"`
	DataOffsets json.RawMessage `json:"data_offsets"`
}

// ReadHeader reads and checks the header of the safetensors file at path; it reads only
// the header, never the data. Errors name the file and, where one is at fault, the tensor.
func ReadHeader(path string) (*Header, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("opening safetensors file: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("reading safetensors file %s: %w", path, err)
	}
	h, err := Parse(f, fi.Size())
	if err != nil {
		return nil, fmt.Errorf("checking safetensors file %s: %w", path, err)
	}
	return h, nil
}

// Parse reads the header of a safetensors file of the given size from r and checks it
// against the size: the data section must end exactly at the end of the file.
func Parse(r io.ReaderAt, size int64) (*Header, error) {
	var lenBuf [8]byte
	if size < 8 {
		return nil, fmt.Errorf("file is %d bytes, too short for a header", size)
	}
	if _, err := r.ReadAt(lenBuf[:], 0); err != nil {
		return nil, fmt.Errorf("reading header length: %w", err)
	}
	n := binary.LittleEndian.Uint64(lenBuf[:])
	if n > MaxHeaderSize {
		return nil, fmt.Errorf("header length %d exceeds the %d-byte limit", n, MaxHeaderSize)
	}
	if int64(n) > size-8 {
		return nil, fmt.Errorf("header length %d runs past the end of the %d-byte file", n, size)
	}
	buf := make([]byte, n)
	if _, err := r.ReadAt(buf, 8); err != nil && !(errors.Is(err, io.EOF) && int64(n) == size-8) {
		return nil, fmt.Errorf("reading header: %w", err)
	}
	h, err := ParseHeaderJSON(buf)
	if err != nil {
		return nil, err
	}
	h.Size = int64(n)
	if got := size - 8 - int64(n); got != h.DataSize {
		if got < h.DataSize {
			last := h.Tensors[len(h.Tensors)-1]
			return nil, fmt.Errorf("tensor %q ends at data offset %d but the data section has only %d bytes (file truncated?)", last.Name, last.End, got)
		}
		return nil, fmt.Errorf("data section has %d bytes but the tensors cover %d (trailing bytes)", got, h.DataSize)
	}
	return h, nil
}

// ParseHeaderJSON parses and checks the JSON part of a header: every entry but
// __metadata__ is a tensor with a dtype, a shape and data offsets; the offsets are ordered,
// contiguous from 0 without gaps or overlaps, and agree with the dtype and shape where the
// dtype's size is known. DataSize is the end of the last tensor.
func ParseHeaderJSON(buf []byte) (*Header, error) {
	trimmed := bytes.TrimRight(buf, " \x00")
	var raw map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	if err := dec.Decode(&raw); err != nil {
		return nil, fmt.Errorf("parsing header JSON: %w", err)
	}
	if raw == nil {
		return nil, errors.New("parsing header JSON: not an object")
	}
	if dec.More() {
		return nil, errors.New("parsing header JSON: trailing data after the object")
	}
	h := &Header{}
	for name, v := range raw {
		if name == "__metadata__" {
			if err := json.Unmarshal(v, &h.Metadata); err != nil {
				return nil, fmt.Errorf("parsing __metadata__: want a map of strings: %w", err)
			}
			continue
		}
		t, err := parseTensor(name, v)
		if err != nil {
			return nil, err
		}
		h.Tensors = append(h.Tensors, t)
	}
	sort.Slice(h.Tensors, func(i, j int) bool {
		a, b := h.Tensors[i], h.Tensors[j]
		if a.Begin != b.Begin {
			return a.Begin < b.Begin
		}
		if a.End != b.End {
			return a.End < b.End
		}
		return a.Name < b.Name
	})
	var end int64
	for i, t := range h.Tensors {
		if t.Begin < end {
			prev := h.Tensors[i-1]
			return nil, fmt.Errorf("tensor %q (bytes %d-%d) overlaps tensor %q (bytes %d-%d)", t.Name, t.Begin, t.End, prev.Name, prev.Begin, prev.End)
		}
		if t.Begin > end {
			return nil, fmt.Errorf("tensor %q starts at data offset %d, leaving a gap after offset %d", t.Name, t.Begin, end)
		}
		end = t.End
	}
	h.DataSize = end
	return h, nil
}

func parseTensor(name string, v json.RawMessage) (Tensor, error) {
	var rt rawTensor
	dec := json.NewDecoder(bytes.NewReader(v))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rt); err != nil {
		return Tensor{}, fmt.Errorf("tensor %q: parsing entry: %w", name, err)
	}
	if rt.DType == "" {
		return Tensor{}, fmt.Errorf("tensor %q: no dtype", name)
	}
	if rt.Shape == nil {
		return Tensor{}, fmt.Errorf("tensor %q: no shape", name)
	}
	var offs []int64
	if err := json.Unmarshal(rt.DataOffsets, &offs); err != nil || len(offs) != 2 {
		return Tensor{}, fmt.Errorf("tensor %q: data_offsets %s: want [begin, end]", name, string(rt.DataOffsets))
	}
	t := Tensor{Name: name, DType: rt.DType, Shape: rt.Shape, Begin: offs[0], End: offs[1]}
	if t.Begin < 0 || t.End < t.Begin {
		return Tensor{}, fmt.Errorf("tensor %q: data_offsets [%d, %d] are not ordered", name, t.Begin, t.End)
	}
	nbits, known := dtypeBits[t.DType]
	elems := uint64(1)
	for _, d := range t.Shape {
		if d < 0 {
			return Tensor{}, fmt.Errorf("tensor %q: negative dimension in shape %v", name, t.Shape)
		}
		hi, lo := bits.Mul64(elems, uint64(d))
		if hi != 0 || lo > math.MaxInt64/64 {
			return Tensor{}, fmt.Errorf("tensor %q: shape %v is too large", name, t.Shape)
		}
		elems = lo
	}
	if known {
		totalBits := elems * uint64(nbits)
		if totalBits%8 != 0 {
			return Tensor{}, fmt.Errorf("tensor %q: %d elements of %s do not fill whole bytes", name, elems, t.DType)
		}
		if want := int64(totalBits / 8); want != t.End-t.Begin {
			return Tensor{}, fmt.Errorf("tensor %q: %s%v needs %d bytes but data_offsets [%d, %d] hold %d", name, t.DType, t.Shape, want, t.Begin, t.End, t.End-t.Begin)
		}
	}
	return t, nil
}

// EncodeHeader returns the header bytes (length prefix and JSON, padded with spaces to a
// multiple of 8) for tensors laid out one after another in the order given; it sets each
// tensor's Begin and End. The caller writes the tensors' data after it, in the same order.
func EncodeHeader(meta map[string]string, tensors []Tensor) ([]byte, error) {
	m := map[string]any{}
	if len(meta) > 0 {
		m["__metadata__"] = meta
	}
	var off int64
	for i := range tensors {
		t := &tensors[i]
		if t.Name == "" || t.Name == "__metadata__" {
			return nil, fmt.Errorf("encoding header: bad tensor name %q", t.Name)
		}
		if _, dup := m[t.Name]; dup {
			return nil, fmt.Errorf("encoding header: tensor %q twice", t.Name)
		}
		nbits, ok := dtypeBits[t.DType]
		if !ok {
			return nil, fmt.Errorf("encoding header: tensor %q has unknown dtype %q", t.Name, t.DType)
		}
		elems := int64(1)
		for _, d := range t.Shape {
			elems *= d
		}
		t.Begin, t.End = off, off+elems*int64(nbits)/8
		off = t.End
		shape := t.Shape
		if shape == nil {
			shape = []int64{}
		}
		m[t.Name] = map[string]any{"dtype": t.DType, "shape": shape, "data_offsets": []int64{t.Begin, t.End}}
	}
	js, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encoding header: %w", err)
	}
	if pad := len(js) % 8; pad != 0 {
		js = append(js, bytes.Repeat([]byte(" "), 8-pad)...)
	}
	out := make([]byte, 8, 8+len(js))
	binary.LittleEndian.PutUint64(out, uint64(len(js)))
	return append(out, js...), nil
}

// Index is a sharded model's model.safetensors.index.json.
type Index struct {
	// Metadata holds total_size and the like.
	Metadata map[string]any `json:"metadata"`
	// WeightMap maps each tensor name to the shard file holding it.
	WeightMap map[string]string `json:"weight_map"`
}

// ReadIndex reads the index file at path.
func ReadIndex(path string) (*Index, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading index: %w", err)
	}
	var idx Index
	if err := json.Unmarshal(b, &idx); err != nil {
		return nil, fmt.Errorf("parsing index %s: %w", path, err)
	}
	if idx.WeightMap == nil {
		return nil, fmt.Errorf("parsing index %s: no weight_map", path)
	}
	return &idx, nil
}

// CheckIndex checks the model.safetensors.index.json in dir, if there is one: every shard
// it names exists (a plain name inside dir) and has a valid header, and every tensor of
// its weight_map is in the shard it names. It reports whether an index was found.
func CheckIndex(dir string) (bool, error) {
	p := filepath.Join(dir, IndexFile)
	if _, err := os.Stat(p); errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	idx, err := ReadIndex(p)
	if err != nil {
		return true, err
	}
	byShard := map[string][]string{}
	for tensor, shard := range idx.WeightMap {
		byShard[shard] = append(byShard[shard], tensor)
	}
	shards := make([]string, 0, len(byShard))
	for s := range byShard {
		shards = append(shards, s)
	}
	sort.Strings(shards)
	for _, shard := range shards {
		tensors := byShard[shard]
		sort.Strings(tensors)
		if shard == "" || filepath.IsAbs(shard) || strings.Contains(shard, "\\") || containsDotDot(shard) {
			return true, fmt.Errorf("checking %s: tensor %q names shard %q, which is not a path inside the model folder", p, tensors[0], shard)
		}
		sp := filepath.Join(dir, filepath.FromSlash(shard))
		if _, err := os.Stat(sp); err != nil {
			return true, fmt.Errorf("checking %s: tensor %q names shard %s, which is missing: %w", p, tensors[0], shard, err)
		}
		h, err := ReadHeader(sp)
		if err != nil {
			return true, err
		}
		names := h.Names()
		for _, t := range tensors {
			if !names[t] {
				return true, fmt.Errorf("checking %s: tensor %q is not in shard %s, where the index places it", p, t, shard)
			}
		}
	}
	return true, nil
}

func containsDotDot(p string) bool {
	for _, el := range strings.Split(p, "/") {
		if el == ".." {
			return true
		}
	}
	return false
}
