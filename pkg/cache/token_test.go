package cache_test

import (
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
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
	"github.com/sglprov/sglprov/test/ociregistry"
)

// tokenService is a registry token service (the docker token auth flow): it checks basic
// credentials and answers a JWT, signed by a key whose certificate the registry trusts,
// that grants the scope asked for.
type tokenService struct {
	key      *rsa.PrivateKey
	certDER  []byte
	service  string
	issuer   string
	mu       sync.Mutex
	issued   []string // tokens handed out
	scopes   []string // scopes asked for
	refusals int
}

func newTokenService(t *testing.T) *tokenService {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "sglprov test token signer"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return &tokenService{key: key, certDER: der, service: "sglprov-test-registry", issuer: "sglprov-test-issuer"}
}

func (ts *tokenService) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	u, p, ok := r.BasicAuth()
	if !ok || u != user || p != password {
		ts.mu.Lock()
		ts.refusals++
		ts.mu.Unlock()
		http.Error(w, `{"errors":[{"code":"UNAUTHORIZED"}]}`, http.StatusUnauthorized)
		return
	}
	type access struct {
		Type    string   `json:"type"`
		Name    string   `json:"name"`
		Actions []string `json:"actions"`
	}
	var grants []access
	for _, scope := range r.URL.Query()["scope"] {
		ts.mu.Lock()
		ts.scopes = append(ts.scopes, scope)
		ts.mu.Unlock()
		parts := strings.SplitN(scope, ":", 3)
		if len(parts) == 3 {
			grants = append(grants, access{Type: parts[0], Name: parts[1], Actions: strings.Split(parts[2], ",")})
		}
	}
	now := time.Now()
	enc := func(v any) string {
		b, _ := json.Marshal(v)
		return base64.RawURLEncoding.EncodeToString(b)
	}
	head := enc(map[string]any{"typ": "JWT", "alg": "RS256", "x5c": []string{base64.StdEncoding.EncodeToString(ts.certDER)}})
	claims := enc(map[string]any{"iss": ts.issuer, "sub": u, "aud": ts.service, "exp": now.Add(5 * time.Minute).Unix(),
		"nbf": now.Add(-time.Minute).Unix(), "iat": now.Unix(), "jti": fmt.Sprint(now.UnixNano()), "access": grants})
	sum := sha256.Sum256([]byte(head + "." + claims))
	sig, err := rsa.SignPKCS1v15(rand.Reader, ts.key, crypto.SHA256, sum[:])
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	tok := head + "." + claims + "." + base64.RawURLEncoding.EncodeToString(sig)
	ts.mu.Lock()
	ts.issued = append(ts.issued, tok)
	ts.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"token": tok, "expires_in": 300})
}

// TestBearerTokenFlow: a registry with token auth (distribution's, against a token service
// that signs JWTs): push, lookup and a ranged pull get their tokens with the credentials
// from the docker config, one token per scope; no token or password is in a log or an
// error.
func TestBearerTokenFlow(t *testing.T) {
	ts := newTokenService(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(ts)
	srv.Listener = ln
	srv.Start()
	defer srv.Close()
	reg := ociregistry.StartWithT(t, ociregistry.Options{Token: &ociregistry.TokenAuth{
		Realm: srv.URL + "/token", Service: ts.service, Issuer: ts.issuer,
		RootCertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ts.certDER}),
	}})
	ctx := context.Background()
	f := writeRandom(t, filepath.Join(t.TempDir(), "kernel.whl"), 5<<20)
	cfgDir := t.TempDir()
	auth := base64.StdEncoding.EncodeToString([]byte(user + ":" + password))
	cfg := fmt.Sprintf(`{"auths": {%q: {"auth": %q}}}`, reg.Addr, auth)
	if err := os.WriteFile(filepath.Join(cfgDir, "config.json"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var logs strings.Builder
	opt := cache.Options{Getenv: env(map[string]string{"DOCKER_CONFIG": cfgDir}), ChunkSize: 1 << 20,
		Logf: func(format string, args ...any) { mu.Lock(); fmt.Fprintf(&logs, format+"\n", args...); mu.Unlock() }}
	c, err := cache.New(cache.Config{Repository: reg.Addr + "/fleet/sglprov", Push: true}, opt)
	if err != nil {
		t.Fatal(err)
	}
	tag := strings.Repeat("3", 64)
	if _, err := c.Push(ctx, tag, cache.KindBuild, []byte(`{}`), []cache.File{f}); err != nil {
		t.Fatalf("push: %v", err)
	}
	puller, err := cache.New(cache.Config{Repository: reg.Addr + "/fleet/sglprov"}, opt)
	if err != nil {
		t.Fatal(err)
	}
	a, err := puller.Lookup(ctx, tag)
	if err != nil || a == nil {
		t.Fatalf("lookup: %v, %v", a, err)
	}
	if err := puller.Pull(ctx, a, t.TempDir()); err != nil {
		t.Fatalf("pull: %v", err)
	}
	ts.mu.Lock()
	scopes, issued := append([]string(nil), ts.scopes...), append([]string(nil), ts.issued...)
	ts.mu.Unlock()
	if !contains(scopes, "repository:fleet/sglprov:pull,push") || !contains(scopes, "repository:fleet/sglprov:pull") {
		t.Errorf("scopes asked for: %q; want a push scope for the push and a pull scope for the pull", scopes)
	}
	// The pull made a request per 1 MiB range and more; tokens are cached per scope.
	if len(issued) > 6 {
		t.Errorf("%d tokens issued for one push and one pull; they are not cached", len(issued))
	}

	// Without credentials the token service refuses, and the error names the fix.
	anon, err := cache.New(cache.Config{Repository: reg.Addr + "/fleet/sglprov"}, cache.Options{Getenv: env(map[string]string{"DOCKER_CONFIG": t.TempDir()})})
	if err != nil {
		t.Fatal(err)
	}
	_, err = anon.Lookup(ctx, tag)
	if err == nil || !strings.Contains(err.Error(), "docker login") {
		t.Errorf("lookup without credentials: %v, want the fix named", err)
	}
	for _, secret := range append(issued, password, auth) {
		if strings.Contains(logs.String(), secret) || (err != nil && strings.Contains(err.Error(), secret)) {
			t.Errorf("a credential is in the log or an error")
		}
	}
	if logs.Len() == 0 {
		t.Error("nothing was logged: the check above checked nothing")
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
