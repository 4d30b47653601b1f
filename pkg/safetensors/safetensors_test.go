package safetensors_test

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sglprov/sglprov/pkg/safetensors"
)

// file builds a safetensors file from a raw JSON header and a data section.
func file(header string, data int) []byte {
	var b bytes.Buffer
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(header)))
	b.Write(n[:])
	b.WriteString(header)
	b.Write(make([]byte, data))
	return b.Bytes()
}

func goodTensors() []safetensors.Tensor {
	return []safetensors.Tensor{
		{Name: "model.layers.0.input_layernorm.weight", DType: "BF16", Shape: []int64{8}},
		{Name: "model.layers.0.mlp.experts.0.down_proj.weight", DType: "U8", Shape: []int64{8, 4}},
		{Name: "model.layers.0.mlp.experts.0.down_proj.weight_scale", DType: "F8_E4M3", Shape: []int64{8, 1}},
		{Name: "model.layers.0.mlp.experts.0.down_proj.weight_scale_2", DType: "F32", Shape: []int64{}},
		{Name: "packed", DType: "F4", Shape: []int64{2, 4}},
	}
}

func encode(t *testing.T, tensors []safetensors.Tensor) []byte {
	t.Helper()
	hdr, err := safetensors.EncodeHeader(map[string]string{"format": "pt"}, tensors)
	if err != nil {
		t.Fatal(err)
	}
	return append(hdr, make([]byte, tensors[len(tensors)-1].End)...)
}

func write(t *testing.T, dir, name string, b []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestReadHeader(t *testing.T) {
	good := encode(t, goodTensors())
	tests := []struct {
		name    string
		content []byte
		wantErr string // "" for success
	}{
		{name: "good", content: good},
		{name: "no tensors", content: file(`{"__metadata__":{"format":"pt"}}`, 0)},
		{name: "unknown dtype kept", content: file(`{"x":{"dtype":"F6_NEW","shape":[3],"data_offsets":[0,5]}}`, 5)},
		{name: "truncated data", content: good[:len(good)-3], wantErr: "file truncated"},
		{name: "trailing bytes", content: append(append([]byte{}, good...), 0), wantErr: "trailing bytes"},
		{name: "header length beyond file", content: func() []byte {
			b := append([]byte{}, good...)
			binary.LittleEndian.PutUint64(b, uint64(len(b)))
			return b
		}(), wantErr: "runs past the end"},
		{name: "header length over limit", content: func() []byte {
			b := append([]byte{}, good...)
			binary.LittleEndian.PutUint64(b, 1<<40)
			return b
		}(), wantErr: "exceeds"},
		{name: "too short", content: []byte{1, 2, 3}, wantErr: "too short"},
		{name: "bad JSON", content: file(`{"x":{"dtype":"U8",`, 0), wantErr: "parsing header JSON"},
		{name: "not an object", content: file(`[1,2]`, 0), wantErr: "parsing header JSON"},
		{name: "overlapping offsets", content: file(`{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}}`, 6),
			wantErr: `tensor "b" (bytes 2-6) overlaps tensor "a"`},
		{name: "gap", content: file(`{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],"data_offsets":[6,10]}}`, 10),
			wantErr: `tensor "b" starts at data offset 6`},
		{name: "size disagrees with shape", content: file(`{"w":{"dtype":"BF16","shape":[4],"data_offsets":[0,4]}}`, 4),
			wantErr: `tensor "w": BF16[4] needs 8 bytes`},
		{name: "half byte of F4", content: file(`{"w":{"dtype":"F4","shape":[3],"data_offsets":[0,2]}}`, 2),
			wantErr: "do not fill whole bytes"},
		{name: "reversed offsets", content: file(`{"w":{"dtype":"U8","shape":[0],"data_offsets":[4,0]}}`, 4),
			wantErr: "not ordered"},
		{name: "missing dtype", content: file(`{"w":{"shape":[1],"data_offsets":[0,1]}}`, 1), wantErr: `tensor "w": no dtype`},
		{name: "unknown field", content: file(`{"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"x":1}}`, 1), wantErr: `tensor "w"`},
		{name: "bad metadata", content: file(`{"__metadata__":{"n":1}}`, 0), wantErr: "__metadata__"},
		{name: "shape overflow", content: file(`{"w":{"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,1]}}`, 1), wantErr: "too large"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := write(t, t.TempDir(), "model.safetensors", tt.content)
			h, err := safetensors.ReadHeader(p)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				if h.DataSize+8+h.Size != int64(len(tt.content)) {
					t.Errorf("header %d + data %d != file %d", h.Size, h.DataSize, len(tt.content))
				}
				return
			}
			if err == nil {
				t.Fatalf("no error, want %q", tt.wantErr)
			}
			if !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), p) {
				t.Errorf("error %q: want it to name the file and contain %q", err, tt.wantErr)
			}
		})
	}
}

