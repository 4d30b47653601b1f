package httpwait

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/sglprov/sglprov/pkg/redact"
)

// MaxRedirects is how many redirects one request may follow.
const MaxRedirects = 10

// RedirectError is a redirect that asking again cannot fix: to a scheme other than http
// and https (file://, ftp://), back to a URL the request already visited, or one hop more
// than MaxRedirects. A client that retries failed requests fails at once on it.
type RedirectError struct {
	// From and To are the URLs of the hop, without query string or user information.
	From, To string
	// Why says what is wrong with it.
	Why string
}

// Error implements error.
func (e *RedirectError) Error() string {
	return fmt.Sprintf("the server redirected %s to %s: %s; asking again cannot change that, so it is not retried", e.From, e.To, e.Why)
}

// CheckRedirect is an http.Client CheckRedirect that refuses, with a *RedirectError, a
// redirect to a scheme other than http(s), one back to a URL already visited (a loop),
// and the hop after MaxRedirects.
func CheckRedirect(req *http.Request, via []*http.Request) error {
	from := redact.URL(via[len(via)-1].URL.String())
	to := redact.URL(req.URL.String())
	if req.URL.Scheme != "http" && req.URL.Scheme != "https" {
		return &RedirectError{From: from, To: to, Why: fmt.Sprintf("a %q URL, not http or https", req.URL.Scheme)}
	}
	for _, v := range via {
		if v.URL.String() == req.URL.String() {
			return &RedirectError{From: from, To: to, Why: "a redirect loop (that URL was already visited)"}
		}
	}
	if len(via) >= MaxRedirects {
		return &RedirectError{From: from, To: to, Why: fmt.Sprintf("more than %d redirects", MaxRedirects)}
	}
	return nil
}

// IsRedirectError reports whether err is, or wraps, a *RedirectError.
func IsRedirectError(err error) bool {
	var re *RedirectError
	return errors.As(err, &re)
}
