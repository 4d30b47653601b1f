// Command fetchbench downloads a list of files with pkg/fetch, for bench/run.sh.
//
// The list has one file a line: URL SHA256 SIZE PATH. With -verify, files already present
// are also hashed (VerifyFile), as `sglprov apply --verify` does. With -http2, the files
// come through a client that negotiates HTTP/2 over TLS (every range a stream of one
// connection, as the downloader did before it kept to HTTP/1.1), for comparison.
package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/sglprov/sglprov/bench/internal/filelist"
	"github.com/sglprov/sglprov/pkg/fetch"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "fetchbench:", err)
		os.Exit(1)
	}
}

func run() error {
	list := flag.String("list", "", "file list: URL SHA256 SIZE PATH per line")
	dest := flag.String("dest", "", "destination folder")
	files := flag.Int("files", 0, "files at once (0: default)")
	conns := flag.Int("conns", 0, "connections per large file (0: default)")
	chunkMB := flag.Int64("chunk-mb", 0, "range size in MiB (0: default)")
	bufferMB := flag.Int64("buffer-mb", 0, "read-ahead memory bound in MiB (0: default)")
	verify := flag.Bool("verify", false, "hash files that are already present")
	quiet := flag.Bool("q", false, "no progress lines")
	h2 := flag.Bool("http2", false, "negotiate HTTP/2 over TLS (the old behaviour, for comparison)")
	flag.Parse()
	if *list == "" || *dest == "" {
		return fmt.Errorf("usage: fetchbench -list FILE -dest DIR [-files N] [-conns N] [-verify]")
	}
	fl, err := filelist.Read(*list)
	if err != nil {
		return err
	}
	opt := fetch.Options{Dest: *dest, Files: *files, Conns: *conns, ChunkSize: *chunkMB << 20, MaxBuffer: *bufferMB << 20}
	if *h2 {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.ForceAttemptHTTP2 = true
		t.DisableCompression = true
		opt.Client = &http.Client{Transport: t}
	}
	if !*quiet {
		opt.Logf = func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }
	}
	var pipe *fetch.PipeReporter
	if !*quiet {
		pipe = fetch.NewPipeReporter(func(msg string, keyvals ...any) {
			fmt.Fprintln(os.Stderr, append([]any{msg}, keyvals...)...)
		}, 5*time.Second)
		opt.Progress = pipe
	}
	start := time.Now()
	res, err := fetch.Fetch(context.Background(), fl, opt)
	if pipe != nil {
		pipe.Close()
	}
	if err != nil {
		return err
	}
	var bytes int64
	for i, r := range res {
		bytes += r.Bytes
		if r.Present && *verify {
			if err := fetch.VerifyFile(*dest+"/"+r.Path, fl[i]); err != nil {
				return err
			}
		}
	}
	fmt.Fprintf(os.Stderr, "fetchbench: %d files, %s transferred in %s\n", len(res), fetch.FormatBytes(bytes), time.Since(start).Round(time.Millisecond))
	return nil
}
