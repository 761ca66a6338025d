"""All-reduce bus bandwidth across GPUs: glassgrad's NCCL all_reduce beside torch.distributed's, in the same run.

Run on a machine of 2 (or more) GPUs, one process per GPU:
    python -m glassgrad.distributed.run --nproc-per-node 2 bench/allreduce.py      (or torchrun --nproc-per-node 2)
MIB=1024 (the tensor, float32), ITERS=20, WARMUP=5. Needs NCCL (`pip install 'glassgrad[multigpu]'`) and a CUDA
PyTorch for its side (without one, glassgrad's row alone).

Bus bandwidth is NCCL's measure (nccl-tests): bytes / seconds * 2 (n - 1) / n, what each link carries in a ring;
each side's time is the mean over ITERS calls queued back to back, synchronized before and after. Both sides check
their result first (every rank's rank + 1, summed).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import glassgrad.distributed as dist  # noqa: E402
from glassgrad import Device, Tensor  # noqa: E402
from glassgrad.distributed import nccl  # noqa: E402
from glassgrad.distributed.group import store_port  # noqa: E402

MIB, ITERS, WARMUP = (int(os.environ.get(k, d)) for k, d in (("MIB", 1024), ("ITERS", 20), ("WARMUP", 5)))


def timed(run: Callable[[], None], synchronize: Callable[[], None]) -> float:
    """Mean seconds per call of `run`, after WARMUP calls."""
    for _ in range(WARMUP):
        run()
    synchronize()
    start = time.perf_counter()
    for _ in range(ITERS):
        run()
    synchronize()
    return (time.perf_counter() - start) / ITERS


def bus_bandwidth(seconds: float, nbytes: int, world: int) -> float:
    return nbytes / seconds * 2 * (world - 1) / world / 1e9


def glassgrad_side(count: int, world: int) -> float:
    rank = dist.get_rank()
    device = Device[Device.DEFAULT]
    check = Tensor.full((4,), float(rank + 1))
    dist.all_reduce(check)
    assert check.tolist() == [world * (world + 1) / 2] * 4, f"glassgrad all_reduce gave {check.tolist()}"
    t = Tensor.zeros(count).contiguous().realize()  # zeros: the sum stays finite however many calls
    return timed(lambda: dist.all_reduce(t), device.synchronize)


def torch_side(count: int, world: int) -> float | None:
    try:
        import torch
        import torch.distributed as tdist
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    rank, local_rank = dist.get_rank(), int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    if not tdist.is_initialized():  # under our launcher; torchrun's store is torch's own (env://)
        method = "env://" if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") else \
            f"tcp://{os.environ['MASTER_ADDR']}:{store_port() + 1}"  # fmt: skip
        tdist.init_process_group("nccl", init_method=method, rank=rank, world_size=world)
    check = torch.full((4,), float(rank + 1), device="cuda")
    tdist.all_reduce(check)
    assert check.tolist() == [world * (world + 1) / 2] * 4, f"torch all_reduce gave {check.tolist()}"
    t = torch.zeros(count, device="cuda")
    seconds = timed(lambda: tdist.all_reduce(t), torch.cuda.synchronize)
    tdist.destroy_process_group()
    return seconds


def main() -> None:
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    count = MIB * (1 << 20) // 4
    nbytes = count * 4
    ours = glassgrad_side(count, world)
    theirs = torch_side(count, world)
    if rank == 0:
        gpu = Device[Device.DEFAULT].gpu_name  # type: ignore[attr-defined]
        print(f"all_reduce of {MIB} MiB float32 (sum) across {world} x {gpu}, NCCL {nccl.version()}, mean of {ITERS} "
              f"after {WARMUP}")  # fmt: skip
        print(
            f"  glassgrad (NCCL by ctypes):  {ours * 1e3:8.3f} ms  {bus_bandwidth(ours, nbytes, world):7.1f} GB/s bus"
        )
        if theirs is not None:
            print(f"  torch.distributed (NCCL):    {theirs * 1e3:8.3f} ms  "
                  f"{bus_bandwidth(theirs, nbytes, world):7.1f} GB/s bus")  # fmt: skip
            print(f"  glassgrad / torch bus bandwidth: {theirs / ours:.3f}")
        else:
            print("  torch.distributed: no CUDA PyTorch here")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
