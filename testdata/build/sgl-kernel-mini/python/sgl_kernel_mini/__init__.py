"""A miniature of sgl-kernel: one CUDA kernel behind a torch op."""

import torch

from . import mini_ops  # noqa: F401  (registers torch.ops.sgl_kernel_mini)


def arch_of(device: int = 0) -> int:
    """Runs the kernel on the device; returns the __CUDA_ARCH__ it was compiled for."""
    out = torch.zeros(1, dtype=torch.int32, device=f"cuda:{device}")
    torch.ops.sgl_kernel_mini.arch_of(out)
    torch.cuda.synchronize(device)
    return int(out.item())


def main() -> None:
    major, minor = torch.cuda.get_device_capability(0)
    arch = arch_of(0)
    print(f"device 0: {torch.cuda.get_device_name(0)}, compute capability {major}.{minor}")
    print(f"kernel ran as __CUDA_ARCH__ {arch} (torch {torch.__version__}, CUDA {torch.version.cuda})")
    if arch // 10 != major * 10 + minor:
        raise SystemExit(f"kernel architecture {arch} is not the device's {major}.{minor}")
