package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"regexp"
	"strings"

	"github.com/sglprov/sglprov/pkg/clidoc"
	"github.com/sglprov/sglprov/pkg/exitcode"
)

// flagSet is a command's flags: the standard library's flag.FlagSet, so that every flag
// keeps taking both -name and --name, with GNU-style help on top. Two flags that store
// into the same variable are one flag with two names (-f and --recipe): help shows them
// once, as "-f, --recipe FILE". Help goes to stdout; errors are returned to Main, which
// prints them once.
type flagSet struct {
	*flag.FlagSet
	cmd   string
	stdio IO
	// common names the flags that every recipe command shares (listed apart in help).
	common map[string]bool
	// after runs once the flags are parsed (checks that need every flag's value).
	after []func() error
	// hidden names the flags that help, the man page and completion leave out: common
	// flags this command refuses (the daemon's --root), still parsed to say why.
	hidden map[string]bool
}

// hide leaves the flags named out of help, the man page and completion.
func (fs *flagSet) hide(names ...string) {
	if fs.hidden == nil {
		fs.hidden = map[string]bool{}
	}
	for _, n := range names {
		fs.hidden[n] = true
	}
}

// newFlags returns the flag set of command name.
func newFlags(name string, stdio IO) *flagSet {
	fs := flag.NewFlagSet("sglprov "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return &flagSet{FlagSet: fs, cmd: name, stdio: stdio, common: map[string]bool{}}
}

// errHelpShown marks a --help that was answered: Main exits 0 and prints nothing more.
var errHelpShown = errors.New("help shown")

// parse parses args, with a usage error (exit 2) for bad flags or stray arguments. -h and
// --help print the command's help to stdout and return errHelpShown.
// As GNU tools do, a one-letter flag takes its value attached (-fFILE), and a command
// that takes -f RECIPE takes the recipe as its one argument too (sglprov plan FILE).
func parse(fs *flagSet, args []string) error {
	if err := fs.Parse(fs.splitShort(args)); err != nil {
		return fs.flagError(err)
	}
	if fs.NArg() > 0 {
		if f := fs.Lookup("f"); f != nil && f.Value.String() == "" && !strings.HasPrefix(fs.Arg(0), "-") {
			// The recipe given as an argument; flags may follow it.
			if err := f.Value.Set(fs.Arg(0)); err != nil {
				return usageError(fs.cmd, err.Error())
			}
			if err := fs.Parse(fs.splitShort(fs.Args()[1:])); err != nil {
				return fs.flagError(err)
			}
		}
	}
	if fs.NArg() > 0 {
		msg := fmt.Sprintf("unexpected argument %q", fs.Arg(0))
		if f := fs.Lookup("f"); f != nil && f.Value.String() != "" {
			msg += fmt.Sprintf(" (the recipe is %s already: one recipe per command)", f.Value.String())
		}
		return usageError(fs.cmd, msg)
	}
	for _, check := range fs.after {
		if err := check(); err != nil {
			return err
		}
	}
	return nil
}

// splitShort rewrites "-fFILE", a one-letter flag that takes a value with the value
// attached, as "-f" "FILE"; a word that names a flag itself ("-json", one dash works too),
// one with "=", and everything after "--" or a flag's value stay as they are.
func (fs *flagSet) splitShort(args []string) []string {
	out := make([]string, 0, len(args)+1)
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return append(out, args[i:]...)
		}
		name, hasValue := strings.CutPrefix(a, "-")
		name = strings.TrimPrefix(name, "-")
		name, _, withEq := strings.Cut(name, "=")
		if !hasValue || name == "" {
			out = append(out, a)
			continue
		}
		if f := fs.Lookup(name); f != nil {
			out = append(out, a)
			if !withEq && !isBoolFlag(f) && i+1 < len(args) {
				// Its value, whatever it looks like.
				i++
				out = append(out, args[i])
			}
			continue
		}
		if !strings.HasPrefix(a, "--") && len(name) > 1 && !withEq {
			if f := fs.Lookup(name[:1]); f != nil && !isBoolFlag(f) {
				out = append(out, "-"+name[:1], a[2:])
				continue
			}
		}
		out = append(out, a)
	}
	return out
}

