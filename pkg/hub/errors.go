// Errors: the hub's error answers (X-Error-Code, X-Error-Message), which of them are
// refusals, and the hint that names the fix.

package hub

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/sglprov/sglprov/pkg/httpwait"
)

// APIError is an error answer from the hub. Its message says what to do and never
// contains the token.
type APIError struct {
	// Status is the HTTP status code.
	Status int
	// Code is the hub's X-Error-Code (RepoNotFound, GatedRepo, RevisionNotFound, ...).
	Code string
	// Message is the hub's X-Error-Message or a short body excerpt.
	Message string
	// Hint says what to do about it.
	Hint string
	// after is the wait the answer asked for (Retry-After, RateLimit), or 0.
	after time.Duration
}

// Error implements error.
func (e *APIError) Error() string {
	s := fmt.Sprintf("hub answered %d %s", e.Status, http.StatusText(e.Status))
	if e.Code != "" {
		s += " (" + e.Code + ")"
	}
	if e.Message != "" {
		s += ": " + e.Message
	}
	if e.Hint != "" {
		s += "; " + e.Hint
	}
	return s
}

// apiError reads an error answer (its body bounded) into an APIError: the status, the
// X-Error-Code and X-Error-Message headers or the body's message, the wait asked for, and
// the hint.
func (c *Client) apiError(resp *http.Response, repo, rev string) error {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	e := &APIError{Status: resp.StatusCode, Code: resp.Header.Get("X-Error-Code"), Message: resp.Header.Get("X-Error-Message"),
		after: httpwait.ServerWait(resp.Header, time.Now())}
	if e.Message == "" {
		var j struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(body, &j) == nil && j.Error != "" {
			e.Message = j.Error
		} else {
			e.Message = strings.TrimSpace(string(body))
			if len(e.Message) > 200 {
				e.Message = e.Message[:200] + "..."
			}
		}
	}
	e.Message = c.redact(e.Message)
	e.Hint = c.Hint(resp.StatusCode, e.Code, e.Message, repo, rev)
	return e
}

// Refused reports whether an answer with this status and X-Error-Code refuses access to
// the repository (gated, private, a token that is invalid or without access), as opposed
// to a missing file or revision or a passing fault.
func Refused(status int, code string) bool {
	return status == http.StatusUnauthorized || status == http.StatusForbidden || code == "GatedRepo" || code == "RepoNotFound"
}

// Hint says what causes a refused or failed answer about repo at rev, and what fixes it,
// from its status and the hub's X-Error-Code and X-Error-Message; "" when there is
// nothing to say.
func (c *Client) Hint(status int, code, message, repo, rev string) string {
	page := c.shownEndpoint() + "/" + repo
	switch {
	case message == "Access to this resource is disabled.":
		return fmt.Sprintf("the hub has disabled %s: nothing on this host can fix it; pin another repository", repo)
	case message == "Invalid credentials in Authorization header":
		return fmt.Sprintf("the hub does not know this token (mistyped, revoked or expired): make a read token at %s/settings/tokens and put it in hf.token_file or HF_TOKEN", c.shownEndpoint())
	case code == "GatedRepo" && c.token == "":
		return fmt.Sprintf("%s is gated: accept its licence at %s with your account, then set hf.token_file (or HF_TOKEN) to a read token of that account", repo, page)
	case code == "GatedRepo":
		return fmt.Sprintf("%s is gated and the token's account has no access (yet): accept the licence at %s with the account the token belongs to (some repositories also wait for the authors' approval), or use a token of an account that has access; a fine-grained token also needs read access to gated repositories", repo, page)
	case code == "RevisionNotFound" || code == "EntryNotFound":
		return fmt.Sprintf("check the revision %q of %s (a branch, tag or 40-hex commit that exists)", rev, repo)
	case (code == "RepoNotFound" || status == http.StatusUnauthorized) && c.token == "":
		return fmt.Sprintf("check that the repository %q exists; if it is private or gated, set hf.token_file (or HF_TOKEN) to a read token of an account with access (for a gated one, accept its licence at %s first)", repo, page)
	case code == "RepoNotFound" || status == http.StatusUnauthorized:
		return fmt.Sprintf("%q does not exist or the token cannot read it: check the name, and that the token's account has access to it (a private repository of another account or organisation, or a fine-grained token without read access to it)", repo)
	case status == http.StatusForbidden:
		return fmt.Sprintf("the hub refused the token for %s: give it read access (a fine-grained token without access to this repository, or a write-only one), or use another", repo)
	case status == http.StatusNotFound:
		return fmt.Sprintf("check the repository name %q and the revision %q", repo, rev)
	case status == http.StatusTooManyRequests:
		return "the hub rate-limits this client (5-minute windows): wait and retry, or use a token (its limits are higher)"
	}
	return ""
}
