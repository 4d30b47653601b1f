package service

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/sglprov/sglprov/pkg/exitcode"
)

// CheckValue reports whether s can be carried in a unit file: no control characters and
// valid UTF-8. what names the value in the error, e.g. `arg 3 ("--foo")`. The error wraps
// exitcode.ErrUsage.
func CheckValue(what, s string) error {
	if !utf8.ValidString(s) {
		return fmt.Errorf("%w: %s is not valid UTF-8 and cannot go into a unit", exitcode.ErrUsage, what)
	}
	for i, r := range s {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("%w: %s contains %s at byte %d; a unit file cannot carry it",
				exitcode.ErrUsage, what, describeControl(r), i)
		}
	}
	return nil
}

func describeControl(r rune) string {
	switch r {
	case '\n':
		return "a newline"
	case '\r':
		return "a carriage return"
	case 0:
		return "a NUL byte"
	case '\t':
		return "a tab"
	}
	return fmt.Sprintf("the control character %U", r)
}

// EscapeSpecifiers returns s with "%" doubled, so that systemd's specifier expansion gives
// back s.
func EscapeSpecifiers(s string) string {
	return strings.ReplaceAll(s, "%", "%%")
}

// QuoteExecArg quotes one argument of an ExecStart= line so that systemd passes exactly s
// to the process: "%" becomes "%%", "$" becomes "$$", and the argument is double-quoted
// with "\" and `"` escaped when it needs quoting. It refuses values CheckValue refuses.
func QuoteExecArg(what, s string) (string, error) {
	if err := CheckValue(what, s); err != nil {
		return "", err
	}
	s = strings.ReplaceAll(EscapeSpecifiers(s), "$", "$$")
	if !needsQuoting(s) {
		return s, nil
	}
	return doubleQuote(s), nil
}

func needsQuoting(s string) bool {
	if s == "" || s == ";" {
		return true
	}
	return strings.ContainsAny(s, " \"'\\") || strings.ContainsFunc(s, isSpace)
}

func isSpace(r rune) bool {
	return r == ' ' || r == '\t' || r == '\n' || r == '\r'
}

func doubleQuote(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		if s[i] == '"' || s[i] == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	b.WriteByte('"')
	return b.String()
}

// CheckExecutable reports whether path can be the first word of an ExecStart= line: an
// absolute path or a bare file name, without quotes, backslashes or a leading prefix
// character. The error wraps exitcode.ErrUsage.
func CheckExecutable(path string) error {
	what := fmt.Sprintf("executable %q", path)
	if err := CheckValue(what, path); err != nil {
		return err
	}
	switch {
	case path == "":
		return fmt.Errorf("%w: the command's executable is empty", exitcode.ErrUsage)
	case strings.ContainsAny(path, "\"'\\"):
		return fmt.Errorf("%w: %s contains a quote or backslash, which systemd refuses in an executable name", exitcode.ErrUsage, what)
	case strings.ContainsAny(path[:1], "-@:+!"):
		return fmt.Errorf("%w: %s starts with %q, which systemd reads as an ExecStart= prefix", exitcode.ErrUsage, what, path[:1])
	case !strings.HasPrefix(path, "/") && strings.Contains(path, "/"):
		return fmt.Errorf("%w: %s is a relative path; use an absolute path or a bare name", exitcode.ErrUsage, what)
	case strings.HasSuffix(path, "/"):
		return fmt.Errorf("%w: %s names a directory", exitcode.ErrUsage, what)
	}
	return nil
}

// ExecLine renders argv as the value of an ExecStart= line: the executable, checked with
// CheckExecutable, then each argument quoted with QuoteExecArg.
func ExecLine(argv []string) (string, error) {
	if len(argv) == 0 {
		return "", fmt.Errorf("%w: empty command line", exitcode.ErrUsage)
	}
	if err := CheckExecutable(argv[0]); err != nil {
		return "", err
	}
	words := make([]string, len(argv))
	for i, a := range argv {
		q, err := QuoteExecArg(fmt.Sprintf("argument %d (%q)", i, a), a)
		if err != nil {
			return "", err
		}
		words[i] = q
	}
	return strings.Join(words, " "), nil
}

// ValidEnvName reports whether name is a shell-style environment variable name.
func ValidEnvName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c == '_', c >= 'A' && c <= 'Z', c >= 'a' && c <= 'z':
		case c >= '0' && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

// EnvAssignment renders one Environment= value, `"KEY=VALUE"`, with "%" doubled and "\"
// and `"` escaped. It refuses an invalid name and values CheckValue refuses.
func EnvAssignment(key, value string) (string, error) {
	if !ValidEnvName(key) {
		return "", fmt.Errorf("%w: environment variable name %q is not valid (want [A-Za-z_][A-Za-z0-9_]*)", exitcode.ErrUsage, key)
	}
	if err := CheckValue(fmt.Sprintf("environment variable %s", key), value); err != nil {
		return "", err
	}
	return doubleQuote(EscapeSpecifiers(key + "=" + value)), nil
}