// isBoolFlag reports whether f takes no value.
func isBoolFlag(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// outputFlag is --output FORMAT: "json" sets the command's --json, "text" clears it.
type outputFlag struct{ json *bool }

func (o *outputFlag) String() string {
	if o.json != nil && *o.json {
		return "json"
	}
	return "text"
}

func (o *outputFlag) Set(v string) error {
	switch v {
	case "json":
		*o.json = true
	case "text":
		*o.json = false
	default:
		return fmt.Errorf("want json or text, not %q", v)
	}
	return nil
}

// jsonFlags adds --json and its long form --output json (-o json) to fs, both setting
// *json.
func (fs *flagSet) jsonFlags(json *bool, usage string) {
	fs.BoolVar(json, "json", false, usage)
	out := &outputFlag{json}
	fs.Var(out, "output", "output `FORMAT`: text or json (as --json)")
	fs.Var(out, "o", "output `FORMAT`: text or json (as --json)")
}

// flagError answers an error of fs.Parse: -h and --help print the command's help (or hand
// the flags to the describe hook) and return errHelpShown; any other is a usage error.
func (fs *flagSet) flagError(err error) error {
	if !errors.Is(err, flag.ErrHelp) {
		msg := gnuFlagNames(err.Error())
		if name, ok := strings.CutPrefix(err.Error(), "flag provided but not defined: -"); ok {
			if s := fs.nearestFlag(strings.TrimLeft(name, "-")); s != "" {
				msg += "; did you mean --" + s + "?"
			}
		}
		return usageError(fs.cmd, msg)
	}
	if fs.stdio.describe != nil {
		fs.stdio.describe(fs)
	} else {
		writeCommandHelp(fs.stdio.Stdout, fs)
	}
	return errHelpShown
}

// nearestFlag returns the flag of fs whose name is closest to name (edit distance at most
// 2, at most a third of the name's length for short ones), or "".
func (fs *flagSet) nearestFlag(name string) string {
	best, bestD := "", min(3, len(name)/3+1)
	fs.VisitAll(func(f *flag.Flag) {
		if len(f.Name) < 2 {
			return
		}
		if d := clidoc.EditDistance(strings.ToLower(name), f.Name); d < bestD {
			best, bestD = f.Name, d
		}
	})
	return best
}

// usageError is a bad-usage error (exit 2) that says where the command's help is.
func usageError(cmd, msg string) error {
	return &exitcode.Error{Msg: fmt.Sprintf("%s\nRun 'sglprov %s --help' for usage.", msg, cmd), Kind: exitcode.ErrUsage}
}

// flagNameInError finds the flag the standard library's error messages name ("-name").
var flagNameInError = regexp.MustCompile(`(flag(?: provided but not defined:| needs an argument:)? )-([A-Za-z0-9][A-Za-z0-9_-]+)`)

// gnuFlagNames rewrites the "-name" of a flag error to "--name", the form help shows (a
// one-letter name stays "-f").
func gnuFlagNames(msg string) string {
	return flagNameInError.ReplaceAllStringFunc(msg, func(m string) string {
		sub := flagNameInError.FindStringSubmatch(m)
		if len(sub[2]) == 1 {
			return sub[1] + "-" + sub[2]
		}
		return sub[1] + "--" + sub[2]
	})
}

// flags returns the set's flags as help shows them (clidoc.Describe).
func (fs *flagSet) flags() []clidoc.Flag {
	return clidoc.Describe(fs.FlagSet, fs.common, fs.hidden)
}

// kvList is a repeatable KEY=VALUE flag (--set).
type kvList []string

func (m *kvList) String() string { return strings.Join(*m, ",") }

// Set takes one KEY=VALUE; a value without "=" is a usage error.
func (m *kvList) Set(v string) error {
	k, _, ok := strings.Cut(v, "=")
	if !ok || strings.TrimSpace(k) == "" {
		return fmt.Errorf("want KEY=VALUE, e.g. --set port=30001")
	}
	*m = append(*m, v)
	return nil
}
