package gate

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sglprov/sglprov/test/fakesglang"
)

// TestSoakCase: long prompts until the server's own sglang:token_usage says the pool is
// nearly full, then short ones: a healthy server passes, one that answers garbage once
// its pool is 90% full fails, a server without metrics or a pool never reached fails
// saying why.
func TestSoakCase(t *testing.T) {
	soak := Case{Name: "soak", Concurrency: 4, Soak: &Soak{Words: 1000, Waves: 3, Until: 0.5}}
	for _, tc := range []struct {
		name   string
		opts   fakesglang.Options
		k      Case
		pass   bool
		reason string
	}{
		{"healthy", fakesglang.Options{KVTokens: 4400}, soak, true, "ok: the KV pool reached"},
		{"garbage when full", fakesglang.Options{Mode: fakesglang.ModeKVFull, KVTokens: 4400}, soak, false, "degenerate content"},
		{"no metrics", fakesglang.Options{}, soak, false, "launch it with --enable-metrics"},
		{"never full", fakesglang.Options{KVTokens: 1000000}, soak, false, "short of soak.until 50%"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.opts.Latency = 300 * time.Millisecond
			srv := httptest.NewServer(fakesglang.New(tc.opts))
			defer srv.Close()
			cfg := fastConfig(srv.URL)
			cfg.RequestTimeout = 10 * time.Second
			cfg.Cases = []Case{tc.k}
			res, err := Run(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			c := res.Cases[0]
			if c.Pass != tc.pass || !strings.Contains(c.Reason, tc.reason) || c.Kind != KindSoak {
				t.Errorf("pass %v kind %s reason %q, want %v %q", c.Pass, c.Kind, c.Reason, tc.pass, tc.reason)
			}
		})
	}
	err := Config{URL: "http://127.0.0.1:1", Cases: []Case{{Name: "s", Prompt: "q", Soak: &Soak{}}}}.Validate()
	if err == nil || !strings.Contains(err.Error(), "a soak case takes no prompt") {
		t.Errorf("soak with a prompt: %v", err)
	}
	err = Config{URL: "http://127.0.0.1:1", Cases: []Case{{Name: "s", Soak: &Soak{Until: 2}}}}.Validate()
	if err == nil || !strings.Contains(err.Error(), "soak.until 2") {
		t.Errorf("soak until 2: %v", err)
	}
}
