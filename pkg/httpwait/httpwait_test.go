package httpwait

import (
	"net/http"
	"testing"
	"time"
)

func TestServerWait(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		h    http.Header
		want time.Duration
	}{
		{http.Header{}, 0},
		{http.Header{"Retry-After": {"7"}}, 7 * time.Second},
		{http.Header{"Retry-After": {now.Add(90 * time.Second).Format(http.TimeFormat)}}, 90 * time.Second},
		{http.Header{"Retry-After": {"soon"}}, 0},
		{http.Header{"Ratelimit": {`"api";r=0;t=55`}}, 55 * time.Second},
		{http.Header{"Ratelimit": {`"api";r=3;t=55`}}, 0},
		{http.Header{"Ratelimit": {`limit=100, remaining=0, reset=20`}}, 20 * time.Second},
		{http.Header{"Retry-After": {"5"}, "Ratelimit": {`"resolvers";r=0;t=30`}}, 30 * time.Second},
		{http.Header{"Retry-After": {"999999999"}}, time.Hour},
	} {
		if got := ServerWait(tc.h, now); got != tc.want {
			t.Errorf("ServerWait(%v) = %s, want %s", tc.h, got, tc.want)
		}
	}
}
