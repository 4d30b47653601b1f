package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// cloudConfig is the part of a #cloud-config that docs/cloud-init.md uses.
type cloudConfig struct {
	WriteFiles []struct {
		Path        string `yaml:"path"`
		Permissions string `yaml:"permissions"`
		Owner       string `yaml:"owner"`
		Content     string `yaml:"content"`
	} `yaml:"write_files"`
	Runcmd [][]string `yaml:"runcmd"`
}

// TestCloudInitRuncmd runs the #cloud-config of docs/cloud-init.md as cloud-init would
// (write_files, then each runcmd line), with every host path moved under a temporary
// root and a small recipe in place of the model's, and checks the exit code it records
// and what `sglprov status` says.
func TestCloudInitRuncmd(t *testing.T) {
	repo := repoRoot(t)
	doc, err := os.ReadFile(filepath.Join(repo, "docs", "cloud-init.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)```yaml\n(#cloud-config\n.*?)```").FindSubmatch(doc)
	if m == nil {
		t.Fatal("docs/cloud-init.md has no #cloud-config block")
	}
	var cfg cloudConfig
	if err := yaml.Unmarshal(m[1], &cfg); err != nil {
		t.Fatalf("the #cloud-config does not parse: %v", err)
	}
	if len(cfg.WriteFiles) == 0 || len(cfg.Runcmd) == 0 {
		t.Fatalf("no write_files or runcmd: %+v", cfg)
	}

	root := t.TempDir()
	moved := regexp.MustCompile(`(^|[\s"'=])(/(?:etc|opt|usr/local|var/lib)/)`)
	under := func(s string) string { return moved.ReplaceAllString(s, "${1}"+root+"${2}") }

	// What the image or a write_files entry would have put in /opt/sglprov.
	bin := filepath.Join(root, "opt", "sglprov", "sglprov")
	build := exec.Command("go", "build", "-o", bin, "./cmd/sglprov")
	build.Dir = repo
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building sglprov: %v\n%s", err, out)
	}
	if err := os.WriteFile(filepath.Join(root, "opt", "sglprov", "sglprov.service"), []byte("[Service]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"usr/local/bin", "etc/systemd/system", "var/lib"} {
		os.MkdirAll(filepath.Join(root, d), 0o755)
	}

	for _, f := range cfg.WriteFiles {
		content := f.Content
		if strings.HasSuffix(f.Path, "recipe.yaml") {
			content = "apiVersion: sglprov/v1\nname: cloud\nsteps:\n" +
				"  - name: hello\n    command: {argv: [touch, " + filepath.Join(root, "hello") + "], creates: [" + filepath.Join(root, "hello") + "]}\n"
		}
		perm, err := strconv.ParseUint(f.Permissions, 8, 32)
		if err != nil {
			t.Fatalf("write_files %s: permissions %q: %v", f.Path, f.Permissions, err)
		}
		if perm&0o077 != 0 {
			t.Errorf("write_files %s is mode %s: recipe and token files must be 0600", f.Path, f.Permissions)
		}
		p := under(f.Path)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(content), os.FileMode(perm)); err != nil {
			t.Fatal(err)
		}
	}
	env := append(os.Environ(), "SGLPROV_STATE_DIR="+filepath.Join(root, "var", "lib", "sglprov"))
	for _, line := range cfg.Runcmd {
		args := make([]string, len(line))
		for i, a := range line {
			args[i] = under(a)
		}
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Env = env
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			t.Fatalf("runcmd %q: %v\n%s", args, err, out.String())
		}
	}
	code, err := os.ReadFile(filepath.Join(root, "var", "lib", "sglprov-exit"))
	if err != nil || strings.TrimSpace(string(code)) != "sglprov exit 0" {
		t.Errorf("recorded exit: %q, %v", code, err)
	}
	if _, err := os.Stat(filepath.Join(root, "hello")); err != nil {
		t.Errorf("the recipe did not run: %v", err)
	}
	status := exec.Command(filepath.Join(root, "usr", "local", "bin", "sglprov"), "status")
	status.Env = env
	out, err := status.CombinedOutput()
	if err != nil || !regexp.MustCompile(`last run: ok`).Match(out) || !regexp.MustCompile(`hello +ok`).Match(out) {
		t.Errorf("sglprov status: %v\n%s", err, out)
	}
}
