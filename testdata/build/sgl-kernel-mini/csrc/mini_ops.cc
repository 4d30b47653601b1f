// The torch extension: registers torch.ops.sgl_kernel_mini.arch_of(Tensor out), and is a
// Python module (as sgl-kernel's common_ops is) so that importing it registers the op.
#include <Python.h>

#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>
#include <torch/library.h>

cudaError_t launch_arch_kernel(int* out, cudaStream_t stream);

void arch_of(at::Tensor out) {
  TORCH_CHECK(out.is_cuda() && out.scalar_type() == at::kInt && out.numel() >= 1,
              "arch_of: out must be a CUDA int32 tensor");
  const c10::cuda::CUDAGuard guard(out.device());
  cudaError_t err = launch_arch_kernel(out.data_ptr<int>(), c10::cuda::getCurrentCUDAStream());
  TORCH_CHECK(err == cudaSuccess, "arch_of: launching the kernel: ", cudaGetErrorString(err));
}

TORCH_LIBRARY(sgl_kernel_mini, m) { m.def("arch_of(Tensor(a!) out) -> ()"); }
TORCH_LIBRARY_IMPL(sgl_kernel_mini, CUDA, m) { m.impl("arch_of", &arch_of); }

static PyModuleDef mini_ops_module = {PyModuleDef_HEAD_INIT, "mini_ops", nullptr, -1, nullptr};
PyMODINIT_FUNC PyInit_mini_ops(void) { return PyModule_Create(&mini_ops_module); }
