// Command fake-sglang is a fake SGLang server for tests. It accepts the command line of a
// real launch (python -m sglang.launch_server --model-path ... --port ...) and answers
// well or like a broken server depending on its flags; see package fakesglang.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/sglprov/sglprov/test/fakesglang"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	code := fakesglang.Main(ctx, os.Args[1:], os.Stderr, os.Getenv)
	stop()
	os.Exit(code)
}
