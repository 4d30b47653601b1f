// Package cli is sglprov's command line: one file per command, flag parsing, output and
// the exit codes of the contract.
package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"charm.land/log/v2"
	"github.com/charmbracelet/x/term"

	"github.com/sglprov/sglprov/pkg/buildinfo"
	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/gpu"
	"github.com/sglprov/sglprov/pkg/logval"
	"github.com/sglprov/sglprov/pkg/stopsignal"
)

// IO is what a command reads and writes: the streams and the environment.
type IO struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	Getenv         func(string) string

	// describe, when set, receives the command's flags in place of its help (--help).
	describe func(*flagSet)
	// run is what Main learns of the command while it runs (nil outside Main).
	run *invocation
	// Factory builds what the command needs of the host (nil: the real constructors, at
	// each use); Main makes one per command.
	Factory *Factory
	// journal is set when Stderr is the systemd journal (see journalStderr): logs default
	// to logfmt there, which the journal writer turns into fields.
	journal bool
}

// DefaultStateDir is where state lives unless --state-dir says otherwise.
const DefaultStateDir = "/var/lib/sglprov"

// command is one sglprov command: its name, the arguments its synopsis shows, the one
// line that says what it does, and its body. Every body parses its flags (parse) before it
// does anything else: help and the man page are made by running it with --help.
type command struct {
	name, args, summary string
	run                 func(ctx context.Context, io IO, args []string) error
	// aliases are other names the command answers to (an older name kept working).
	aliases []string
}

func commands() []command {
	return []command{
		{"validate", "-f RECIPE", "check a recipe; every problem as file:line:col: message", cmd(parseValidate, validateRun), nil},
		{"plan", "-f RECIPE", "what apply would do, step by step, and why (changes nothing)", cmd(parsePlan, planRun), nil},
		{"apply", "-f RECIPE", "do it; re-runs skip what is already done and still intact", cmd(parseApply, applyRun), nil},
		{"detect", "", "the GPUs, driver and CUDA version of this host (NVML), and nvcc's", cmd(parseDetect, detectRun), nil},
		{"smoke", "--url URL | -f RECIPE", "the correctness gate alone, against a running server", cmd(parseSmoke, smokeRun), nil},
		{"status", "", "the last run: each step, its result, time and reason; exits with that run's code", cmd(parseStatus, statusRun), nil},
		{"daemon", "-f RECIPE [-f RECIPE...]", "apply, then keep watching the node (driver changes, canary smoke, remediation, health, metrics)", cmd(parseDaemon, daemonRun), nil},
		{"rollback", "-f RECIPE [--to GENERATION]", "put the previous generation that passed its gate back in service, gated (--to: another kept one)", cmd(parseRollback, rollbackRun), nil},
		{"remove", "-f RECIPE", "take a recipe off the node: its units, generations and records (--weights: its downloads)", cmd(parseRemove, removeRun), nil},
		{"gc", "", "free what no recipe needs: old generations, part files, weights of removed recipes", cmd(parseGC, gcRun), nil},
		{"pylock", "-f RECIPE", "write the lock of the Python environment the recipe's pip steps made here (wheels and sha256s); also answers to lock", cmd(parsePylock, pylockRun), []string{"lock"}},
		{"version", "", "the version and the commit this binary was built from", runVersion, nil},
		{"help", "[COMMAND]", "sglprov's help, or a command's", runHelp, nil},
		{"completion", "bash|zsh|fish", "a shell completion script", runCompletion, nil},
		{"man", "", "the man page, sglprov(1), in roff", runMan, nil},
		{"known-bad", "", "the table of known-bad package, GPU and flag combinations that validate, plan and apply refuse", runKnownBad, nil},
		{"schema", "[recipe|report|status|plan]", "the JSON Schema of recipes (for editors), of report.json, of status --json or of plan --json", runSchema, nil},
	}
}

// cmd makes a command's body from its parser and its run, as cli/cli's NewCmdX(f, runF):
// the command line is parsed into the command's options (a test parses alone), then the
// options are run.
func cmd[O any](parse func(IO, []string) (*O, error), run func(context.Context, IO, *O) error) func(context.Context, IO, []string) error {
	return func(ctx context.Context, stdio IO, args []string) error {
		o, err := parse(stdio, args)
		if err != nil {
			return err
		}
		return run(ctx, stdio, o)
	}
}