// Specifiers resolves systemd specifiers ("%n") while a unit is read back; it returns false
// for a specifier it does not know.
type Specifiers func(c byte) (string, bool)

// UnitSpecifiers returns the specifiers the exec manager resolves for unit: %% %n %N %p %i
// %I (for a unit that is not a template instance, %i and %I are empty).
func UnitSpecifiers(unit string) Specifiers {
	prefix := strings.TrimSuffix(unit, ".service")
	instance := ""
	if at := strings.IndexByte(prefix, '@'); at >= 0 {
		prefix, instance = prefix[:at], prefix[at+1:]
	}
	return func(c byte) (string, bool) {
		switch c {
		case '%':
			return "%", true
		case 'n':
			return unit, true
		case 'N':
			return strings.TrimSuffix(unit, ".service"), true
		case 'p':
			return prefix, true
		case 'i', 'I':
			return instance, true
		}
		return "", false
	}
}

// ResolveSpecifiers expands the specifiers in s.
func ResolveSpecifiers(s string, spec Specifiers) (string, error) {
	if !strings.Contains(s, "%") {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b.WriteByte(s[i])
			continue
		}
		if i+1 >= len(s) {
			return "", fmt.Errorf("a lone %% at the end of %q", s)
		}
		i++
		v, ok := spec(s[i])
		if !ok {
			return "", fmt.Errorf("specifier %%%c in %q is not supported", s[i], s)
		}
		b.WriteString(v)
	}
	return b.String(), nil
}

// errUnbalanced is returned by splitWords for a quote that is not closed.
var errUnbalanced = errors.New("unbalanced quotes")

// word is one word of a unit value as systemd's extract_first_word with UNQUOTE and
// CUNESCAPE reads it; sep is set for an unquoted lone ";".
type word struct {
	text string
	sep  bool
}

// splitWords splits a unit value into words: whitespace separates words, single and
// double quotes group, and C escapes are decoded inside and outside quotes. An unquoted
// lone ";" is a separator word and "\;" a literal ";".
func splitWords(s string) ([]word, error) {
	var words []word
	i := 0
	for {
		for i < len(s) && isSpace(rune(s[i])) {
			i++
		}
		if i >= len(s) {
			return words, nil
		}
		if s[i] == ';' && (i+1 == len(s) || isSpace(rune(s[i+1]))) {
			words = append(words, word{text: ";", sep: true})
			i++
			continue
		}
		if s[i] == '\\' && i+1 < len(s) && s[i+1] == ';' && (i+2 == len(s) || isSpace(rune(s[i+2]))) {
			words = append(words, word{text: ";"})
			i += 2
			continue
		}
		var b strings.Builder
		var quote byte
		for ; i < len(s); i++ {
			c := s[i]
			switch {
			case quote == 0 && isSpace(rune(c)):
				goto done
			case quote == 0 && (c == '"' || c == '\''):
				quote = c
			case quote != 0 && c == quote:
				quote = 0
			case c == '\\':
				r, n, err := unescapeOne(s[i+1:])
				if err != nil {
					return nil, err
				}
				b.WriteString(r)
				i += n
			default:
				b.WriteByte(c)
			}
		}
	done:
		if quote != 0 {
			return nil, errUnbalanced
		}
		words = append(words, word{text: b.String()})
	}
}

// unescapeOne decodes the C escape that follows a backslash; it returns the decoded text
// and how many bytes of s it used.
func unescapeOne(s string) (string, int, error) {
	if s == "" {
		return "", 0, errors.New("a trailing backslash")
	}
	simple := map[byte]string{'a': "\a", 'b': "\b", 'f': "\f", 'n': "\n", 'r': "\r", 't': "\t",
		'v': "\v", '\\': "\\", '"': "\"", '\'': "'", 's': " "}
	if r, ok := simple[s[0]]; ok {
		return r, 1, nil
	}
	hex := func(n int) (rune, error) {
		if len(s) < 1+n {
			return 0, fmt.Errorf("a short \\%c escape", s[0])
		}
		v, err := strconv.ParseUint(s[1:1+n], 16, 32)
		if err != nil {
			return 0, fmt.Errorf("a bad \\%c escape %q", s[0], s[:1+n])
		}
		return rune(v), nil
	}
	switch c := s[0]; {
	case c == 'x':
		v, err := hex(2)
		if err != nil {
			return "", 0, err
		}
		return string([]byte{byte(v)}), 3, nil
	case c == 'u':
		v, err := hex(4)
		if err != nil {
			return "", 0, err
		}
		return string(v), 5, nil
	case c == 'U':
		v, err := hex(8)
		if err != nil {
			return "", 0, err
		}
		return string(v), 9, nil
	case c >= '0' && c <= '7':
		if len(s) < 3 {
			return "", 0, errors.New("a short octal escape")
		}
		v, err := strconv.ParseUint(s[:3], 8, 8)
		if err != nil {
			return "", 0, fmt.Errorf("a bad octal escape %q", s[:3])
		}
		return string([]byte{byte(v)}), 3, nil
	}
	return "", 0, fmt.Errorf("an unknown escape \\%c", s[0])
}

