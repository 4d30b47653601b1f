package clidoc

import (
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
)

// flagChoices are the values of flags that take one of a few words, for completion.
var flagChoices = map[string][]string{
	"log-format": {"text", "json", "logfmt"},
	"log-level":  {"debug", "info", "warn", "error"},
}

// Shells are the shells `sglprov completion` writes scripts for.
var Shells = []string{"bash", "zsh", "fish"}

// Completion writes the completion script of shell (one of Shells); an unknown shell is
// an error.
func Completion(w io.Writer, shell string, d Doc) error {
	switch shell {
	case "bash":
		return writeBash(w, d.Commands)
	case "zsh":
		return writeZsh(w, d.Commands)
	case "fish":
		return writeFish(w, d.Commands)
	}
	return fmt.Errorf("%w %q: want bash, zsh or fish", ErrUnknownShell, shell)
}

// ErrUnknownShell is Completion's error for a shell it writes no script for.
var ErrUnknownShell = errors.New("unknown shell")

// valueKind says how to complete a flag's value: "file", "dir", "choice" or "" (free).
func valueKind(f Flag) string {
	switch {
	case f.Bool:
		return ""
	case flagChoices[f.Long] != nil:
		return "choice"
	case f.ValueName == "FILE":
		return "file"
	case f.ValueName == "DIR":
		return "dir"
	}
	return ""
}

func commandNames(cmds []Command) string {
	var names []string
	for _, c := range cmds {
		names = append(names, c.Name)
	}
	return strings.Join(names, " ")
}

