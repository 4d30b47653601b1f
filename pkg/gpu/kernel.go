package gpu

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sglprov/sglprov/pkg/safefile"
)

// KernelReader reads what the kernel says of the GPUs' surroundings: the IOMMU mode, PCIe
// ACS on the bridges above the GPUs (from their PCI config space in sysfs) and the Xid
// lines of the kernel log. It only reads.
type KernelReader struct {
	// Root is prefixed to every path it reads ("" for "/"): tests point it at a made-up tree.
	Root string
	// Kmsg is the kernel log device, /dev/kmsg when empty (under Root).
	Kmsg string
	// MaxLogBytes bounds what is read of the kernel log, 16 MiB when 0.
	MaxLogBytes int64
	// Timeout bounds the whole read, 5 s when 0.
	Timeout time.Duration
}

func (k *KernelReader) path(p string) string {
	if k.Root == "" {
		return p
	}
	return filepath.Join(k.Root, p)
}

// SysfsPCI turns an NVML bus id ("00000000:18:00.0") into the sysfs address
// ("0000:18:00.0"), lower case.
func SysfsPCI(bus string) string {
	bus = strings.ToLower(strings.TrimSpace(bus))
	dom, rest, ok := strings.Cut(bus, ":")
	if !ok {
		return bus
	}
	if len(dom) > 4 {
		dom = dom[len(dom)-4:]
	}
	return dom + ":" + rest
}

