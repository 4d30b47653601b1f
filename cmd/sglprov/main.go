// Command sglprov provisions GPU hosts to serve LLMs with SGLang, and will not call a host
// ready until the model's answers are right.
package main

import (
	"os"

	"github.com/sglprov/sglprov/pkg/cli"
)

func main() {
	os.Exit(cli.Main(os.Args, cli.IO{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv}))
}
