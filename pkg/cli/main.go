// Package cli is sglprov's command line: one file per command, flag parsing, output and
// the exit codes of the contract.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"charm.land/log/v2"
	"github.com/charmbracelet/x/term"

	sglprov "github.com/sglprov/sglprov"
	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/gpu"
	"github.com/sglprov/sglprov/pkg/recipe"
	"github.com/sglprov/sglprov/pkg/steps"
)

// IO is what a command reads and writes: the streams and the environment.
type IO struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	Getenv         func(string) string
}

// DefaultStateDir is where state lives unless --state-dir says otherwise.
const DefaultStateDir = "/var/lib/sglprov"

type command struct {
	name, usage string
	run         func(ctx context.Context, io IO, args []string) error
}

func commands() []command {
	return []command{
		{"validate", "validate -f RECIPE        check a recipe; errors as file:line:col: message", runValidate},
		{"plan", "plan -f RECIPE            what apply would do, step by step, and why", runPlan},
		{"apply", "apply -f RECIPE           do it; re-runs skip what is already done and intact", runApply},
		{"detect", "detect [--json]           the GPUs, driver and CUDA version of this host", runDetect},
		{"smoke", "smoke --url URL | -f RECIPE  the correctness gate alone, against a running server", runSmokeCommand},
		{"status", "status [--json]           the last run: each step, its result, time and reason", runStatus},
		{"daemon", "daemon -f RECIPE          apply, then keep watching the node", runDaemon},
		{"version", "version                   print the version", runVersion},
	}
}

// Version is the build's version, set with -ldflags "-X ...cli.Version=...".
var Version = "dev"

// Main runs sglprov with args (args[0] is the program name) and returns the exit code.
func Main(args []string, stdio IO) int {
	if stdio.Getenv == nil {
		stdio.Getenv = os.Getenv
	}
	if len(args) < 2 || args[1] == "-h" || args[1] == "--help" || args[1] == "help" {
		usage(stdio.Stderr)
		if len(args) < 2 {
			return engine.ExitUsage
		}
		return engine.ExitOK
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	finished := make(chan struct{})
	defer close(finished)
	go endAfterSignal(ctx, stop, finished, ForceExitAfter, func() {
		fmt.Fprintf(stdio.Stderr, "sglprov: still running %s after the signal; exiting now\n", ForceExitAfter)
		os.Exit(engine.ExitFailed)
	})
	for _, c := range commands() {
		if c.name == args[1] {
			err := c.run(ctx, stdio, args[2:])
			if err != nil && !errors.Is(err, errReported) {
				fmt.Fprintf(stdio.Stderr, "sglprov %s: %v\n", c.name, err)
			}
			if errors.Is(err, flag.ErrHelp) {
				return engine.ExitOK
			}
			return engine.ExitCode(err)
		}
	}
	fmt.Fprintf(stdio.Stderr, "sglprov: unknown command %q\n\n", args[1])
	usage(stdio.Stderr)
	return engine.ExitUsage
}

// ForceExitAfter is how long a command may take to stop after SIGINT or SIGTERM before the
// process ends without waiting for it: longer than any clean stop takes (a build's children
// get 10 s, a server under the exec manager its unit's TimeoutStopSec, 90 s by default), so
// that it ends only what waits on something deaf to the cancel.
const ForceExitAfter = 2 * time.Minute

// endAfterSignal waits for the first signal (ctx done), then gives the signals back their
// default action, so that a second one ends the process at once, and calls exit when the
// command has not finished within grace.
func endAfterSignal(ctx context.Context, stop func(), finished <-chan struct{}, grace time.Duration, exit func()) {
	select {
	case <-ctx.Done():
	case <-finished:
		return
	}
	stop()
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-finished:
	case <-t.C:
		exit()
	}
}

// errReported marks an error whose message was already printed.
var errReported = errors.New("reported")

