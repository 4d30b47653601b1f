package gpu

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestFormatTable(t *testing.T) {
	mixed := loadFixture(t, "mixed.json")
	mixed.GPUs = mixed.GPUs[5:]
	mixed.Source = "nvml"
	tests := []struct {
		name  string
		facts *Facts
		want  string
	}{
		{"h200-x1", loadFixture(t, "h200-x1.json"), `
INDEX  NAME         CC   MEMORY (GiB)  UUID                                      PCI BUS ID
0      NVIDIA H200  9.0  140.4         GPU-099f27c2-138d-0442-7d0d-5c50dea9258a  00000000:19:00.0

Driver: 570.172.08
CUDA:   12.8
NVML:   12.570.172.08
Source: fixture:../../testdata/gpu/h200-x1.json
`},
		{"mixed, aligned", mixed, `
INDEX  NAME                                          CC    MEMORY (GiB)  UUID                                      PCI BUS ID
5      NVIDIA RTX PRO 6000 Blackwell Server Edition  12.0  95.5          GPU-` + mixed.GPUs[0].UUID[4:] + `  00000000:AB:00.0
6      NVIDIA RTX PRO 6000 Blackwell Server Edition  12.0  95.5          GPU-` + mixed.GPUs[1].UUID[4:] + `  00000000:BA:00.0
7      NVIDIA RTX 6000 Ada Generation                8.9   47.9          GPU-` + mixed.GPUs[2].UUID[4:] + `  00000000:DB:00.0

Driver: 580.95.05
CUDA:   13.0
NVML:   13.580.95.05
`},
		{"no GPU, unknown values", &Facts{GPUs: []Device{{Index: 0}}}, `
INDEX  NAME  CC  MEMORY (GiB)  UUID  PCI BUS ID
0      -     -   unknown       -     -

Driver: -
CUDA:   -
NVML:   -
`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var sb strings.Builder
			if err := FormatTable(&sb, tt.facts); err != nil {
				t.Fatalf("FormatTable: %v", err)
			}
			if diff := cmp.Diff(strings.TrimPrefix(tt.want, "\n"), sb.String()); diff != "" {
				t.Errorf("table (-want +got):\n%s", diff)
			}
		})
	}
}
