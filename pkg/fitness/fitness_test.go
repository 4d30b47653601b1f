package fitness

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/sglprov/sglprov/pkg/gpu"
	"github.com/sglprov/sglprov/pkg/recipe"
)

func fixture(t *testing.T, name string) *gpu.Facts {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	f, err := gpu.LoadFixture(filepath.Join(filepath.Dir(file), "..", "..", "testdata", "gpu", name))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// fakeProcs describes processes as /proc would.
type fakeProcs map[uint32][2]string

func (p fakeProcs) Describe(pid uint32) (string, string) { v := p[pid]; return v[0], v[1] }

func messages(ps []Problem) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.Check+": "+p.Message)
	}
	return out
}

func TestFitHostHasNoProblem(t *testing.T) {
	res := Check(fixture(t, "rtx-pro-6000-x8-fit.json"), recipe.GPURequirements{P2P: recipe.PolicyRefuse}, Options{Procs: fakeProcs{}})
	if len(res.Refusals)+len(res.Warnings)+len(res.Unchecked) != 0 {
		t.Errorf("a fit host: %+v", res)
	}
}

// An old fixture (no health facts) is not refused: what could not be checked is said.
func TestOldFixtureIsUnchecked(t *testing.T) {
	res := Check(fixture(t, "rtx-pro-6000-x8.json"), recipe.GPURequirements{}, Options{})
	if len(res.Refusals) != 0 || len(res.Unchecked) != 3 {
		t.Errorf("old fixture: %+v", res)
	}
	if !strings.Contains(res.Unchecked[0], "do not have it") {
		t.Errorf("unchecked = %q", res.Unchecked)
	}
}

// Every problem of the unfit host at once, each with its fix.
func TestUnfitHostAllAtOnce(t *testing.T) {
	f := fixture(t, "rtx-pro-6000-x8-unfit.json")
	req := recipe.GPURequirements{PCIeLink: recipe.PolicyRefuse, P2P: recipe.PolicyRefuse}
	res := Check(f, req, Options{Unit: "sglang-qwen.service", Procs: fakeProcs{
		4000000: {"python3 -m sglang.launch_server --model-path /models/old", "sglang-old.service"},
	}})
	got := messages(res.Refusals)
	want := []string{
		"busy: GPU 0 (NVIDIA RTX PRO 6000 Blackwell Server Edition) is in use by pid 4000000 (python3 -m sglang.launch_server --model-path /models/old), unit sglang-old.service, holding 80.0 GiB",
		"pcie_link: GPU 3 (NVIDIA RTX PRO 6000 Blackwell Server Edition) has its PCIe link at x8; the GPU and its slot can do x16",
		"ecc: GPU 5 (NVIDIA RTX PRO 6000 Blackwell Server Edition) has memory rows waiting to be remapped (the bad rows are in use until a reset)",
	}
	if len(got) != 4 {
		t.Fatalf("refusals = %d, want 4:\n%s", len(got), strings.Join(got, "\n"))
	}
	if diff := cmp.Diff(want, got[:3]); diff != "" {
		t.Errorf("refusals (-want +got):\n%s", diff)
	}
	p2p := got[3]
	for _, s := range []string{"p2p: peer-to-peer between the GPUs is blocked", "GPU 0 <-> GPU 4 (SYS): P2P read chipset_not_supported",
		"PCIe bridge 0000:16:02.0 above GPU [0 1] redirects peer traffic", "the IOMMU translates"} {
		if !strings.Contains(p2p, s) {
			t.Errorf("P2P refusal lacks %q:\n%s", s, p2p)
		}
	}
	for _, p := range res.Refusals {
		if p.Fix == "" {
			t.Errorf("%s: no fix", p.Message)
		}
	}
	if !strings.Contains(res.Refusals[0].Fix, "systemctl disable --now sglang-old.service") {
		t.Errorf("busy fix = %q", res.Refusals[0].Fix)
	}
	if !strings.Contains(res.Refusals[2].Fix, "nvidia-smi -r -i 5") {
		t.Errorf("remap fix = %q", res.Refusals[2].Fix)
	}
}

// Defaults: a link at x8 warns, P2P blocked is left to the NCCL settings, the rest refuse.
func TestDefaultPolicies(t *testing.T) {
	f := fixture(t, "rtx-pro-6000-x8-unfit.json")
	res := Check(f, recipe.GPURequirements{}, Options{Procs: fakeProcs{}})
	if diff := cmp.Diff([]string{"busy", "ecc"}, checks(res.Refusals)); diff != "" {
		t.Errorf("refusals (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"pcie_link"}, checks(res.Warnings)); diff != "" {
		t.Errorf("warnings (-want +got):\n%s", diff)
	}
	res = Check(f, recipe.GPURequirements{Busy: recipe.PolicyIgnore, ECC: recipe.PolicyWarn, PCIeLink: recipe.PolicyIgnore}, Options{Procs: fakeProcs{}})
	if len(res.Refusals) != 0 || len(res.Warnings) != 1 {
		t.Errorf("relaxed: %+v", res)
	}
}

func checks(ps []Problem) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.Check)
	}
	return out
}

