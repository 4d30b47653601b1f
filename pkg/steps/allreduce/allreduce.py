"""All-reduce bus bandwidth over the GPUs a service will use, as nccl-tests measures it.

One process per GPU (torch.distributed with the NCCL backend), a float32 tensor of
--bytes, --warmup untimed and --iters timed all-reduces (sum). The time is the slowest
rank's mean; algbw = bytes / time and busbw = algbw * 2 * (n - 1) / n, nccl-tests'
definition for all-reduce. The result is one JSON object written to --out.
"""
import argparse
import json
import os
import socket
import sys
import time


def worker(rank, world, args, port, queue):
    import torch
    import torch.distributed as dist

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world)
    n = max(1, args.bytes // 4)
    x = torch.ones(n, dtype=torch.float32, device="cuda")
    dist.all_reduce(x)
    torch.cuda.synchronize()
    correct = bool(x[0].item() == world and x[-1].item() == world)
    for _ in range(args.warmup):
        dist.all_reduce(x)
    torch.cuda.synchronize()
    dist.barrier()
    start = time.perf_counter()
    for _ in range(args.iters):
        dist.all_reduce(x)
    torch.cuda.synchronize()
    elapsed = (time.perf_counter() - start) / args.iters
    t = torch.tensor([elapsed, 0.0 if correct else 1.0], dtype=torch.float64, device="cuda")
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    if rank == 0:
        secs = t[0].item()
        algbw = n * 4 / secs / 1e9
        queue.put({
            "ranks": world,
            "bytes": n * 4,
            "iters": args.iters,
            "time_s": secs,
            "algbw_gbps": algbw,
            "busbw_gbps": algbw * 2 * (world - 1) / world,
            "correct": t[1].item() == 0.0,
            "torch": torch.__version__,
            "nccl": ".".join(str(v) for v in torch.cuda.nccl.version()),
            "gpu": torch.cuda.get_device_name(0),
        })
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--gpus", type=int, required=True)
    p.add_argument("--bytes", type=int, default=256 << 20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--out", required=True)
    args = p.parse_args()

    import torch
    import torch.multiprocessing as mp

    have = torch.cuda.device_count()
    if have < args.gpus:
        sys.exit(f"allreduce: {args.gpus} GPUs asked for, torch sees {have} (CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '')!r})")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=worker, args=(r, args.gpus, args, port, queue)) for r in range(args.gpus)]
    for pr in procs:
        pr.start()
    for pr in procs:
        pr.join()
    bad = [pr.exitcode for pr in procs if pr.exitcode != 0]
    if bad:
        sys.exit(f"allreduce: {len(bad)} of {args.gpus} ranks failed (exit codes {bad})")
    result = queue.get(timeout=10)
    with open(args.out + ".tmp", "w") as f:
        json.dump(result, f)
    os.replace(args.out + ".tmp", args.out)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
