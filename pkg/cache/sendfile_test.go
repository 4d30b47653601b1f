package cache_test

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/sglprov/sglprov/pkg/cache"
	"github.com/sglprov/sglprov/test/ociregistry"
)

// bodyRecorder notes, for each PATCH, whether its body (and the one GetBody gives for a
// second try) is a syscall.Conn: what net.TCPConn.ReadFrom needs, under the transport's
// io.LimitedReader, to send the chunk with sendfile(2).
type bodyRecorder struct {
	next http.RoundTripper

	mu            sync.Mutex
	patches, conn int
	retryConn     int
	types         []string
}

func (b *bodyRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodPatch {
		b.mu.Lock()
		b.patches++
		if _, ok := req.Body.(syscall.Conn); ok {
			b.conn++
		}
		b.types = append(b.types, fmt.Sprintf("%T", req.Body))
		if req.GetBody != nil {
			if again, err := req.GetBody(); err == nil {
				if _, ok := again.(syscall.Conn); ok {
					b.retryConn++
				}
				// A second body reads the chunk from its start, whatever the first did.
				again.Close()
			}
		}
		b.mu.Unlock()
	}
	return b.next.RoundTrip(req)
}

// TestPushChunksGoBySendfile: every chunk of a push is a body the kernel can send from the
// file itself (sendfile), not bytes copied through the process, also when the transport
// asks for the body again; the blobs arrive whole, which the registry checks against
// their sha256, and pull back.
func TestPushChunksGoBySendfile(t *testing.T) {
	reg := ociregistry.StartT(t)
	ctx := context.Background()
	src := t.TempDir()
	var files []cache.File
	for i := range 3 {
		files = append(files, writeRandom(t, filepath.Join(src, fmt.Sprintf("f%d.bin", i)), 2<<20+1+i*777))
	}
	rec := &bodyRecorder{next: http.DefaultTransport.(*http.Transport).Clone()}
	pusher, err := cache.New(cache.Config{Repository: reg.Addr + "/fleet/sglprov", Push: true},
		cache.Options{Transport: rec, ChunkSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	tag := strings.Repeat("5f", 32)
	if _, err := pusher.Push(ctx, tag, cache.KindDownload, []byte(`{}`), files); err != nil {
		t.Fatal(err)
	}
	if rec.patches != 9 || rec.conn != rec.patches || rec.retryConn != rec.patches {
		t.Errorf("%d PATCHes (want 9, 3 of each file), %d with a body sendfile can send, %d such bodies again; bodies %v",
			rec.patches, rec.conn, rec.retryConn, rec.types)
	}
	puller, err := cache.New(cache.Config{Repository: reg.Addr + "/fleet/sglprov"}, cache.Options{})
	if err != nil {
		t.Fatal(err)
	}
	a, err := puller.Lookup(ctx, tag)
	if err != nil || a == nil {
		t.Fatalf("lookup: %v, %v", a, err)
	}
	dir := t.TempDir()
	if err := puller.Pull(ctx, a, dir); err != nil {
		t.Fatal(err)
	}
}
