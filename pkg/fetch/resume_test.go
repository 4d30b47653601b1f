package fetch

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestResumeAfterInterruptedRun(t *testing.T) {
	const size = 2 << 20
	tests := []struct {
		name         string
		parallel     bool
		loseSidecar  bool
		wantSidecar  bool
		corruptState bool
	}{
		{name: "one connection", wantSidecar: true},
		{name: "parallel ranges", parallel: true, wantSidecar: true},
		{name: "sidecar lost: the part is hashed once", loseSidecar: true},
		{name: "sidecar state unusable: the part is hashed once", corruptState: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			data := randomBytes(t, size)
			dest := t.TempDir()
			f := File{Path: "w.bin", Size: size, SHA256: sha256Hex(data)}
			opt := testOptions(dest)
			if !tc.parallel {
				opt.MinChunk = 1 << 30
			}

			// First run: cancelled once half the file has been served.
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			first := newFaultServer(t, map[string][]byte{"w": data})
			partPath, _ := partPaths(dest, "w.bin")
			var once sync.Once
			first.configure(func() {
				first.throttle = time.Millisecond
				first.onServed = func(total int64) {
					// With parallel ranges, half the bytes served may all be ranges
					// after the first: wait until some prefix is on disk too.
					if st, err := os.Stat(partPath); total >= size/2 && err == nil && st.Size() > 0 {
						once.Do(cancel)
					}
				}
			})
			f.URL = first.url("w")
			_, err := Fetch(ctx, []File{f}, opt)
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("first run: err = %v, want context.Canceled", err)
			}
			part := partFile(t, dest, "w.bin")
			st, err := os.Stat(part)
			if err != nil {
				t.Fatalf("no part file after the interrupted run: %v", err)
			}
			have := st.Size()
			if have == 0 || have >= size {
				t.Fatalf("part has %d bytes, want some but not all", have)
			}
			if !bytes.Equal(readFile(t, part), data[:have]) {
				t.Fatal("the part is not a prefix of the file")
			}
			side := partSide(dest, "w.bin")
			if _, err := os.Stat(side); (err == nil) != tc.wantSidecar && !tc.loseSidecar && !tc.corruptState {
				t.Errorf("sidecar present = %v, want %v", err == nil, tc.wantSidecar)
			}
			if tc.loseSidecar {
				os.Remove(side)
			}
			if tc.corruptState {
				if err := os.WriteFile(side, []byte(`{"version":1,"size":2097152,"sha256":"`+f.SHA256+`","hashed":1,"state":"AAAA"}`), 0o644); err != nil {
					t.Fatal(err)
				}
			}

			// Second run, against a fresh server that counts what it serves.
			second := newFaultServer(t, map[string][]byte{"w": data})
			f.URL = second.url("w")
			res, err := Fetch(context.Background(), []File{f}, opt)
			if err != nil {
				t.Fatalf("second run: %v", err)
			}
			if !bytes.Equal(readFile(t, filepath.Join(dest, "w.bin")), data) {
				t.Fatal("resumed file differs")
			}
			if got := second.served.Load(); got != size-have {
				t.Errorf("second run served %d bytes, want only the rest %d", got, size-have)
			}
			if !res[0].Resumed || res[0].Bytes != size-have {
				t.Errorf("result %+v: want resumed with %d bytes transferred", res[0], size-have)
			}
			assertOnly(t, dest, "w.bin")
		})
	}
}

// TestHelperProcessFetch is the child of TestResumeAfterKill: it downloads until killed.
func TestHelperProcessFetch(t *testing.T) {
	if os.Getenv("SGLPROV_FETCH_HELPER") != "1" {
		t.Skip("helper process for TestResumeAfterKill")
	}
	size, _ := strconv.ParseInt(os.Getenv("SGLPROV_FETCH_SIZE"), 10, 64)
	opt := testOptions(os.Getenv("SGLPROV_FETCH_DEST"))
	opt.CheckpointBytes = 256 << 10
	f := File{URL: os.Getenv("SGLPROV_FETCH_URL"), Path: "w.bin", Size: size, SHA256: os.Getenv("SGLPROV_FETCH_SHA256")}
	if _, err := Fetch(context.Background(), []File{f}, opt); err != nil {
		t.Fatal(err)
	}
}