// Read returns the kernel facts for gpus. What cannot be read is said in the facts
// (ACSUnread, XidUnread, IOMMU "unknown"), never an error.
func (k *KernelReader) Read(ctx context.Context, gpus []Device) *KernelFacts {
	timeout := k.Timeout
	if timeout == 0 {
		timeout = 5 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	kf := &KernelFacts{}
	kf.Cmdline = iommuCmdline(k.path("/proc/cmdline"))
	kf.IOMMU = k.iommuMode(gpus, kf.Cmdline)
	kf.ACS, kf.ACSUnread = k.acs(gpus)
	kf.Xid, kf.XidUnread = k.xid(ctx)
	return kf
}

// iommuCmdline returns the IOMMU switches of the kernel command line.
func iommuCmdline(path string) []string {
	b, err := safefile.ReadPrefix(path, 64<<10)
	if err != nil {
		return nil
	}
	var out []string
	for _, f := range strings.Fields(string(b)) {
		if strings.HasPrefix(f, "intel_iommu=") || strings.HasPrefix(f, "amd_iommu=") ||
			strings.HasPrefix(f, "iommu=") || strings.HasPrefix(f, "iommu.passthrough=") {
			out = append(out, f)
		}
	}
	return out
}

// iommuMode is "translated" when any GPU's IOMMU group does DMA translation, "passthrough"
// when their groups are identity-mapped, "off" when no GPU has an IOMMU group, and what the
// command line says (or "unknown") when sysfs shows no GPU.
func (k *KernelReader) iommuMode(gpus []Device, cmdline []string) string {
	mode := ""
	for _, d := range gpus {
		if d.PCIBusID == "" {
			continue
		}
		dev := k.path("/sys/bus/pci/devices/" + SysfsPCI(d.PCIBusID))
		if _, err := os.Stat(dev); err != nil {
			continue
		}
		grp, err := os.Readlink(filepath.Join(dev, "iommu_group"))
		if err != nil {
			if mode == "" {
				mode = "off"
			}
			continue
		}
		t, err := safefile.ReadPrefix(k.path("/sys/kernel/iommu_groups/"+filepath.Base(grp)+"/type"), 4096)
		typ := strings.TrimSpace(string(t))
		switch {
		case err == nil && typ == "identity":
			if mode == "" || mode == "off" {
				mode = "passthrough"
			}
		default:
			// DMA, DMA-FQ, or a kernel too old to say: translation.
			mode = "translated"
		}
	}
	if mode != "" {
		return mode
	}
	for _, c := range cmdline {
		switch c {
		case "iommu=pt", "iommu.passthrough=1":
			return "passthrough"
		case "intel_iommu=off", "amd_iommu=off", "iommu=off":
			return "off"
		}
	}
	return "unknown"
}

var bdfPattern = regexp.MustCompile(`^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$`)

// acs lists the bridges above the GPUs whose ACS control redirects peer-to-peer traffic.
func (k *KernelReader) acs(gpus []Device) ([]ACSBridge, string) {
	bridges := map[string][]int{}
	seen := 0
	for _, d := range gpus {
		if d.PCIBusID == "" {
			continue
		}
		real, err := filepath.EvalSymlinks(k.path("/sys/bus/pci/devices/" + SysfsPCI(d.PCIBusID)))
		if err != nil {
			continue
		}
		seen++
		parts := strings.Split(real, string(filepath.Separator))
		for i := 0; i < len(parts)-1; i++ {
			if bdfPattern.MatchString(parts[i]) {
				bdf := strings.Join(parts[:i+1], string(filepath.Separator))
				bridges[bdf] = append(bridges[bdf], d.Index)
			}
		}
	}
	if seen == 0 {
		return nil, "no GPU found in /sys/bus/pci/devices"
	}
	var out []ACSBridge
	var unread []string
	for path, idx := range bridges {
		ctl, found, err := readACSControl(filepath.Join(path, "config"))
		if err != nil {
			unread = append(unread, fmt.Sprintf("%s: %v", filepath.Base(path), err))
			continue
		}
		if !found || ctl&(acsReqRedir|acsCmpltRedir) == 0 {
			continue
		}
		sort.Ints(idx)
		out = append(out, ACSBridge{Bridge: filepath.Base(path), GPUs: idx, Control: acsControlText(ctl)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Bridge < out[j].Bridge })
	sort.Strings(unread)
	return out, strings.Join(unread, "; ")
}

// ACS control bits (PCIe base specification, ACS extended capability, offset 6).
const (
	acsSrcValid   = 1 << 0
	acsTransBlk   = 1 << 1
	acsReqRedir   = 1 << 2
	acsCmpltRedir = 1 << 3
	acsUpstream   = 1 << 4
	acsEgress     = 1 << 5
	acsDirectTr   = 1 << 6
	acsCapID      = 0x000d
)

func acsControlText(ctl uint16) string {
	names := []struct {
		bit  uint16
		name string
	}{{acsSrcValid, "SrcValid"}, {acsTransBlk, "TransBlk"}, {acsReqRedir, "ReqRedir"}, {acsCmpltRedir, "CmpltRedir"},
		{acsUpstream, "UpstreamFwd"}, {acsEgress, "EgressCtrl"}, {acsDirectTr, "DirectTrans"}}
	var parts []string
	for _, n := range names {
		sign := "-"
		if ctl&n.bit != 0 {
			sign = "+"
		}
		parts = append(parts, n.name+sign)
	}
	return strings.Join(parts, " ")
}

// readACSControl finds the ACS extended capability in a PCI config space file and returns
// its control register. A config space of 256 bytes or less (read as a user, or a
// conventional PCI device) has no extended capabilities: not found, with an error when it
// was cut short for want of root.
func readACSControl(path string) (uint16, bool, error) {
	cfg, err := safefile.ReadPrefix(path, 4096)
	if err != nil {
		return 0, false, err
	}
	if len(cfg) <= 256 {
		if len(cfg) < 256 {
			return 0, false, errors.New("config space cut short (reading it whole needs root)")
		}
		return 0, false, nil
	}
	off := 0x100
	for hops := 0; off >= 0x100 && off+8 <= len(cfg) && hops < 64; hops++ {
		hdr := binary.LittleEndian.Uint32(cfg[off:])
		if hdr == 0 || hdr == 0xffffffff {
			return 0, false, nil
		}
		if hdr&0xffff == acsCapID {
			return binary.LittleEndian.Uint16(cfg[off+6:]), true, nil
		}
		off = int(hdr>>20) & 0xffc
	}
	return 0, false, nil
}

var xidLine = regexp.MustCompile(`NVRM: Xid \(PCI:([0-9a-fA-F:.]+)\): (\d+)`)

// xid reads the Xid lines of the kernel log since boot from /dev/kmsg, without blocking
// and within the reader's byte and time bounds.
func (k *KernelReader) xid(ctx context.Context) ([]XidEvent, string) {
	path := k.Kmsg
	if path == "" {
		path = "/dev/kmsg"
	}
	path = k.path(path)
	// Raw reads of a non-blocking descriptor: through os.File the runtime's poller would
	// wait for the next kernel message instead of returning EAGAIN at the end of the log.
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Sprintf("opening the kernel log %s: %v", path, err)
	}
	defer syscall.Close(fd)
	limit := k.MaxLogBytes
	if limit <= 0 {
		limit = 16 << 20
	}
	var events []XidEvent
	buf := make([]byte, 8192) // one /dev/kmsg record per read, at most 8 KiB
	var pending []byte
	var total int64
	for total < limit {
		if ctx.Err() != nil {
			return events, "reading the kernel log: timed out"
		}
		n, err := syscall.Read(fd, buf)
		if n == 0 && err == nil {
			err = io.EOF
		}
		if n > 0 {
			total += int64(n)
			pending = append(pending, buf[:n]...)
			for {
				i := bytes.IndexByte(pending, '\n')
				if i < 0 {
					break
				}
				if e, ok := parseXid(string(pending[:i])); ok {
					events = append(events, e)
				}
				pending = pending[i+1:]
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, syscall.EAGAIN) {
				break
			}
			if errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.EINTR) {
				continue // records overwritten while reading: go on from the next one
			}
			return events, fmt.Sprintf("reading the kernel log: %v", err)
		}
	}
	if e, ok := parseXid(string(pending)); ok {
		events = append(events, e)
	}
	return events, ""
}

// parseXid reads one kernel log line ("4,1234,567,-;NVRM: Xid (PCI:0000:18:00): 79, pid=...")
// or a dmesg line.
func parseXid(line string) (XidEvent, bool) {
	m := xidLine.FindStringSubmatch(line)
	if m == nil {
		return XidEvent{}, false
	}
	code, err := strconv.Atoi(m[2])
	if err != nil {
		return XidEvent{}, false
	}
	text := line[strings.Index(line, "NVRM: ")+len("NVRM: "):]
	if len(text) > 300 {
		text = text[:300]
	}
	return XidEvent{PCI: strings.ToLower(m[1]), Code: code, Text: text}, true
}