// reported wraps err so that Main does not print it again but keeps its exit code.
func reported(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w%w", errReported, err)
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "sglprov provisions GPU hosts to serve LLMs with SGLang, and gates on correct answers.")
	fmt.Fprintln(w, "\nUsage: sglprov COMMAND [flags]")
	for _, c := range commands() {
		fmt.Fprintln(w, "  sglprov "+c.usage)
	}
	fmt.Fprintln(w, "\nCommon flags: -f/--recipe FILE, --set KEY=VALUE, --state-dir DIR, --root DIR,")
	fmt.Fprintln(w, "  --log-format text|json|logfmt, --log-level debug|info|warn|error")
	fmt.Fprintln(w, "Exit codes: 0 ok, 1 step failed, 2 bad usage or recipe, 3 smoke gate failed,")
	fmt.Fprintln(w, "  4 host does not meet the recipe, 5 locked by another run, 6 reboot required")
}

// common are the flags every recipe command takes.
type common struct {
	recipe    string
	sets      multi
	stateDir  string
	root      string
	logFormat string
	logLevel  string
	insecure  bool
}

type multi []string

func (m *multi) String() string     { return strings.Join(*m, ",") }
func (m *multi) Set(v string) error { *m = append(*m, v); return nil }

func newFlags(name string, stdio IO) *flag.FlagSet {
	fs := flag.NewFlagSet("sglprov "+name, flag.ContinueOnError)
	fs.SetOutput(stdio.Stderr)
	return fs
}

func (c *common) register(fs *flag.FlagSet, stdio IO) {
	stateDir := DefaultStateDir
	if v := stdio.Getenv("SGLPROV_STATE_DIR"); v != "" {
		stateDir = v
	}
	fs.StringVar(&c.recipe, "f", "", "recipe `FILE`")
	fs.StringVar(&c.recipe, "recipe", "", "recipe `FILE`")
	fs.Var(&c.sets, "set", "override a recipe var, `KEY=VALUE` (repeatable)")
	fs.StringVar(&c.stateDir, "state-dir", stateDir, "state `DIR` (default $SGLPROV_STATE_DIR, else "+DefaultStateDir+")")
	fs.StringVar(&c.root, "root", "", "write every host path under `DIR`; start nothing")
	fs.StringVar(&c.logFormat, "log-format", "text", "log format: text, json or logfmt")
	fs.StringVar(&c.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.BoolVar(&c.insecure, "insecure-permissions", false, "accept recipe files and a state dir that other users own or can write")
}

// parse parses args, with a usage error (exit 2) for bad flags or stray arguments.
func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: %v", engine.ErrUsage, err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", engine.ErrUsage, fs.Arg(0))
	}
	return nil
}

// stateDir returns the state directory with --root applied.
func (c *common) stateDirPath() string {
	return engine.HostPath(c.root, c.stateDir)
}

// logger returns a logger for the chosen format writing to w.
func (c *common) newLoggerFunc() (func(w io.Writer) *log.Logger, error) {
	var fmtr log.Formatter
	// Machines get whole timestamps; people on a terminal get the time of day.
	timeFormat := time.RFC3339
	switch c.logFormat {
	case "text", "":
		fmtr, timeFormat = log.TextFormatter, "15:04:05"
	case "json":
		fmtr = log.JSONFormatter
	case "logfmt":
		fmtr = log.LogfmtFormatter
	default:
		return nil, fmt.Errorf("%w: --log-format %q: want text, json or logfmt", engine.ErrUsage, c.logFormat)
	}
	level, err := log.ParseLevel(c.logLevel)
	if err != nil {
		return nil, fmt.Errorf("%w: --log-level %q: want debug, info, warn or error", engine.ErrUsage, c.logLevel)
	}
	return func(w io.Writer) *log.Logger {
		return log.NewWithOptions(w, log.Options{Formatter: fmtr, Level: level, ReportTimestamp: true, TimeFormat: timeFormat})
	}, nil
}

