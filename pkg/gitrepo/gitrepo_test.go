package gitrepo

import (
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