// Command is one command of an ExecStart= line as systemd reads it.
type Command struct {
	// Argv is the executable and its arguments, specifiers resolved, "$" not yet expanded.
	Argv []string
	// IgnoreFailure is set by the "-" prefix.
	IgnoreFailure bool
	// NoEnvExpand is set by the ":" prefix.
	NoEnvExpand bool
}

// ParseExecLine reads the value of an ExecStart= line the way systemd does: words split
// and unquoted, C escapes decoded, prefixes of the first word ("-", ":"; "@", "+" and "!"
// are refused), specifiers resolved with spec. Only one command is allowed (the exec
// manager runs Type=simple services). "$" is left for ExpandEnv.
func ParseExecLine(line string, spec Specifiers) (Command, error) {
	words, err := splitWords(line)
	if err != nil {
		return Command{}, fmt.Errorf("reading ExecStart=: %w", err)
	}
	if len(words) == 0 {
		return Command{}, errors.New("reading ExecStart=: empty command")
	}
	var cmd Command
	first := words[0].text
	for len(first) > 0 {
		switch first[0] {
		case '-':
			cmd.IgnoreFailure = true
		case ':':
			cmd.NoEnvExpand = true
		case '@', '+', '!':
			return Command{}, fmt.Errorf("reading ExecStart=: the %q prefix is not supported", first[:1])
		default:
			goto prefixesDone
		}
		first = first[1:]
	}
prefixesDone:
	words[0].text = first
	for i, w := range words {
		if w.sep {
			if i == 0 {
				return Command{}, errors.New("reading ExecStart=: empty command before \";\"")
			}
			return Command{}, errors.New("reading ExecStart=: more than one command (\";\") is not supported")
		}
		r, err := ResolveSpecifiers(w.text, spec)
		if err != nil {
			return Command{}, fmt.Errorf("reading ExecStart=: %w", err)
		}
		cmd.Argv = append(cmd.Argv, r)
	}
	if cmd.Argv[0] == "" {
		return Command{}, errors.New("reading ExecStart=: empty executable")
	}
	return cmd, nil
}

// ExpandEnv expands "$$", "${NAME}" and a whole-word "$NAME" in argv as systemd does when it
// starts the command: "${NAME}" is replaced in place, an unquoted "$NAME" word is split at
// whitespace into several arguments, unknown names expand to nothing.
func ExpandEnv(argv []string, env map[string]string) []string {
	out := make([]string, 0, len(argv))
	for _, a := range argv {
		if name, ok := strings.CutPrefix(a, "$"); ok && ValidEnvName(name) {
			out = append(out, strings.Fields(env[name])...)
			continue
		}
		out = append(out, expandWord(a, env))
	}
	return out
}

func expandWord(s string, env map[string]string) string {
	if !strings.Contains(s, "$") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 >= len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch {
		case s[i+1] == '$':
			b.WriteByte('$')
			i++
		case s[i+1] == '{':
			end := strings.IndexByte(s[i+2:], '}')
			if end < 0 {
				b.WriteByte(s[i])
				continue
			}
			b.WriteString(env[s[i+2:i+2+end]])
			i += 2 + end
		default:
			b.WriteByte(s[i])
		}
	}
	return b.String()
}

// ParseEnvironmentLine reads the value of an Environment= line: one or more KEY=VALUE
// assignments, quoted and escaped as systemd reads them, specifiers resolved with spec.
func ParseEnvironmentLine(line string, spec Specifiers) ([][2]string, error) {
	words, err := splitWords(line)
	if err != nil {
		return nil, fmt.Errorf("reading Environment=: %w", err)
	}
	var out [][2]string
	for _, w := range words {
		r, err := ResolveSpecifiers(w.text, spec)
		if err != nil {
			return nil, fmt.Errorf("reading Environment=: %w", err)
		}
		k, v, ok := strings.Cut(r, "=")
		if !ok || !ValidEnvName(k) {
			return nil, fmt.Errorf("reading Environment=: %q is not a KEY=VALUE assignment", r)
		}
		out = append(out, [2]string{k, v})
	}
	return out, nil
}