// The recipe's own unit on its GPUs (a re-run of a serving node) is not "another server";
// only the GPUs the service uses count.
func TestBusyOwnUnitAndSubset(t *testing.T) {
	f := fixture(t, "rtx-pro-6000-x8-unfit.json")
	procs := fakeProcs{4000000: {"python3 -m sglang.launch_server", "sglang-qwen.service"}}
	res := Check(f, recipe.GPURequirements{ECC: recipe.PolicyIgnore}, Options{Unit: "sglang-qwen.service", Procs: procs})
	if len(res.Refusals) != 0 {
		t.Errorf("own unit refused: %v", messages(res.Refusals))
	}
	// A model switch: the server of the recipe this one replaces holds the GPUs until the
	// switch stops it, after the preflight.
	res = Check(f, recipe.GPURequirements{ECC: recipe.PolicyIgnore}, Options{Unit: "sglang-b.service", Replaced: []string{"sglang-qwen.service"}, Procs: procs})
	if len(res.Refusals) != 0 {
		t.Errorf("the replaced recipe's unit refused: %v", messages(res.Refusals))
	}
	res = Check(f, recipe.GPURequirements{ECC: recipe.PolicyIgnore}, Options{Unit: "sglang-b.service", Procs: procs})
	if len(res.Refusals) != 1 || !strings.Contains(res.Refusals[0].Fix, "replaces") {
		t.Errorf("another recipe's unit, not replaced: %v", res.Refusals)
	}
	res = Check(f, recipe.GPURequirements{ECC: recipe.PolicyIgnore}, Options{Unit: "other.service", Procs: procs, GPUs: []int{1, 2}})
	if len(res.Refusals) != 0 {
		t.Errorf("GPUs 1-2 only: %v", messages(res.Refusals))
	}
	// GPUs 2 and 3 share a switch and NVML says P2P works, but the IOMMU translates DMA.
	if got := P2PBlocked(f, []int{2, 3}); got != "peer-to-peer between the GPUs is blocked: the IOMMU translates the GPUs' DMA (not passthrough)" {
		t.Errorf("GPUs 2-3: %s", got)
	}
	if got := P2PBlocked(fixture(t, "rtx-pro-6000-x8-fit.json"), []int{0, 1, 2, 3, 4, 5, 6, 7}); got != "" {
		t.Errorf("fit host: %s", got)
	}
}

func TestMIGXidClocks(t *testing.T) {
	f := fixture(t, "rtx-pro-6000-x8-fit.json")
	yes := true
	hw := uint64(gpu.ClocksHWSlowdown | 0x1)
	f.GPUs[1].Health.MIG = &yes
	f.GPUs[2].Health.ClocksEventReasons = &hw
	f.Kernel.Xid = []gpu.XidEvent{
		{PCI: "0000:3a:00", Code: 79, Text: "Xid (PCI:0000:3a:00): 79, GPU has fallen off the bus."},
		{PCI: "0000:3a:00", Code: 79, Text: "Xid (PCI:0000:3a:00): 79, again"},
		{PCI: "0000:3a:00", Code: 13, Text: "Xid (PCI:0000:3a:00): 13, Graphics Exception"},
	}
	res := Check(f, recipe.GPURequirements{Clocks: recipe.PolicyRefuse}, Options{Procs: fakeProcs{}})
	got := messages(res.Refusals)
	want := []string{
		"mig: GPU 1 (NVIDIA RTX PRO 6000 Blackwell Server Edition) has MIG on; the service needs the whole GPU",
		"clocks: GPU 2 (NVIDIA RTX PRO 6000 Blackwell Server Edition) has its clocks held down: hw_slowdown",
		"xid: GPU 2 (NVIDIA RTX PRO 6000 Blackwell Server Edition) logged Xid 79 2 time(s) since boot: Xid (PCI:0000:3a:00): 79, again",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("refusals (-want +got):\n%s", diff)
	}
	if res := Check(f, recipe.GPURequirements{MIG: recipe.PolicyAllow, Xid: recipe.PolicyIgnore}, Options{Procs: fakeProcs{}}); len(res.Refusals) != 0 {
		t.Errorf("mig allowed, xid ignored: %v", messages(res.Refusals))
	}
}

func TestUnitOfCgroup(t *testing.T) {
	for text, want := range map[string]string{
		"0::/system.slice/sglang-old.service\n":                                     "sglang-old.service",
		"0::/user.slice/user-1000.slice/session-3.scope\n":                          "session-3.scope",
		"12:pids:/system.slice/a.service\n1:name=systemd:/system.slice/a.service\n": "a.service",
		"0::/\n": "",
		// A user manager's unit named as the recipe's is not the recipe's system unit.
		"0::/user.slice/user-1000.slice/user@1000.service/app.slice/sglang-old.service\n": "user@1000.service",
	} {
		if got := UnitOfCgroup(text); got != want {
			t.Errorf("UnitOfCgroup(%q) = %q, want %q", text, got, want)
		}
	}
}

// This process, read through the real /proc: its command line and its cgroup's unit.
func TestProcFSDescribesItself(t *testing.T) {
	cmd, _ := ProcFS{}.Describe(uint32(os.Getpid()))
	if !strings.Contains(cmd, filepath.Base(os.Args[0])) {
		t.Errorf("cmdline = %q, want it to name %s", cmd, os.Args[0])
	}
	if cmd, unit := (ProcFS{}).Describe(4000000); cmd != "" || unit != "" {
		t.Errorf("a pid that does not exist: %q %q", cmd, unit)
	}
}

// A FIFO in place of /proc/PID/cmdline or cgroup (a made-up tree) is refused without
// waiting for a writer: the process is described as unknown, at once.
func TestProcFSFIFONotWaitedOn(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "proc", "4242")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"cmdline", "cgroup"} {
		if err := syscall.Mkfifo(filepath.Join(dir, name), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan [2]string, 1)
	go func() {
		cmd, unit := ProcFS{Root: root}.Describe(4242)
		done <- [2]string{cmd, unit}
	}()
	select {
	case got := <-done:
		if got != [2]string{"", ""} {
			t.Errorf("Describe = %q", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Describe waits on a FIFO")
	}
}
