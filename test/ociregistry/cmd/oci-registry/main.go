// Command oci-registry runs a real OCI registry (distribution 3 from make deps, or Debian's
// docker-registry: test/ociregistry's Find) on a free loopback port with its storage in
// DIR, writes "127.0.0.1:PORT" to the port file once it answers, and runs until it is
// signalled. With --which it prints the registry it would run and exits (1 when there is
// none). The scripts of the demo and the benchmarks use it.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/sglprov/sglprov/test/ociregistry"
)

func main() {
	dir := flag.String("dir", "", "folder for the config, the storage and the log")
	portFile := flag.String("port-file", "", "write HOST:PORT here once the registry answers")
	which := flag.Bool("which", false, "print the registry executable and its release, and exit")
	flag.Parse()
	if *which {
		e, err := ociregistry.Find()
		if err != nil {
			fmt.Fprintln(os.Stderr, "oci-registry:", err)
			os.Exit(1)
		}
		fmt.Println(e)
		return
	}
	if *dir == "" {
		fmt.Fprintln(os.Stderr, "usage: oci-registry --dir DIR [--port-file FILE] | --which")
		os.Exit(2)
	}
	r, err := ociregistry.Start(*dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "oci-registry:", err)
		os.Exit(1)
	}
	if *portFile != "" {
		if err := os.WriteFile(*portFile, []byte(r.Addr), 0o644); err != nil {
			r.Stop()
			fmt.Fprintln(os.Stderr, "oci-registry:", err)
			os.Exit(1)
		}
	} else {
		fmt.Println(r.Addr)
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	<-sig
	r.Stop()
}
