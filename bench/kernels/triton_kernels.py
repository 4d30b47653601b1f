"""Compile and run a set of real Triton kernels, as a server's first start does.

Run with TRITON_CACHE_DIR set. Prints one JSON line: the kernels run, the cache entries
(folders in TRITON_CACHE_DIR) before and after, the entries this process created, and the
seconds to the first result of every kernel (compile or load, then run).
"""
import json
import os
import time

t0 = time.time()
import torch
import triton
import triton.language as tl

import_s = time.time() - t0


@triton.jit
def add_kernel(x, y, out, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < n
    tl.store(out + i, tl.load(x + i, mask=m) + tl.load(y + i, mask=m), mask=m)


@triton.jit
def scale_kernel(x, out, n, s, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < n
    tl.store(out + i, tl.load(x + i, mask=m) * s, mask=m)


@triton.jit
def softmax_kernel(x, out, cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    c = tl.arange(0, BLOCK)
    m = c < cols
    v = tl.load(x + row * cols + c, mask=m, other=-float("inf"))
    v = v - tl.max(v, axis=0)
    e = tl.exp(v)
    tl.store(out + row * cols + c, e / tl.sum(e, axis=0), mask=m)


@triton.jit
def matmul_kernel(a, b, c, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pm = tl.program_id(0)
    pn = tl.program_id(1)
    rm = pm * BM + tl.arange(0, BM)
    rn = pn * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        x = tl.load(a + rm[:, None] * K + (k + rk)[None, :])
        y = tl.load(b + (k + rk)[:, None] * N + rn[None, :])
        acc += tl.dot(x, y)
    tl.store(c + rm[:, None] * N + rn[None, :], acc.to(tl.float16))


def entries(d):
    try:
        return sorted(os.listdir(d))
    except FileNotFoundError:
        return []


cache = os.environ["TRITON_CACHE_DIR"]
before = entries(cache)
dev = "cuda"
n = 1 << 20
x = torch.randn(n, device=dev)
y = torch.randn(n, device=dev)
o = torch.empty_like(x)
runs = 0
t1 = time.time()
for block in (128, 256, 512, 1024, 2048, 4096):
    add_kernel[(triton.cdiv(n, block),)](x, y, o, n, BLOCK=block)
    assert torch.allclose(o, x + y)
    scale_kernel[(triton.cdiv(n, block),)](x, o, n, 3.0, BLOCK=block)
    assert torch.allclose(o, x * 3.0)
    runs += 2
rows = 64
for cols in (128, 256, 512, 1024):
    s = torch.randn(rows, cols, device=dev)
    so = torch.empty_like(s)
    softmax_kernel[(rows,)](s, so, cols, BLOCK=cols)
    assert torch.allclose(so, torch.softmax(s, dim=1), atol=1e-5)
    runs += 1
M = N = K = 512
a = torch.randn(M, K, device=dev, dtype=torch.float16)
b = torch.randn(K, N, device=dev, dtype=torch.float16)
for bm, bn, bk in ((64, 64, 32), (128, 64, 32), (64, 128, 64), (128, 128, 32)):
    c = torch.empty(M, N, device=dev, dtype=torch.float16)
    matmul_kernel[(M // bm, N // bn)](a, b, c, M, N, K, BM=bm, BN=bn, BK=bk)
    assert torch.allclose(c.float(), (a.float() @ b.float()), atol=1e-1, rtol=1e-2)
    runs += 1
torch.cuda.synchronize()
kernels_s = time.time() - t1
after = entries(cache)
print(json.dumps({
    "triton": triton.__version__, "torch": torch.__version__, "gpu": torch.cuda.get_device_name(0),
    "kernels_run": runs, "entries_before": len(before), "entries_after": len(after),
    "entries_created": len(set(after) - set(before)), "kernels_s": round(kernels_s, 3),
    "import_s": round(import_s, 3),
}))
