package gitrepo

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

func TestHead(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	dir := t.TempDir()
	ctx := context.Background()
	if _, err := Head(ctx, dir); err == nil {
		t.Error("Head of a folder that is no work tree succeeded")
	}
	for _, args := range [][]string{{"init", "-q"}, {"-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-q", "--allow-empty", "-m", "x"}} {
		if _, err := Output(ctx, dir, args...); err != nil {
			t.Fatal(err)
		}
	}
	head, err := Head(ctx, dir)
	if err != nil || !regexp.MustCompile(`^[0-9a-f]{40,64}$`).MatchString(head) {
		t.Errorf("Head = %q, %v", head, err)
	}
}

func TestMergeFileAndBlob(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	ctx := context.Background()
	base := []byte("a\nb\nc\nd\ne\n")
	out, n, err := MergeFile(ctx, "", []byte("top\na\nb\nc\nd\ne\n"), base, []byte("a\nb\nC\nd\ne\n"))
	if err != nil || n != 0 || string(out) != "top\na\nb\nC\nd\ne\n" {
		t.Errorf("clean merge = %q, %d, %v", out, n, err)
	}
	_, n, err = MergeFile(ctx, "", []byte("a\nb\nc2\nd\ne\n"), base, []byte("a\nb\nC\nd\ne\n"))
	if err != nil || n != 1 {
		t.Errorf("conflicting merge: %d conflicts, %v; want 1", n, err)
	}

	dir := t.TempDir()
	if _, err := Output(ctx, dir, "init", "-q"); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("git", "-C", dir, "hash-object", "-w", "--stdin")
	cmd.Stdin = bytes.NewReader(base)
	oid, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	if b, err := Blob(ctx, dir, string(oid[:7])); err != nil || !bytes.Equal(b, base) {
		t.Errorf("Blob(abbreviated) = %q, %v", b, err)
	}
	if _, err := Blob(ctx, dir, "0123456"); err == nil {
		t.Error("Blob of a missing object succeeded")
	}
	if _, err := Blob(ctx, dir, "--help"); err == nil {
		t.Error("Blob of an option succeeded")
	}
}

func TestClone(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	ctx := context.Background()
	repo := t.TempDir()
	commit := func(msg string) string {
		if _, err := Output(ctx, repo, "-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-q", "--allow-empty", "-m", msg); err != nil {
			t.Fatal(err)
		}
		h, err := Head(ctx, repo)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	if _, err := Output(ctx, repo, "init", "-q"); err != nil {
		t.Fatal(err)
	}
	first := commit("first")
	commit("second")

	dst := filepath.Join(t.TempDir(), "tree")
	if err := Clone(ctx, "file://"+repo, dst, first); err != nil {
		t.Fatal(err)
	}
	if h, err := Head(ctx, dst); err != nil || h != first {
		t.Errorf("cloned HEAD = %s, %v; want %s", h, err, first)
	}

	// A URL that git would read as an option never reaches git: the program it names
	// does not run.
	marker := filepath.Join(t.TempDir(), "ran")
	script := filepath.Join(t.TempDir(), "pack.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\ntouch "+marker+"\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, url := range []string{"--upload-pack=" + script, "-u" + script} {
		err := Clone(ctx, url, filepath.Join(t.TempDir(), "tree"), first)
		if err == nil || !strings.Contains(err.Error(), "read as an option") {
			t.Errorf("Clone(%q) = %v; want a refusal", url, err)
		}
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("the upload-pack program ran")
	}
	for _, c := range []string{"--orphan", "HEAD", first[:12]} {
		if err := Clone(ctx, "file://"+repo, filepath.Join(t.TempDir(), "tree"), c); err == nil || !strings.Contains(err.Error(), "not a full hex commit") {
			t.Errorf("Clone at %q = %v; want a refusal", c, err)
		}
	}
	// A commit the repository lacks fails, naming it.
	missing := strings.Repeat("ab", 20)
	if err := Clone(ctx, "file://"+repo, filepath.Join(t.TempDir(), "tree"), missing); err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("Clone at a missing commit = %v", err)
	}
}

func TestMergeFileWritesInScratch(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	scratch := t.TempDir()
	t.Setenv("TMPDIR", filepath.Join(t.TempDir(), "missing"))
	out, n, err := MergeFile(context.Background(), scratch, []byte("a\n"), []byte("a\n"), []byte("b\n"))
	if err != nil || n != 0 || string(out) != "b\n" {
		t.Fatalf("MergeFile = %q, %d, %v", out, n, err)
	}
	if entries, _ := os.ReadDir(scratch); len(entries) != 0 {
		t.Errorf("left in scratch: %v", entries)
	}
}
