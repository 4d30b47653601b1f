package gpu

import (
	"strings"

	"github.com/sglprov/sglprov/pkg/versions"
)

// SGLKernelCMakeArgs returns the CMake defines that restrict an sgl-kernel build to the
// host's GPUs, space-separated for scikit-build-core's CMAKE_ARGS ("" with no GPUs):
//
//	RTX PRO 6000 (12.0)  -DENABLE_BELOW_SM90=OFF -DSGL_KERNEL_ENABLE_SM90A=OFF
//	                     -DSGL_KERNEL_ENABLE_SM100A=ON -DSGL_KERNEL_ENABLE_FA3=OFF
//	                     -DSGL_KERNEL_ENABLE_FP4=ON
//	H100/H200 (9.0)      -DENABLE_BELOW_SM90=OFF -DSGL_KERNEL_ENABLE_SM90A=ON
//	                     -DSGL_KERNEL_ENABLE_SM100A=OFF -DSGL_KERNEL_ENABLE_FA3=ON
//	                     -DSGL_KERNEL_ENABLE_FP4=OFF
//
// These are the switches sgl-kernel/CMakeLists.txt declares (see docs/sglang-commit.md):
// ENABLE_BELOW_SM90 adds sm_80/sm_89 (and FA3's sm_80/sm_86); SGL_KERNEL_ENABLE_SM90A
// marks a Hopper build; SGL_KERNEL_ENABLE_SM100A adds the Blackwell gencodes on toolkits
// older than 12.8; SGL_KERNEL_ENABLE_FA3 builds FlashAttention 3, a Hopper-only
// (sm_90a) library; SGL_KERNEL_ENABLE_FP4 defines ENABLE_NVFP4 (block-scaled FP4 MMA:
// compute capability 10 and up). Upstream forces FA3 and the Blackwell gencodes on with a
// new enough toolkit whatever the switches say; the series' host-arch patch makes them
// hold when TORCH_CUDA_ARCH_LIST is set, and drops every gencode whose target is not in
// that list.
func SGLKernelCMakeArgs(ccs []string) string {
	if len(ccs) == 0 {
		return ""
	}
	var below90, hopper, blackwell bool
	for _, cc := range ccs {
		switch {
		case versions.CompareVersions(cc, "9.0") < 0:
			below90 = true
		case versions.CompareVersions(cc, "10.0") < 0:
			hopper = true
		default:
			blackwell = true
		}
	}
	onOff := func(b bool) string {
		if b {
			return "ON"
		}
		return "OFF"
	}
	return strings.Join([]string{
		"-DENABLE_BELOW_SM90=" + onOff(below90),
		"-DSGL_KERNEL_ENABLE_SM90A=" + onOff(hopper),
		"-DSGL_KERNEL_ENABLE_SM100A=" + onOff(blackwell),
		"-DSGL_KERNEL_ENABLE_FA3=" + onOff(hopper),
		"-DSGL_KERNEL_ENABLE_FP4=" + onOff(blackwell),
	}, " ")
}

// SGLKernelCMakeArgs returns the sgl-kernel CMake defines for the host's GPUs (see the
// function of the same name).
func (f *Facts) SGLKernelCMakeArgs() string {
	return SGLKernelCMakeArgs(f.ComputeCapabilities())
}
