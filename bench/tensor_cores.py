"""The tiled matrix products (codegen/tensor_cores.py) beside PyTorch, every configuration of each, on one GPU.

Run (on a machine with an NVIDIA GPU): python bench/tensor_cores.py
     CASES=square,head RUNS=20 python bench/tensor_cores.py   (only those cases)

Cases (each in PyTorch's own layout, the same random normal inputs for both):
- square: C = A @ B at N = 8192 (SIZES) in float32 (TF32 off, as in PyTorch by default: the SIMT kernel), float16,
  bfloat16, and float32 with TF32 allowed in both;
- head: GPT-2's output layer, float16, 4096 x 768 times 768 x 50257: as `x @ W` (W's rows 50257 elements apart:
  not 16-byte aligned) and as `x @ wte.T` (the tied embedding, its rows k-contiguous), and its gradient
  dlogits @ wte (dlogits' rows 50257 elements apart);
- projection: attention's output projection, float16, heads (8, 12, 512, 64) transposed back into rows (8, 512, 768)
  times W.T (768 x 768): PyTorch copies the transposed heads first, glassgrad reads them where they lie.
TFLOP/s = 2 m n k over the median of event-timed runs (RUNS, after 2 warm-ups); glassgrad's kernels launched
directly on the engine's buffers, so the figures are the kernels'. Error: ||C - C_torch|| / ||C_torch||. The
heuristics' choice is marked with *; the last table has, per case, PyTorch, the heuristics' kernel and the best.
"""

from __future__ import annotations

import os
import statistics
import sys
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import torch  # noqa: E402

from glassgrad import Context, Device, Tensor, dtypes  # noqa: E402
from glassgrad.codegen import choose_opts, get_program  # noqa: E402
from glassgrad.codegen.tensor_cores import tensor_core_actions  # noqa: E402
from glassgrad.engine.realize import buffer_of  # noqa: E402

SIZES = tuple(int(n) for n in os.environ.get("SIZES", "8192").split(","))
RUNS = int(os.environ.get("RUNS", 10))
CASES = os.environ.get("CASES", "square,head,projection").split(",")
TORCH = {dtypes.float16: torch.float16, dtypes.bfloat16: torch.bfloat16, dtypes.float32: torch.float32}


def torch_seconds(fn) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(RUNS + 2):
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return statistics.median(times[2:])


def ours(t: torch.Tensor, dtype) -> Tensor:
    return Tensor(t.float().cpu().numpy(), device="CUDA").cast(dtype).realize()


def run_case(name: str, flops: int, make_torch, make_ours, inputs: list[torch.Tensor], dtype, tf32: bool) -> tuple:
    """One case: PyTorch's time, then every configuration's; returns (name, torch, chosen, best) in TFLOP/s."""
    torch.backends.cuda.matmul.allow_tf32 = tf32
    ref = make_torch(*inputs)
    base = flops / torch_seconds(lambda: make_torch(*inputs)) / 1e12
    print(f"{name:<44} {'torch':<52} {base:>8.1f} {1:>7.2f}", flush=True)
    with Context(TF32=int(tf32)):
        out = make_ours(*(ours(x, dtype) for x in inputs))
        (item,) = out.schedule()
        renderer = Device["CUDA"].renderer
        chosen, actions = choose_opts(item.ast, renderer), tensor_core_actions(item.ast, renderer)
        specs = [get_program(item.ast, renderer, (opt,)) for opt in actions]
    device = Device["CUDA"]
    with ThreadPoolExecutor(8) as pool:  # NVRTC runs outside the GIL
        binaries = list(pool.map(lambda spec: device.compiler.compile_cached(spec.src), specs))
    bufs = [buffer_of(b).ensure_allocated() for b in item.bufs]
    found = {}
    for opt, spec, binary in zip(actions, specs, binaries):
        program, handles = device.load(spec.name, spec.src, binary), [b.handle for b in bufs]
        launch = {"global_size": spec.global_size, "local_size": spec.local_size, "wait": True}
        times = [program(*handles, **launch) for _ in range(RUNS + 2)][2:]
        got = torch.frombuffer(bytearray(bufs[0].as_bytes()), dtype=TORCH[bufs[0].dtype]).reshape(ref.shape)
        error = float((got.cuda().float() - ref.float()).norm() / ref.float().norm())
        found[opt] = tflops = flops / statistics.median(times) / 1e12
        label = f"{'*' if (opt,) == chosen else ' '}{opt} {renderer.tile_configs[opt.amount]}"
        print(f"{name:<44} {label:<52} {tflops:>8.1f} {tflops / base:>7.2f} {error:>9.2e}", flush=True)
    heuristic = found.get(chosen[0], 0.0) if chosen else 0.0
    return name, base, heuristic, max(found.values(), default=0.0)


