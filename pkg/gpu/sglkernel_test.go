package gpu

import (
	"strings"
	"testing"
	"text/template"
)

func TestSGLKernelCMakeArgs(t *testing.T) {
	tests := []struct {
		name string
		ccs  []string
		want string
	}{
		{"RTX PRO 6000: sm_120a only, no FA3, FP4 on", []string{"12.0", "12.0"},
			"-DENABLE_BELOW_SM90=OFF -DSGL_KERNEL_ENABLE_SM90A=OFF -DSGL_KERNEL_ENABLE_SM100A=ON -DSGL_KERNEL_ENABLE_FA3=OFF -DSGL_KERNEL_ENABLE_FP4=ON"},
		{"GB10 is SM12x too", []string{"12.1"},
			"-DENABLE_BELOW_SM90=OFF -DSGL_KERNEL_ENABLE_SM90A=OFF -DSGL_KERNEL_ENABLE_SM100A=ON -DSGL_KERNEL_ENABLE_FA3=OFF -DSGL_KERNEL_ENABLE_FP4=ON"},
		{"B200", []string{"10.0"},
			"-DENABLE_BELOW_SM90=OFF -DSGL_KERNEL_ENABLE_SM90A=OFF -DSGL_KERNEL_ENABLE_SM100A=ON -DSGL_KERNEL_ENABLE_FA3=OFF -DSGL_KERNEL_ENABLE_FP4=ON"},
		{"H100/H200: the Hopper set", []string{"9.0"},
			"-DENABLE_BELOW_SM90=OFF -DSGL_KERNEL_ENABLE_SM90A=ON -DSGL_KERNEL_ENABLE_SM100A=OFF -DSGL_KERNEL_ENABLE_FA3=ON -DSGL_KERNEL_ENABLE_FP4=OFF"},
		{"A100 keeps the below-SM90 gencodes", []string{"8.0"},
			"-DENABLE_BELOW_SM90=ON -DSGL_KERNEL_ENABLE_SM90A=OFF -DSGL_KERNEL_ENABLE_SM100A=OFF -DSGL_KERNEL_ENABLE_FA3=OFF -DSGL_KERNEL_ENABLE_FP4=OFF"},
		{"mixed Ada + Hopper + Blackwell: the union", []string{"8.9", "9.0", "12.0"},
			"-DENABLE_BELOW_SM90=ON -DSGL_KERNEL_ENABLE_SM90A=ON -DSGL_KERNEL_ENABLE_SM100A=ON -DSGL_KERNEL_ENABLE_FA3=ON -DSGL_KERNEL_ENABLE_FP4=ON"},
		{"no GPU: nothing", nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := factsWithCCs(tt.ccs...).SGLKernelCMakeArgs(); got != tt.want {
				t.Errorf("SGLKernelCMakeArgs(%v) =\n  %q\nwant\n  %q", tt.ccs, got, tt.want)
			}
		})
	}
}

// The fact reaches templates under the name recipes use, from the host's own GPUs.
func TestTemplateDataSGLKernelCMakeArgs(t *testing.T) {
	tp := template.Must(template.New("t").Option("missingkey=error").Parse("{{ .gpu.sgl_kernel_cmake_args }}"))
	for fixture, want := range map[string]string{
		"rtx-pro-6000-x8.json": "-DSGL_KERNEL_ENABLE_FA3=OFF",
		"h100-x8.json":         "-DSGL_KERNEL_ENABLE_FA3=ON",
	} {
		var sb strings.Builder
		if err := tp.Execute(&sb, loadFixture(t, fixture).TemplateData()); err != nil {
			t.Fatalf("%s: %v", fixture, err)
		}
		if !strings.Contains(sb.String(), want) {
			t.Errorf("%s: rendered %q, want it to contain %q", fixture, sb.String(), want)
		}
	}
}
