"""Every tensor-core tile configuration (renderer/cuda_tc.py) on square float16 and bfloat16 products, beside PyTorch.

Run (on a machine with an NVIDIA GPU): python bench/tensor_cores.py
     SIZES=4096,8192 CONFIGS=0,1,5 python bench/tensor_cores.py   (only those tile configurations, by index)

For each size and dtype: PyTorch's TFLOP/s (cuBLAS), then each configuration that fits, its TFLOP/s (2 N^3 over the
median of event-timed launches on random inputs) and its error ||C - C_torch|| / ||C_torch||; the heuristics' choice
is marked with *. It launches the compiled kernels directly on the engine's buffers, so the figures are the kernel's.
"""

from __future__ import annotations

import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import torch  # noqa: E402

from glassgrad import Device, Tensor, dtypes  # noqa: E402
from glassgrad.codegen import choose_opts, get_program  # noqa: E402
from glassgrad.codegen.tensor_cores import tensor_core_actions  # noqa: E402
from glassgrad.runtime.device import Buffer  # noqa: E402

SIZES = tuple(int(n) for n in os.environ.get("SIZES", "4096,8192").split(","))
RUNS = int(os.environ.get("RUNS", 10))
CONFIGS = {int(i) for i in os.environ["CONFIGS"].split(",")} if os.environ.get("CONFIGS") else None
TORCH = {dtypes.float16: torch.float16, dtypes.bfloat16: torch.bfloat16}


def torch_seconds(a: torch.Tensor, b: torch.Tensor) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(RUNS + 2):
        start.record()
        a @ b
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return statistics.median(times[2:])


def main() -> None:
    device = Device["CUDA"]
    print(f"# {device.gpu_name}, {device.arch}")
    print(f"{'n':>6} {'dtype':>9} {'kernel':<48} {'TFLOP/s':>8} {'x torch':>8} {'error':>9}")
    for n in SIZES:
        for dtype, tdtype in TORCH.items():
            gen = torch.Generator(device="cuda").manual_seed(n)
            ta, tb = (torch.randn(n, n, device="cuda", generator=gen).to(tdtype) for _ in range(2))
            ref = (ta @ tb).float()
            flops = 2 * n**3
            base = flops / torch_seconds(ta, tb) / 1e12
            print(f"{n:>6} {dtype.name:>9} {'torch':<48} {base:>8.1f} {1:>8.2f}")
            a, b = (Tensor.empty(n, n, dtype=dtype, device="CUDA") for _ in range(2))
            ast = (a @ b).schedule()[-1].ast
            chosen = choose_opts(ast, device.renderer)
            bufs = [Buffer("CUDA", n * n, dtype) for _ in range(3)]
            for buf, x in zip(bufs[1:], (ta, tb)):
                buf.copyin(x.view(torch.int16).cpu().numpy().tobytes())
            for opt in tensor_core_actions(ast, device.renderer):
                if CONFIGS is not None and opt.amount not in CONFIGS:
                    continue
                spec = get_program(ast, device.renderer, (opt,))
                program, handles = device.load(spec.name, spec.src), [buf.handle for buf in bufs]
                launch = {"global_size": spec.global_size, "local_size": spec.local_size, "wait": True}
                times = [program(*handles, **launch) for _ in range(RUNS + 2)][2:]
                out = torch.frombuffer(bufs[0].as_bytes(), dtype=torch.int16).view(tdtype).reshape(n, n).float()
                error = float((out.cuda() - ref).norm() / ref.norm())
                tflops = flops / statistics.median(times) / 1e12
                name = f"{'*' if (opt,) == chosen else ' '}{opt} {device.renderer.tile_configs[opt.amount]}"
                print(f"{n:>6} {dtype.name:>9} {name:<48} {tflops:>8.1f} {tflops / base:>8.2f} {error:>9.2e}")
            del bufs


if __name__ == "__main__":
    main()
