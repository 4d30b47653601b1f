package knownbad

import (
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestTableRows: every row has an id of its own, a source URL and a quote of what the
// source says, a reason, a fix, a word on how far it was checked, conditions that parse,
// and at least one condition.
func TestTableRows(t *testing.T) {
	ids := map[string]bool{}
	for _, r := range Table() {
		if r.ID == "" || ids[r.ID] {
			t.Errorf("row id %q empty or repeated", r.ID)
		}
		ids[r.ID] = true
		if r.Reason == "" || r.Fix == "" || r.Checked == "" {
			t.Errorf("%s: reason, fix and checked are all needed", r.ID)
		}
		if len(r.Sources) == 0 || len(r.Quotes) == 0 {
			t.Errorf("%s: no source, or no quote of what it says", r.ID)
		}
		for _, s := range r.Sources {
			if u, err := url.Parse(s); err != nil || u.Scheme != "https" || u.Host == "" {
				t.Errorf("%s: source %q is not an https URL", r.ID, s)
			}
		}
		if len(r.Packages) == 0 && len(r.Flags) == 0 {
			t.Errorf("%s: no package or flag condition", r.ID)
		}
		for _, p := range r.Packages {
			if len(p.Names) == 0 {
				t.Errorf("%s: a package condition names no package", r.ID)
			}
			if _, err := ParseRange(p.Range); err != nil {
				t.Errorf("%s: %v", r.ID, err)
			}
		}
	}
}

func TestVersions(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"9.21.0.48", "9.21", 1}, {"9.21", "9.21.0", 0}, {"0.6.18rc4", "0.6.18", -1},
		{"0.6.18rc10", "0.6.18rc7", 1}, {"0.6.18.post1", "0.6.18", 1}, {"0.6.18.dev1", "0.6.18rc1", -1},
		{"2.9.1+cu130", "2.9.1", 0}, {"4.5.0", "4.5.1", -1}, {"0.6.8", "0.6.11", -1}, {"1.0b2", "1.0a9", 1},
	} {
		a, err := ParseVersion(tc.a)
		if err != nil {
			t.Fatal(err)
		}
		b, err := ParseVersion(tc.b)
		if err != nil {
			t.Fatal(err)
		}
		if got := a.Compare(b); got != tc.want {
			t.Errorf("%s vs %s: %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
	r, err := ParseRange(">=0.6.18rc4,<=0.6.18rc7")
	if err != nil {
		t.Fatal(err)
	}
	for v, want := range map[string]bool{"0.6.18rc3": false, "0.6.18rc4": true, "0.6.18rc7": true, "0.6.18": false, "0.6.17": false} {
		pv, _ := ParseVersion(v)
		if r.Contains(pv) != want {
			t.Errorf("%s in %s: %v", v, r, !want)
		}
	}
	for _, bad := range []string{"", "x", "1.2.x", "1..2"} {
		if _, err := ParseVersion(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
	if _, err := ParseRange("0.6.8"); err == nil {
		t.Error("a range without a comparison parsed")
	}
}

// TestCheckEachRow: each row refuses its own combination, names itself, and stays quiet
// when one condition is off (a fixed version, another GPU, another flag).
func TestCheckEachRow(t *testing.T) {
	fp4 := [][]string{{"--quantization", "modelopt_fp4", "--kv-cache-dtype", "fp8_e4m3"}}
	cudnn := [][]string{{"--quantization", "modelopt_fp4", "--tp", "4"}, {"--fp4-gemm-backend", "flashinfer_cudnn", "--quantization", "modelopt_fp4"}}
	sm120 := []string{"12.0", "12.0"}
	for _, tc := range []struct {
		name string
		f    Facts
		want string // row id, "" for none
	}{
		// flashinfer#3192: FlashInfer's own bug, whatever the cuDNN; on the cuDNN FP4 GEMM only.
		{"cudnn gemm with flashinfer 0.6.8", Facts{Packages: map[string]string{"flashinfer_python": "0.6.8"},
			ComputeCapabilities: sm120, LaunchLines: cudnn}, "cudnn-fp4-gemm-nan"},
		{"cudnn gemm with flashinfer 0.6.8.post1 and cuDNN 9.16", Facts{Packages: map[string]string{"nvidia-cudnn-cu13": "9.16.0.29", "flashinfer-python": "0.6.8.post1"},
			ComputeCapabilities: sm120, LaunchLines: cudnn}, "cudnn-fp4-gemm-nan"},
		{"cudnn gemm with flashinfer 0.6.9", Facts{Packages: map[string]string{"flashinfer-python": "0.6.9"},
			ComputeCapabilities: sm120, LaunchLines: cudnn}, ""},
		{"cutlass gemm with flashinfer 0.6.8", Facts{Packages: map[string]string{"flashinfer-python": "0.6.8"},
			ComputeCapabilities: sm120, LaunchLines: fp4}, ""},
		{"cudnn gemm with flashinfer 0.6.8 on sm_90", Facts{Packages: map[string]string{"flashinfer-python": "0.6.8"},
			ComputeCapabilities: []string{"9.0"}, LaunchLines: cudnn}, ""},
		{"cutlass dsl 4.5.0", Facts{Packages: map[string]string{"Nvidia.Cutlass_DSL": "4.5.0"}, ComputeCapabilities: sm120}, "cutlass-dsl-4.5.0-sm12x"},
		{"cutlass dsl 4.5.0 on sm_90", Facts{Packages: map[string]string{"nvidia-cutlass-dsl": "4.5.0"}, ComputeCapabilities: []string{"9.0"}}, ""},
		// No row for FlashInfer release candidates: no source for one was found.
		{"flashinfer rc5", Facts{Packages: map[string]string{"flashinfer-python": "0.6.18rc5"}, ComputeCapabilities: sm120}, ""},
		{"trtllm mla", Facts{ComputeCapabilities: sm120, LaunchLines: [][]string{{"--tp", "8"}, {"--attention-backend=trtllm_mla"}}}, "trtllm-mla-attention-sm12x"},
		{"trtllm mla on sm_100", Facts{ComputeCapabilities: []string{"10.0"}, LaunchLines: [][]string{{"--attention-backend", "trtllm_mla"}}}, ""},
		// An FP4 KV cache is not refused: SGLang serves nvfp4 KV on SM120 (sglang#21601).
		{"nvfp4 kv cache", Facts{ComputeCapabilities: sm120, LaunchLines: [][]string{{"--kv-cache-dtype", "nvfp4"}}}, ""},
		{"fp8 kv cache", Facts{ComputeCapabilities: sm120, LaunchLines: fp4}, ""},
	} {
		m, err := Check(tc.f)
		if err != nil {
			t.Fatal(err)
		}
		got := ""
		if len(m) > 0 {
			got = m[0].Row.ID
		}
		if got != tc.want || len(m) > 1 {
			t.Errorf("%s: %v, want %q", tc.name, m, tc.want)
		}
		if len(m) > 0 {
			msg := (&Error{Where: "x", Matches: m}).Error()
			for _, want := range []string{"[" + tc.want + "]", m[0].Row.Fix, m[0].Row.Sources[0]} {
				if !strings.Contains(msg, want) {
					t.Errorf("%s: message lacks %q: %s", tc.name, want, msg)
				}
			}
		}
	}
}

func TestPins(t *testing.T) {
	got := Pins([]string{"-m", "pip", "install", "torch==2.9.1", "flashinfer-python==0.6.8", "nvidia_cudnn_cu13 == 9.16.0.29",
		"sglang[all]==0.5.20 ; python_version>='3.10'", "cmake", "flashinfer-python>=0.6", "x=y"})
	want := map[string]string{"torch": "2.9.1", "flashinfer-python": "0.6.8", "nvidia-cudnn-cu13": "9.16.0.29", "sglang": "0.5.20"}
	if len(got) != len(want) {
		t.Errorf("%v", got)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %q, want %q (%v)", k, got[k], v, got)
		}
	}
}

// TestInstalled: versions come from METADATA (not the folder's name), only the table's
// packages when asked, and a missing environment is no error.
func TestInstalled(t *testing.T) {
	root := t.TempDir()
	sp := filepath.Join(root, "opt/v/lib/python3.12/site-packages")
	for name, meta := range map[string]string{
		"flashinfer_python-0.6.8.dist-info": "Name: flashinfer-python\nVersion: 0.6.8.post1\n\nVersion: 9\n",
		"torch-2.9.1.dist-info":             "Name: torch\nVersion: 2.9.1+cu130\n",
		"broken-1.dist-info":                "",
	} {
		if err := os.MkdirAll(filepath.Join(sp, name), 0o755); err != nil {
			t.Fatal(err)
		}
		if meta != "" {
			if err := os.WriteFile(filepath.Join(sp, name, "METADATA"), []byte(meta), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	dirs, err := SitePackages(root, "/opt/v/bin/python")
	if err != nil || len(dirs) != 1 {
		t.Fatalf("%v %v", dirs, err)
	}
	all, err := Installed(dirs, false)
	if err != nil || all["flashinfer-python"] != "0.6.8.post1" || all["torch"] != "2.9.1+cu130" || len(all) != 2 {
		t.Errorf("%v %v", all, err)
	}
	only, err := Installed(dirs, true)
	if err != nil || len(only) != 1 || only["flashinfer-python"] == "" {
		t.Errorf("%v %v", only, err)
	}
	if dirs, err := SitePackages(root, "/nowhere/bin/python"); err != nil || len(dirs) != 0 {
		t.Errorf("missing venv: %v %v", dirs, err)
	}
	if _, err := Installed([]string{filepath.Join(root, "nope")}, false); err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing folder: %v", err)
	}
}

// TestInstalledAsImportlibSees: the reader finds what importlib.metadata finds: a
// dist-info that is a symbolic link, an .egg-info folder (PKG-INFO) and an .egg-info file,
// a folder whose name differs from its METADATA's Name (the Name counts, also for the
// table's filter), and a project installed twice (both reported, a bad version among them
// found by the check). A METADATA that is a FIFO is an error naming it, at once.
func TestInstalledAsImportlibSees(t *testing.T) {
	sp := t.TempDir()
	elsewhere := t.TempDir()
	write := func(path, text string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(elsewhere, "nvidia_cutlass_dsl-4.5.0.dist-info", "METADATA"), "Name: nvidia-cutlass-dsl\nVersion: 4.5.0\n")
	if err := os.Symlink(filepath.Join(elsewhere, "nvidia_cutlass_dsl-4.5.0.dist-info"), filepath.Join(sp, "nvidia_cutlass_dsl-4.5.0.dist-info")); err != nil {
		t.Fatal(err)
	}
	write(filepath.Join(sp, "torch-2.13.0.egg-info", "PKG-INFO"), "Metadata-Version: 2.1\nName: torch\nVersion: 2.13.0\n")
	write(filepath.Join(sp, "sglang-0.5.21-py3.12.egg-info"), "Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.21\n")
	write(filepath.Join(sp, "renamed-1.0.dist-info", "METADATA"), "Name: flashinfer_python\nVersion: 0.6.18\n")
	write(filepath.Join(sp, "flashinfer_python-0.6.8.dist-info", "METADATA"), "Name: flashinfer-python\nVersion: 0.6.8\n")
	if err := os.Symlink(filepath.Join(elsewhere, "gone"), filepath.Join(sp, "dangling-1.dist-info")); err != nil {
		t.Fatal(err)
	}
	ds, err := InstalledDists([]string{sp}, false)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{}
	for _, d := range ds {
		got[Normalize(d.Name)] = append(got[Normalize(d.Name)], d.Version)
	}
	for name, want := range map[string]string{"nvidia-cutlass-dsl": "4.5.0", "torch": "2.13.0", "sglang": "0.5.21", "flashinfer-python": "0.6.8 0.6.18"} {
		if strings.Join(got[name], " ") != want {
			t.Errorf("%s: %v, want %s (all: %v)", name, got[name], want, got)
		}
	}
	if dup := Duplicates(ds); len(dup) != 1 || len(dup["flashinfer-python"]) != 2 {
		t.Errorf("duplicates: %v", dup)
	}
	// The table's filter goes by the METADATA name: the renamed folder is kept.
	only, err := InstalledDists([]string{sp}, true)
	if err != nil || len(only) != 3 {
		t.Errorf("only the table's: %v %v", only, err)
	}
	// A bad version among duplicates is found (the cuDNN GEMM row wants FlashInfer < 0.6.9).
	first, also := FactsOf(ds)
	m, err := Check(Facts{Packages: map[string]string{"flashinfer-python": first["flashinfer-python"]}, Also: map[string][]string{"flashinfer-python": also["flashinfer-python"]},
		ComputeCapabilities: []string{"12.0"}, LaunchLines: [][]string{{"--quantization", "modelopt_fp4", "--fp4-gemm-backend", "flashinfer_cudnn"}}})
	if err != nil || len(m) != 1 || !strings.Contains(m[0].What, "0.6.8") {
		t.Errorf("duplicate with a bad version: %v %v", m, err)
	}
	// A FIFO for METADATA: an error naming it, never a blocked read.
	fifo := filepath.Join(sp, "x-1.dist-info")
	if err := os.MkdirAll(fifo, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(fifo, "METADATA"), 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := Installed([]string{sp}, false); done <- err }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), filepath.Join(fifo, "METADATA")) || !strings.Contains(err.Error(), "not a regular file") {
			t.Errorf("FIFO: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a FIFO METADATA blocked the read")
	}
}
