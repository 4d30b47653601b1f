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

// config is what the command line asks.
type config struct {
	dir, repo, commit, addr, portFile, token, generate string
	pageSize, shards                                   int
	lfs, shardBytes, rate                              int64
}

// parseFlags reads the command line into a config.
func parseFlags(args []string, stderr io.Writer) (config, error) {
	var c config
	fl := flag.NewFlagSet("fake-hub", flag.ContinueOnError)
	fl.SetOutput(stderr)
	fl.StringVar(&c.dir, "dir", "", "folder to serve as the repository")
	fl.StringVar(&c.repo, "repo", "org/model", "repository id")
	fl.StringVar(&c.commit, "commit", fakehub.DefaultCommit, "commit the repository is at")
	fl.StringVar(&c.addr, "addr", "127.0.0.1:0", "address to listen on")
	fl.StringVar(&c.portFile, "port-file", "", "write the hub's URL to this file once listening")
	fl.StringVar(&c.token, "token", "", "require this bearer token")
	fl.IntVar(&c.pageSize, "page-size", 0, "tree-listing page size (0: 1000)")
	fl.Int64Var(&c.lfs, "lfs-threshold", 0, "size from which files are LFS files served from the CDN (0: 1 MiB)")
	fl.StringVar(&c.generate, "generate", "", "generate a model into this folder and exit")
	fl.IntVar(&c.shards, "shards", 3, "shards to generate")
	fl.Int64Var(&c.shardBytes, "shard-bytes", 1<<20, "approximate bytes per generated shard")
	fl.Int64Var(&c.rate, "rate", 0, "bytes per second of each file response (0: no limit)")
	err := fl.Parse(args)
	return c, err
}

func run(args []string, stdout, stderr io.Writer) int {
	c, err := parseFlags(args, stderr)
	if err != nil {
		return 2
	}
	if c.generate != "" {
		if err := fakehub.GenerateModel(c.generate, c.shards, c.shardBytes); err != nil {
			fmt.Fprintln(stderr, "fake-hub:", err)
			return 1
		}
		return 0
	}
	if c.dir == "" {
		fmt.Fprintln(stderr, "fake-hub: --dir or --generate is required")
		return 2
	}
	h, err := fakehub.New(fakehub.Options{
		Repo: c.repo, FS: os.DirFS(c.dir), Commit: c.commit, Token: c.token,
		PageSize: c.pageSize, LFSThreshold: c.lfs, CDNHost: "localhost", Rate: c.rate,
	})
	if err != nil {
		fmt.Fprintln(stderr, "fake-hub:", err)
		return 1
	}
	return serve(h, c, stdout, stderr)
}

// serve serves h and its CDN until SIGINT or SIGTERM, and returns the exit code.
func serve(h *fakehub.Hub, c config, stdout, stderr io.Writer) int {
	hubLn, err := net.Listen("tcp", c.addr)
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
	if c.portFile != "" {
		if err := writePortFile(c.portFile, hubURL); err != nil {
			fmt.Fprintln(stderr, "fake-hub: writing port file:", err)
			return 1
		}
	}
	fmt.Fprintf(stdout, "fake-hub: serving %s (%s) at %s commit %s\n", c.repo, filepath.Clean(c.dir), hubURL, c.commit)
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

// writePortFile writes the hub's URL to path, through a temporary file renamed into place.
func writePortFile(path, hubURL string) error {
	tmp := path + ".tmp"
	err := os.WriteFile(tmp, []byte(hubURL+"\n"), 0o644)
	if err == nil {
		err = os.Rename(tmp, path)
	}
	return err
}
