package build

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sglprov/sglprov/pkg/exitcode"
)

// TestArchLibsRefuseAnotherArch: a build that installs a kernel library carrying only
// sm_120a SASS (testdata/fatbin/sm120a.so, made with nvcc) fails on an H100 (compute
// capability 9.0) with exit 4, naming the library, what it carries and what is needed; on
// the RTX PRO 6000 it passes. A library of sm_90 SASS and compute_90 PTX runs on both (the
// driver compiles the PTX for 12.0). Of the variants of one library (a loader picks one per
// GPU) one must run. A glob that matches nothing with GPU code is refused.
func TestArchLibsRefuseAnotherArch(t *testing.T) {
	fakeTools(t)
	fixtures, err := filepath.Abs(filepath.Join("..", "..", "..", "testdata", "fatbin"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		lib, cc, want string
	}{
		{"sm120a.so", "12.0", ""},
		{"sm120a.so", "9.0", "carries sm_120a, and the GPUs (compute capability 9.0) need SASS for sm_90"},
		{"sm120a.so", "12.1", "carries sm_120a, and the GPUs (compute capability 12.1) need SASS for sm_121"},
		// compute_100f would not run on 12.1: the hint names the family PTX of major 12 alone.
		{"ptx120a.so", "12.1", "or PTX of compute_121 or older (plain, or f of major 12)"},
		{"sm90.so", "9.0", ""},
		{"sm90.so", "12.0", ""},
		{"ptx120.so", "9.0", "carries compute_120"},
	} {
		src := t.TempDir()
		writeScript(t, filepath.Join(src, "install.sh"), "mkdir -p site/kernel && cp "+filepath.Join(fixtures, tc.lib)+" site/kernel/common_ops.so\n")
		env, _, _ := testEnv(t)
		env.Facts = facts(tc.cc, "580.95.05")
		s := newStep(t, Spec{Dir: src, Argv: []string{"./install.sh"}, ArchLibs: []string{"site/kernel/*.so"}})
		err := s.Run(context.Background(), env)
		if tc.want == "" {
			if err != nil {
				t.Errorf("%s on %s: %v", tc.lib, tc.cc, err)
			}
			continue
		}
		if err == nil || !errors.Is(err, exitcode.ErrHost) || exitcode.Of(err) != exitcode.ExitHost {
			t.Fatalf("%s on %s: %v (exit %d)", tc.lib, tc.cc, err, exitcode.Of(err))
		}
		for _, w := range []string{tc.want, filepath.Join(src, "site/kernel/common_ops.so"), "TORCH_CUDA_ARCH_LIST"} {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s on %s: error lacks %q: %v", tc.lib, tc.cc, w, err)
			}
		}
	}
	// Variants: sm_90 only beside sm_120; on the RTX PRO 6000 the sm_120 one runs.
	src := t.TempDir()
	writeScript(t, filepath.Join(src, "install.sh"), "mkdir -p site/sm90 site/sm120 && cp "+filepath.Join(fixtures, "sm120a.so")+
		" site/sm120/ops.so && cp "+filepath.Join(fixtures, "sm120a.so")+" site/sm90/ops.so\n")
	env, _, _ := testEnv(t)
	s := newStep(t, Spec{Dir: src, Argv: []string{"./install.sh"}, ArchLibs: []string{"site/"}})
	if err := s.Run(context.Background(), env); err != nil {
		t.Errorf("variants on 12.0: %v", err)
	}
	env.Facts = facts("9.0", "580.95.05")
	if err := s.Run(context.Background(), env); err == nil || strings.Count(err.Error(), "carries sm_120a") != 2 {
		t.Errorf("variants on 9.0: %v", err)
	}
	src = t.TempDir()
	writeScript(t, filepath.Join(src, "install.sh"), "true\n")
	env, _, _ = testEnv(t)
	s = newStep(t, Spec{Dir: src, Argv: []string{"./install.sh"}, ArchLibs: []string{"site/*.so"}})
	if err := s.Run(context.Background(), env); err == nil || !strings.Contains(err.Error(), `arch_libs "site/*.so" matches no library with GPU code`) {
		t.Errorf("no match: %v", err)
	}
	// A library without GPU code alone checks nothing, and says so.
	if err := os.WriteFile(filepath.Join(src, "install.sh"), []byte("#!/bin/sh\nmkdir -p site && cp /proc/self/exe site/cpu.so\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := s.Run(context.Background(), env); err == nil || !strings.Contains(err.Error(), "matches no library with GPU code") {
		t.Errorf("no GPU code: %v", err)
	}
}

// TestArchLibsFixtures: the verdict of arch_libs for each library nvcc 13.0 built
// (testdata/fatbin) on Hopper (9.0), the RTX PRO 6000 (12.0) and the GB10 (12.1): passed,
// or refused with exit 4 naming what the library carries and the GPUs' compute capability.
func TestArchLibsFixtures(t *testing.T) {
	fakeTools(t)
	fixtures, err := filepath.Abs(filepath.Join("..", "..", "..", "testdata", "fatbin"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		lib, carries string
		runs         map[string]bool
	}{
		{"sm90.so", "sm_90, compute_90", map[string]bool{"9.0": true, "12.0": true, "12.1": true}},
		{"sm90a.so", "sm_90a, compute_90a", map[string]bool{"9.0": true, "12.0": false, "12.1": false}},
		{"sm120.so", "sm_120", map[string]bool{"9.0": false, "12.0": true, "12.1": true}},
		{"sm120a.so", "sm_120a", map[string]bool{"9.0": false, "12.0": true, "12.1": false}},
		{"sm120a-compressed.so", "sm_120a", map[string]bool{"9.0": false, "12.0": true, "12.1": false}},
		{"sm120f.so", "sm_120f", map[string]bool{"9.0": false, "12.0": true, "12.1": true}},
		{"sm121a.so", "sm_121a", map[string]bool{"9.0": false, "12.0": false, "12.1": true}},
		{"ptx120.so", "compute_120", map[string]bool{"9.0": false, "12.0": true, "12.1": true}},
		{"ptx120a.so", "compute_120a", map[string]bool{"9.0": false, "12.0": true, "12.1": false}},
		{"ptx120f.so", "compute_120f", map[string]bool{"9.0": false, "12.0": true, "12.1": true}},
	} {
		src := t.TempDir()
		writeScript(t, filepath.Join(src, "install.sh"), "mkdir -p site/kernel && cp "+filepath.Join(fixtures, tc.lib)+" site/kernel/common_ops.so\n")
		s := newStep(t, Spec{Dir: src, Argv: []string{"./install.sh"}, ArchLibs: []string{"site/kernel/*.so"}})
		for _, cc := range []string{"9.0", "12.0", "12.1"} {
			env, _, _ := testEnv(t)
			env.Facts = facts(cc, "580.95.05")
			err := s.Run(context.Background(), env)
			if tc.runs[cc] {
				if err != nil {
					t.Errorf("%s on %s: %v", tc.lib, cc, err)
				}
				continue
			}
			if err == nil || exitcode.Of(err) != exitcode.ExitHost ||
				!strings.Contains(err.Error(), "common_ops.so carries "+tc.carries+", and the GPUs (compute capability "+cc+")") {
				t.Errorf("%s on %s: %v (exit %d), want exit 4 naming %q", tc.lib, cc, err, exitcode.Of(err), tc.carries)
			}
		}
	}
}

// TestArchLibsJudgeEachLibrary: in a folder entry every library is judged on its own (a
// common_ops of sm_120a beside a flash_ops of sm_90 only fails on 12.0, naming flash_ops);
// libraries of one name in different folders are variants of which one must run; an entry
// "DIR/**/NAME" names the libraries the loader takes on this GPU; a FIFO in the folder is
// skipped and one matched by a glob is refused at once, not read.
func TestArchLibsJudgeEachLibrary(t *testing.T) {
	fakeTools(t)
	fixtures, err := filepath.Abs(filepath.Join("..", "..", "..", "testdata", "fatbin"))
	if err != nil {
		t.Fatal(err)
	}
	src := t.TempDir()
	writeScript(t, filepath.Join(src, "install.sh"), "mkdir -p site/k/sm90 site/k/sm100 && cp "+filepath.Join(fixtures, "sm120a.so")+
		" site/k/sm100/common_ops.so && cp "+filepath.Join(fixtures, "sm90.so")+" site/k/sm90/common_ops.so && cp "+
		filepath.Join(fixtures, "sm120a.so")+" site/k/flash_ops.so && rm -f site/k/fifo.so && mkfifo site/k/fifo.so\n")
	env, _, _ := testEnv(t)
	env.Facts = facts("9.0", "580.95.05")
	s := newStep(t, Spec{Dir: src, Argv: []string{"./install.sh"}, ArchLibs: []string{"site/k/"}})
	err = s.Run(context.Background(), env)
	if err == nil || exitcode.Of(err) != exitcode.ExitHost || !strings.Contains(err.Error(), "flash_ops.so carries sm_120a") ||
		strings.Contains(err.Error(), "common_ops.so carries") {
		t.Fatalf("flash_ops of sm_120a alone on 9.0: %v", err)
	}
	// Only the common_ops variants: sm90/ runs on 9.0, sm100/ on 12.0; on 12.1 neither.
	s = newStep(t, Spec{Dir: src, Argv: []string{"./install.sh"}, ArchLibs: []string{"site/k/**/common_ops*.so"}})
	for cc, ok := range map[string]bool{"9.0": true, "12.0": true, "12.1": true} {
		env.Facts = facts(cc, "580.95.05")
		if err := s.Run(context.Background(), env); (err == nil) != ok {
			t.Errorf("common_ops variants on %s: %v", cc, err)
		}
	}
	// sm90/common_ops carries compute_90 PTX, which the driver compiles for 12.1: so it
	// runs there. Without it, 12.1 is refused.
	writeScript(t, filepath.Join(src, "install.sh"), "rm -rf site && mkdir -p site/k/sm100 && cp "+filepath.Join(fixtures, "sm120a.so")+" site/k/sm100/common_ops.so\n")
	env.Facts = facts("12.1", "580.95.05")
	if err := s.Run(context.Background(), env); err == nil || !strings.Contains(err.Error(), "compute capability 12.1") {
		t.Errorf("sm_120a alone on 12.1: %v", err)
	}
	// A FIFO matched by a glob: a clear error, at once.
	writeScript(t, filepath.Join(src, "install.sh"), "rm -rf site && mkdir -p site && mkfifo site/ops.so\n")
	s = newStep(t, Spec{Dir: src, Argv: []string{"./install.sh"}, ArchLibs: []string{"site/*.so"}})
	done := make(chan error, 1)
	go func() { done <- s.Run(context.Background(), env) }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Errorf("FIFO: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a FIFO blocked the check")
	}
}
