package fetch

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
)

// A part file a download is writing is held: FreePart and RemoveParts (gc, remove, or
// another run's clean-up in the same dest) leave it and its resume record, and the
// download completes. A part no download holds (a killed run's) is freed with its records.
func TestAPartInUseIsNotFreed(t *testing.T) {
	const size = 256 << 10
	data := randomBytes(t, size)
	serving, release := make(chan struct{}), make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "262144")
		w.WriteHeader(http.StatusOK)
		w.Write(data[:size/2])
		w.(http.Flusher).Flush()
		close(serving)
		<-release
		w.Write(data[size/2:])
	}))
	defer srv.Close()
	dest := t.TempDir()
	opt := testOptions(dest)
	opt.MinChunk = 1 << 30
	done := make(chan error, 1)
	go func() {
		_, err := Fetch(context.Background(), []File{{URL: srv.URL + "/w", Path: "w.bin", Size: size, SHA256: sha256Hex(data)}}, opt)
		done <- err
	}()
	<-serving // the part is open and held before the request is made
	part := PartPath(dest, "w.bin")
	freed, inUse, err := FreePart(part, false)
	if err != nil || !inUse || freed != 0 {
		t.Errorf("FreePart of a part a download writes = %d, %v, %v; want it in use and left", freed, inUse, err)
	}
	if _, err := RemoveParts(dest); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(part); err != nil {
		t.Errorf("the part a download writes was removed: %v", err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("the download: %v", err)
	}
	if got, _ := os.ReadFile(dest + "/w.bin"); !bytes.Equal(got, data) {
		t.Fatal("the download did not complete with the right bytes")
	}

	// A killed run's part: no process holds it.
	stale := PartPath(dest, "x.bin")
	os.MkdirAll(dest+"/.sglprov/parts", 0o755)
	os.WriteFile(stale, []byte("12345"), 0o644)
	os.WriteFile(stale+".json", []byte("{}"), 0o644)
	if freed, inUse, err := FreePart(stale, false); err != nil || inUse || freed != 7 {
		t.Errorf("FreePart of a stale part = %d, %v, %v; want 7 bytes freed", freed, inUse, err)
	}
	for _, p := range []string{stale, stale + ".json"} {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("%s is still there", p)
		}
	}
}
