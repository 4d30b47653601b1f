package cache_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sglprov/sglprov/pkg/cache"
)

// nonLoopbackIP returns an address of this host that is not loopback, or skips the test.
func nonLoopbackIP(t *testing.T) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Skipf("no interface addresses: %v", err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() {
			return n.IP.String()
		}
	}
	t.Skip("this host has no address other than loopback")
	return ""
}

// serveOn starts srv on ip (TLS or not) and returns its host:port.
func serveOn(t *testing.T, ip string, h http.Handler, useTLS bool) *httptest.Server {
	t.Helper()
	l, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Skipf("cannot listen on %s: %v", ip, err)
	}
	srv := &httptest.Server{Listener: l, Config: &http.Server{Handler: h}}
	if useTLS {
		srv.TLS = &tls.Config{Certificates: []tls.Certificate{certFor(t, ip)}}
		srv.StartTLS()
	} else {
		srv.Start()
	}
	t.Cleanup(srv.Close)
	return srv
}

// certFor makes a self-signed certificate for ip.
func certFor(t *testing.T, ip string) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: ip},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP(ip)}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// recorder is a plain HTTP server that records what reaches it.
type recorder struct {
	mu   sync.Mutex
	seen []string
}

func (r *recorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	r.seen = append(r.seen, req.Method+" "+req.URL.Path+" auth="+req.Header.Get("Authorization"))
	r.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprint(w, `{"token":"t","access_token":"t"}`)
}

func (r *recorder) requests() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.seen...)
}

// TestPlainHTTPOnlyWhenAllowed: with plain_http false and a registry that is not on
// loopback, nothing goes over plain HTTP: not the registry's own requests (TLS is spoken,
// a plain server sees no request), not a bearer token request to an http:// realm the
// registry names (it would carry the docker config's password in the clear), not a blob
// redirected to http://. With plain_http true the same plain registry is spoken to.
func TestPlainHTTPOnlyWhenAllowed(t *testing.T) {
	ip := nonLoopbackIP(t)
	ctx := context.Background()
	tag := strings.Repeat("ab", 32)

	t.Run("registry", func(t *testing.T) {
		plain := &recorder{}
		srv := serveOn(t, ip, plain, false)
		host := strings.TrimPrefix(srv.URL, "http://")
		c, err := cache.New(cache.Config{Repository: host + "/fleet/sglprov"}, cache.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Lookup(ctx, tag); err == nil {
			t.Error("Lookup over TLS to a plain HTTP server succeeded")
		}
		if got := plain.requests(); len(got) != 0 {
			t.Errorf("with plain_http false the plain server got %q", got)
		}
		c, err = cache.New(cache.Config{Repository: host + "/fleet/sglprov", PlainHTTP: true}, cache.Options{})
		if err != nil {
			t.Fatal(err)
		}
		_, _ = c.Lookup(ctx, tag)
		if got := plain.requests(); len(got) == 0 {
			t.Error("with plain_http true the plain server got no request")
		}
	})

	t.Run("token realm and redirect", func(t *testing.T) {
		plain := &recorder{}
		psrv := serveOn(t, ip, plain, false)
		reg := serveOn(t, ip, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if strings.Contains(r.URL.Path, "/blobs/") && r.Method == http.MethodGet {
				http.Redirect(w, r, psrv.URL+"/blob", http.StatusTemporaryRedirect)
				return
			}
			if r.Header.Get("Authorization") == "" {
				w.Header().Set("WWW-Authenticate", `Bearer realm="`+psrv.URL+`/token",service="reg"`)
				w.WriteHeader(http.StatusUnauthorized)
				return
			}
			http.NotFound(w, r)
		}), true)
		host := strings.TrimPrefix(reg.URL, "https://")
		dir := t.TempDir()
		auth := base64.StdEncoding.EncodeToString([]byte("fleet:s3cret-pass"))
		if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"auths":{"`+host+`":{"auth":"`+auth+`"}}}`), 0o600); err != nil {
			t.Fatal(err)
		}
		c, err := cache.New(cache.Config{Repository: host + "/fleet/sglprov"}, cache.Options{
			Transport: reg.Client().Transport,
			Getenv:    func(k string) string { return map[string]string{"DOCKER_CONFIG": dir}[k] },
		})
		if err != nil {
			t.Fatal(err)
		}
		_, lerr := c.Lookup(ctx, tag)
		if lerr == nil || !strings.Contains(lerr.Error(), "plain HTTP") {
			t.Errorf("Lookup = %v, want a refusal of plain HTTP", lerr)
		}
		resp, gerr := c.HTTPClient().Get(c.BlobURL(strings.Repeat("cd", 32)))
		if gerr == nil {
			resp.Body.Close()
			t.Error("a blob redirected to http:// was fetched")
		}
		for _, e := range []error{lerr, gerr} {
			if e != nil && strings.Contains(e.Error(), "s3cret") {
				t.Errorf("the password is in an error: %v", e)
			}
		}
		if got := plain.requests(); len(got) != 0 {
			t.Errorf("with plain_http false requests went over plain HTTP: %q", got)
		}
	})
}
