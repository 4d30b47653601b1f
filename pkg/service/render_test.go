package service

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sglprov/sglprov/pkg/atomicfile"
	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/templates"
)

func testData() Data {
	return Data{
		Recipe:      "demo",
		Unit:        "sglang-demo.service",
		Profile:     Profile{Name: "p1", Args: []string{"--attention-backend", "triton"}, Env: map[string]string{"SGLANG_X": "1"}},
		Fingerprint: "abc123",
		Command:     []string{"/bin/sh", "-c", `echo "$0" "$@"; exec sleep 1`},
		Args:        []string{"--model-path", "/models/m", "--host", "127.0.0.1", "--port", "30000", "--attention-backend", "triton"},
		Env:         map[string]string{"SGLANG_X": "1", "NOTE": "50% of \"it\""},
		Host:        "127.0.0.1",
		Port:        30000,
		ModelPath:   "/models/m",
	}
}

func shippedTemplate(t *testing.T) []byte {
	t.Helper()
	b, err := templates.Read(templates.SGLangService)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestRenderShippedTemplate(t *testing.T) {
	d := testData()
	out, err := Render("sglang.service.tmpl", shippedTemplate(t), d)
	if err != nil {
		t.Fatal(err)
	}
	if want := Header("demo", "p1", "abc123"); !strings.HasPrefix(string(out), want) {
		t.Errorf("unit does not start with the header:\n%s", out)
	}
	svc, err := ReadService(d.Unit, out, "/var/cache")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(d.Argv(), svc.Argv); diff != "" {
		t.Errorf("ExecStart read back (-want +got):\n%s", diff)
	}
	for k, v := range d.Env {
		if svc.Env[k] != v {
			t.Errorf("Environment %s = %q, want %q", k, svc.Env[k], v)
		}
	}
	if svc.Env["HOME"] != "/var/cache/sglang" || svc.Restart != "on-failure" || svc.RestartSec.Seconds() != 5 {
		t.Errorf("service settings: HOME=%q Restart=%q RestartSec=%s", svc.Env["HOME"], svc.Restart, svc.RestartSec)
	}
	if strings.Contains(string(out), "User=") {
		t.Error("User= rendered without a user")
	}
	d.User = "sglang"
	out, err = Render("t", shippedTemplate(t), d)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "\nUser=sglang\n") {
		t.Error("User= missing")
	}
}

func TestRenderVerifies(t *testing.T) {
	if _, err := exec.LookPath("systemd-analyze"); err != nil {
		t.Skip("systemd-analyze is not installed")
	}
	out, err := Render("t", shippedTemplate(t), testData())
	if err != nil {
		t.Fatal(err)
	}
	checked, err := Verify(context.Background(), "sglang-demo.service", out)
	if err != nil || !checked {
		t.Fatalf("Verify = %v, %v\n%s", checked, err, out)
	}
	bad := testData()
	bad.Command = []string{"/nonexistent/python", "-m", "sglang.launch_server"}
	out, err = Render("t", shippedTemplate(t), bad)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Verify(context.Background(), "sglang-demo.service", out); err == nil || !strings.Contains(err.Error(), "/nonexistent/python") {
		t.Errorf("Verify of a missing executable = %v", err)
	}
}

func TestRenderRefusesInjectedValues(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(*Data)
		tmpl    string
		mention string
	}{
		{"newline in an arg", func(d *Data) { d.Args = append(d.Args, "x\nExecStartPre=/bin/evil") }, "", "newline"},
		{"newline in a profile arg", func(d *Data) { d.Profile.Args = []string{"ok", "a\nb"} }, "", "profile p1 args[1]"},
		{"control char in an env value", func(d *Data) { d.Env["BAD"] = "a\x07b" }, "", "BAD"},
		{"newline then section in env", func(d *Data) { d.Env["BAD"] = "x\n[Install]" }, "", "BAD"},
		{"bad env name", func(d *Data) { d.Env["NOT-OK"] = "1" }, "", "NOT-OK"},
		{"section header as working directory", func(d *Data) { d.WorkingDirectory = "[Service]" }, "", "working_directory"},
		{"section header as user on its own line", func(d *Data) { d.User = "[Install]" },
			"[Service]\n{{ .User }}\nExecStart=/bin/true\n", "user"},
		{"newline in the recipe name", func(d *Data) { d.Recipe = "a\nb" }, "", "recipe name"},
		{"quote in the executable", func(d *Data) { d.Command = []string{`/opt/"x"/python`} }, "", "executable"},
		{"template writing a broken line", func(*Data) {}, "[Service]\nExecStart=/bin/true\nthis is not an assignment\n", "not a KEY=VALUE"},
		{"template repeating a section", func(*Data) {}, "[Service]\nExecStart=/bin/true\n[Service]\n", "twice"},
		{"template with an unknown section", func(*Data) {}, "[Service]\nExecStart=/bin/true\n[Evil]\n", "[Evil]"},
		{"template calling a missing field", func(*Data) {}, "[Service]\nExecStart={{ .Nope }}\n", "Nope"},
		{"template parse error", func(*Data) {}, "[Service]\nExecStart={{ exec .Argv \n", "parsing"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := testData()
			tt.mutate(&d)
			tmpl := shippedTemplate(t)
			if tt.tmpl != "" {
				tmpl = []byte(tt.tmpl)
			}
			_, err := Render("t", tmpl, d)
			if !errors.Is(err, exitcode.ErrUsage) {
				t.Fatalf("Render error %v does not wrap ErrUsage", err)
			}
			if !strings.Contains(err.Error(), tt.mention) {
				t.Errorf("error %q does not mention %q", err, tt.mention)
			}
		})
	}
}

func TestWriteFileIfChanged(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "sub")
	path := filepath.Join(dir, "unit.service")
	for i, tt := range []struct {
		content string
		want    bool
	}{{"a\n", true}, {"a\n", false}, {"b\n", true}} {
		changed, err := atomicfile.WriteIfChanged(path, []byte(tt.content), 0o644)
		if err != nil {
			t.Fatal(err)
		}
		if changed != tt.want {
			t.Errorf("write %d: changed = %v, want %v", i, changed, tt.want)
		}
		got, _ := os.ReadFile(path)
		if string(got) != tt.content {
			t.Errorf("write %d: file holds %q", i, got)
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("temporary files left: %v", entries)
	}
	st, _ := os.Stat(path)
	if st.Mode().Perm() != 0o644 {
		t.Errorf("mode %v", st.Mode())
	}
}

func TestLastKnownGood(t *testing.T) {
	dir := t.TempDir()
	if _, ok, err := LoadLastKnownGood(dir, "u.service"); ok || err != nil {
		t.Fatalf("LoadLastKnownGood on an empty state = %v, %v", ok, err)
	}
	if err := SaveLastKnownGood(dir, "u.service", []byte("good\n")); err != nil {
		t.Fatal(err)
	}
	b, ok, err := LoadLastKnownGood(dir, "u.service")
	if !ok || err != nil || string(b) != "good\n" {
		t.Fatalf("LoadLastKnownGood = %q, %v, %v", b, ok, err)
	}
}