func TestResumeAfterKill(t *testing.T) {
	const size = 4 << 20
	data := randomBytes(t, size)
	dest := t.TempDir()
	srv := newFaultServer(t, map[string][]byte{"w": data})
	half := make(chan struct{})
	var once sync.Once
	srv.configure(func() {
		srv.throttle = time.Millisecond
		srv.onServed = func(total int64) {
			if total >= size/2 {
				once.Do(func() { close(half) })
			}
		}
	})
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcessFetch$", "-test.count=1")
	cmd.Env = append(os.Environ(),
		"SGLPROV_FETCH_HELPER=1",
		"SGLPROV_FETCH_DEST="+dest,
		"SGLPROV_FETCH_URL="+srv.url("w"),
		"SGLPROV_FETCH_SIZE="+strconv.Itoa(size),
		"SGLPROV_FETCH_SHA256="+sha256Hex(data),
	)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-half:
	case <-time.After(20 * time.Second):
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("the helper did not get halfway; output:\n%s", out.String())
	}
	if err := cmd.Process.Kill(); err != nil { // SIGKILL: no clean-up of any kind
		t.Fatal(err)
	}
	_ = cmd.Wait()

	part := partFile(t, dest, "w.bin")
	st, err := os.Stat(part)
	if err != nil {
		t.Fatalf("no part file after the kill: %v\n%s", err, out.String())
	}
	have := st.Size()
	if _, err := os.Stat(partSide(dest, "w.bin")); err != nil {
		t.Logf("no sidecar after the kill (the part is hashed again): %v", err)
	}

	again := newFaultServer(t, map[string][]byte{"w": data})
	f := File{URL: again.url("w"), Path: "w.bin", Size: size, SHA256: sha256Hex(data)}
	res, err := Fetch(context.Background(), []File{f}, testOptions(dest))
	if err != nil {
		t.Fatalf("re-run: %v", err)
	}
	if !bytes.Equal(readFile(t, filepath.Join(dest, "w.bin")), data) {
		t.Fatal("file differs after the re-run")
	}
	if got := again.served.Load(); got != size-have {
		t.Errorf("re-run served %d bytes, want only the rest: %d", got, size-have)
	}
	if !res[0].Resumed {
		t.Errorf("result %+v: want Resumed", res[0])
	}
	assertOnly(t, dest, "w.bin")
}

func TestResumeIgnoresPartOfAnotherVersion(t *testing.T) {
	const size = 1 << 20
	data := randomBytes(t, size)
	dest := t.TempDir()
	// A part and sidecar left by a download of another version of the file.
	if err := os.WriteFile(partFile(t, dest, "w.bin"), randomBytes(t, size/2), 0o644); err != nil {
		t.Fatal(err)
	}
	side := `{"version":1,"size":1048576,"sha256":"` + sha256Hex([]byte("old")) + `","hashed":0,"state":""}`
	if err := os.WriteFile(partSide(dest, "w.bin"), []byte(side), 0o644); err != nil {
		t.Fatal(err)
	}
	srv := newFaultServer(t, map[string][]byte{"w": data})
	f := File{URL: srv.url("w"), Path: "w.bin", Size: size, SHA256: sha256Hex(data)}
	res, err := Fetch(context.Background(), []File{f}, testOptions(dest))
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Resumed || srv.served.Load() != size {
		t.Errorf("result %+v, served %d: want a fresh download of %d bytes", res[0], srv.served.Load(), size)
	}
	if !bytes.Equal(readFile(t, filepath.Join(dest, "w.bin")), data) {
		t.Error("file differs")
	}
	assertOnly(t, dest, "w.bin")
}

func TestResumeAgainstServerIgnoringRange(t *testing.T) {
	const size = 1 << 20
	data := randomBytes(t, size)
	dest := t.TempDir()
	// A good half of the file from an earlier run.
	if err := os.WriteFile(partFile(t, dest, "w.bin"), data[:size/2], 0o644); err != nil {
		t.Fatal(err)
	}
	srv := newFaultServer(t, map[string][]byte{"w": data})
	srv.configure(func() { srv.plan = func(int, *http.Request) action { return action{ignoreRange: true} } })
	var logs lines
	opt := testOptions(dest)
	opt.Logf = logs.logf
	f := File{URL: srv.url("w"), Path: "w.bin", Size: size, SHA256: sha256Hex(data)}
	res, err := Fetch(context.Background(), []File{f}, opt)
	if err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(dest, "w.bin")); !bytes.Equal(got, data) {
		t.Fatalf("file differs (len %d): the 200 answer was appended?", len(got))
	}
	if res[0].Resumed {
		t.Errorf("result %+v: want a fresh download", res[0])
	}
	reqs := srv.requests()
	if len(reqs) != 2 || reqs[0].rng != "bytes=524288-1048575" || reqs[1].rng != "" {
		t.Errorf("requests = %+v: want the ranged resume, then one plain GET", reqs)
	}
	if !strings.Contains(strings.Join(logs.get(), "\n"), "ignored the Range header") {
		t.Errorf("logs %q do not say the server ignored Range", logs.get())
	}
	assertOnly(t, dest, "w.bin")
}