// loadRecipe checks the recipe file's permissions and parses it.
func (c *common) loadRecipe() (*recipe.Recipe, error) {
	if c.recipe == "" {
		return nil, fmt.Errorf("%w: no recipe: give -f RECIPE", engine.ErrUsage)
	}
	if !c.insecure {
		if err := engine.CheckPermissions(c.recipe); err != nil {
			if errors.Is(err, engine.ErrUsage) {
				return nil, err
			}
			return nil, fmt.Errorf("%w: reading recipe: %v", engine.ErrUsage, err)
		}
	}
	r, err := recipe.Load(c.recipe, steps.Specs(steps.Registry()), c.sets)
	if err != nil {
		var ps recipe.Problems
		if errors.As(err, &ps) {
			return nil, fmt.Errorf("%w: %d problem(s) in the recipe:\n%v", engine.ErrUsage, len(ps), ps)
		}
		return nil, fmt.Errorf("%w: %v", engine.ErrUsage, err)
	}
	return r, nil
}

// detectFacts reads the host's GPU facts and maps NVML's failures to the exit-code
// contract: a driver/library mismatch is exit 6, no NVML library exit 4. A host where NVML
// works but finds no GPU returns its facts (zero GPUs) without error.
func detectFacts(ctx context.Context, stdio IO) (*gpu.Facts, error) {
	facts, err := gpu.Detect(ctx, stdio.Getenv)
	switch {
	case err == nil, errors.Is(err, gpu.ErrNoGPU):
		return facts, nil
	case errors.Is(err, gpu.ErrDriverMismatch):
		return nil, fmt.Errorf("%w: %v", engine.ErrReboot, err)
	case errors.Is(err, gpu.ErrNoLibrary):
		return nil, fmt.Errorf("%w: %v (SGLPROV_GPU_FIXTURE=FILE describes a host without a GPU)", engine.ErrHost, err)
	}
	return nil, fmt.Errorf("detecting GPUs: %w", err)
}

// hostFacts detects the GPUs when the recipe needs them and checks the requirements:
// a host that falls short is exit 4. A recipe that needs the facts only for a step kind
// that always uses them (a build step's arch list) goes on without them on a host without
// NVML: that step says what is missing when it runs.
func hostFacts(ctx context.Context, stdio IO, r *recipe.Recipe) (*gpu.Facts, error) {
	reg := steps.Registry()
	if !reg.NeedsFacts(r) {
		return nil, nil
	}
	facts, err := detectFacts(ctx, stdio)
	if err != nil && !r.NeedsFacts() && errors.Is(err, engine.ErrHost) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if problems := r.Requires.Check(facts); len(problems) > 0 {
		return nil, fmt.Errorf("%w:\n  %s", engine.ErrHost, strings.Join(problems, "\n  "))
	}
	return facts, nil
}

// newEngine loads the recipe (unless r is given) and the facts, and builds the engine.
func (c *common) newEngine(ctx context.Context, stdio IO, r *recipe.Recipe, mod func(*engine.Options)) (*engine.Engine, *recipe.Recipe, error) {
	if r == nil {
		var err error
		if r, err = c.loadRecipe(); err != nil {
			return nil, nil, err
		}
	}
	facts, err := hostFacts(ctx, stdio, r)
	if err != nil {
		return nil, nil, err
	}
	newLogger, err := c.newLoggerFunc()
	if err != nil {
		return nil, nil, err
	}
	dir, err := filepath.Abs(filepath.Dir(c.recipe))
	if err != nil {
		return nil, nil, fmt.Errorf("locating recipe: %w", err)
	}
	opts := engine.Options{
		Recipe:              r,
		RecipeDir:           dir,
		Registry:            steps.Registry(),
		Facts:               facts,
		Root:                c.root,
		StateDir:            c.stateDirPath(),
		NewLogger:           newLogger,
		Console:             stdio.Stderr,
		IsTerminal:          isTerminal(stdio.Stderr),
		Builtin:             sglprov.Assets,
		InsecurePermissions: c.insecure,
	}
	if mod != nil {
		mod(&opts)
	}
	e, err := engine.New(opts)
	if err != nil {
		return nil, nil, err
	}
	return e, r, nil
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(f.Fd())
}

func runVersion(ctx context.Context, stdio IO, args []string) error {
	fmt.Fprintln(stdio.Stdout, "sglprov", Version)
	return nil
}
