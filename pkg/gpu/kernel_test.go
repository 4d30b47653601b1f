package gpu

import (
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// fakeSysfs lays out a PCI tree as the kernel shows it: a root port and a switch port
// above each GPU, /sys/bus/pci/devices links, IOMMU groups, and the bridges' config space
// with an ACS capability whose control register is acsCtl (0: no ACS capability at all).
func fakeSysfs(t *testing.T, acsCtl uint16, groupType string, gpus ...string) string {
	t.Helper()
	root := t.TempDir()
	mk := func(p string) string {
		if err := os.MkdirAll(filepath.Join(root, p), 0o755); err != nil {
			t.Fatal(err)
		}
		return filepath.Join(root, p)
	}
	config := func(dir string, ctl uint16) {
		cfg := make([]byte, 4096)
		if ctl != 0 {
			// A first extended capability (AER, 0x0001) pointing at ACS at 0x148.
			binary.LittleEndian.PutUint32(cfg[0x100:], 0x0001|1<<16|0x148<<20)
			binary.LittleEndian.PutUint32(cfg[0x148:], acsCapID|1<<16)
			binary.LittleEndian.PutUint16(cfg[0x148+4:], 0x5f)
			binary.LittleEndian.PutUint16(cfg[0x148+6:], ctl)
		}
		if err := os.WriteFile(filepath.Join(dir, "config"), cfg, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	mk("sys/bus/pci/devices")
	for i, g := range gpus {
		port := "0000:00:0" + string(rune('1'+i)) + ".0"
		bridge := mk("sys/devices/pci0000:00/" + port)
		config(bridge, acsCtl)
		dev := mk("sys/devices/pci0000:00/" + port + "/" + g)
		config(dev, 0)
		if err := os.Symlink(dev, filepath.Join(root, "sys/bus/pci/devices", g)); err != nil {
			t.Fatal(err)
		}
		if groupType != "" {
			grp := mk("sys/kernel/iommu_groups/" + string(rune('3'+i)))
			if err := os.WriteFile(filepath.Join(grp, "type"), []byte(groupType+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(grp, filepath.Join(dev, "iommu_group")); err != nil {
				t.Fatal(err)
			}
		}
	}
	mk("proc")
	if err := os.WriteFile(filepath.Join(root, "proc/cmdline"), []byte("BOOT_IMAGE=/vmlinuz root=/dev/sda1 intel_iommu=on quiet\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	mk("dev")
	kmsg := "6,100,5000,-;nvidia: module license taints kernel.\n" +
		"3,101,6000,-;NVRM: Xid (PCI:0000:18:00): 79, pid=1234, name=python3, GPU has fallen off the bus.\n" +
		"4,102,7000,-;NVRM: Xid (PCI:0000:2A:00): 13, pid=99, Graphics Exception\n"
	if err := os.WriteFile(filepath.Join(root, "dev/kmsg"), []byte(kmsg), 0o644); err != nil {
		t.Fatal(err)
	}
	return root
}

func TestKernelFactsACSAndIOMMU(t *testing.T) {
	root := fakeSysfs(t, acsSrcValid|acsReqRedir|acsCmpltRedir|acsUpstream, "DMA-FQ", "0000:18:00.0", "0000:2a:00.0")
	gpus := []Device{{Index: 0, PCIBusID: "00000000:18:00.0"}, {Index: 1, PCIBusID: "00000000:2A:00.0"}}
	kf := (&KernelReader{Root: root}).Read(context.Background(), gpus)
	if kf.IOMMU != "translated" {
		t.Errorf("IOMMU = %q, want translated", kf.IOMMU)
	}
	if diff := cmp.Diff([]string{"intel_iommu=on"}, kf.Cmdline); diff != "" {
		t.Errorf("cmdline (-want +got):\n%s", diff)
	}
	want := []ACSBridge{
		{Bridge: "0000:00:01.0", GPUs: []int{0}, Control: "SrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-"},
		{Bridge: "0000:00:02.0", GPUs: []int{1}, Control: "SrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-"},
	}
	if diff := cmp.Diff(want, kf.ACS); diff != "" {
		t.Errorf("ACS (-want +got):\n%s", diff)
	}
	if kf.ACSUnread != "" {
		t.Errorf("ACSUnread = %q", kf.ACSUnread)
	}
	wantXid := []XidEvent{
		{PCI: "0000:18:00", Code: 79, Text: "Xid (PCI:0000:18:00): 79, pid=1234, name=python3, GPU has fallen off the bus."},
		{PCI: "0000:2a:00", Code: 13, Text: "Xid (PCI:0000:2A:00): 13, pid=99, Graphics Exception"},
	}
	if diff := cmp.Diff(wantXid, kf.Xid); diff != "" {
		t.Errorf("Xid (-want +got):\n%s", diff)
	}
}

func TestKernelFactsClean(t *testing.T) {
	// ACS present but not redirecting (SrcValid alone), identity-mapped IOMMU groups.
	root := fakeSysfs(t, acsSrcValid, "identity", "0000:18:00.0")
	kf := (&KernelReader{Root: root}).Read(context.Background(), []Device{{Index: 0, PCIBusID: "00000000:18:00.0"}})
	if kf.IOMMU != "passthrough" || len(kf.ACS) != 0 {
		t.Errorf("IOMMU %q, ACS %v: want passthrough, none", kf.IOMMU, kf.ACS)
	}
	root = fakeSysfs(t, 0, "", "0000:18:00.0")
	kf = (&KernelReader{Root: root}).Read(context.Background(), []Device{{Index: 0, PCIBusID: "00000000:18:00.0"}})
	if kf.IOMMU != "off" || len(kf.ACS) != 0 {
		t.Errorf("IOMMU %q, ACS %v: want off, none", kf.IOMMU, kf.ACS)
	}
}

// A config space read as a user is 64 bytes: ACS is then unknown, and says why.
func TestKernelFactsACSUnreadable(t *testing.T) {
	root := fakeSysfs(t, acsReqRedir, "", "0000:18:00.0")
	bridge := filepath.Join(root, "sys/devices/pci0000:00/0000:00:01.0/config")
	if err := os.WriteFile(bridge, make([]byte, 64), 0o644); err != nil {
		t.Fatal(err)
	}
	kf := (&KernelReader{Root: root}).Read(context.Background(), []Device{{Index: 0, PCIBusID: "00000000:18:00.0"}})
	if !strings.Contains(kf.ACSUnread, "0000:00:01.0: config space cut short") {
		t.Errorf("ACSUnread = %q", kf.ACSUnread)
	}
}

// A FIFO in place of a bridge's config space, the kernel command line or an IOMMU
// group's type (a made-up or tampered tree) is refused without waiting for a writer:
// the read ends at once, and what it could not read is said.
func TestKernelFactsFIFONotWaitedOn(t *testing.T) {
	root := fakeSysfs(t, acsReqRedir, "DMA", "0000:18:00.0")
	for _, p := range []string{"sys/devices/pci0000:00/0000:00:01.0/config", "proc/cmdline", "sys/kernel/iommu_groups/3/type"} {
		path := filepath.Join(root, p)
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Mkfifo(path, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan *KernelFacts, 1)
	go func() {
		done <- (&KernelReader{Root: root, Timeout: time.Minute}).Read(context.Background(), []Device{{Index: 0, PCIBusID: "00000000:18:00.0"}})
	}()
	select {
	case kf := <-done:
		if !strings.Contains(kf.ACSUnread, "0000:00:01.0") || !strings.Contains(kf.ACSUnread, "FIFO, not a regular file") {
			t.Errorf("ACSUnread = %q, want the FIFO named", kf.ACSUnread)
		}
		if kf.Cmdline != nil || kf.IOMMU != "translated" {
			t.Errorf("cmdline %q, IOMMU %q: want none read, and a group whose type cannot be read taken as translating", kf.Cmdline, kf.IOMMU)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the kernel reader waits on a FIFO")
	}
}

// The real /dev/kmsg, where there is one, is read to its end without waiting for the
// next message.
func TestKernelLogDoesNotBlock(t *testing.T) {
	if _, err := os.Stat("/dev/kmsg"); err != nil {
		t.Skip("no /dev/kmsg")
	}
	k := &KernelReader{}
	_, unread := k.xid(context.Background())
	if strings.Contains(unread, "timed out") {
		t.Errorf("reading /dev/kmsg: %s", unread)
	}
}
