package main

import (
	"fmt"
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
// (write_files, then the runcmd lines as one shell script whose exit status cloud-init
// records), with every host path moved under a temporary root and a small recipe in place
// of the model's: once with a recipe that works, once with one whose step fails. The
// script must exit as sglprov did, record the result in /var/log/sglprov/last-result and
// the journal (logger), and `sglprov status` must say the same with the same exit code.
func TestCloudInitRuncmd(t *testing.T) {
	repo := repoRoot(t)
	doc, err := os.ReadFile(filepath.Join(repo, "docs", "cloud-init.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```yaml\n(#cloud-config\n.*?)```").FindAllSubmatch(doc, -1)
	if blocks == nil {
		t.Fatal("docs/cloud-init.md has no #cloud-config block")
	}
	var cfgs []cloudConfig
	for i, m := range blocks {
		var cfg cloudConfig
		if err := yaml.Unmarshal(m[1], &cfg); err != nil {
			t.Fatalf("#cloud-config %d does not parse: %v", i+1, err)
		}
		if len(cfg.WriteFiles) == 0 || len(cfg.Runcmd) == 0 {
			t.Fatalf("#cloud-config %d: no write_files or runcmd: %+v", i+1, cfg)
		}
		cfgs = append(cfgs, cfg)
	}
	cfg, m := cfgs[0], blocks[0]

	// The recipe it writes uses the token file it writes, through the shipped recipe's
	// hf_token_file var.
	written := map[string]string{}
	for _, f := range cfg.WriteFiles {
		written[f.Path] = f.Content
	}
	tm := regexp.MustCompile(`(?m)^\s*hf_token_file:\s*(\S+)`).FindStringSubmatch(written["/etc/sglprov/recipe.yaml"])
	if tm == nil {
		t.Error("the recipe written does not set hf_token_file")
	} else if _, ok := written[tm[1]]; !ok {
		t.Errorf("hf_token_file %s is not a file the #cloud-config writes", tm[1])
	}
	shipped, err := os.ReadFile(filepath.Join(repo, "recipes", "qwen3.5-397b-a17b-nvfp4-sm120.yaml"))
	if err != nil || !strings.Contains(string(shipped), `token_file: "{{ .vars.hf_token_file }}"`) {
		t.Errorf("the shipped recipe does not read its hub token from the hf_token_file var (%v)", err)
	}

	// The daemon's line, commented out in the document, takes the apply line's place.
	dm := regexp.MustCompile(`(?m)^  # (- \[.*systemctl.*enable.*\])\s*$`).FindSubmatch(m[1])
	if dm == nil {
		t.Fatal("docs/cloud-init.md has no commented runcmd line that enables the daemon")
	}
	var daemonLine [][]string
	if err := yaml.Unmarshal(dm[1], &daemonLine); err != nil || len(daemonLine) != 1 {
		t.Fatalf("the daemon's runcmd line does not parse: %v (%q)", err, dm[1])
	}
	daemonCfg := cfg
	daemonCfg.Runcmd = append(append([][]string{}, cfg.Runcmd[:len(cfg.Runcmd)-1]...), daemonLine[0])

	// The step that works needs a variable of /etc/sglprov/env: a runcmd line that does not
	// read that file loses the proxy and HF_ENDPOINT set there, and fails here.
	ok := `[sh, -c, 'test "$SGLPROV_ENV_PROBE" = from-env-file && touch HELLO']`
	for _, tc := range []struct {
		name     string
		argv     string
		wantExit int
		wantStep string
	}{
		{name: "ok", argv: ok, wantExit: 0, wantStep: `hello +ok`},
		{name: "failing apply", argv: "[sh, -c, 'echo broken >&2; exit 9']", wantExit: 1, wantStep: `hello +failed`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			runCloudConfig(t, repo, cfg, tc.argv, tc.wantExit, tc.wantStep, modeApply, true)
		})
		t.Run("daemon "+tc.name, func(t *testing.T) {
			runCloudConfig(t, repo, daemonCfg, tc.argv, tc.wantExit, tc.wantStep, modeDaemon, true)
		})
	}
	// A daemon that stopped before its first apply recorded no run: status, the line's
	// last command, exits 1, and cloud-init records a failure.
	t.Run("daemon without a run", func(t *testing.T) {
		runCloudConfig(t, repo, daemonCfg, ok, 1, `no run recorded`, modeDaemonNoRun, true)
	})
	// The fleet's #cloud-configs (the node that pushes, the pull-only ones) record the
	// result as the first does (a failed apply is a failed runcmd) and read the same
	// /etc/sglprov/env.
	for i, fleet := range cfgs[1:] {
		t.Run(fmt.Sprintf("fleet %d ok", i+1), func(t *testing.T) {
			runCloudConfig(t, repo, fleet, ok, 0, `hello +ok`, modeApply, true)
		})
		t.Run(fmt.Sprintf("fleet %d failing apply", i+1), func(t *testing.T) {
			runCloudConfig(t, repo, fleet, "[sh, -c, 'echo broken >&2; exit 9']", 1, `hello +failed`, modeApply, true)
		})
	}
	// /etc/sglprov/env is optional, as the daemon's unit treats it: every #cloud-config,
	// pasted as it is, works and records its result on a node without it.
	plain := `[sh, -c, 'touch HELLO']`
	for i, c := range cfgs {
		t.Run(fmt.Sprintf("config %d without /etc/sglprov/env", i+1), func(t *testing.T) {
			runCloudConfig(t, repo, c, plain, 0, `hello +ok`, modeApply, false)
		})
		t.Run(fmt.Sprintf("config %d failing without /etc/sglprov/env", i+1), func(t *testing.T) {
			runCloudConfig(t, repo, c, "[sh, -c, 'exit 9']", 1, `hello +failed`, modeApply, false)
		})
	}
}

// runMode is how a #cloud-config's last runcmd line runs sglprov.
type runMode int

const (
	// modeApply: the line runs sglprov apply itself.
	modeApply runMode = iota
	// modeDaemon: the line enables the daemon, which applies once (systemctl's stand-in
	// runs that apply with the unit's EnvironmentFile) and the line then runs status.
	modeDaemon
	// modeDaemonNoRun: as modeDaemon, but the daemon stops before its first apply.
	modeDaemonNoRun
)

// runCloudConfig plays cfg on a fresh root with a recipe of one command step (argv, where
// HELLO is a file under the root) and checks the exit code and the result's records, and
// that the daemon's unit is installed. Without withEnv, /etc/sglprov/env is not there. With
// daemon, cfg's last runcmd line enables the daemon: systemctl stands in for systemd,
// running the daemon's first apply and returning 0 once it is done, as `systemctl start`
// of the Type=notify unit does whatever the apply found (READY=1 comes either way).
func runCloudConfig(t *testing.T, repo string, cfg cloudConfig, argv string, wantExit int, wantStep string, mode runMode, withEnv bool) {
	daemon := mode != modeApply
	root := t.TempDir()
	moved := regexp.MustCompile(`(^|[\s"'=])(/(?:etc|opt|usr/local|var/lib|var/log|root)/)`)
	under := func(s string) string { return moved.ReplaceAllString(s, "${1}"+root+"${2}") }
	hello := filepath.Join(root, "hello")

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
	for _, d := range []string{"usr/local/bin", "etc/systemd/system", "var/lib", "var/log", "shim"} {
		os.MkdirAll(filepath.Join(root, d), 0o755)
	}
	// logger stands in for the journal: it appends its tag and message to a file.
	journal := filepath.Join(root, "journal")
	shim := "#!/bin/sh\nwhile [ $# -gt 1 ]; do case $1 in -t) tag=$2; shift 2;; *) break;; esac; done\necho \"$tag: $*\" >> " + journal + "\n"
	if err := os.WriteFile(filepath.Join(root, "shim", "logger"), []byte(shim), 0o755); err != nil {
		t.Fatal(err)
	}
	// cloud-init query stands in for cloud-init's instance data: the keys the two-node
	// #cloud-config reads, as OpenStack's server metadata gives them (rank 0, its head).
	query := "#!/bin/sh\n[ \"$1\" = query ] || exit 2\ncase $2 in\n" +
		"ds.meta_data.meta.sglprov_rank) echo 0;;\nds.meta_data.meta.sglprov_head) echo 10.0.0.1;;\n" +
		"*) echo \"cloud-init query: no key $2\" >&2; exit 1;;\nesac\n"
	if err := os.WriteFile(filepath.Join(root, "shim", "cloud-init"), []byte(query), 0o755); err != nil {
		t.Fatal(err)
	}
	// The unit reads /etc/sglprov/env as its EnvironmentFile (optional: the leading "-").
	envFile := filepath.Join(root, "etc", "sglprov", "env")
	systemctl := "#!/bin/sh\n[ \"$1 $2 $3\" = \"enable --now sglprov.service\" ] || { echo \"systemctl $*: not expected\" >&2; exit 1; }\n" +
		"if [ -f " + envFile + " ]; then set -a; . " + envFile + "; set +a; fi\n" +
		filepath.Join(root, "usr", "local", "bin", "sglprov") + " apply -f " + filepath.Join(root, "etc", "sglprov", "recipe.yaml") + "\nexit 0\n"
	if mode == modeDaemonNoRun {
		systemctl = "#!/bin/sh\nexit 0\n"
	}
	if err := os.WriteFile(filepath.Join(root, "shim", "systemctl"), []byte(systemctl), 0o755); err != nil {
		t.Fatal(err)
	}

	for _, f := range cfg.WriteFiles {
		content := f.Content
		if strings.HasSuffix(f.Path, "recipe.yaml") {
			// The fleet's vars, with no registry (cache_oci empty turns the cache off).
			content = "apiVersion: sglprov/v1\nname: cloud\n" +
				"vars: {cache_oci: \"\", cache_push: \"false\", node_rank: \"0\", head_addr: \"\"}\n" +
				"cache: {oci: \"{{ .vars.cache_oci }}\", push: \"{{ .vars.cache_push }}\"}\nsteps:\n" +
				"  - name: hello\n    command: {argv: " + strings.ReplaceAll(argv, "HELLO", hello) + "}\n"
		}
		perm, err := strconv.ParseUint(f.Permissions, 8, 32)
		if err != nil {
			t.Fatalf("write_files %s: permissions %q: %v", f.Path, f.Permissions, err)
		}
		if perm&0o077 != 0 {
			t.Errorf("write_files %s is mode %s: recipe, token and environment files must be 0600", f.Path, f.Permissions)
		}
		p := under(f.Path)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(content), os.FileMode(perm)); err != nil {
			t.Fatal(err)
		}
	}
	// /etc/sglprov/env as the first #cloud-config writes it (the fleet's say theirs is the
	// same), with one variable the recipe's step reads.
	envText, _ := os.ReadFile(envFile)
	os.MkdirAll(filepath.Dir(envFile), 0o755)
	if !withEnv {
		if err := os.Remove(envFile); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
	} else if err := os.WriteFile(envFile, append(envText, "SGLPROV_ENV_PROBE=from-env-file\n"...), 0o600); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "SGLPROV_STATE_DIR="+filepath.Join(root, "var", "lib", "sglprov"),
		"PATH="+filepath.Join(root, "shim")+string(os.PathListSeparator)+os.Getenv("PATH"))

	// cloud-init writes runcmd as one shell script, each list item's words quoted, and
	// records the script's exit status.
	script := "#!/bin/sh\n"
	for _, line := range cfg.Runcmd {
		words := make([]string, len(line))
		for i, a := range line {
			words[i] = "'" + strings.ReplaceAll(under(a), "'", `'\''`) + "'"
		}
		script += strings.Join(words, " ") + "\n"
	}
	scriptPath := filepath.Join(root, "runcmd")
	if err := os.WriteFile(scriptPath, []byte(script), 0o700); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sh", scriptPath)
	cmd.Env = env
	out, _ := cmd.CombinedOutput()
	if got := cmd.ProcessState.ExitCode(); got != wantExit {
		t.Errorf("the runcmd script exited %d, want sglprov's %d: cloud-init would record the wrong result\n%s", got, wantExit, out)
	}

	if _, err := os.Stat(filepath.Join(root, "etc", "systemd", "system", "sglprov.service")); err != nil {
		t.Errorf("the runcmd did not install the daemon's unit: %v", err)
	}
	want := fmt.Sprintf("sglprov apply exit %d at ", wantExit)
	if daemon {
		// The daemon's line records nothing itself: the daemon's journal and status do.
	} else if b, err := os.ReadFile(filepath.Join(root, "var", "log", "sglprov", "last-result")); err != nil || !strings.HasPrefix(string(b), want) {
		t.Errorf("/var/log/sglprov/last-result: %q, %v; want %q...", b, err, want)
	}
	if b, err := os.ReadFile(journal); !daemon && (err != nil || !strings.Contains(string(b), "sglprov: "+want)) {
		t.Errorf("journal (logger): %q, %v; want a line tagged sglprov: %q...", b, err, want)
	}
	if !daemon {
		// The one-shot node shows up in the fleet's Prometheus: the textfile says how the
		// apply ended.
		tf := filepath.Join(root, "var", "lib", "prometheus", "node-exporter", "sglprov.prom")
		if b, err := os.ReadFile(tf); err != nil || !regexp.MustCompile(fmt.Sprintf(`(?m)^sglprov_apply_exit_code\{recipe="[^"]+"\} %d$`, wantExit)).Match(b) {
			t.Errorf("the metrics textfile: %v\n%s", err, b)
		}
	}
	if _, err := os.Stat(hello); (err == nil) != (wantExit == 0 && mode != modeDaemonNoRun) {
		t.Errorf("the recipe's step: %v", err)
	}
	status := exec.Command(filepath.Join(root, "usr", "local", "bin", "sglprov"), "status")
	status.Env = env
	sout, _ := status.CombinedOutput()
	if got := status.ProcessState.ExitCode(); got != wantExit || !regexp.MustCompile(wantStep).Match(sout) {
		t.Errorf("sglprov status exited %d (want %d):\n%s", got, wantExit, sout)
	}
}

