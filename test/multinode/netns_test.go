// Package multinode_test serves one model across two "nodes": two network namespaces joined
// by a veth pair, each with its own state dir, running sglprov with the exec manager and
// the fake SGLang server in its multi-node mode, which really meets at --dist-init-addr.
// It needs root and iproute2's ip; it skips, naming what is missing, without them.
package multinode_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

const recipeText = `apiVersion: sglprov/v1
name: two-nodes
vars:
  node_rank: "0"
  head_addr: ""
  iface: ""
  rdv_port: "29500"
  port: "30000"
  join: 60s
requires:
  gpu: {min_count: 1}
nodes:
  count: 2
  rank: "{{ .vars.node_rank }}"
  head: "{{ .vars.head_addr }}:{{ .vars.rdv_port }}"
  interface: "{{ .vars.iface }}"
  join_timeout: "{{ .vars.join }}"
steps:
  - name: sglang-service
    systemd:
      unit: sglang-group.service
      needs_commands: []
      manager: exec
      command: [FAKE, -m, sglang.launch_server]
      model_path: /models/qwen
      host: 0.0.0.0
      port: "{{ .vars.port }}"
      args: [--fake-join-timeout, 60s, --attention-backend, triton]
  - name: smoke
    needs: [sglang-service]
    smoke:
      url: "http://127.0.0.1:{{ .vars.port }}"
      ready_timeout: 60s
      cases:
        - name: prime
          prompt: "Write a Python function to check if a number is prime. Be concise."
          expect: {regex: "def \\w+\\("}
`

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// twoNodes makes namespaces a and b joined by a veth pair: a holds HEAD, b the worker's
// address, both in 10.233.N.0/24, a range used only inside the namespaces.
func twoNodes(t *testing.T) (nsA, nsB, head, vethA, vethB string) {
	t.Helper()
	id := fmt.Sprintf("%d%03d", os.Getpid()%10000, rand.IntN(1000))
	nsA, nsB = "sglpA"+id, "sglpB"+id
	vethA, vethB = "vA"+id, "vB"+id
	n := rand.IntN(200) + 20
	head = fmt.Sprintf("10.233.%d.1", n)
	run(t, "ip", "netns", "add", nsA)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", nsA).Run() })
	run(t, "ip", "netns", "add", nsB)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", nsB).Run() })
	run(t, "ip", "link", "add", vethA, "netns", nsA, "type", "veth", "peer", "name", vethB, "netns", nsB)
	for _, c := range [][]string{
		{nsA, "ip", "addr", "add", head + "/24", "dev", vethA},
		{nsB, "ip", "addr", "add", fmt.Sprintf("10.233.%d.2/24", n), "dev", vethB},
		{nsA, "ip", "link", "set", vethA, "up"}, {nsB, "ip", "link", "set", vethB, "up"},
		{nsA, "ip", "link", "set", "lo", "up"}, {nsB, "ip", "link", "set", "lo", "up"},
	} {
		run(t, "ip", append([]string{"netns", "exec"}, c...)...)
	}
	// The kernel reports a veth up (operstate) a moment after both ends are.
	for _, c := range [][2]string{{nsA, vethA}, {nsB, vethB}} {
		for end := time.Now().Add(15 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			out, _ := exec.Command("ip", "netns", "exec", c[0], "cat", "/sys/class/net/"+c[1]+"/operstate").Output()
			if strings.TrimSpace(string(out)) == "up" {
				break
			}
			if time.Now().After(end) {
				t.Fatalf("%s in %s is not up: %s", c[1], c[0], out)
			}
		}
	}
	return nsA, nsB, head, vethA, vethB
}

func build(t *testing.T, dir string) (sglprov, fake string) {
	t.Helper()
	root := repoRoot()
	sglprov, fake = filepath.Join(dir, "sglprov"), filepath.Join(dir, "fake-sglang")
	for out, pkg := range map[string]string{sglprov: "./cmd/sglprov", fake: "./test/fakesglang/cmd/fake-sglang"} {
		cmd := exec.Command("go", "build", "-o", out, pkg)
		cmd.Dir = root
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("building %s: %v\n%s", pkg, err, b)
		}
	}
	return sglprov, fake
}

