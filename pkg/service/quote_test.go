package service

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sglprov/sglprov/pkg/exitcode"
)

func TestQuoteExecArg(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"plain", "--tp", "--tp"},
		{"percent", "50%", "50%%"},
		{"dollar", "$HOME", "$$HOME"},
		{"space", "a b", `"a b"`},
		{"double quote", `a"b`, `"a\"b"`},
		{"single quote", `it's`, `"it's"`},
		{"backslash", `a\b`, `"a\\b"`},
		{"empty", "", `""`},
		{"semicolon", ";", `";"`},
		{"json", `{"a": 1}`, `"{\"a\": 1}"`},
		{"bracket", "[1,2]", "[1,2]"},
		{"unicode", "é✓", "é✓"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := QuoteExecArg("arg", tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("QuoteExecArg(%q) = %s, want %s", tt.in, got, tt.want)
			}
		})
	}
}

func TestExecLineRoundTrip(t *testing.T) {
	argv := []string{
		"/opt/sglang/.venv/bin/python", "-m", "sglang.launch_server",
		"50%", "%n", "%%", "$HOME", "${HOME}", "$$", "a$", `a"b`, `"`, `it's`, `'`, `back\slash`, `\`,
		"", ";", `\;`, "with space", "  lead", "{\"a\": [1, 2]}", "[Service]", "#notacomment",
		"é✓", "--x=--y", "tab-free", "=",
	}
	line, err := ExecLine(argv)
	if err != nil {
		t.Fatal(err)
	}
	cmd, err := ParseExecLine(line, UnitSpecifiers("x.service"))
	if err != nil {
		t.Fatalf("ParseExecLine(%s): %v", line, err)
	}
	got := ExpandEnv(cmd.Argv, map[string]string{"HOME": "/nothere"})
	if diff := cmp.Diff(argv, got); diff != "" {
		t.Errorf("argv after render and parse (-want +got):\n%s\nline: %s", diff, line)
	}
}

func TestEnvAssignmentRoundTrip(t *testing.T) {
	values := map[string]string{
		"PLAIN": "1", "SPACES": "a b c", "QUOTES": `say "hi" it's`, "BACKSLASH": `C:\dir\`,
		"PERCENT": "100%", "DOLLAR": "$PATH", "EMPTY": "", "EQUALS": "a=b=c",
	}
	var parts []string
	for k, v := range values {
		a, err := EnvAssignment(k, v)
		if err != nil {
			t.Fatal(err)
		}
		parts = append(parts, a)
	}
	kvs, err := ParseEnvironmentLine(strings.Join(parts, " "), UnitSpecifiers("x.service"))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, kv := range kvs {
		got[kv[0]] = kv[1]
	}
	if diff := cmp.Diff(values, got); diff != "" {
		t.Errorf("environment after render and parse (-want +got):\n%s", diff)
	}
}

func TestRefusals(t *testing.T) {
	tests := []struct {
		name    string
		f       func() error
		mention string
	}{
		{"newline in arg", func() error { _, err := ExecLine([]string{"/bin/x", "ok\nExecStartPre=/bin/evil"}); return err }, "newline"},
		{"carriage return in arg", func() error { _, err := ExecLine([]string{"/bin/x", "a\rb"}); return err }, "carriage return"},
		{"NUL in arg", func() error { _, err := ExecLine([]string{"/bin/x", "a\x00b"}); return err }, "NUL"},
		{"escape char in env value", func() error { _, err := EnvAssignment("K", "a\x1bb"); return err }, "K"},
		{"tab in env value", func() error { _, err := EnvAssignment("K", "a\tb"); return err }, "tab"},
		{"bad env name", func() error { _, err := EnvAssignment("1K", "v"); return err }, "1K"},
		{"env name with equals", func() error { _, err := EnvAssignment("A=B", "v"); return err }, "A=B"},
		{"invalid utf8", func() error { _, err := ExecLine([]string{"/bin/x", "\xff"}); return err }, "UTF-8"},
		{"quote in executable", func() error { _, err := ExecLine([]string{`/bin/a"b`}); return err }, "quote"},
		{"prefix in executable", func() error { _, err := ExecLine([]string{"-x"}); return err }, "prefix"},
		{"relative executable", func() error { _, err := ExecLine([]string{"bin/python"}); return err }, "relative"},
		{"empty argv", func() error { _, err := ExecLine(nil); return err }, "empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.f()
			if !errors.Is(err, exitcode.ErrUsage) {
				t.Fatalf("error %v does not wrap ErrUsage", err)
			}
			if exitcode.Of(err) != exitcode.ExitUsage {
				t.Errorf("exit code %d, want %d", exitcode.Of(err), exitcode.ExitUsage)
			}
			if !strings.Contains(err.Error(), tt.mention) {
				t.Errorf("error %q does not mention %q", err, tt.mention)
			}
		})
	}
}