func TestGoodHeaderContents(t *testing.T) {
	p := write(t, t.TempDir(), "m.safetensors", encode(t, goodTensors()))
	h, err := safetensors.ReadHeader(p)
	if err != nil {
		t.Fatal(err)
	}
	if h.Metadata["format"] != "pt" || len(h.Tensors) != 5 || h.Size%8 != 0 {
		t.Errorf("header = %+v", h)
	}
	// 16 + 32 + 8 + 4 + 4 bytes, in order.
	if h.DataSize != 64 || h.Tensors[0].Name != "model.layers.0.input_layernorm.weight" {
		t.Errorf("data size %d, first tensor %q", h.DataSize, h.Tensors[0].Name)
	}
}

func writeModel(t *testing.T, dir string, shards map[string][]safetensors.Tensor, weightMap map[string]string) {
	t.Helper()
	for name, ts := range shards {
		write(t, dir, name, encode(t, ts))
	}
	b, err := json.Marshal(map[string]any{"metadata": map[string]any{"total_size": 1}, "weight_map": weightMap})
	if err != nil {
		t.Fatal(err)
	}
	write(t, dir, safetensors.IndexFile, b)
}

func TestCheckIndex(t *testing.T) {
	a := []safetensors.Tensor{{Name: "a.weight", DType: "U8", Shape: []int64{4}}, {Name: "a.bias", DType: "F32", Shape: []int64{1}}}
	b := []safetensors.Tensor{{Name: "b.weight", DType: "BF16", Shape: []int64{2}}}
	shards := map[string][]safetensors.Tensor{"m-1.safetensors": a, "m-2.safetensors": b}
	tests := []struct {
		name      string
		weightMap map[string]string
		wantErr   []string
	}{
		{name: "good", weightMap: map[string]string{"a.weight": "m-1.safetensors", "a.bias": "m-1.safetensors", "b.weight": "m-2.safetensors"}},
		{name: "missing tensor", weightMap: map[string]string{"a.weight": "m-1.safetensors", "c.weight": "m-1.safetensors"},
			wantErr: []string{`"c.weight"`, "m-1.safetensors"}},
		{name: "tensor in the other shard", weightMap: map[string]string{"b.weight": "m-1.safetensors"},
			wantErr: []string{`"b.weight"`, "not in shard m-1.safetensors"}},
		{name: "missing shard", weightMap: map[string]string{"a.weight": "m-1.safetensors", "z.weight": "m-3.safetensors"},
			wantErr: []string{`"z.weight"`, "m-3.safetensors", "missing"}},
		{name: "shard outside", weightMap: map[string]string{"a.weight": "../m-1.safetensors"},
			wantErr: []string{`"a.weight"`, "not a path inside"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			writeModel(t, dir, shards, tt.weightMap)
			found, err := safetensors.CheckIndex(dir)
			if !found {
				t.Error("index not found")
			}
			if len(tt.wantErr) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
	t.Run("no index", func(t *testing.T) {
		found, err := safetensors.CheckIndex(t.TempDir())
		if found || err != nil {
			t.Errorf("CheckIndex(empty) = %v, %v", found, err)
		}
	})
	t.Run("bad shard header", func(t *testing.T) {
		dir := t.TempDir()
		writeModel(t, dir, shards, map[string]string{"a.weight": "m-1.safetensors"})
		write(t, dir, "m-1.safetensors", file(`{"a.weight":`, 0))
		_, err := safetensors.CheckIndex(dir)
		if err == nil || !strings.Contains(err.Error(), "m-1.safetensors") {
			t.Errorf("err = %v, want one naming the shard", err)
		}
	})
}

func FuzzParse(f *testing.F) {
	f.Add(file(`{"__metadata__":{"format":"pt"},"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}}`, 2))
	f.Add(file(`{"a":{"dtype":"F4","shape":[2,2],"data_offsets":[0,2]},"b":{"dtype":"BF16","shape":[],"data_offsets":[2,4]}}`, 4))
	f.Add(file(`{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}}`, 6))
	f.Add(file(`{}`, 0))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, '{'})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := safetensors.Parse(bytes.NewReader(b), int64(len(b)))
		if err != nil {
			return
		}
		if 8+h.Size+h.DataSize != int64(len(b)) {
			t.Fatalf("accepted a header whose data section (%d) does not end the %d-byte file", h.DataSize, len(b))
		}
		var end int64
		for _, tn := range h.Tensors {
			if tn.Begin != end || tn.End < tn.Begin {
				t.Fatalf("accepted tensor %q at [%d,%d) after offset %d", tn.Name, tn.Begin, tn.End, end)
			}
			end = tn.End
		}
	})
}

// countingReaderAt counts the bytes read through it.
type countingReaderAt struct {
	r io.ReaderAt
	n int64
}

func (c *countingReaderAt) ReadAt(p []byte, off int64) (int, error) {
	n, err := c.r.ReadAt(p, off)
	c.n += int64(n)
	return n, err
}

func TestParseReadsOnlyTheHeader(t *testing.T) {
	tensors := []safetensors.Tensor{{Name: "big", DType: "U8", Shape: []int64{4 << 20}}}
	b := encode(t, tensors)
	cr := &countingReaderAt{r: bytes.NewReader(b)}
	h, err := safetensors.Parse(cr, int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	if want := 8 + h.Size; cr.n != want {
		t.Errorf("read %d bytes of a %d-byte file, want only the %d of the header", cr.n, len(b), want)
	}
}
