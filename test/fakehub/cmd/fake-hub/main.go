// Command fake-hub serves a folder as a Hugging Face hub repository at a fixed commit, for
// demos and CLI tests, and can generate a small NVFP4-style model to serve.
//
//	fake-hub --generate DIR [--shards N] [--shard-bytes N]
//	fake-hub --dir DIR --repo ORG/NAME [--addr 127.0.0.1:0] [--port-file PATH] [--token T]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/sglprov/sglprov/test/fakehub"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fl := flag.NewFlagSet("fake-hub", flag.ContinueOnError)
	fl.SetOutput(stderr)
	dir := fl.String("dir", "", "folder to serve as the repository")
	repo := fl.String("repo", "org/model", "repository id")
	commit := fl.String("commit", fakehub.DefaultCommit, "commit the repository is at")
	addr := fl.String("addr", "127.0.0.1:0", "address to listen on")
	portFile := fl.String("port-file", "", "write the hub's URL to this file once listening")
	token := fl.String("token", "", "require this bearer token")
	pageSize := fl.Int("page-size", 0, "tree-listing page size (0: 1000)")
	lfs := fl.Int64("lfs-threshold", 0, "size from which files are LFS files served from the CDN (0: 1 MiB)")
	generate := fl.String("generate", "", "generate a model into this folder and exit")
	shards := fl.Int("shards", 3, "shards to generate")
	shardBytes := fl.Int64("shard-bytes", 1<<20, "approximate bytes per generated shard")
	rate := fl.Int64("rate", 0, "bytes per second of each file response (0: no limit)")
	if err := fl.Parse(args); err != nil {
		return 2
	}
	if *generate != "" {
		if err := fakehub.GenerateModel(*generate, *shards, *shardBytes); err != nil {
			fmt.Fprintln(stderr, "fake-hub:", err)
			return 1
		}
		return 0
	}
	if *dir == "" {
		fmt.Fprintln(stderr, "fake-hub: --dir or --generate is required")
		return 2
	}
	h, err := fakehub.New(fakehub.Options{
		Repo: *repo, FS: os.DirFS(*dir), Commit: *commit, Token: *token,
		PageSize: *pageSize, LFSThreshold: *lfs, CDNHost: "localhost", Rate: *rate,
	})
	if err != nil {
		fmt.Fprintln(stderr, "fake-hub:", err)
		return 1
	}
	hubLn, err := net.Listen("tcp", *addr)
	if err != nil {
		fmt.Fprintln(stderr, "fake-hub: listening:", err)
		return 1
	}
	cdnLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(stderr, "fake-hub: listening for the CDN:", err)
		return 1
	}
	h.SetCDNBase("http://" + cdnLn.Addr().String())
	hubURL := "http://" + hubLn.Addr().String()
	hubSrv := &http.Server{Handler: h.Handler(), ReadHeaderTimeout: 10 * time.Second}
	cdnSrv := &http.Server{Handler: h.CDNHandler(), ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 2)
	go func() { errc <- hubSrv.Serve(hubLn) }()
	go func() { errc <- cdnSrv.Serve(cdnLn) }()
	if *portFile != "" {
		tmp := *portFile + ".tmp"
		err := os.WriteFile(tmp, []byte(hubURL+"\n"), 0o644)
		if err == nil {
			err = os.Rename(tmp, *portFile)
		}
		if err != nil {
			fmt.Fprintln(stderr, "fake-hub: writing port file:", err)
			return 1
		}
	}
	fmt.Fprintf(stdout, "fake-hub: serving %s (%s) at %s commit %s\n", *repo, filepath.Clean(*dir), hubURL, *commit)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	select {
	case <-ctx.Done():
	case err := <-errc:
		if !errors.Is(err, http.ErrServerClosed) {
			fmt.Fprintln(stderr, "fake-hub:", err)
			return 1
		}
	}
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = hubSrv.Shutdown(sctx)
	_ = cdnSrv.Shutdown(sctx)
	return 0
}