// TestTwoNodes: the head and the worker (each a daemon, so that its server outlives one
// apply) join at the rendezvous over the veth pair; the head's gate passes, and the
// worker's by asking the head. A worker told to use an interface that does
// not reach the head is refused naming it (exit 4); a worker given a rendezvous port
// nobody listens on fails naming the rendezvous and the likely causes; killing the
// worker's server fails both nodes' canaries, and the group comes back through the
// ladders in order: the worker's server first, then the head's. Day two: a bad change
// applied head first, then the worker, and a bad then a good change applied on both nodes
// at the same moment (the "same time" subtest), end with both nodes serving one command
// line: the old one after a bad change, the new one after a good one; so do a change
// applied on the head only (the worker follows the head's line) and one applied on the
// worker only (refused before its candidate starts: the worker serves on unchanged).
func TestTwoNodes(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: it makes network namespaces and a veth pair")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs iproute2's ip (make deps installs it)")
	}
	dir := t.TempDir()
	sglprov, fake := build(t, dir)
	recipe := filepath.Join(dir, "r.yaml")
	if err := os.WriteFile(recipe, []byte(strings.Replace(recipeText, "FAKE", fake, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	nsA, nsB, head, vethA, vethB := twoNodes(t)
	env := append(os.Environ(), "SGLPROV_GPU_FIXTURE="+filepath.Join(repoRoot(), "testdata", "gpu", "rtx-pro-6000-x8.json"))
	sets := func(rank string, more ...string) []string {
		out := []string{"--set", "node_rank=" + rank, "--set", "head_addr=" + head}
		for _, m := range more {
			out = append(out, "--set", m)
		}
		return out
	}

	// plan on each rank shows its flags and the group's interface.
	for _, c := range []struct{ ns, rank, iface, role string }{{nsA, "0", vethA, "head"}, {nsB, "1", vethB, "worker"}} {
		cmd := exec.Command("ip", append([]string{"netns", "exec", c.ns, sglprov, "plan", "-f", recipe,
			"--state-dir", filepath.Join(dir, "plan"+c.rank)}, sets(c.rank)...)...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("plan rank %s: %v\n%s", c.rank, err, out)
		}
		for _, want := range []string{"--nnodes 2 --node-rank " + c.rank + " --dist-init-addr " + head + ":29500 --tp 16",
			"node rank " + c.rank + " of 2 (" + c.role + ")", "NCCL_SOCKET_IFNAME=" + c.iface + ": the interface that reaches the head"} {
			if !strings.Contains(string(out), want) {
				t.Errorf("plan rank %s lacks %q:\n%s", c.rank, want, out)
			}
		}
	}

	// Each node runs a daemon, so that its server outlives one apply (the exec manager's
	// server is the child of the sglprov that started it).
	var daemons []*exec.Cmd
	daemon := func(ns, rank, stateDir string) (metrics, logPath string) {
		metrics, logPath = filepath.Join(dir, stateDir+".prom"), filepath.Join(dir, stateDir+".log")
		out, err := os.Create(logPath)
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("ip", append([]string{"netns", "exec", ns, sglprov, "daemon", "-f", recipe,
			"--state-dir", filepath.Join(dir, stateDir), "--interval", "1s", "--failures-before-restart", "1",
			"--canary-timeout", "60s", "--metrics-addr", "", "--textfile", metrics}, sets(rank)...)...)
		cmd.Env, cmd.Stdout, cmd.Stderr = env, out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			done := make(chan struct{})
			go func() { _ = cmd.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(20 * time.Second):
				_ = cmd.Process.Kill()
			}
			out.Close()
			if t.Failed() {
				b, _ := os.ReadFile(logPath)
				t.Logf("rank %s daemon:\n%s", rank, b)
			}
		})
		daemons = append(daemons, cmd)
		return metrics, logPath
	}
	waitMetric := func(path, want string, within time.Duration) bool {
		for end := time.Now().Add(within); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
			if m, _ := os.ReadFile(path); bytes.Contains(m, []byte(want)) {
				return true
			}
		}
		return false
	}
	headMetrics, headLog := daemon(nsA, "0", "a")
	workerMetrics, workerLog := daemon(nsB, "1", "b")
	const pass, healthy = `sglprov_gate_pass{recipe="two-nodes"} 1`, `sglprov_node_health{recipe="two-nodes",state="healthy"} 1`
	for _, m := range []string{headMetrics, workerMetrics} {
		if !waitMetric(m, pass, 90*time.Second) || !waitMetric(m, healthy, 30*time.Second) {
			b, _ := os.ReadFile(m)
			t.Fatalf("%s: the gate did not pass or the node is not healthy:\n%s", m, b)
		}
	}
	if b, _ := os.ReadFile(workerLog); bytes.Contains(b, []byte("the head's arguments cannot be read")) {
		t.Errorf("the worker did not compare its command line with the head's:\n%s", b)
	}
	logs, _ := os.ReadFile(filepath.Join(dir, "b", "logs", "sglang-group.service.log"))
	if !strings.Contains(string(logs), "rank 1 joined the group at "+head+":29500") {
		t.Errorf("the worker's server did not join over the veth pair:\n%s", logs)
	}

	worker := func(stateDir string, more ...string) (int, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", nsB, sglprov, "apply", "-f", recipe,
			"--state-dir", filepath.Join(dir, stateDir)}, sets("1", more...)...)...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return code, string(out)
	}
	// A worker told to use loopback, which does not reach the head: refused before start.
	code, out := worker("c", "iface=lo")
	if code != 4 || !strings.Contains(out, "nodes.interface lo does not reach the head "+head+": the kernel routes it through "+vethB) {
		t.Errorf("wrong interface: exit %d:\n%s", code, out)
	}
	// A worker whose rendezvous nobody serves fails naming it and the likely causes.
	code, out = worker("d", "rdv_port=29600", "port=30100", "join=5s")
	if code != 3 || !strings.Contains(out, "nothing listens at the rendezvous "+head+":29600 now (connection refused)") || !strings.Contains(out, "firewall") {
		t.Errorf("unserved rendezvous: exit %d:\n%s", code, out)
	}

	// The worker's server dies: the head's group is broken for good, so both nodes' canaries
	// fail (the head's own, the worker's asked at the head). The group restarts in order:
	// the worker's ladder restarts its server, which knocks at the head's rendezvous; the
	// head's ladder waits until its kernel shows that new connection, then restarts the
	// head, whose new server takes the worker in; both canaries pass again.
	pid := serverPID(t, nsB)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for _, l := range []string{headLog, workerLog} {
		if !waitMetric(l, "canary failed", 60*time.Second) {
			t.Errorf("%s: no canary failed after the worker's server died", l)
		}
	}
	for _, l := range []string{headLog, workerLog} {
		if !waitMetric(l, "canary passes again", 90*time.Second) {
			t.Errorf("%s: the group did not come back", l)
		}
	}
	if !waitMetric(workerLog, "restarting this worker's server: the head says the group does not serve", time.Second) {
		t.Errorf("the worker's ladder did not restart its server")
	}
	if !waitMetric(headLog, "group: every worker started again and waits at the rendezvous; restarting the head", time.Second) {
		t.Errorf("the head did not restart after its worker started again")
	}
	headServer, _ := os.ReadFile(filepath.Join(dir, "a", "logs", "sglang-group.service.log"))
	knock := strings.Index(string(headServer), "rank 1 knocks from "+strings.TrimSuffix(head, ".1")+".2")
	if knock < 0 || !strings.Contains(string(headServer)[knock:], "rank 1 joined from") {
		t.Errorf("the restarted worker did not knock at the broken head and then join the restarted one:\n%s", headServer)
	}
	for _, m := range []string{headMetrics, workerMetrics} {
		if !waitMetric(m, healthy, 30*time.Second) {
			b, _ := os.ReadFile(m)
			t.Fatalf("%s: not healthy again:\n%s", m, b)
		}
	}

	// Day two: a change whose server answers badly on the head (another attention
	// backend), applied head first, then the worker (SIGHUP after the recipe file
	// changed), as the group's order says. The head's switch fails its gate and restores
	// what served, the head's ladder re-forming the group; the worker's switch then finds
	// the head running other arguments and is refused before its candidate starts, its
	// server serving on in the group: the group runs the old command line on both nodes,
	// and both serve with the change pending.
	changed := strings.Replace(strings.Replace(recipeText, "FAKE", fake, 1), "--attention-backend, triton]",
		"--attention-backend, flashinfer, --fake-broken-if, attention-backend=flashinfer]", 1)
	if err := os.WriteFile(recipe, []byte(changed), 0o644); err != nil {
		t.Fatal(err)
	}
	const restored = "the switch failed; what served before serves again and passed the gate"
	const refused = "the switch was refused before its candidate started; what served serves on as it was"
	for i, l := range []string{headLog, workerLog} {
		if err := daemons[i].Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		if !waitMetric(l, []string{restored, refused}[i], 90*time.Second) {
			t.Fatalf("%s: the switch was not undone or refused on this node", l)
		}
	}
	if b, _ := os.ReadFile(workerLog); !bytes.Contains(b, []byte("does not run this launch: apply the change on the head (rank 0) first")) ||
		!bytes.Contains(b, []byte("(--attention-backend: the head runs triton, this node flashinfer)")) {
		t.Errorf("the worker's switch was not refused for the head's other arguments:\n%s", b)
	}
	for _, m := range []string{headMetrics, workerMetrics} {
		if !waitMetric(m, `sglprov_switch_pending_failed{recipe="two-nodes"} 1`, 10*time.Second) || !waitMetric(m, healthy, 30*time.Second) {
			b, _ := os.ReadFile(m)
			t.Errorf("%s: not serving what it served before with the change pending:\n%s", m, b)
		}
	}
	workerServer, _ := os.ReadFile(filepath.Join(dir, "b", "logs", "sglang-group.service.log"))
	if last := strings.LastIndex(string(workerServer), "fake-sglang: rank 1 joined the group"); last < 0 {
		t.Errorf("the worker's server never joined:\n%s", workerServer)
	}

	// Day two on both nodes at the same time (a fleet rollout applies one recipe
	// everywhere at once): the worker's switch waits until the head runs the change (its
	// server starts again at the rendezvous, or serves the change) before its server
	// restarts, so that the head's candidate and the worker's meet. A bad change fails the
	// head's gate, which restores; the worker's candidate then finds the head running the
	// old launch (or failing) and restores too: both serve the old launch. A good change
	// ends with both serving it.
	t.Run("same time", func(t *testing.T) {
		sameTime := func(change, ends string) {
			t.Helper()
			offsets := []int{len(readFile(headLog)), len(readFile(workerLog))}
			text := strings.Replace(strings.Replace(recipeText, "FAKE", fake, 1), "--attention-backend, triton]", change, 1)
			if err := os.WriteFile(recipe, []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			found := make([]bool, 2)
			for i, l := range []string{headLog, workerLog} {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if err := daemons[i].Process.Signal(syscall.SIGHUP); err != nil {
						return
					}
					found[i] = waitLogAfter(l, offsets[i], ends, 150*time.Second)
				}()
			}
			wg.Wait()
			for i, l := range []string{headLog, workerLog} {
				if !found[i] {
					t.Fatalf("%s: no %q after the change %s:\n%s", l, ends, change, readFile(l)[offsets[i]:])
				}
			}
		}
		serving := func(want string) {
			t.Helper()
			for _, m := range []string{headMetrics, workerMetrics} {
				if !waitMetric(m, healthy, 60*time.Second) {
					b, _ := os.ReadFile(m)
					t.Errorf("%s: not healthy:\n%s", m, b)
				}
			}
			for _, ns := range []string{nsA, nsB} {
				cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", serverPID(t, ns)))
				if got := strings.ReplaceAll(string(cmdline), "\x00", " "); !strings.Contains(got, want) {
					t.Errorf("%s serves %q, want %q", ns, got, want)
				}
			}
		}
		sameTime("--attention-backend, fa3, --fake-broken-if, attention-backend=fa3]", restored)
		serving("--attention-backend triton ")
		sameTime("--attention-backend, torch_native]", "apply done")
		serving("--attention-backend torch_native ")
		if b := readFile(workerLog); !strings.Contains(b, "group: the head's server starts again and waits at the rendezvous") &&
			!strings.Contains(b, "group: the head runs this node's launch") {
			t.Errorf("the worker did not wait for the head before its server restarted:\n%s", b)
		}

		// A change applied on the head only (its daemon re-reads the recipe; the worker's
		// does not): the head's switch breaks the group, the worker's ladder brings its
		// server back with the old line into the head's new one, and the group serves on
		// two launch lines until the worker compares its line with the head's: it applies
		// its recipe again (whose file has the change) and follows the head. Both end on
		// the head's line.
		offsets := []int{len(readFile(headLog)), len(readFile(workerLog))}
		text := strings.Replace(strings.Replace(recipeText, "FAKE", fake, 1), "--attention-backend, triton]", "--attention-backend, flashinfer]", 1)
		if err := os.WriteFile(recipe, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := daemons[0].Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		if !waitLogAfter(headLog, offsets[0], "apply done", 150*time.Second) {
			t.Fatalf("head only: the head did not apply its change:\n%s", readFile(headLog)[offsets[0]:])
		}
		if !waitLogAfter(workerLog, offsets[1], "group: this worker runs the head's launch line", 240*time.Second) {
			t.Fatalf("head only: the worker did not follow the head's launch:\n%s", readFile(workerLog)[offsets[1]:])
		}
		if b := readFile(workerLog)[offsets[1]:]; !strings.Contains(b, "the head runs another launch line than this worker") {
			t.Errorf("head only: the worker did not say why it applied again:\n%s", b)
		}
		serving("--attention-backend flashinfer ")

		// A change applied on the worker only is refused before its candidate starts: the
		// worker's old server serves inside the group while its switch finds the head
		// running another launch, and is left as it was. The candidate never joins the
		// head's group and the group has no outage: the worker's server is the same
		// process, the head's server saw no rank leave or join, and no canary failed.
		offsets = []int{len(readFile(headLog)), len(readFile(workerLog))}
		headServerLog := filepath.Join(dir, "a", "logs", "sglang-group.service.log")
		headServerOffset, workerPID := len(readFile(headServerLog)), serverPID(t, nsB)
		text = strings.Replace(strings.Replace(recipeText, "FAKE", fake, 1), "--attention-backend, triton]", "--attention-backend, torch_native]", 1)
		if err := os.WriteFile(recipe, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := daemons[1].Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		if !waitLogAfter(workerLog, offsets[1], refused, 150*time.Second) {
			t.Fatalf("worker only: the worker's change was not refused before its candidate started:\n%s", readFile(workerLog)[offsets[1]:])
		}
		if b := readFile(workerLog)[offsets[1]:]; !strings.Contains(b, "does not run this launch: apply the change on the head (rank 0) first") ||
			!strings.Contains(b, "--attention-backend: the head runs flashinfer, this node torch_native") ||
			strings.Contains(b, "switch: candidate started") || strings.Contains(b, restored) {
			t.Errorf("worker only: the refusal does not name the head's other line, or a candidate started:\n%s", b)
		}
		if !calm([]string{headLog, workerLog}, 5*time.Second, 120*time.Second) {
			t.Fatalf("the group did not settle after the worker's change")
		}
		for _, ns := range []string{nsA, nsB} {
			cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", serverPID(t, ns)))
			if got := strings.ReplaceAll(string(cmdline), "\x00", " "); !strings.Contains(got, "--attention-backend flashinfer ") {
				t.Errorf("worker only: %s serves %q, want the head's line", ns, got)
			}
		}
		if !waitMetric(headMetrics, healthy, 10*time.Second) {
			t.Errorf("worker only: the head is not healthy")
		}
		if pid := serverPID(t, nsB); pid != workerPID {
			t.Errorf("worker only: the worker's server was restarted (pid %d, was %d)", pid, workerPID)
		}
		if b := readFile(headServerLog)[headServerOffset:]; strings.Contains(b, "rank 1 joined") || strings.Contains(b, "rank 1 left") ||
			strings.Contains(b, "rank 1 knocks") {
			t.Errorf("worker only: the worker's candidate reached the head's group:\n%s", b)
		}
		for i, l := range []string{headLog, workerLog} {
			if b := readFile(l)[offsets[i]:]; strings.Contains(b, "canary failed") {
				t.Errorf("worker only: %s: the group had an outage:\n%s", l, b)
			}
		}
	})
}

// calm waits, at most within, until none of the logs has grown for quiet (a daemon whose
// canaries pass logs nothing).
func calm(paths []string, quiet, within time.Duration) bool {
	size := func() int {
		n := 0
		for _, p := range paths {
			n += len(readFile(p))
		}
		return n
	}
	last, since := size(), time.Now()
	for end := time.Now().Add(within); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		if n := size(); n != last {
			last, since = n, time.Now()
		} else if time.Since(since) >= quiet {
			return true
		}
	}
	return false
}

// readFile returns path's text ("" when it cannot be read).
func readFile(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}

// waitLogAfter waits until path holds want after its first offset bytes.
func waitLogAfter(path string, offset int, want string, within time.Duration) bool {
	for end := time.Now().Add(within); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		if b := readFile(path); len(b) > offset && strings.Contains(b[offset:], want) {
			return true
		}
	}
	return false
}

// serverPID returns the pid of the fake server running in namespace ns.
func serverPID(t *testing.T, ns string) int {
	t.Helper()
	for _, f := range strings.Fields(run(t, "ip", "netns", "pids", ns)) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			continue
		}
		if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); strings.TrimSpace(string(comm)) == "fake-sglang" {
			return pid
		}
	}
	t.Fatalf("no fake-sglang runs in %s", ns)
	return 0
}
