package service

import (
	"bytes"
	"fmt"
	"strings"
	"text/template"

	"github.com/sglprov/sglprov/pkg/exitcode"
)

// DefaultCommand returns the argv prefix of the server when a recipe names none:
// the virtual environment's Python running sglang.launch_server.
func DefaultCommand() []string {
	return []string{"/opt/sglang/.venv/bin/python", "-m", "sglang.launch_server"}
}

// Profile is the backend profile a unit is rendered with.
type Profile struct {
	// Name is the profile's name in the recipe ("" when the step names no profiles).
	Name string
	// Args and Env are the profile's server arguments and environment.
	Args []string
	Env  map[string]string
}

// Data is what a unit template sees.
type Data struct {
	// Recipe is the recipe's name; Unit the unit's name, e.g. "sglang-qwen.service".
	Recipe, Unit string
	// Profile is the backend profile the unit is rendered with.
	Profile Profile
	// Fingerprint digests the render inputs; it goes into the header comment.
	Fingerprint string
	// Command is the argv prefix that starts the server, e.g.
	// [/opt/sglang/.venv/bin/python -m sglang.launch_server]; Python is Command[0].
	Command []string
	Python  string
	// Args are the server's arguments after Command: --model-path, --host, --port, --tp,
	// then the profile's arguments, then the step's.
	Args []string
	// Env is the service environment: the profile's, then the step's (which wins).
	Env map[string]string
	// User runs the service ("" for root); WorkingDirectory is its working directory.
	User, WorkingDirectory string
	// ModelPath, Host and Port are the served model and the address the server listens on.
	ModelPath, Host string
	Port            int
}

// Argv returns the server's whole command line: Command then Args.
func (d Data) Argv() []string {
	out := make([]string, 0, len(d.Command)+len(d.Args))
	out = append(out, d.Command...)
	return append(out, d.Args...)
}

// Header returns the comment line every rendered unit starts with.
func Header(recipe, profile, fingerprint string) string {
	if profile == "" {
		profile = "(none)"
	}
	return fmt.Sprintf("# Managed by sglprov. Recipe: %s. Profile: %s. Fingerprint: %s. Do not edit: changes are replaced on the next apply.\n",
		recipe, profile, fingerprint)
}

// Validate checks every value of d against the rules in the package documentation, naming
// the first value that breaks them. The error wraps exitcode.ErrUsage.
func (d Data) Validate() error {
	scalars := []struct{ name, v string }{
		{"recipe name", d.Recipe}, {"unit name", d.Unit}, {"profile name", d.Profile.Name},
		{"fingerprint", d.Fingerprint}, {"user", d.User}, {"working_directory", d.WorkingDirectory},
		{"model_path", d.ModelPath}, {"host", d.Host},
	}
	for _, s := range scalars {
		what := fmt.Sprintf("%s %q", s.name, s.v)
		if err := CheckValue(what, s.v); err != nil {
			return err
		}
		if strings.HasPrefix(strings.TrimSpace(s.v), "[") {
			return fmt.Errorf("%w: %s starts with \"[\", which reads as a section header at the start of a line", exitcode.ErrUsage, what)
		}
	}
	if len(d.Command) == 0 {
		return fmt.Errorf("%w: the server command is empty", exitcode.ErrUsage)
	}
	if err := CheckExecutable(d.Command[0]); err != nil {
		return err
	}
	lists := []struct {
		name string
		v    []string
	}{{"command", d.Command}, {"profile " + d.Profile.Name + " args", d.Profile.Args}, {"args", d.Args}}
	for _, l := range lists {
		for i, a := range l.v {
			if err := CheckValue(fmt.Sprintf("%s[%d] %q", l.name, i, a), a); err != nil {
				return err
			}
		}
	}
	for _, m := range []map[string]string{d.Profile.Env, d.Env} {
		for k, v := range m {
			if _, err := EnvAssignment(k, v); err != nil {
				return err
			}
		}
	}
	return nil
}

// FuncMap returns the helpers unit templates call:
//
//	exec LIST        the value of an ExecStart= line for argv LIST
//	env KEY VALUE    the value of an Environment= line: "KEY=VALUE", quoted and escaped
//	escape VALUE     VALUE with "%" doubled, for Description=, User=, WorkingDirectory=
//	quote VALUE      one ExecStart= argument, quoted when it needs to be
func FuncMap() template.FuncMap {
	return template.FuncMap{
		"exec": ExecLine,
		"env":  EnvAssignment,
		"escape": func(v string) (string, error) {
			if err := CheckValue(fmt.Sprintf("value %q", v), v); err != nil {
				return "", err
			}
			return EscapeSpecifiers(v), nil
		},
		"quote": func(v string) (string, error) {
			return QuoteExecArg(fmt.Sprintf("value %q", v), v)
		},
	}
}

// Render renders the unit template text (named name in errors) with d: it validates d,
// executes the template, puts the header comment first and checks the result with
// CheckUnit. Every error that a recipe value or the template causes wraps exitcode.ErrUsage.
func Render(name string, text []byte, d Data) ([]byte, error) {
	if err := d.Validate(); err != nil {
		return nil, err
	}
	if d.Python == "" {
		d.Python = d.Command[0]
	}
	t, err := template.New(name).Option("missingkey=error").Funcs(FuncMap()).Parse(string(text))
	if err != nil {
		return nil, fmt.Errorf("%w: parsing unit template: %w", exitcode.ErrUsage, err)
	}
	var b bytes.Buffer
	b.WriteString(Header(d.Recipe, d.Profile.Name, d.Fingerprint))
	if err := t.Execute(&b, d); err != nil {
		return nil, fmt.Errorf("%w: rendering unit template: %w", exitcode.ErrUsage, err)
	}
	out := b.Bytes()
	if !bytes.HasSuffix(out, []byte("\n")) {
		out = append(out, '\n')
	}
	if err := CheckUnit(out); err != nil {
		return nil, err
	}
	return out, nil
}
