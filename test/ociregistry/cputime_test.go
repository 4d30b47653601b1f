package ociregistry

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"net/http"
	"testing"
)

// TestCPUTime: the registry's CPU time is read from its process, grows with the work it
// does (a 64 MiB blob taken and hashed is several ticks of CPU), and is an error once the
// registry is stopped.
func TestCPUTime(t *testing.T) {
	r := StartT(t)
	before, err := r.CPUTime()
	if err != nil {
		t.Fatal(err)
	}
	blob := make([]byte, 64<<20)
	if _, err := rand.Read(blob); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post("http://"+r.Addr+"/v2/t/blobs/uploads/", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	loc, err := resp.Location()
	if err != nil {
		t.Fatal(err)
	}
	q := loc.Query()
	q.Set("digest", fmt.Sprintf("sha256:%x", sha256.Sum256(blob)))
	loc.RawQuery = q.Encode()
	req, _ := http.NewRequest(http.MethodPut, loc.String(), bytes.NewReader(blob))
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("PUT of the blob: %s", resp.Status)
	}
	after, err := r.CPUTime()
	if err != nil {
		t.Fatal(err)
	}
	if after <= before {
		t.Errorf("CPU time %s before taking 64 MiB, %s after; want it to grow", before, after)
	}
	r.Stop()
	if d, err := r.CPUTime(); err == nil {
		t.Errorf("CPUTime of a stopped registry = %s, want an error", d)
	}
}
