// The one CUDA kernel: writes the architecture it was compiled for (__CUDA_ARCH__,
// 900 for sm_90a, 1200 for sm_120a). A library built without the device's architecture
// fails to launch it ("no kernel image is available for execution on the device").
#include <cuda_runtime.h>

__global__ void arch_kernel(int* out) {
#ifdef __CUDA_ARCH__
  *out = __CUDA_ARCH__;
#endif
}

cudaError_t launch_arch_kernel(int* out, cudaStream_t stream) {
  arch_kernel<<<1, 1, 0, stream>>>(out);
  return cudaGetLastError();
}
