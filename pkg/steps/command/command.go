// Package command is the command step kind: run a program (argv, never a shell string) in
// a directory with a set environment; the files it creates make it intact.
package command

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/sglprov/sglprov/pkg/engine"
)

// Spec is a command step's recipe body.
type Spec struct {
	// Argv is the program and its arguments.
	Argv []string `yaml:"argv"`
	// Dir is the working directory (a host path).
	Dir string `yaml:"dir"`
	// Env is added to the environment sglprov runs with.
	Env map[string]string `yaml:"env"`
	// Creates lists host paths the command makes; their presence (and, for files, their
	// digest) makes the step intact.
	Creates []string `yaml:"creates"`
}

// Kind returns the command step kind.
func Kind() engine.Kind {
	return engine.KindOf(func(name string, s Spec) (*Step, error) {
		if len(s.Argv) == 0 || s.Argv[0] == "" {
			return nil, fmt.Errorf("command step %q: argv must name a program: %w", name, engine.ErrUsage)
		}
		return &Step{spec: s}, nil
	})
}

// Step is a command step.
type Step struct {
	spec Spec
}

type record struct {
	// Created maps each path of creates to the sha256 of the file ("dir" for a directory).
	Created map[string]string `json:"created"`
}

// Fingerprint adds nothing beyond the recipe text and the vars it uses.
func (s *Step) Fingerprint(ctx context.Context, env *engine.Env) (map[string]string, error) {
	return nil, nil
}

// Intact reports whether every path of creates is there and unchanged.
func (s *Step) Intact(ctx context.Context, env *engine.Env) (bool, string, error) {
	var rec record
	env.LoadData(&rec)
	for _, p := range s.spec.Creates {
		sum, err := digestPath(env.HostPath(p))
		if errors.Is(err, fs.ErrNotExist) {
			return false, "outputs missing: " + p, nil
		}
		if err != nil {
			return false, "", fmt.Errorf("checking %s: %w", p, err)
		}
		if rec.Created[p] != sum {
			return false, "outputs changed: " + p, nil
		}
	}
	return true, "", nil
}

// Run runs the command; its output goes to the step log, and its last lines into the
// error when it fails.
func (s *Step) Run(ctx context.Context, env *engine.Env) error {
	cmd := exec.CommandContext(ctx, s.spec.Argv[0], s.spec.Argv[1:]...)
	if s.spec.Dir != "" {
		cmd.Dir = env.HostPath(s.spec.Dir)
	}
	cmd.Env = os.Environ()
	keys := make([]string, 0, len(s.spec.Env))
	for k := range s.spec.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		cmd.Env = append(cmd.Env, k+"="+s.spec.Env[k])
	}
	tail := &tailBuffer{max: 40}
	out := io.Writer(tail)
	if env.Out != nil {
		out = io.MultiWriter(env.Out, tail)
	}
	cmd.Stdout, cmd.Stderr = out, out
	// The command's process group is its own, and it dies with sglprov.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	// Cancelling stops the whole group: SIGTERM, then SIGKILL for what is left after the
	// grace period.
	cmd.Cancel = func() error {
		pgid := cmd.Process.Pid
		time.AfterFunc(killGrace, func() { _ = syscall.Kill(-pgid, syscall.SIGKILL) })
		return syscall.Kill(-pgid, syscall.SIGTERM)
	}
	cmd.WaitDelay = killGrace + time.Second
	env.Log.Info("running command", "argv", strings.Join(s.spec.Argv, " "))
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("running %s: %w\n--- last lines (full log: %s) ---\n%s", s.spec.Argv[0], err, env.LogPath, tail.String())
	}
	rec := record{Created: map[string]string{}}
	for _, p := range s.spec.Creates {
		sum, err := digestPath(env.HostPath(p))
		if err != nil {
			return fmt.Errorf("command ran but did not create %s: %w", p, err)
		}
		rec.Created[p] = sum
	}
	return env.SaveData(rec)
}

func digestPath(p string) (string, error) {
	st, err := os.Stat(p)
	if err != nil {
		return "", err
	}
	if st.IsDir() {
		return "dir", nil
	}
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// killGrace is how long a cancelled command's group gets between SIGTERM and SIGKILL.
const killGrace = 10 * time.Second

// maxLine bounds one kept line: a progress bar redrawn with \r is one endless line.
const maxLine = 4096

// tailBuffer keeps the last max lines written to it, each cut to maxLine bytes.
type tailBuffer struct {
	max   int
	lines []string
	part  bytes.Buffer
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	for _, c := range p {
		if c == '\r' {
			t.part.Reset()
			continue
		}
		if c == '\n' {
			t.lines = append(t.lines, t.part.String())
			t.part.Reset()
			if len(t.lines) > t.max {
				t.lines = t.lines[len(t.lines)-t.max:]
			}
			continue
		}
		if t.part.Len() < maxLine {
			t.part.WriteByte(c)
		}
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	lines := t.lines
	if t.part.Len() > 0 {
		lines = append(lines, t.part.String())
	}
	return strings.Join(lines, "\n")
}
