package gpu

import (
	"fmt"
	"strings"
	"testing"
	"text/template"

	"github.com/google/go-cmp/cmp"
)

func factsWithCCs(ccs ...string) *Facts {
	f := &Facts{}
	for i, cc := range ccs {
		f.GPUs = append(f.GPUs, Device{Index: i, ComputeCapability: cc})
	}
	return f
}

func TestArchList(t *testing.T) {
	tests := []struct {
		name string
		ccs  []string
		want string
	}{
		{"Turing", []string{"7.5"}, "7.5"},
		{"A100", []string{"8.0"}, "8.0"},
		{"Ada", []string{"8.9"}, "8.9"},
		{"Hopper", []string{"9.0"}, "9.0a"},
		{"B200", []string{"10.0"}, "10.0a"},
		{"B300", []string{"10.3"}, "10.3a"},
		{"Thor", []string{"11.0"}, "11.0a"},
		{"RTX PRO 6000 x2", []string{"12.0", "12.0"}, "12.0a"},
		{"GB10", []string{"12.1"}, "12.1a"},
		{"mixed, lowest first, once each", []string{"12.0", "8.9", "12.0", "9.0"}, "8.9;9.0a;12.0a"},
		{"no GPU", nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := factsWithCCs(tt.ccs...).ArchList(); got != tt.want {
				t.Errorf("ArchList = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestFactsHelpers(t *testing.T) {
	tests := []struct {
		name        string
		facts       *Facts
		cuda        string
		cc          string
		minMem      string
		homogeneous bool
	}{
		{"rtx-pro-6000-x8", loadFixture(t, "rtx-pro-6000-x8.json"), "13.0", "12.0", "95.59", true},
		{"h100-x8", loadFixture(t, "h100-x8.json"), "12.4", "9.0", "79.65", true},
		{"mixed", loadFixture(t, "mixed.json"), "13.0", "8.9", "47.99", false},
		{"cuda 12.10", &Facts{CUDADriverVersion: 12100}, "12.10", "", "0.00", true},
		{"unknown cuda", &Facts{}, "", "", "0.00", true},
		{"nil", nil, "", "", "0.00", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.facts.CUDAVersion(); got != tt.cuda {
				t.Errorf("CUDAVersion = %q, want %q", got, tt.cuda)
			}
			if got := tt.facts.ComputeCapability(); got != tt.cc {
				t.Errorf("ComputeCapability = %q, want %q", got, tt.cc)
			}
			if got := fmt.Sprintf("%.2f", tt.facts.MinMemoryGiB()); got != tt.minMem {
				t.Errorf("MinMemoryGiB = %s, want %s", got, tt.minMem)
			}
			if got := tt.facts.Homogeneous(); got != tt.homogeneous {
				t.Errorf("Homogeneous = %v, want %v", got, tt.homogeneous)
			}
		})
	}
}

func TestTemplateData(t *testing.T) {
	const tmpl = "count={{.gpu.count}} cc={{.gpu.cc}} arch={{.gpu.arch_list}} mem={{.gpu.memory_gib}} " +
		"name={{.gpu.name}} driver={{.driver.version}} cuda={{.cuda.version}}"
	tests := []struct {
		name  string
		facts *Facts
		want  string
	}{
		{"rtx-pro-6000-x8", loadFixture(t, "rtx-pro-6000-x8.json"),
			"count=8 cc=12.0 arch=12.0a mem=95 name=NVIDIA RTX PRO 6000 Blackwell Server Edition driver=580.95.05 cuda=13.0"},
		{"h200-x1", loadFixture(t, "h200-x1.json"),
			"count=1 cc=9.0 arch=9.0a mem=140 name=NVIDIA H200 driver=570.172.08 cuda=12.8"},
		{"mixed takes the lowest", loadFixture(t, "mixed.json"),
			"count=8 cc=8.9 arch=8.9;12.0a mem=47 name=NVIDIA RTX PRO 6000 Blackwell Server Edition driver=580.95.05 cuda=13.0"},
		{"no GPU", &Facts{DriverVersion: "580.95.05", CUDADriverVersion: 13000},
			"count=0 cc= arch= mem=0 name= driver=580.95.05 cuda=13.0"},
		{"nil", nil, "count=0 cc= arch= mem=0 name= driver= cuda="},
	}
	tp := template.Must(template.New("t").Option("missingkey=error").Parse(tmpl))
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var sb strings.Builder
			if err := tp.Execute(&sb, tt.facts.TemplateData()); err != nil {
				t.Fatalf("Execute: %v", err)
			}
			if diff := cmp.Diff(tt.want, sb.String()); diff != "" {
				t.Errorf("rendered (-want +got):\n%s", diff)
			}
		})
	}
}

func TestTemplateDataTypes(t *testing.T) {
	data := loadFixture(t, "rtx-pro-6000-x8.json").TemplateData()
	g := data["gpu"].(map[string]any)
	if _, ok := g["count"].(int); !ok {
		t.Errorf("gpu.count is %T, want int", g["count"])
	}
	if _, ok := g["memory_gib"].(int); !ok {
		t.Errorf("gpu.memory_gib is %T, want int", g["memory_gib"])
	}
	for _, k := range []string{"cc", "arch_list", "name"} {
		if _, ok := g[k].(string); !ok {
			t.Errorf("gpu.%s is %T, want string", k, g[k])
		}
	}
}
