// Command cachebench pushes files to the fleet cache and pulls them back with pkg/cache,
// for bench/run.sh: the registry path of a download, beside the origin's.
//
//	cachebench push -repo HOST:PORT/PATH -tag TAG -src DIR -list LIST
//	cachebench pull -repo HOST:PORT/PATH -tag TAG -dest DIR [-conns N] [-files N]
//
// The list is fetchbench's (URL SHA256 SIZE PATH a line; the URL is not used): push sends
// SRC/PATH of each line as a blob and tags one download artifact listing them; pull looks
// the tag up and fetches every file with the parallel ranged downloader, through the
// registry's authenticating client, exactly as a download step on a cache hit does.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/sglprov/sglprov/bench/internal/filelist"
	"github.com/sglprov/sglprov/pkg/cache"
	"github.com/sglprov/sglprov/pkg/fetch"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "cachebench:", err)
		os.Exit(1)
	}
}

func run() error {
	if len(os.Args) < 2 || (os.Args[1] != "push" && os.Args[1] != "pull") {
		return fmt.Errorf("usage: cachebench push|pull -repo HOST:PORT/PATH -tag TAG ...")
	}
	mode := os.Args[1]
	fs := flag.NewFlagSet(mode, flag.ExitOnError)
	repo := fs.String("repo", "", "registry repository")
	tag := fs.String("tag", "bench", "artifact tag")
	src := fs.String("src", "", "push: folder of the files")
	list := fs.String("list", "", "push: file list (URL SHA256 SIZE PATH per line)")
	dest := fs.String("dest", "", "pull: destination folder")
	files := fs.Int("files", 0, "pull: files at once (0: default)")
	conns := fs.Int("conns", 0, "pull: connections per large file (0: default)")
	chunkMB := fs.Int64("chunk-mb", 0, "pull: range size in MiB (0: pkg/cache's default)")
	bufferMB := fs.Int64("buffer-mb", 0, "pull: read-ahead memory bound in MiB (0: default)")
	_ = fs.Parse(os.Args[2:])
	ctx := context.Background()
	start := time.Now()
	c, err := cache.New(cache.Config{Repository: *repo, Push: mode == "push"}, cache.Options{
		Fetch: fetch.Options{Files: *files, Conns: *conns, ChunkSize: *chunkMB << 20, MaxBuffer: *bufferMB << 20},
	})
	if err != nil {
		return err
	}
	switch mode {
	case "push":
		fl, err := readList(*list, *src)
		if err != nil {
			return err
		}
		a, err := c.Push(ctx, *tag, cache.KindDownload, []byte(`{"files":[]}`), fl)
		if err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "cachebench: pushed %d files as %s in %s\n", len(fl), a.Digest, time.Since(start).Round(time.Millisecond))
	case "pull":
		a, err := c.Lookup(ctx, *tag)
		if err != nil {
			return err
		}
		if a == nil {
			return fmt.Errorf("no artifact tagged %s in %s", *tag, *repo)
		}
		if err := c.Pull(ctx, a, *dest); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "cachebench: pulled %d files of %s in %s\n", len(a.Files), a.Digest, time.Since(start).Round(time.Millisecond))
	}
	return nil
}

// readList reads the bench file list and places each file under src.
func readList(path, src string) ([]cache.File, error) {
	files, err := filelist.Read(path)
	if err != nil {
		return nil, err
	}
	out := make([]cache.File, 0, len(files))
	for _, f := range files {
		out = append(out, cache.File{Name: f.Path, Path: filepath.Join(src, f.Path), Size: f.Size, SHA256: f.SHA256, Mode: 0o644})
	}
	return out, nil
}
