package gpu

import (
	"fmt"
	"strconv"
	"strings"
)

// Subset returns the facts of the listed devices only (NVML indices such as "4", or UUIDs
// such as "GPU-..."), in index order, marked Selected. A device the host does not have, or
// one listed twice, is an error naming it and the host's devices.
func (f *Facts) Subset(devices []string) (*Facts, error) {
	if len(devices) == 0 {
		return f, nil
	}
	if f == nil {
		return nil, fmt.Errorf("requires.gpu.devices %s: no GPU facts", strings.Join(devices, ", "))
	}
	picked := map[int]bool{}
	for _, want := range devices {
		want = strings.TrimSpace(want)
		found := -1
		for i, d := range f.GPUs {
			if n, err := strconv.Atoi(want); err == nil && d.Index == n || strings.EqualFold(d.UUID, want) {
				found = i
			}
		}
		if found < 0 {
			return nil, fmt.Errorf("requires.gpu.devices: this host has no GPU %q (it has %s)", want, f.deviceList())
		}
		if picked[found] {
			return nil, fmt.Errorf("requires.gpu.devices: GPU %q is listed twice", want)
		}
		picked[found] = true
	}
	out := *f
	out.GPUs = nil
	for i, d := range f.GPUs {
		if picked[i] {
			out.GPUs = append(out.GPUs, d)
		}
	}
	out.Selected = true
	return &out, nil
}

func (f *Facts) deviceList() string {
	var ids []string
	for _, d := range f.GPUs {
		ids = append(ids, fmt.Sprintf("%d (%s)", d.Index, d.UUID))
	}
	if len(ids) == 0 {
		return "none"
	}
	return strings.Join(ids, ", ")
}

// CUDAVisibleDevices returns the value of CUDA_VISIBLE_DEVICES that shows a server only the
// selected GPUs: their UUIDs (stable whatever CUDA's device order), or their indices when a
// UUID is unknown (byIndex is then set, and CUDA_DEVICE_ORDER=PCI_BUS_ID makes CUDA's
// order NVML's). "" when the facts are not a selection.
func (f *Facts) CUDAVisibleDevices() (value string, byIndex bool) {
	if f == nil || !f.Selected {
		return "", false
	}
	var uuids, idx []string
	for _, d := range f.GPUs {
		if d.UUID == "" {
			byIndex = true
		}
		uuids = append(uuids, d.UUID)
		idx = append(idx, strconv.Itoa(d.Index))
	}
	if byIndex {
		return strings.Join(idx, ","), true
	}
	return strings.Join(uuids, ","), false
}

// IDs returns each GPU's UUID, or "index N" when it has none: what recipes claim.
func (f *Facts) IDs() []string {
	if f == nil {
		return nil
	}
	var out []string
	for _, d := range f.GPUs {
		if d.UUID != "" {
			out = append(out, d.UUID)
		} else {
			out = append(out, "index "+strconv.Itoa(d.Index))
		}
	}
	return out
}