// TestCloudInitCUDAToolkit checks the CUDA toolkit part of docs/cloud-init.md's
// #cloud-config against cloud-init's apt module and the shipped recipe: one source on
// NVIDIA's repository for Ubuntu x86_64 whose key cloud-init fetches by its full
// fingerprint (the one the text names) into the file $KEY_FILE stands for, and a
// cuda-toolkit-X-Y package whose toolkit is the one the recipe builds with (cuda_home) and
// that satisfies its requires.commands.nvcc.
func TestCloudInitCUDAToolkit(t *testing.T) {
	repo := repoRoot(t)
	doc, err := os.ReadFile(filepath.Join(repo, "docs", "cloud-init.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)```yaml\n(#cloud-config\n.*?)```").FindSubmatch(doc)
	if m == nil {
		t.Fatal("docs/cloud-init.md has no #cloud-config block")
	}
	var cfg struct {
		Apt struct {
			Sources map[string]struct {
				Source    string `yaml:"source"`
				KeyID     string `yaml:"keyid"`
				Keyserver string `yaml:"keyserver"`
			} `yaml:"sources"`
		} `yaml:"apt"`
		Packages []string `yaml:"packages"`
	}
	if err := yaml.Unmarshal(m[1], &cfg); err != nil {
		t.Fatalf("the #cloud-config does not parse: %v", err)
	}
	src, ok := cfg.Apt.Sources["cuda"]
	if !ok || len(cfg.Apt.Sources) != 1 {
		t.Fatalf("apt.sources = %+v, want one source, cuda", cfg.Apt.Sources)
	}
	if !regexp.MustCompile(`^deb \[signed-by=\$KEY_FILE\] https://developer\.download\.nvidia\.com/compute/cuda/repos/ubuntu(2204|2404)/x86_64/ /$`).MatchString(src.Source) {
		t.Errorf("source %q is not NVIDIA's flat repository for ubuntu2204/ubuntu2404 x86_64 signed by the key cloud-init writes", src.Source)
	}
	fpr := strings.ReplaceAll(src.KeyID, " ", "")
	if !regexp.MustCompile(`^[0-9A-F]{40}$`).MatchString(fpr) || src.Keyserver == "" {
		t.Errorf("keyid %q (keyserver %q): want the key's full 40-digit fingerprint and a keyserver", src.KeyID, src.Keyserver)
	}
	var spaced []string
	for i := 0; i+4 <= len(fpr); i += 4 {
		spaced = append(spaced, fpr[i:i+4])
	}
	if !strings.Contains(string(doc), "`"+strings.Join(spaced, " ")+"`") {
		t.Errorf("the text does not name the fingerprint of keyid %s", fpr)
	}

	shipped, err := os.ReadFile(filepath.Join(repo, "recipes", "qwen3.5-397b-a17b-nvfp4-sm120.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	home := regexp.MustCompile(`(?m)^\s*cuda_home:\s*(\S+)`).FindSubmatch(shipped)
	want := regexp.MustCompile(`(?m)^\s*nvcc:\s*\{version:\s*">=(\d+)\.(\d+)"\}`).FindSubmatch(shipped)
	if home == nil || want == nil {
		t.Fatal("the shipped recipe has no cuda_home var or requires.commands.nvcc range")
	}
	var toolkit []string
	for _, p := range cfg.Packages {
		if tm := regexp.MustCompile(`^cuda-toolkit-(\d+)-(\d+)$`).FindStringSubmatch(p); tm != nil {
			toolkit = tm
		}
	}
	if toolkit == nil {
		t.Fatalf("packages %q has no cuda-toolkit-X-Y", cfg.Packages)
	}
	if got := "/usr/local/cuda-" + toolkit[1] + "." + toolkit[2]; got != string(home[1]) {
		t.Errorf("%s installs %s; the shipped recipe builds with cuda_home %s", toolkit[0], got, home[1])
	}
	major, _ := strconv.Atoi(toolkit[1])
	minor, _ := strconv.Atoi(toolkit[2])
	wantMajor, _ := strconv.Atoi(string(want[1]))
	wantMinor, _ := strconv.Atoi(string(want[2]))
	if major < wantMajor || major == wantMajor && minor < wantMinor {
		t.Errorf("%s does not satisfy the shipped recipe's nvcc >=%s.%s", toolkit[0], want[1], want[2])
	}

	// The Hopper recipe builds with another toolkit: it requires that toolkit's nvcc, and
	// the text names the package that installs it.
	hopper, err := os.ReadFile(filepath.Join(repo, "recipes", "qwen3-235b-a22b-fp8-sm90.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	hh := regexp.MustCompile(`(?m)^\s*cuda_home:\s*/usr/local/cuda-(\d+)\.(\d+)$`).FindSubmatch(hopper)
	hw := regexp.MustCompile(`(?m)^\s*nvcc:\s*\{version:\s*">=(\d+)\.(\d+)"\}`).FindSubmatch(hopper)
	if hh == nil || hw == nil {
		t.Fatal("the Hopper recipe has no cuda_home var or requires.commands.nvcc range")
	}
	if string(hh[1]) != string(hw[1]) || string(hh[2]) != string(hw[2]) {
		t.Errorf("the Hopper recipe builds with cuda-%s.%s but requires nvcc >=%s.%s", hh[1], hh[2], hw[1], hw[2])
	}
	if pkg := fmt.Sprintf("`cuda-toolkit-%s-%s`", hh[1], hh[2]); !strings.Contains(string(doc), pkg) {
		t.Errorf("docs/cloud-init.md does not name %s, the Hopper recipe's toolkit", pkg)
	}
}
