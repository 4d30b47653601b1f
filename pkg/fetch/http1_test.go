package fetch

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestHTTP1OnlyAgainstH2: a transport cloned from http.DefaultTransport (which offers h2)
// with its own TLS config speaks HTTP/1.1 to a server that offers h2 once HTTP1Only has
// run, and the TLS config it was given is not changed under its owner.
func TestHTTP1OnlyAgainstH2(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(r.Proto))
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	own := srv.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
	own.NextProtos = []string{"h2", "http/1.1"}

	h2 := http.DefaultTransport.(*http.Transport).Clone()
	h2.TLSClientConfig = own.Clone()
	h2.ForceAttemptHTTP2 = true
	resp, err := (&http.Client{Transport: h2}).Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.ProtoMajor != 2 {
		t.Fatalf("without HTTP1Only the client got %s; the test server must offer h2", resp.Proto)
	}

	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = own
	tr.ForceAttemptHTTP2 = true
	HTTP1Only(tr)
	resp, err = (&http.Client{Transport: tr}).Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.Proto != "HTTP/1.1" {
		t.Errorf("with HTTP1Only the client got %s, want HTTP/1.1", resp.Proto)
	}
	if len(own.NextProtos) != 2 {
		t.Errorf("HTTP1Only changed the caller's TLS config: NextProtos %v", own.NextProtos)
	}
}
