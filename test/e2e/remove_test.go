package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/generation"
)

// weightsStep is a download from the fake hub, added to genRecipe for this test.
const weightsStep = `  - name: weights
    download:
      dest: /var/lib/sglprov/models/tiny
      hf:
        repo: org/tiny
        revision: "0123456789abcdef0123456789abcdef01234567"
        include: ["*.safetensors", "*.json", "tokenizer*"]
  - name: sglang-service
    needs: [app-build, weights]`

// TestRemoveAndGC drives remove and gc against real systemd: gc frees a generation whose
// build failed and the part files of a download, saying the size first with --dry-run;
// remove keeps the weights another recipe uses and takes the recipe's unit, generations
// and records; removing the last user of the weights frees them.
func TestRemoveAndGC(t *testing.T) {
	requireE2E(t)
	bins := buildBinaries(t)
	hub := filepath.Join(t.TempDir(), "fake-hub")
	cmd := exec.Command("go", "build", "-o", hub, "github.com/sglprov/sglprov/test/fakehub/cmd/fake-hub")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOTOOLCHAIN=local")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building fake-hub: %v\n%s", err, out)
	}
	g := newGenHost(t, bins)
	g.CopyIn(hub, "/usr/local/bin/fake-hub", 0o755)
	// The fake hub's CDN redirects name localhost, which the bare root does not resolve.
	g.WriteFile("/etc/hosts", []byte("127.0.0.1 localhost\n::1 localhost\n"), 0o644)
	g.MustRun("fake-hub", "--generate", "/srv/model", "--shards", "2", "--shard-bytes", "1048576")
	g.MustRun("sh", "-c", "setsid fake-hub --dir /srv/model --repo org/tiny --port-file /tmp/hub.url >/tmp/hub.log 2>&1 &")
	for i := 0; g.catIn("/tmp/hub.url") == ""; i++ {
		if i > 100 {
			t.Fatalf("fake-hub did not start: %s", g.catIn("/tmp/hub.log"))
		}
		time.Sleep(100 * time.Millisecond)
	}
	// A and B share the weights and split the node's eight GPUs: two servers on the same
	// GPUs would be refused.
	withWeights := strings.Replace(genRecipe, "  - name: sglang-service\n    needs: [app-build]", weightsStep, 1)
	recipeB := strings.NewReplacer("name: e2e-gen", "name: e2e-gen-b", "unit: sglang-e2e.service", "unit: sglang-b.service",
		`port: "30000"`, `port: "30001"`, "generations: {keep: 2}", `generations: {keep: 2}
requires: {gpu: {devices: ["4", "5", "6", "7"]}}`).Replace(withWeights)
	withWeights = strings.Replace(withWeights, "generations: {keep: 2}", `generations: {keep: 2}
requires: {gpu: {devices: ["0", "1", "2", "3"]}}`, 1)
	g.WriteFile(recipePath, []byte(withWeights), 0o644)
	g.WriteFile("/etc/sglprov/b.yaml", []byte(recipeB), 0o644)
	sg := func(args ...string) (string, int) {
		return g.Run(5*time.Minute, append([]string{"sh", "-c", `HF_ENDPOINT=$(cat /tmp/hub.url) SGLPROV_GPU_FIXTURE=/etc/sglprov/gpu.json exec "$@"`, "sh", "sglprov"}, args...)...)
	}
	mustSG := func(args ...string) string {
		t.Helper()
		out, code := sg(args...)
		if code != 0 {
			t.Fatalf("sglprov %s: exit %d\n%s", strings.Join(args, " "), code, out)
		}
		return out
	}
	applyA := func(pin string) (string, int) {
		return sg("apply", "-f", recipePath, "--state-dir", stateDir, "--set", "pin="+pin, "--set", "sha="+g.sums[pin])
	}
	if out, code := applyA("v1"); code != 0 {
		t.Fatalf("apply A v1: exit %d\n%s", code, out)
	}
	mustSG("apply", "-f", "/etc/sglprov/b.yaml", "--state-dir", stateDir, "--set", "pin=v1", "--set", "sha="+g.sums["v1"])
	// Back to A after B: A's records are its own, so its weights are checked by size, mtime
	// and inode, not hashed again, and nothing else runs but the gate.
	if out, code := applyA("v1"); code != 0 {
		t.Fatalf("apply A v1 again: exit %d\n%s", code, out)
	}
	for _, name := range []string{"weights", "app-src", "app-build", "sglang-service"} {
		if s := step(t, g.lastReport(), name); s.Result != engine.ResultSkipped {
			t.Errorf("A again after B: %s %s (%s), want skipped", name, s.Result, s.Reason)
		}
	}
	unitB := string(g.ReadFile("/etc/systemd/system/sglang-b.service"))
	for _, want := range []string{"CUDA_VISIBLE_DEVICES=GPU-", "--tp 4"} {
		if !strings.Contains(unitB, want) {
			t.Errorf("B's unit (GPUs 4-7) lacks %q:\n%s", want, unitB)
		}
	}
	// A third recipe on all eight GPUs is refused: it would share them with A and B.
	g.WriteFile("/etc/sglprov/c.yaml", []byte(strings.NewReplacer("name: e2e-gen", "name: e2e-gen-c", "unit: sglang-e2e.service", "unit: sglang-c.service").Replace(genRecipe)), 0o644)
	if out, code := sg("apply", "-f", "/etc/sglprov/c.yaml", "--state-dir", stateDir, "--set", "pin=v1", "--set", "sha="+g.sums["v1"]); code != 4 ||
		!strings.Contains(out, "recipe e2e-gen serves on") || !strings.Contains(out, "recipe e2e-gen-b serves on") {
		t.Errorf("a whole-node recipe beside A and B: exit %d, want 4 naming both\n%s", code, out)
	}
	if out, code := applyA("v3-fail"); code != 1 {
		t.Fatalf("apply A v3-fail: exit %d, want 1\n%s", code, out)
	}
	// A download cut short leaves a part file of a listed file (as a kill mid-download
	// does): the record names it, so gc frees it.
	g.MustRun("sh", "-c", "mkdir -p /var/lib/sglprov/models/tiny/.sglprov/parts && head -c 300000 /dev/zero > /var/lib/sglprov/models/tiny/.sglprov/parts/model-00002-of-00002.safetensors.part")

	dry := mustSG("gc", "--state-dir", stateDir, "--dry-run")
	for _, want := range []string{"generations of e2e-gen: kept", "part files in /var/lib/sglprov/models/tiny: would free 293.0 KiB", "; would free "} {
		if !strings.Contains(dry, want) {
			t.Errorf("gc --dry-run does not say %q:\n%s", want, dry)
		}
	}
	// The generations folder's entries besides its lock folder (generation.LockDir).
	generations := func() []os.DirEntry {
		ents, _ := os.ReadDir(filepath.Join(g.Root, genDir))
		return slices.DeleteFunc(ents, func(e os.DirEntry) bool { return e.Name() == generation.LockDir })
	}
	gens := generations()
	if len(gens) != 3 { // v1, v3-fail and the current link
		t.Errorf("gc --dry-run changed the generations: %d entries", len(gens))
	}
	out := mustSG("gc", "--state-dir", stateDir)
	t.Logf("sglprov gc --dry-run:\n%s\nsglprov gc:\n%s", dry, out)
	if total := regexp.MustCompile(`(?m)^freed (.*) in all$`).FindStringSubmatch(out); total == nil || strings.Replace(dry, "would free", "freed", -1) != out {
		t.Errorf("gc did not free what its dry run said:\n%s\n---\n%s", dry, out)
	}
	gens = generations()
	if len(gens) != 2 {
		t.Errorf("after gc the generations folder holds %d entries, want the serving one and the link", len(gens))
	}
	if _, err := os.Stat(filepath.Join(g.Root, "/var/lib/sglprov/models/tiny/.sglprov")); err == nil {
		t.Errorf("gc left the part files")
	}

	// remove A: the weights stay (B uses them), the rest goes.
	dry = mustSG("remove", "-f", recipePath, "--state-dir", stateDir, "--weights", "--dry-run")
	for _, want := range []string{"stop, disable and delete unit sglang-e2e.service", "delete 1 generation(s)", "keep: weights /var/lib/sglprov/models/tiny: also used by recipe e2e-gen-b", "--dry-run: nothing was changed"} {
		if !strings.Contains(dry, want) {
			t.Errorf("remove --dry-run does not say %q:\n%s", want, dry)
		}
	}
	if act, _ := g.Run(10*time.Second, "systemctl", "is-active", unitName); strings.TrimSpace(act) != "active" {
		t.Errorf("remove --dry-run stopped %s", unitName)
	}
	out = mustSG("remove", "-f", recipePath, "--state-dir", stateDir, "--weights")
	t.Logf("sglprov remove -f A --weights:\n%s", out)
	if !strings.Contains(out, "removed e2e-gen; freed") {
		t.Errorf("remove A says:\n%s", out)
	}
	if _, err := os.Stat(filepath.Join(g.Root, unitPath)); err == nil {
		t.Errorf("remove left %s", unitPath)
	}
	if en, _ := g.Run(10*time.Second, "systemctl", "is-enabled", unitName); strings.TrimSpace(en) == "enabled" {
		t.Errorf("remove left %s enabled", unitName)
	}
	if _, err := os.Stat(filepath.Join(g.Root, genDir)); err == nil {
		t.Errorf("remove left the generations in %s", genDir)
	}
	if _, err := os.Stat(filepath.Join(g.Root, "/var/lib/sglprov/models/tiny/model-00001-of-00002.safetensors")); err != nil {
		t.Errorf("remove A deleted the weights B uses: %v", err)
	}
	if act, _ := g.Run(10*time.Second, "systemctl", "is-active", "sglang-b.service"); strings.TrimSpace(act) != "active" {
		t.Errorf("removing A stopped B")
	}
	// remove B --weights: its weights go, and it says how much that freed.
	out = mustSG("remove", "-f", "/etc/sglprov/b.yaml", "--state-dir", stateDir, "--weights")
	t.Logf("sglprov remove -f B --weights:\n%s", out)
	if !strings.Contains(out, "delete weights /var/lib/sglprov/models/tiny (2") {
		t.Errorf("remove B does not say it deletes the weights and their size:\n%s", out)
	}
	if _, err := os.Stat(filepath.Join(g.Root, "/var/lib/sglprov/models/tiny")); err == nil {
		t.Errorf("remove B --weights left the weights")
	}
	if out := mustSG("gc", "--state-dir", stateDir); !strings.Contains(out, "freed 0 B in all") {
		t.Errorf("gc after both removes frees something:\n%s", out)
	}
}
