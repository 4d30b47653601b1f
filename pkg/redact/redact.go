// Package redact removes credentials from URLs and from text that may hold URLs, before
// they are logged, stored or shown: the user information of a URL
// ("https://user:password@host/...") and its query and fragment, where signed URLs carry
// their signatures.
package redact

import (
	"regexp"
	"strings"
)

// URL returns u without user information, query or fragment.
func URL(u string) string {
	if i := strings.IndexAny(u, "?#"); i >= 0 {
		u = u[:i]
	}
	return Userinfo(u)
}

// userinfoRE matches the user information of a URL inside any text: a scheme, "://",
// then everything up to the last "@" before the host, with no "/", space or quote in it.
var userinfoRE = regexp.MustCompile(`([A-Za-z][A-Za-z0-9+.\-]*://)[^/?#@\s"'<>]*@`)

// Userinfo returns s with the user information of every URL in it removed
// ("http://user:pw@host/x" becomes "http://host/x"), whatever else s says.
func Userinfo(s string) string {
	if !strings.Contains(s, "@") || !strings.Contains(s, "://") {
		return s
	}
	return userinfoRE.ReplaceAllString(s, "$1")
}

// Error returns err with the user information of every URL in its text removed; errors.Is
// and errors.As still see the errors it wraps. It returns err itself when there is nothing
// to remove, and nil for nil.
func Error(err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	if clean := Userinfo(msg); clean != msg {
		return &redacted{err: err, msg: clean}
	}
	return err
}

type redacted struct {
	err error
	msg string
}

func (e *redacted) Error() string { return e.msg }
func (e *redacted) Unwrap() error { return e.err }