// lookup returns the command named name.
func lookup(name string) (command, bool) {
	for _, c := range commands() {
		if c.name == name || slices.Contains(c.aliases, name) {
			return c, true
		}
	}
	return command{}, false
}

// ExitInterrupted is the exit code of a run stopped by Ctrl-C (SIGINT): 128 + 2, as
// shells report it.
const ExitInterrupted = exitcode.ExitInterrupted

// Main runs sglprov with args (args[0] is the program name) and returns the exit code.
func Main(args []string, stdio IO) int {
	if stdio.Getenv == nil {
		stdio.Getenv = os.Getenv
	}
	if len(args) < 2 {
		usage(stdio.Stderr)
		return exitcode.ExitUsage
	}
	switch args[1] {
	case "-h", "-help", "--help":
		usage(stdio.Stdout)
		return exitcode.ExitOK
	case "-version", "--version":
		args = append([]string{args[0], "version"}, args[2:]...)
	}
	c, ok := lookup(args[1])
	if !ok {
		if strings.HasPrefix(args[1], "-") {
			fmt.Fprintf(stdio.Stderr, "sglprov: unknown flag %q: a command comes first, its flags after it (sglprov apply -f RECIPE)\nRun 'sglprov --help' for the list of commands.\n", args[1])
			return exitcode.ExitUsage
		}
		fmt.Fprintf(stdio.Stderr, "sglprov: %v\n", unknownCommand(args[1]))
		return exitcode.ExitUsage
	}
	ctx, interrupted, done := stopsignal.Handle(context.Background(), ForceExitAfter, func() {
		fmt.Fprintf(stdio.Stderr, "sglprov: still running %s after the signal; exiting now\n", ForceExitAfter)
		os.Exit(exitcode.ExitFailed)
	})
	defer done()
	stdio.run = &invocation{}
	if stdio.Factory == nil {
		stdio.Factory = &Factory{}
	}
	stdio = journalStderr(stdio)
	err := c.run(ctx, stdio, args[2:])
	if errors.Is(err, errHelpShown) {
		return exitcode.ExitOK
	}
	code := exitCodeOf(err)
	if err != nil && interrupted() {
		code = ExitInterrupted
	}
	if err != nil && !errors.Is(err, errReported) {
		stdio.run.final(stdio.Stderr, c.name, "err", strings.TrimSpace(exitcode.Message(err)), code)
	}
	if hint := stdio.run.permissionHint(err); hint != "" {
		stdio.run.final(stdio.Stderr, c.name, "hint", hint, code)
	}
	return code
}

// exitCodeOf is err's exit code: the contract's (exitcode.Of), or an exitError's own.
func exitCodeOf(err error) int {
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return exitcode.Of(err)
}

// final writes the command's last word (its error, or a hint): a plain line on stderr, or
// under --log-format json or logfmt an error record of that format with the exit code, so
// that every line a machine reads parses.
func (inv *invocation) final(w io.Writer, name, key, msg string, code int) {
	if inv.newLogger == nil {
		fmt.Fprintf(w, "sglprov %s: %s\n", name, msg)
		return
	}
	inv.newLogger(w).Error("sglprov "+name+" failed", key, msg, "exit_code", code)
}

// invocation is what one run of Main learns while the command parses its flags.
type invocation struct {
	// stateDir is the state directory the command uses ("" for commands without one);
	// stateDirChosen says whether --state-dir or SGLPROV_STATE_DIR chose it.
	stateDir       string
	stateDirChosen bool
	// newLogger is set under --log-format json or logfmt: the command's last word is then
	// a record of that format.
	newLogger func(io.Writer) *log.Logger
}

// permissionHint says what to do when err is a permission error on the state directory
// of a run that is not root's.
func (inv *invocation) permissionHint(err error) string {
	if err == nil || inv == nil || inv.stateDir == "" || !errors.Is(err, os.ErrPermission) || os.Geteuid() == 0 {
		return ""
	}
	if !strings.Contains(err.Error(), inv.stateDir) {
		return ""
	}
	if inv.stateDirChosen {
		return fmt.Sprintf("this user cannot use the state dir %s: run as its owner or root, or give another --state-dir DIR", inv.stateDir)
	}
	return fmt.Sprintf("the state dir %s is root's: run as root (sudo sglprov ...), or give --state-dir DIR (or set SGLPROV_STATE_DIR)", inv.stateDir)
}

