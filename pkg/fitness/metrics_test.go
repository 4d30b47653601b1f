package fitness

import (
	"bytes"
	"os/exec"
	"strings"
	"testing"

	"github.com/sglprov/sglprov/pkg/gpu"
)

func TestCountersAsDCGMExporterNamesThem(t *testing.T) {
	f := fixture(t, "rtx-pro-6000-x8-unfit.json")
	f.Kernel.Xid = []gpu.XidEvent{{PCI: "0000:18:00", Code: 79, Text: "Xid (PCI:0000:18:00): 79"}, {PCI: "0000:18:00", Code: 13, Text: "Xid 13"}}
	var buf bytes.Buffer
	if err := WriteCounters(&buf, Counters(f), map[string]string{"recipe": "qwen"}); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{
		"# TYPE DCGM_FI_DEV_PCIE_LINK_WIDTH gauge\n",
		`DCGM_FI_DEV_PCIE_LINK_WIDTH{UUID="GPU-`,
		`gpu="3",modelName="NVIDIA RTX PRO 6000 Blackwell Server Edition",pci_bus_id="00000000:`,
		`recipe="qwen"} 8` + "\n",
		`DCGM_FI_DEV_ROW_REMAP_PENDING{`,
		`DCGM_FI_DEV_XID_ERRORS{UUID="` + f.GPUs[0].UUID + `",gpu="0"`,
		`,xid="79"} 1`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("counters lack %q:\n%s", want, out)
		}
	}
	if strings.Count(out, "# TYPE DCGM_FI_DEV_PCIE_LINK_WIDTH") != 1 {
		t.Error("TYPE written more than once")
	}
	// The last Xid of GPU 0 is 13.
	if !strings.Contains(out, `gpu="0",modelName="NVIDIA RTX PRO 6000 Blackwell Server Edition",pci_bus_id="00000000:18:00.0",recipe="qwen"} 13`) {
		t.Errorf("GPU 0's last Xid is not 13:\n%s", out)
	}
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("no promtool (Debian package prometheus) to check the exposition format")
	}
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = &buf
	if b, err := cmd.CombinedOutput(); err != nil {
		// promtool lints names too (counters without _total): dcgm-exporter's names are
		// kept on purpose, so only a format error fails.
		if strings.Contains(string(b), "error while linting") || strings.Contains(string(b), "text format parsing error") {
			t.Errorf("promtool check metrics: %v\n%s", err, b)
		}
	}
}

func TestWorse(t *testing.T) {
	before := fixture(t, "rtx-pro-6000-x8-fit.json")
	now := fixture(t, "rtx-pro-6000-x8-fit.json")
	if w := Worse(before, now); len(w) != 0 {
		t.Errorf("nothing changed: %v", w)
	}
	now.GPUs[2].Health.ECC.VolatileUncorrected = 1
	now.Kernel.Xid = []gpu.XidEvent{{PCI: "0000:3a:00", Code: 13, Text: "Xid 13"}, {PCI: "0000:3a:00", Code: 79, Text: "Xid (PCI:0000:3a:00): 79, GPU has fallen off the bus."}}
	w := Worse(before, now)
	if len(w) != 2 || !strings.Contains(w[0], "GPU 2") || !strings.Contains(w[1], "Xid 79") {
		t.Errorf("Worse = %q", w)
	}
	// The same state read again is not worse again.
	if w := Worse(now, now); len(w) != 0 {
		t.Errorf("again: %v", w)
	}
}
