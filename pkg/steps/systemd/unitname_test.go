package systemd

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/service"
)

// A unit name whose file sglprov did not render for the recipe (an admin's unit, another
// recipe's, a mask, a FIFO), or that a unit of the system holds in /lib or /usr/lib, is
// refused by validate and plan (ReadFiles) and by apply (Run) with exit 2, the file named
// and the fix; what is there stays byte-identical and nothing is written in /etc.
func TestUnitNameNotSglprovs(t *testing.T) {
	const admin = "[Unit]\nDescription=nightly backup, written by an admin\n[Service]\nExecStart=/usr/local/bin/backup\n"
	other := "# Managed by sglprov. Recipe: other. Profile: . Fingerprint: f. Do not edit: changes are replaced on the next apply.\n[Service]\nExecStart=/bin/true\n"
	cases := []struct {
		name, unit string
		// file is written at ROOT/rel before the run; fifo makes it a FIFO.
		rel, content string
		fifo         bool
		want         error
		// etc is the unit's path in /etc when it must not appear there.
		etc bool
	}{
		{name: "admin unit in /etc", unit: "backup.service", rel: "etc/systemd/system/backup.service", content: admin, want: service.ErrNotRendered},
		{name: "another recipe's unit", unit: "sglang-a.service", rel: "etc/systemd/system/sglang-a.service", content: other, want: service.ErrNotRendered},
		{name: "vendor unit in /lib", unit: "ssh.service", rel: "lib/systemd/system/ssh.service", content: "[Service]\nExecStart=/usr/sbin/sshd -D\n", want: service.ErrVendorUnit, etc: true},
		{name: "vendor unit in /usr/lib", unit: "ssh.service", rel: "usr/lib/systemd/system/ssh.service", content: "[Service]\nExecStart=/usr/sbin/sshd -D\n", want: service.ErrVendorUnit, etc: true},
		{name: "a FIFO in /etc", unit: "backup.service", rel: "etc/systemd/system/backup.service", fifo: true, want: service.ErrNotRendered},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env := testEnv(t, "rtx-pro-6000-x8.json")
			env.Root = t.TempDir()
			env.Offline = true
			p := filepath.Join(env.Root, tc.rel)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if tc.fifo {
				if err := syscall.Mkfifo(p, 0o644); err != nil {
					t.Fatal(err)
				}
			} else if err := os.WriteFile(p, []byte(tc.content), 0o644); err != nil {
				t.Fatal(err)
			}
			spec := qwenSpec()
			spec.Unit = tc.unit
			spec.Manager = "systemd"
			s := newStep(t, spec)
			done := make(chan [2]error, 1)
			go func() { done <- [2]error{s.ReadFiles(env), s.Run(context.Background(), env)} }()
			var errs [2]error
			select {
			case errs = <-done:
			case <-time.After(20 * time.Second):
				t.Fatal("the check blocked")
			}
			for i, err := range errs {
				if !errors.Is(err, tc.want) || !errors.Is(err, exitcode.ErrUsage) {
					t.Fatalf("call %d: err = %v, want %v and exit 2", i, err, tc.want)
				}
			}
			if !tc.fifo {
				if b, err := os.ReadFile(p); err != nil || string(b) != tc.content {
					t.Errorf("%s changed: %q %v", tc.rel, b, err)
				}
			}
			if tc.etc {
				if _, err := os.Lstat(filepath.Join(env.Root, "etc/systemd/system", tc.unit)); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("a unit was written in /etc: %v", err)
				}
			}
		})
	}

	// The recipe's own unit, rendered by an earlier run, is the recipe's to rewrite.
	env := testEnv(t, "rtx-pro-6000-x8.json")
	env.Root = t.TempDir()
	env.Offline = true
	spec := qwenSpec()
	spec.Unit = "backup.service"
	spec.Manager = "systemd"
	s := newStep(t, spec)
	for i := 0; i < 2; i++ {
		if err := s.ReadFiles(env); err != nil {
			t.Fatal(err)
		}
		if err := s.Run(context.Background(), env); err != nil {
			t.Fatal(err)
		}
	}
}