// ForceExitAfter is how long a command may take to stop after SIGINT or SIGTERM before the
// process ends without waiting for it (stopsignal.ForceExitAfter).
const ForceExitAfter = stopsignal.ForceExitAfter

// errReported marks an error whose message was already printed.
var errReported = errors.New("reported")

// reported wraps err so that Main does not print it again but keeps its exit code.
func reported(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w%w", errReported, err)
}

// recipeFlags are the flags every recipe command takes: their values only.
type recipeFlags struct {
	recipe    string
	sets      kvList
	stateDir  string
	root      string
	logFormat string
	logLevel  string
	insecure  bool
}

// multi is a repeatable flag whose values are kept in order.
type multi []string

func (m *multi) String() string     { return strings.Join(*m, ",") }
func (m *multi) Set(v string) error { *m = append(*m, v); return nil }

// register adds the common flags to fs.
func (c *recipeFlags) register(fs *flagSet, stdio IO) {
	stateDir := DefaultStateDir
	envStateDir := stdio.Getenv("SGLPROV_STATE_DIR")
	if envStateDir != "" {
		stateDir = envStateDir
	}
	fs.StringVar(&c.recipe, "f", "", "recipe `FILE`")
	fs.StringVar(&c.recipe, "recipe", "", "recipe `FILE`")
	fs.Var(&c.sets, "set", "override a recipe var, `KEY=VALUE` (repeatable)")
	fs.StringVar(&c.stateDir, "state-dir", stateDir, "state `DIR`; $SGLPROV_STATE_DIR sets the default")
	fs.StringVar(&c.root, "root", "", "write every host path under `DIR`; start nothing")
	logFormat := "text"
	if stdio.journal {
		logFormat = "logfmt"
	}
	fs.StringVar(&c.logFormat, "log-format", logFormat, "log `FORMAT`: text, json or logfmt")
	fs.StringVar(&c.logLevel, "log-level", "info", "log `LEVEL`: debug, info, warn or error")
	fs.BoolVar(&c.insecure, "insecure-permissions", false, "accept recipe files and a state dir that other users own or can write")
	for _, n := range []string{"f", "recipe", "set", "state-dir", "root", "log-format", "log-level", "insecure-permissions"} {
		fs.common[n] = true
	}
	fs.after = append(fs.after, func() error {
		if stdio.run != nil {
			chosen := envStateDir != ""
			fs.Visit(func(f *flag.Flag) { chosen = chosen || f.Name == "state-dir" })
			stdio.run.stateDir, stdio.run.stateDirChosen = c.stateDirPath(), chosen
			if c.logFormat == "json" || c.logFormat == "logfmt" {
				if nl, err := c.newLoggerFunc(); err == nil {
					stdio.run.newLogger = nl
				}
			}
		}
		return nil
	})
}

// stateDirPath returns the state directory. Under --root the built-in default
// (/var/lib/sglprov) moves under the root with every other host path; a directory given
// with --state-dir or SGLPROV_STATE_DIR stays where it was given.
func (c *recipeFlags) stateDirPath() string {
	if c.stateDir != DefaultStateDir {
		return c.stateDir
	}
	return engine.HostPath(c.root, c.stateDir)
}

// newLoggerFunc returns a logger maker for the chosen format and level
// (logval.NewLoggerFunc).
func (c *recipeFlags) newLoggerFunc() (func(w io.Writer) *log.Logger, error) {
	return logval.NewLoggerFunc(c.logFormat, c.logLevel)
}

// detectFacts reads the host's GPU facts through the factory, its failures mapped to the
// exit-code contract (node.DetectFacts).
func detectFacts(ctx context.Context, stdio IO) (*gpu.Facts, error) {
	return stdio.Factory.Deps(stdio).Facts(ctx)
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(f.Fd())
}

// versionOptions are version's flags.
type versionOptions struct {
	json bool
}

func runVersion(ctx context.Context, stdio IO, args []string) error {
	var o versionOptions
	fs := newFlags("version", stdio)
	fs.jsonFlags(&o.json, "print the build's facts as JSON")
	if err := parse(fs, args); err != nil {
		return err
	}
	info := buildinfo.Read()
	if o.json {
		enc := json.NewEncoder(stdio.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(info)
	}
	_, err := io.WriteString(stdio.Stdout, info.String())
	return err
}
