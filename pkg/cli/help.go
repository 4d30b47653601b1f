package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/sglprov/sglprov/pkg/buildinfo"
	"github.com/sglprov/sglprov/pkg/clidoc"
	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/gpuclaim"
)

// summary is the one line that says what sglprov is.
const summary = "sglprov provisions GPU hosts to serve LLMs with SGLang, and gates on correct answers."

// exitCodes is the exit-code contract, as help and the man page show it.
var exitCodes = []clidoc.ExitCode{
	{Code: exitcode.ExitOK, Meaning: "success (the gate passed, or there was nothing to do)"},
	{Code: exitcode.ExitFailed, Meaning: "a step failed"},
	{Code: exitcode.ExitUsage, Meaning: "bad usage or an invalid recipe"},
	{Code: exitcode.ExitGate, Meaning: "the smoke gate failed"},
	{Code: exitcode.ExitHost, Meaning: "the host does not meet the recipe's requirements, or NVML could not be loaded, or a download cannot fit, or (plan) the hub has no such model revision"},
	{Code: exitcode.ExitLocked, Meaning: "another sglprov run holds the lock"},
	{Code: exitcode.ExitReboot, Meaning: "reboot required (NVIDIA driver/library version mismatch)"},
	{Code: ExitChanges, Meaning: "plan --detailed-exitcode only: the plan has steps to run"},
	{Code: ExitInterrupted, Meaning: "interrupted (Ctrl-C, SIGINT)"},
}

// environment lists the variables sglprov reads, as help and the man page show them.
var environment = []clidoc.Variable{
	{Name: "SGLPROV_STATE_DIR", Meaning: "the default of --state-dir (else " + DefaultStateDir + ")"},
	{Name: "SGLPROV_GPU_FIXTURE", Meaning: "a JSON file that describes the host's GPUs in place of NVML"},
	{Name: "SGLPROV_GPU_CLAIMS_DIR", Meaning: "the node-wide folder of GPU claims, which recipe serves on which GPUs (else " + gpuclaim.NodeClaimsDir + ")"},
	{Name: "SGLPROV_STATE_DIRS_DIR", Meaning: "the node-wide registry of state dirs, which remove and gc read (else " + engine.NodeStateDirsDir + ")"},
	{Name: "HF_TOKEN", Meaning: "the Hugging Face hub token (never logged)"},
	{Name: "HF_ENDPOINT", Meaning: "the Hugging Face hub's URL"},
}

// doc is the documentation's material: every command with flags when describe is set
// (describeAll), else without.
func doc(cmds []clidoc.Command) clidoc.Doc {
	return clidoc.Doc{Summary: summary, Commands: cmds, ExitCodes: exitCodes, Environment: environment, StateDir: DefaultStateDir}
}

// usage writes the top-level help.
func usage(w io.Writer) {
	var cmds []clidoc.Command
	for _, c := range commands() {
		cmds = append(cmds, c.doc(nil))
	}
	clidoc.Usage(w, doc(cmds))
}

// doc is the command as the documentation shows it, with flags.
func (c command) doc(flags []clidoc.Flag) clidoc.Command {
	d := clidoc.Command{Name: c.name, Aliases: c.aliases, Args: c.args, Summary: c.summary, Flags: flags}
	switch c.name {
	case "help":
		for _, o := range commands() {
			d.Words = append(d.Words, o.name)
		}
	case "completion":
		d.Words = clidoc.Shells
	}
	return d
}

// writeCommandHelp writes a command's help: what it does, its synopsis and its flags.
func writeCommandHelp(w io.Writer, fs *flagSet) {
	c, _ := lookup(fs.cmd)
	clidoc.CommandHelp(w, c.doc(fs.flags()))
}

// describeAll returns each command with its flags, as the command defines them: each
// command is run with --help and a describe hook in place of printing.
func describeAll(stdio IO) []clidoc.Command {
	var out []clidoc.Command
	for _, c := range commands() {
		var flags []clidoc.Flag
		quiet := IO{Stdin: stdio.Stdin, Stdout: io.Discard, Stderr: io.Discard, Getenv: func(string) string { return "" }}
		quiet.describe = func(fs *flagSet) { flags = fs.flags() }
		_ = c.run(context.Background(), quiet, []string{"--help"})
		out = append(out, c.doc(flags))
	}
	return out
}

// runHelp is `sglprov help [COMMAND]`.
func runHelp(ctx context.Context, stdio IO, args []string) error {
	fs := newFlags("help", stdio)
	if err := fs.Parse(args); err != nil {
		return fs.flagError(err)
	}
	switch fs.NArg() {
	case 0:
		usage(stdio.Stdout)
		return nil
	case 1:
	default:
		return usageError("help", fmt.Sprintf("give one command, not %q", strings.Join(fs.Args(), " ")))
	}
	c, ok := lookup(fs.Arg(0))
	if !ok {
		return unknownCommand(fs.Arg(0))
	}
	return c.run(ctx, stdio, []string{"--help"})
}

// runMan is `sglprov man`: the man page sglprov(1), made from the same commands, flags and
// tables as the help.
func runMan(ctx context.Context, stdio IO, args []string) error {
	fs := newFlags("man", stdio)
	if err := parse(fs, args); err != nil {
		return err
	}
	return clidoc.Man(stdio.Stdout, doc(describeAll(stdio)), buildinfo.Read().Version)
}

// runCompletion is `sglprov completion bash|zsh|fish`.
func runCompletion(ctx context.Context, stdio IO, args []string) error {
	fs := newFlags("completion", stdio)
	if err := fs.Parse(args); err != nil {
		return fs.flagError(err)
	}
	if fs.NArg() != 1 {
		return usageError("completion", "give one shell: bash, zsh or fish")
	}
	err := clidoc.Completion(stdio.Stdout, fs.Arg(0), doc(describeAll(stdio)))
	if errors.Is(err, clidoc.ErrUnknownShell) {
		return usageError("completion", err.Error())
	}
	if err != nil {
		return fmt.Errorf("writing the %s completion script: %w", fs.Arg(0), err)
	}
	return nil
}

// unknownCommand is the usage error for a command sglprov does not have, with the nearest
// one when it is close.
func unknownCommand(name string) error {
	msg := fmt.Sprintf("unknown command %q", name)
	if s := nearest(name); s != "" {
		msg += fmt.Sprintf("; did you mean %s?", s)
	}
	return &exitcode.Error{Msg: msg + "\nRun 'sglprov --help' for the list of commands.", Kind: exitcode.ErrUsage}
}

// nearest returns the command whose name is closest to name (clidoc.Nearest), or "".
func nearest(name string) string {
	var names []string
	for _, c := range commands() {
		names = append(names, c.name)
	}
	return clidoc.Nearest(name, names)
}
