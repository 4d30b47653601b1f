package hub

import (
	"net/http"
	"testing"
)

// recordRT records the Authorization header of each request it is given.
type recordRT struct{ auth []string }

func (r *recordRT) RoundTrip(req *http.Request) (*http.Response, error) {
	r.auth = append(r.auth, req.Header.Get("Authorization"))
	return &http.Response{StatusCode: 200, Body: http.NoBody, Request: req}, nil
}

func TestTokenOnlyToTheEndpoint(t *testing.T) {
	rec := &recordRT{}
	tr := &authTransport{base: rec, scheme: "https", host: "hub.example:443", token: "hf_secret"}
	for _, u := range []string{
		"https://hub.example:443/api/models/x", // the endpoint: token
		"http://hub.example:443/api/models/x",  // downgraded by a redirect: none
		"https://cdn.example/x",                // another host: none
	} {
		req, _ := http.NewRequest("GET", u, nil)
		req.Header.Set("Authorization", "Bearer hf_secret")
		if _, err := tr.RoundTrip(req); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{"Bearer hf_secret", "", ""}
	for i := range want {
		if rec.auth[i] != want[i] {
			t.Errorf("request %d: Authorization %q, want %q", i, rec.auth[i], want[i])
		}
	}
}
