// Package httpwait reads how long an HTTP answer asks its client to wait before asking
// again: Retry-After, and the RateLimit header of the Hugging Face hub and of the IETF
// draft.
package httpwait

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// MaxWait bounds the wait a Retry-After or RateLimit header can ask for.
const MaxWait = time.Hour

// ServerWait returns how long an answer asks the client to wait before asking again:
// Retry-After (seconds or an HTTP date), or the reset of a RateLimit header whose remaining
// quota is 0 (the hub's `"api";r=0;t=55`, or the IETF draft's `remaining=0, reset=55`),
// the longer of them; 0 when it asks nothing.
func ServerWait(h http.Header, now time.Time) time.Duration {
	var d time.Duration
	if v := strings.TrimSpace(h.Get("Retry-After")); v != "" {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil && n >= 0 {
			d = time.Duration(min(n, int64(MaxWait/time.Second))) * time.Second
		} else if t, err := http.ParseTime(v); err == nil {
			d = t.Sub(now)
		}
	}
	if v := h.Get("RateLimit"); v != "" {
		remaining, reset := int64(-1), int64(-1)
		for _, field := range strings.FieldsFunc(v, func(r rune) bool { return r == ';' || r == ',' }) {
			k, val, ok := strings.Cut(strings.TrimSpace(field), "=")
			if !ok {
				continue
			}
			n, err := strconv.ParseInt(strings.TrimSpace(val), 10, 64)
			if err != nil || n < 0 {
				continue
			}
			switch strings.ToLower(strings.TrimSpace(k)) {
			case "r", "remaining":
				remaining = n
			case "t", "reset":
				reset = n
			}
		}
		if remaining == 0 && reset > 0 {
			d = max(d, time.Duration(min(reset, int64(MaxWait/time.Second)))*time.Second)
		}
	}
	return min(max(d, 0), MaxWait)
}
