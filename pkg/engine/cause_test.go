package engine

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/sglprov/sglprov/pkg/exitcode"
)

// TestCauseIsTheLineThatSaysWhy: a table row shows the line of a failure that says why,
// not the child's first output line.
func TestCauseIsTheLineThatSaysWhy(t *testing.T) {
	tests := []struct{ name, msg, want string }{
		{"one line", "writing unit: permission denied", "writing unit: permission denied"},
		{"git", "fetching git::https://github.com/x/y?ref=abc: /usr/bin/git exited with 128: Cloning into '/opt/y'...\nfatal: unable to access 'https://github.com/x/y/': Could not resolve host: github.com\n",
			"fetching git::https://github.com/x/y?ref=abc: /usr/bin/git exited with 128: fatal: unable to access 'https://github.com/x/y/': Could not resolve host: github.com"},
		{"make after the compiler", "running make: exit status 2; last 4 lines of output:\n  nvcc -c k.cu\n  k.cu(12): error: identifier \"x\" is undefined\n  make: *** [all] Error 1\n  done\nfull log: /s/k.log",
			`running make: exit status 2: k.cu(12): error: identifier "x" is undefined`},
		{"python", "running python: exit status 1; last 3 lines of output:\n  Traceback (most recent call last):\n  File \"/x/error_handler.py\", line 3\n  RuntimeError: CUDA error: no kernel image\nfull log: /s/p.log",
			"running python: exit status 1: RuntimeError: CUDA error: no kernel image"},
		{"no error line", "running sh: exit status 3; last 2 lines of output:\n  one\n  two\nfull log: /s/x.log", "running sh: exit status 3: two"},
		{"a list of problems", "3 problems in the patch series:\n  a.patch: gone\n  b.patch: gone", "3 problems in the patch series:"},
	}
	for _, tc := range tests {
		if got := Cause(tc.msg); got != tc.want {
			t.Errorf("%s: Cause =\n  %q\nwant\n  %q", tc.name, got, tc.want)
		}
	}
}

// TestNetworkHintNamesTheFixesOfTheKind: a proxy for every kind, HF_ENDPOINT for a
// download from the hub, the fleet cache for the kinds it serves; nothing for other failures.
func TestNetworkHintNamesTheFixesOfTheKind(t *testing.T) {
	dns := "fatal: unable to access 'https://github.com/x/': Could not resolve host: github.com"
	if h := NetworkHint("source", dns, false); h == "" || !containsAll(h, "/etc/sglprov/env") || containsAll(h, "HF_ENDPOINT") || containsAll(h, "cache:") {
		t.Errorf("source: %q", h)
	}
	if h := NetworkHint("download", "dial tcp 10.0.0.1:443: connect: connection refused", true); !containsAll(h, "/etc/sglprov/env", "HF_ENDPOINT", "cache: block") {
		t.Errorf("download from the hub: %q", h)
	}
	if h := NetworkHint("build", "error: identifier undefined", false); h != "" {
		t.Errorf("a compile error got a network hint: %q", h)
	}
}

// TestApplyErrorNamesEveryFailedStep: the last line of the run's error names every failed
// step; the exit code is the first failure's.
func TestApplyErrorNamesEveryFailedStep(t *testing.T) {
	err := &stepsFailed{names: []string{"a", "b"}, errs: []error{fmt.Errorf("x: %w", exitcode.ErrGate), errors.New("y\n")}}
	want := "step a: x: smoke gate failed\nstep b: y\n2 steps failed: a, b"
	if err.Error() != want {
		t.Errorf("Error() = %q, want %q", err.Error(), want)
	}
	if exitcode.Of(err) != exitcode.ExitGate {
		t.Errorf("exit code %d, want %d", exitcode.Of(err), exitcode.ExitGate)
	}
}

func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

// TestPlainURLDownloadHintHasNoHFEndpoint: a plain-URL download that cannot reach its
// server is not told to set HF_ENDPOINT (no hub mirror serves its URL); one from the hub
// (its report names the repository) is.
func TestPlainURLDownloadHintHasNoHFEndpoint(t *testing.T) {
	msg := "downloading into /models/x: w.bin: dial tcp: lookup files.example: no such host"
	plain := &Report{Steps: []*StepReport{{Name: "weights", Kind: "download", Result: ResultFailed, Error: msg}}}
	fromHub := &Report{Steps: []*StepReport{{Name: "weights", Kind: "download", Result: ResultFailed, Error: msg, Details: map[string]any{HubDetail: "org/model"}}}}
	for _, h := range append(plain.Hints(), plain.Failures(0)) {
		if strings.Contains(h, "HF_ENDPOINT") || !strings.Contains(h, "/etc/sglprov/env") {
			t.Errorf("plain-URL download: %q, want the proxy fix and no HF_ENDPOINT", h)
		}
	}
	for _, h := range append(fromHub.Hints(), fromHub.Failures(0)) {
		if !strings.Contains(h, "HF_ENDPOINT") {
			t.Errorf("hub download: %q, want HF_ENDPOINT named", h)
		}
	}
}
