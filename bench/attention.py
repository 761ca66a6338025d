"""Fused attention beside the unfused path (the same call under FUSED_ATTENTION=0): forward, and forward with
backward, of scaled_dot_product_attention at B=8, H=12, E=64 over several lengths. The fused side is the kernel the
device's renderer asks for (CUDA: the tensor cores' for float16 and bfloat16; float32 takes the unfused path on both
sides there unless --simt asks for the SIMT kernel).

Run: python bench/attention.py [--device CPU] [--dtype float32] [--lengths 128,256,512] [--causal] [--backward]
Each figure is the median of --runs timed runs after two warm-up runs, each ended by the device's synchronize.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time

from glassgrad import Context, Device, Tensor, dtypes


def _time(fn, device: str, runs: int) -> float:
    times = []
    for i in range(runs + 2):
        start = time.perf_counter()
        fn()
        Device[device].synchronize()
        if i >= 2:
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def _step(q: Tensor, k: Tensor, v: Tensor, args: argparse.Namespace) -> None:
    out = q.scaled_dot_product_attention(k, v, is_causal=args.causal)
    if args.backward:
        out.float().sum().backward()
        Tensor.realize(q.grad, k.grad, v.grad)
    else:
        out.realize()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=Device.DEFAULT)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--lengths", default="128,256,512")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--head-size", type=int, default=64)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--causal", action="store_true")
    parser.add_argument("--backward", action="store_true")
    parser.add_argument("--simt", action="store_true", help="CUDA: fuse every case (the SIMT kernel where no other)")
    args = parser.parse_args()
    dtype, renderer = getattr(dtypes, args.dtype), Device[args.device].renderer
    print(f"{args.device} {args.dtype} B={args.batch} H={args.heads} E={args.head_size} causal={args.causal}"
          f"{' forward+backward' if args.backward else ' forward'}: median ms (fused, unfused, ratio)")  # fmt: skip
    for length in (int(n) for n in args.lengths.split(",")):
        shape = (args.batch, args.heads, length, args.head_size)
        q, k, v = (Tensor.randn(*shape, device=args.device).cast(dtype).realize() for _ in range(3))
        for t in (q, k, v):
            t.requires_grad = args.backward

        figures = []
        renderer.fused_attention = args.simt or type(renderer).fused_attention
        for fused in (True, False):
            with Context(FUSED_ATTENTION=int(fused)):
                figures.append(_time(functools.partial(_step, q, k, v, args), args.device, args.runs) * 1e3)
        renderer.fused_attention = type(renderer).fused_attention
        print(f"T={length:5d}: {figures[0]:9.3f} {figures[1]:9.3f} {figures[1] / figures[0]:6.2f}x")


if __name__ == "__main__":
    main()