def square(n: int) -> list[tuple]:
    rows = []
    gen = torch.Generator(device="cuda").manual_seed(n)
    a, b = (torch.randn(n, n, device="cuda", generator=gen) for _ in range(2))
    for dtype, tf32 in ((dtypes.float32, False), (dtypes.float16, False), (dtypes.bfloat16, False),
                        (dtypes.float32, True)):  # fmt: skip
        ta, tb = a.to(TORCH[dtype]), b.to(TORCH[dtype])
        name = f"{n} {dtype.name}{' tf32' if tf32 else ''}"
        rows.append(run_case(name, 2 * n**3, lambda x, y: x @ y, lambda x, y: x @ y, [ta, tb], dtype, tf32))
    return rows


def head() -> list[tuple]:
    gen = torch.Generator(device="cuda").manual_seed(0)
    x, w, grad = (torch.randn(*s, device="cuda", generator=gen).half() for s in ((4096, 768), (768, 50257),
                                                                              (4096, 50257)))  # fmt: skip
    wte = w.T.contiguous()
    flops, f16 = 2 * 4096 * 768 * 50257, dtypes.float16
    return [
        run_case("head x @ W (768 x 50257)", flops, lambda a, b: a @ b, lambda a, b: a @ b, [x, w], f16, False),
        run_case(
            "head x @ wte.T (50257 x 768)", flops, lambda a, b: a @ b.T, lambda a, b: a @ b.T, [x, wte], f16, False
        ),  # fmt: skip
        run_case(
            "head gradient dlogits @ wte", flops, lambda a, b: a @ b, lambda a, b: a @ b, [grad, wte], f16, False
        ),  # fmt: skip
    ]


def projection() -> list[tuple]:
    gen = torch.Generator(device="cuda").manual_seed(1)
    y, w = (torch.randn(*s, device="cuda", generator=gen).half() for s in ((8, 12, 512, 64), (768, 768)))
    make = lambda heads, weight: heads.transpose(1, 2).reshape(8, 512, 768) @ weight.T  # noqa: E731
    flops = 2 * 8 * 512 * 768 * 768
    return [run_case("projection (8,12,512,64) -> rows @ W.T", flops, make, make, [y, w], dtypes.float16, False)]


def main() -> None:
    device = Device["CUDA"]
    print(f"# {device.gpu_name}, {device.arch}, torch {torch.__version__}")
    print(f"{'case':<44} {'kernel':<52} {'TFLOP/s':>8} {'x torch':>7} {'error':>9}")
    rows = []
    if "square" in CASES:
        for n in SIZES:
            rows += square(n)
    if "head" in CASES:
        rows += head()
    if "projection" in CASES:
        rows += projection()
    print(f"\n{'case':<44} {'torch':>8} {'ours*':>8} {'ratio':>6} {'best':>8} {'ratio':>6}")
    for name, base, chosen, best in rows:
        print(f"{name:<44} {base:>8.1f} {chosen:>8.1f} {chosen / base:>6.2f} {best:>8.1f} {best / base:>6.2f}")


if __name__ == "__main__":
    main()