func writeBash(w io.Writer, cmds []Command) error {
	var b strings.Builder
	b.WriteString("# bash completion for sglprov; load with: source <(sglprov completion bash)\n")
	b.WriteString("_sglprov() {\n")
	b.WriteString("    local cur=\"${COMP_WORDS[COMP_CWORD]}\" prev=\"${COMP_WORDS[COMP_CWORD-1]}\"\n")
	fmt.Fprintf(&b, "    local commands=%q\n", commandNames(cmds))
	b.WriteString("    if [[ $COMP_CWORD -eq 1 ]]; then\n")
	b.WriteString("        COMPREPLY=($(compgen -W \"$commands --help --version\" -- \"$cur\"))\n")
	b.WriteString("        return\n    fi\n")
	b.WriteString("    local flags=\"\" words=\"\"\n")
	b.WriteString("    case \"${COMP_WORDS[1]}\" in\n")
	for _, c := range cmds {
		var flags []string
		values := map[string][]string{} // kind or choice list -> flag spellings
		for _, f := range c.Flags {
			flags = append(flags, f.Words()...)
			switch k := valueKind(f); k {
			case "choice":
				key := "choice:" + strings.Join(flagChoices[f.Long], " ")
				values[key] = append(values[key], f.Words()...)
			case "file", "dir":
				values[k] = append(values[k], f.Words()...)
			}
		}
		flags = append(flags, "--help")
		fmt.Fprintf(&b, "    %s)\n", c.Name)
		keys := make([]string, 0, len(values))
		for k := range values {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		if len(keys) > 0 {
			b.WriteString("        case \"$prev\" in\n")
			for _, k := range keys {
				fmt.Fprintf(&b, "        %s)\n", strings.Join(values[k], "|"))
				switch {
				case k == "file":
					b.WriteString("            COMPREPLY=($(compgen -f -- \"$cur\")); return;;\n")
				case k == "dir":
					b.WriteString("            COMPREPLY=($(compgen -d -- \"$cur\")); return;;\n")
				default:
					fmt.Fprintf(&b, "            COMPREPLY=($(compgen -W %q -- \"$cur\")); return;;\n", strings.TrimPrefix(k, "choice:"))
				}
			}
			b.WriteString("        esac\n")
		}
		fmt.Fprintf(&b, "        flags=%q; words=%q;;\n", strings.Join(flags, " "), strings.Join(c.Words, " "))
	}
	b.WriteString("    esac\n")
	b.WriteString("    if [[ $cur == -* ]]; then\n")
	b.WriteString("        COMPREPLY=($(compgen -W \"$flags\" -- \"$cur\"))\n")
	b.WriteString("    else\n")
	b.WriteString("        COMPREPLY=($(compgen -W \"$words\" -- \"$cur\"))\n")
	b.WriteString("    fi\n")
	b.WriteString("}\n")
	b.WriteString("complete -o default -F _sglprov sglprov\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// zshQuote quotes s for a single-quoted zsh word, with [ ] and : escaped for _arguments.
func zshQuote(s string) string {
	s = strings.ReplaceAll(s, `\`, `\\`)
	s = strings.NewReplacer("[", `\[`, "]", `\]`, ":", `\:`).Replace(s)
	return strings.ReplaceAll(s, "'", `'\''`)
}

func writeZsh(w io.Writer, cmds []Command) error {
	var b strings.Builder
	b.WriteString("#compdef sglprov\n# zsh completion for sglprov; load with: source <(sglprov completion zsh)\n")
	b.WriteString("_sglprov() {\n")
	b.WriteString("    local -a commands\n    commands=(\n")
	for _, c := range cmds {
		fmt.Fprintf(&b, "        '%s:%s'\n", c.Name, zshQuote(c.Summary))
	}
	b.WriteString("    )\n")
	b.WriteString("    if (( CURRENT == 2 )); then\n")
	b.WriteString("        _describe -t commands 'sglprov command' commands\n        return\n    fi\n")
	b.WriteString("    local cmd=${words[2]}\n    shift words\n    (( CURRENT-- ))\n")
	b.WriteString("    case $cmd in\n")
	for _, c := range cmds {
		fmt.Fprintf(&b, "    %s)\n        _arguments -s \\\n", c.Name)
		for _, f := range c.Flags {
			words := f.Words()
			spec := ""
			if len(words) > 1 {
				spec = "'(" + strings.Join(words, " ") + ")'{" + strings.Join(words, ",") + "}"
			} else {
				spec = words[0]
			}
			action := ""
			if !f.Bool {
				action = ":" + zshQuote(f.ValueName) + ":"
				switch valueKind(f) {
				case "file":
					action += "_files"
				case "dir":
					action += "_files -/"
				case "choice":
					action += "(" + strings.Join(flagChoices[f.Long], " ") + ")"
				}
			}
			fmt.Fprintf(&b, "            %s'[%s]%s' \\\n", spec, zshQuote(f.Usage), action)
		}
		b.WriteString("            '(- *)'{-h,--help}'[show this help]'")
		if args := c.Words; len(args) > 0 {
			fmt.Fprintf(&b, " \\\n            '1:argument:(%s)'", strings.Join(args, " "))
		}
		b.WriteString(";;\n")
	}
	b.WriteString("    esac\n}\n")
	b.WriteString("if [[ $zsh_eval_context[-1] == loadautofunc ]]; then\n    _sglprov \"$@\"\nelse\n    compdef _sglprov sglprov\nfi\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// fishQuote quotes s as a single-quoted fish word.
func fishQuote(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, "'", `\'`).Replace(s) + "'"
}

func writeFish(w io.Writer, cmds []Command) error {
	var b strings.Builder
	b.WriteString("# fish completion for sglprov; load with: sglprov completion fish | source\n")
	b.WriteString("complete -c sglprov -f\n")
	b.WriteString("complete -c sglprov -n __fish_use_subcommand -l help -d 'show the help'\n")
	b.WriteString("complete -c sglprov -n __fish_use_subcommand -l version -d 'print the version'\n")
	for _, c := range cmds {
		fmt.Fprintf(&b, "complete -c sglprov -n __fish_use_subcommand -a %s -d %s\n", c.Name, fishQuote(c.Summary))
	}
	for _, c := range cmds {
		cond := fishQuote("__fish_seen_subcommand_from " + c.Name)
		for _, f := range c.Flags {
			line := "complete -c sglprov -n " + cond
			if f.Short != "" {
				line += " -s " + f.Short
			}
			if f.Long != "" {
				line += " -l " + f.Long
			}
			switch valueKind(f) {
			case "file":
				line += " -r -F"
			case "dir":
				line += " -x -a '(__fish_complete_directories)'"
			case "choice":
				line += " -x -a " + fishQuote(strings.Join(flagChoices[f.Long], " "))
			default:
				if !f.Bool {
					line += " -x"
				}
			}
			b.WriteString(line + " -d " + fishQuote(f.Usage) + "\n")
		}
		fmt.Fprintf(&b, "complete -c sglprov -n %s -s h -l help -d 'show this help'\n", cond)
		if args := c.Words; len(args) > 0 {
			fmt.Fprintf(&b, "complete -c sglprov -n %s -a %s\n", cond, fishQuote(strings.Join(args, " ")))
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
