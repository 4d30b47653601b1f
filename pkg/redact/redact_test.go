package redact

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

func TestUserinfo(t *testing.T) {
	tests := map[string]string{
		"http://alice:pw@127.0.0.1:8080/x.bin":                     "http://127.0.0.1:8080/x.bin",
		"see https://bob@hub.example/org/m and http://c:d@e/f":     "see https://hub.example/org/m and http://e/f",
		`Get "http://bob:***@127.0.0.1:1/api": connection refused`: `Get "http://127.0.0.1:1/api": connection refused`,
		"mail me at a@b.example, or at https://host/x?u=a@b":       "mail me at a@b.example, or at https://host/x?u=a@b",
		"http://u:p%40ss@host/a":                                   "http://host/a",
		"no url here":                                              "no url here",
	}
	for in, want := range tests {
		if got := Userinfo(in); got != want {
			t.Errorf("Userinfo(%q) = %q, want %q", in, got, want)
		}
	}
	if got := URL("https://u:p@cdn.example/f?X-Amz-Signature=s#frag"); got != "https://cdn.example/f" {
		t.Errorf("URL = %q", got)
	}
}

func TestError(t *testing.T) {
	base := fmt.Errorf("downloading from http://u:secret@h/x: %w", context.Canceled)
	err := Error(base)
	if err.Error() != "downloading from http://h/x: context canceled" {
		t.Errorf("Error() = %q", err)
	}
	if !errors.Is(err, context.Canceled) {
		t.Error("the redacted error does not wrap the original")
	}
	plain := errors.New("nothing to hide")
	if Error(plain) != plain || Error(nil) != nil {
		t.Error("an error without user information changed")
	}
}
