package download

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/fetch"
	"github.com/sglprov/sglprov/test/fakehub"
)

// A `files:` entry with `size: 9` whose server answers 200 with no Content-Length and
// never ends its body: the step fails at the 10th byte with an error that says so (exit 1,
// not "not enough free space"), no part file stays, and the next run is not refused for a
// lack of space.
func TestFilesEntryWithoutAnEnd(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		w.Write([]byte("123456789"))
		chunk := make([]byte, 32<<10)
		for r.Context().Err() == nil {
			if _, err := w.Write(chunk); err != nil {
				return
			}
			w.(http.Flusher).Flush()
		}
	}))
	defer srv.Close()
	fx := newFixture(t, fakehub.Options{})
	spec := Spec{Dest: fx.dest, StallTimeout: "5s", Files: []FileSpec{{URL: srv.URL + "/nine", Path: "nine.bin", Size: 9, SHA256: sum([]byte("123456789"))}}}
	for run := 1; run <= 2; run++ {
		start := time.Now()
		err := fx.step(t, spec, nil).Run(context.Background(), fx.env)
		var tl *fetch.TooLongError
		if !errors.As(err, &tl) || !strings.Contains(err.Error(), "more than the 9 bytes") {
			t.Fatalf("run %d: Run = %v, want the file refused at its 10th byte", run, err)
		}
		if code := exitcode.Of(err); code != exitcode.ExitFailed {
			t.Errorf("run %d: exit code %d, want %d", run, code, exitcode.ExitFailed)
		}
		if d := time.Since(start); d > 20*time.Second {
			t.Errorf("run %d took %s", run, d)
		}
		var left []string
		filepath.WalkDir(fx.dest, func(p string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				left = append(left, p)
			}
			return nil
		})
		if len(left) != 0 {
			t.Errorf("run %d left %v", run, left)
		}
	}
}
