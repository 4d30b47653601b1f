package gitrepo

import (
	"bytes"
	"context"
	"os/exec"
	"regexp"
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
	out, n, err := MergeFile(ctx, []byte("top\na\nb\nc\nd\ne\n"), base, []byte("a\nb\nC\nd\ne\n"))
	if err != nil || n != 0 || string(out) != "top\na\nb\nC\nd\ne\n" {
		t.Errorf("clean merge = %q, %d, %v", out, n, err)
	}
	_, n, err = MergeFile(ctx, []byte("a\nb\nc2\nd\ne\n"), base, []byte("a\nb\nC\nd\ne\n"))
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