func TestParseExecLine(t *testing.T) {
	tests := []struct {
		name, line string
		want       []string
		ignore     bool
		wantErr    string
	}{
		{name: "words", line: "/bin/echo a  b", want: []string{"/bin/echo", "a", "b"}},
		{name: "single quotes", line: `/bin/echo 'a b' "c'd"`, want: []string{"/bin/echo", "a b", "c'd"}},
		{name: "escapes", line: `/bin/echo a\sb "x\ty" \x41 \101`, want: []string{"/bin/echo", "a b", "x\ty", "A", "A"}},
		{name: "escaped semicolon", line: `/bin/echo \; x`, want: []string{"/bin/echo", ";", "x"}},
		{name: "ignore prefix", line: "-/bin/false", want: []string{"/bin/false"}, ignore: true},
		{name: "specifiers", line: "/bin/echo %n %p 100%%", want: []string{"/bin/echo", "web.service", "web", "100%"}},
		{name: "two commands", line: "/bin/a ; /bin/b", wantErr: "more than one command"},
		{name: "unbalanced", line: `/bin/echo "abc`, wantErr: "unbalanced"},
		{name: "unknown specifier", line: "/bin/echo %Z", wantErr: "%Z"},
		{name: "unknown escape", line: `/bin/echo \q`, wantErr: `\q`},
		{name: "privileged prefix", line: "+/bin/echo", wantErr: `"+"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd, err := ParseExecLine(tt.line, UnitSpecifiers("web.service"))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one mentioning %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, cmd.Argv); diff != "" {
				t.Errorf("argv (-want +got):\n%s", diff)
			}
			if cmd.IgnoreFailure != tt.ignore {
				t.Errorf("IgnoreFailure = %v", cmd.IgnoreFailure)
			}
		})
	}
}

func TestExpandEnv(t *testing.T) {
	env := map[string]string{"A": "x y", "B": "z"}
	got := ExpandEnv([]string{"$A", "${A}", "pre${B}post", "$$A", "$UNSET", "${UNSET}"}, env)
	want := []string{"x", "y", "x y", "prezpost", "$A", ""}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestParseTimespan(t *testing.T) {
	tests := []struct {
		in     string
		want   string
		finite bool
	}{
		{"10", "10s", true}, {"1min 30s", "1m30s", true}, {"500ms", "500ms", true}, {"infinity", "0s", false}, {"2h", "2h0m0s", true},
	}
	for _, tt := range tests {
		d, finite, err := ParseTimespan(tt.in)
		if err != nil {
			t.Fatalf("%q: %v", tt.in, err)
		}
		if d.String() != tt.want || finite != tt.finite {
			t.Errorf("ParseTimespan(%q) = %s %v, want %s %v", tt.in, d, finite, tt.want, tt.finite)
		}
	}
	if _, _, err := ParseTimespan("10 parsecs"); err == nil {
		t.Error("unknown unit accepted")
	}
}
