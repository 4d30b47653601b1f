package download

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sglprov/sglprov/pkg/fetch"
	"github.com/sglprov/sglprov/test/fakehub"
)

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// fileServer serves the files of a folder (with Range support); a path listed in broken
// is cut off after half its bytes, every time.
func fileServer(t *testing.T, dir string, broken map[string]bool) *httptest.Server {
	t.Helper()
	fs := http.FileServer(http.Dir(dir))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if broken[strings.TrimPrefix(r.URL.Path, "/")] {
			b, _ := os.ReadFile(filepath.Join(dir, r.URL.Path))
			w.Header().Set("Content-Length", strconv.Itoa(len(b)))
			w.Write(b[:len(b)/2])
			panic(http.ErrAbortHandler)
		}
		fs.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func writeSrc(t *testing.T, dir string, files map[string][]byte) {
	t.Helper()
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// A listing with both a.bin and a.bin.part ends with each file holding its own bytes,
// recorded with its own digest, and a re-run keeps them.
func TestListingWithAPartFileName(t *testing.T) {
	ctx := context.Background()
	fx := newFixture(t, fakehub.Options{})
	src := t.TempDir()
	big := bytes.Repeat([]byte("sglprov!"), 300<<10/8)
	small := bytes.Repeat([]byte("p"), 1000)
	writeSrc(t, src, map[string][]byte{"big": big, "small": small})
	srv := fileServer(t, src, nil)
	spec := Spec{Dest: fx.dest, Files: []FileSpec{
		{URL: srv.URL + "/big", SHA256: sum(big), Path: "a.bin", Size: int64(len(big))},
		{URL: srv.URL + "/small", SHA256: sum(small), Path: "a.bin.part", Size: int64(len(small))},
	}}
	for run := 1; run <= 2; run++ {
		if err := fx.step(t, spec, nil).Run(ctx, fx.env); err != nil {
			t.Fatalf("run %d: %v", run, err)
		}
		for name, want := range map[string][]byte{"a.bin": big, "a.bin.part": small} {
			got, err := os.ReadFile(filepath.Join(fx.dest, name))
			if err != nil || !bytes.Equal(got, want) {
				t.Errorf("run %d: %s holds %d bytes that are not its own (%v)", run, name, len(got), err)
			}
		}
		var rec record
		fx.env.LoadData(&rec)
		if rec.Files["a.bin"].SHA256 != sum(big) || rec.Files["a.bin.part"].SHA256 != sum(small) {
			t.Errorf("run %d: recorded %+v", run, rec.Files)
		}
	}
	if ok, why, err := fx.step(t, spec, nil).Intact(ctx, fx.env); !ok || err != nil {
		t.Errorf("Intact = %v %q %v", ok, why, err)
	}
	// A file listed inside the part folder is an invalid recipe.
	bad := Spec{Dest: fx.dest, Files: []FileSpec{{URL: srv.URL + "/small", SHA256: sum(small), Path: ".sglprov/parts/a.bin.part"}}}
	if _, err := New(bad); err == nil || !strings.Contains(err.Error(), ".sglprov/") {
		t.Errorf("New = %v, want a refusal of .sglprov/", err)
	}
}

// After a successful run, the part files of files that left the listing are removed, and
// the log says so.
func TestPartsOfUnlistedFilesRemoved(t *testing.T) {
	ctx := context.Background()
	fx := newFixture(t, fakehub.Options{})
	src := t.TempDir()
	keep := bytes.Repeat([]byte("k"), 4096)
	gone := bytes.Repeat([]byte("g"), 200<<10)
	writeSrc(t, src, map[string][]byte{"keep": keep, "gone": gone})
	srv := fileServer(t, src, map[string]bool{"gone": true})
	keepSpec := FileSpec{URL: srv.URL + "/keep", SHA256: sum(keep), Path: "keep.bin"}
	goneSpec := FileSpec{URL: srv.URL + "/gone", SHA256: sum(gone), Path: "sub/gone.bin", Size: int64(len(gone))}

	// First run: gone.bin is cut off halfway, and its part stays for a resume.
	err := fx.step(t, Spec{Dest: fx.dest, Files: []FileSpec{keepSpec, goneSpec}, Retries: -1}, nil).Run(ctx, fx.env)
	if err == nil {
		t.Fatal("the first run did not fail")
	}
	part := filepath.Join(fx.dest, fetch.WorkDir, "parts", "sub", "gone.bin.part")
	if st, err := os.Stat(part); err != nil || st.Size() == 0 {
		t.Fatalf("no part of gone.bin after the failed run: %v", err)
	}

	// A part an earlier version kept beside its file.
	if err := os.WriteFile(filepath.Join(fx.dest, "keep.bin.part"), []byte("old layout"), 0o644); err != nil {
		t.Fatal(err)
	}

	// Second run: gone.bin left the listing; the run succeeds and removes its part.
	if err := fx.step(t, Spec{Dest: fx.dest, Files: []FileSpec{keepSpec}}, nil).Run(ctx, fx.env); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(fx.dest, fetch.WorkDir)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s still there after a successful run: %v", fetch.WorkDir, err)
	}
	if log := fx.log.String(); !strings.Contains(log, "removed the part file of a file no longer listed") || !strings.Contains(log, "sub/gone.bin") || !strings.Contains(log, "keep.bin.part") {
		t.Errorf("log does not name the removed part:\n%s", log)
	}
	ents, _ := os.ReadDir(fx.dest)
	if len(ents) != 1 || ents[0].Name() != "keep.bin" {
		t.Errorf("dest holds %v, want keep.bin only", ents)
	}
}

// A file whose source keeps failing runs out of its no-progress budget and fails alone:
// the other files are downloaded and recorded, and the step's error and log name every
// failed file.
func TestFailedFilesReportedOthersKept(t *testing.T) {
	ctx := context.Background()
	fx := newFixture(t, fakehub.Options{})
	src := t.TempDir()
	good := bytes.Repeat([]byte("k"), 300<<10)
	writeSrc(t, src, map[string][]byte{"good": good})
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "0")
		http.Error(w, "upstream down", http.StatusBadGateway)
	}))
	t.Cleanup(down.Close)
	srv := fileServer(t, src, nil)
	other := sum([]byte("never served"))
	spec := Spec{Dest: fx.dest, NoProgressTimeout: "300ms", Files: []FileSpec{
		{URL: down.URL + "/x", SHA256: other, Path: "x.bin"},
		{URL: srv.URL + "/good", SHA256: sum(good), Path: "good.bin"},
		{URL: down.URL + "/y", SHA256: other, Path: "y.bin"},
	}}
	st := fx.step(t, spec, nil)
	st.stall = time.Second
	err := st.Run(ctx, fx.env)
	if err == nil {
		t.Fatal("the run did not fail")
	}
	for _, want := range []string{"2 of 3 files failed", "x.bin", "y.bin", "502"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if got, err := os.ReadFile(filepath.Join(fx.dest, "good.bin")); err != nil || !bytes.Equal(got, good) {
		t.Fatalf("good.bin was not downloaded alongside the failing files: %v", err)
	}
	var rec record
	fx.env.LoadData(&rec)
	if rec.Files["good.bin"].SHA256 != sum(good) {
		t.Errorf("good.bin not recorded: %+v", rec.Files)
	}
	if log := fx.log.String(); strings.Count(log, "file failed") != 2 {
		t.Errorf("log does not name each failed file:\n%s", log)
	}
}
