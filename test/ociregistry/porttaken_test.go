package ociregistry

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
)

// TestStartOnAPortAnotherServerTook: the port picked for the registry is taken by another
// server before the registry listens (tests run side by side). Start does not take the
// other server's answer for the registry's: it tries another port, and the registry it
// returns is the one it started.
func TestStartOnAPortAnotherServerTook(t *testing.T) {
	if _, err := Find(); err != nil {
		t.Skip(err)
	}
	// Another registry-like server: it answers /v2/ with 200 as a registry does.
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
	}))
	defer other.Close()
	taken := other.Listener.Addr().(*net.TCPAddr).Port
	picks := 0
	pickPort = func() (int, error) {
		picks++
		if picks == 1 {
			return taken, nil
		}
		return freePort()
	}
	defer func() { pickPort = freePort }()
	r, err := Start(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Stop()
	if picks != 2 {
		t.Errorf("%d ports picked, want a second one after the taken port", picks)
	}
	if strings.HasSuffix(r.Addr, ":"+strconv.Itoa(taken)) {
		t.Fatalf("Start returned the other server's address %s", r.Addr)
	}
	resp, err := http.Get("http://" + r.Addr + "/v2/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.Header.Get(identHeader) == "" {
		t.Errorf("the server at %s is not the registry Start started", r.Addr)
	}
}
