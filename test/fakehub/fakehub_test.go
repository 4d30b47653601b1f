package fakehub_test

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sglprov/sglprov/pkg/safetensors"
	"github.com/sglprov/sglprov/test/fakehub"
)

func TestGenerateModel(t *testing.T) {
	tests := []struct {
		name   string
		shards int
		bytes  int64
	}{
		{name: "one small shard", shards: 1, bytes: 4 << 10},
		{name: "three shards", shards: 3, bytes: 256 << 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := fakehub.GenerateModel(dir, tt.shards, tt.bytes); err != nil {
				t.Fatal(err)
			}
			found, err := safetensors.CheckIndex(dir)
			if !found || err != nil {
				t.Fatalf("CheckIndex = %v, %v", found, err)
			}
			dtypes := map[string]bool{}
			for s := 1; s <= tt.shards; s++ {
				p := filepath.Join(dir, "model-0000"+string(rune('0'+s))+"-of-0000"+string(rune('0'+tt.shards))+".safetensors")
				h, err := safetensors.ReadHeader(p)
				if err != nil {
					t.Fatal(err)
				}
				for _, tn := range h.Tensors {
					dtypes[tn.DType] = true
				}
				fi, _ := os.Stat(p)
				if tt.bytes >= 64<<10 && (fi.Size() < tt.bytes*8/10 || fi.Size() > tt.bytes*12/10) {
					t.Errorf("%s is %d bytes, want about %d", p, fi.Size(), tt.bytes)
				}
			}
			for _, d := range []string{"BF16", "U8", "F8_E4M3", "F32"} {
				if !dtypes[d] {
					t.Errorf("no %s tensor", d)
				}
			}
			for _, name := range []string{"config.json", "tokenizer.json", "tokenizer_config.json"} {
				b, err := os.ReadFile(filepath.Join(dir, name))
				if err != nil || !json.Valid(b) {
					t.Errorf("%s: %v", name, err)
				}
			}
			idx, err := safetensors.ReadIndex(filepath.Join(dir, safetensors.IndexFile))
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := idx.WeightMap["model.layers.0.mlp.experts.0.down_proj.weight"]; !ok {
				t.Error("index lacks model.layers.0.mlp.experts.0.down_proj.weight")
			}
		})
	}
	// The same call writes the same bytes.
	a, b := t.TempDir(), t.TempDir()
	for _, d := range []string{a, b} {
		if err := fakehub.GenerateModel(d, 1, 8<<10); err != nil {
			t.Fatal(err)
		}
	}
	x, _ := os.ReadFile(filepath.Join(a, "model-00001-of-00001.safetensors"))
	y, _ := os.ReadFile(filepath.Join(b, "model-00001-of-00001.safetensors"))
	if string(x) != string(y) {
		t.Error("GenerateModel is not deterministic")
	}
}

func TestHubEndpoints(t *testing.T) {
	dir := t.TempDir()
	if err := fakehub.GenerateModel(dir, 2, 8<<10); err != nil {
		t.Fatal(err)
	}
	h, err := fakehub.New(fakehub.Options{Repo: "org/m", FS: os.DirFS(dir), LFSThreshold: 4 << 10, PageSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	h.Start()
	defer h.Close()
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	tests := []struct {
		name       string
		path       string
		wantStatus int
		wantHeader map[string]string
		wantBody   string
	}{
		{name: "revision", path: "/api/models/org/m/revision/main", wantStatus: 200, wantBody: `"sha":"` + fakehub.DefaultCommit + `"`},
		{name: "unknown revision", path: "/api/models/org/m/revision/v9", wantStatus: 404, wantHeader: map[string]string{"X-Error-Code": "RevisionNotFound"}},
		{name: "unknown repo", path: "/api/models/org/x/revision/main", wantStatus: 401, wantHeader: map[string]string{"X-Error-Code": "RepoNotFound"}},
		{name: "first page links the next", path: "/api/models/org/m/tree/main?recursive=true", wantStatus: 200, wantHeader: map[string]string{"Link": `rel="next"`}},
		{name: "LFS entry without expand", path: "/api/models/org/m/tree/main?recursive=true&cursor=2", wantStatus: 200, wantBody: `"lfs":{"oid":"`},
		{name: "small file served directly", path: "/org/m/resolve/main/config.json", wantStatus: 200, wantBody: `"quant_algo": "NVFP4"`},
		{name: "large file redirects to the CDN", path: "/org/m/resolve/main/model-00001-of-00002.safetensors", wantStatus: 302, wantHeader: map[string]string{"Location": h.CDNURL() + "/cdn/", "X-Repo-Commit": fakehub.DefaultCommit}},
		{name: "missing file", path: "/org/m/resolve/main/nope.bin", wantStatus: 404, wantHeader: map[string]string{"X-Error-Code": "EntryNotFound"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := noRedirect.Get(h.URL() + tt.path)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.wantStatus {
				t.Errorf("status %d, want %d", resp.StatusCode, tt.wantStatus)
			}
			for k, v := range tt.wantHeader {
				if !strings.Contains(resp.Header.Get(k), v) {
					t.Errorf("%s = %q, want it to contain %q", k, resp.Header.Get(k), v)
				}
			}
			if !strings.Contains(string(body), tt.wantBody) {
				t.Errorf("body %.200s lacks %q", body, tt.wantBody)
			}
		})
	}
}
