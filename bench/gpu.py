"""glassgrad's CUDA backend side by side with PyTorch and tinygrad 0.14 (CUDA) on one GPU, in one run.

Run (on a machine with an NVIDIA GPU): python bench/gpu.py
     PARTS=matmul,elementwise,reduce,launch,mnist FRAMEWORKS=torch,glassgrad,tinygrad STEPS=20 python bench/gpu.py

Each framework runs in its own process (three CUDA contexts in one process would share the current-context state).
- matmul: C = A @ B, square N x N at N = 4096 and 8192 in float32, float16 and bfloat16 (random normal inputs made
  by PyTorch, the same for all); TFLOP/s = 2 N^3 / median seconds, and the error ||C - C_torch|| / ||C_torch||.
  glassgrad and tinygrad run it under TinyJit; PyTorch (cuBLAS) eagerly, float32 without TF32.
- elementwise: ((a + b) * a - b) * 0.5 + 1 over 256M float32 (5 ops; one fused kernel in glassgrad and tinygrad,
  five kernels in PyTorch eager); GB/s counts 3 x 1 GiB (two reads, one write). The reference is PyTorch's
  device-to-device copy of 1 GiB (counting its read and its write), the card's copy bandwidth.
- reduce: sums of 256M float32 (1 GiB): the whole tensor, its rows as (4096, 65536) and (16384, 16384), its
  columns as (65536, 4096); GB/s counts the 1 GiB read. glassgrad and tinygrad under TinyJit, PyTorch eagerly.
- launch: (a) eager `(a + b).realize()` on 10-element tensors (PyTorch: `a + b`), microseconds per call over a
  loop of calls ending in one synchronize; (b) a jitted function of 64 tiny dependent kernels, microseconds per
  kernel: glassgrad with its CUDA graph and with JIT_GRAPH=0, tinygrad's TinyJit, PyTorch eager and PyTorch's own
  CUDA graph.
- mnist: the beautiful_mnist training step (examples/beautiful_mnist.py's Model, Adam, batch 512) on random
  MNIST-shaped data held on the GPU; glassgrad and tinygrad under TinyJit, PyTorch eager; a step runs from handing
  over the batch indices to the loss as a Python float; median over steps 3..STEPS.
Times are medians per call over groups of calls queued between two synchronizations (at least 20 ms a group, as
a stream of work runs). Every ratio divides by PyTorch's figure (for "ms" and "us" rows lower is better, for the
others higher).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
import traceback
from collections.abc import Callable

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import numpy as np  # noqa: E402

PARTS = os.environ.get("PARTS", "matmul,elementwise,reduce,launch,mnist").split(",")
FRAMEWORKS = os.environ.get("FRAMEWORKS", "torch,glassgrad,tinygrad").split(",")
STEPS, BS, CHAIN = int(os.environ.get("STEPS", 20)), int(os.environ.get("BS", 512)), 64
SIZES = tuple(int(n) for n in os.environ.get("SIZES", "4096,8192").split(","))
DTYPES = ("float32", "float16", "bfloat16")
ELEMENTS = int(os.environ.get("ELEMENTS", 1 << 28))  # 256M float32: 1 GiB a tensor
GROUP_S = 0.02  # seconds of queued calls between two synchronizations in `timed`
# (name, shape, axis) of each reduce row: a whole sum, row sums (few and many rows), column sums
REDUCTIONS = (("sum all", (ELEMENTS,), None), ("sum rows 4096", (4096, -1), 1), ("sum rows 16384", (16384, -1), 1),
              ("sum columns 4096", (-1, 4096), 0))  # fmt: skip


def queued(fn: Callable[[], object], sync: Callable[[], object], calls: int, groups: int) -> float:
    """Median seconds per call over `groups` groups of `calls` calls queued back to back, one synchronize each."""
    times = []
    for _ in range(groups):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        sync()
        times.append((time.perf_counter() - start) / calls)
    return statistics.median(times)


def timed(fn: Callable[[], object], sync: Callable[[], object], repeats: int = 10, budget_s: float = 10.0) -> float:
    """Median seconds per fn() after one warm-up, over groups of calls lasting at least GROUP_S each (as a stream of
    work runs: the host's per-call time overlaps the GPU's); fewer groups where a run is slow."""
    sync()  # earlier work is not timed
    first = queued(fn, sync, 1, 1)
    calls = max(1, int(GROUP_S / max(first, 1e-9)))
    return queued(fn, sync, calls, max(1, min(repeats, int(budget_s / max(first * calls, 1e-9)))))


def per_call(fn: Callable[[], object], sync: Callable[[], object], calls: int) -> float:
    """Seconds per call of fn over `calls` calls queued back to back, then one synchronize (median of 5 such)."""
    queued(fn, sync, 10, 1)  # warm-up
    return queued(fn, sync, calls, 5)


ROWS = 64  # output rows checked against a float64 product


def matmul_inputs(n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A and B (random normal float32, the same in every process) and the output rows the check reads."""
    rng = np.random.default_rng(n)
    a, b = (rng.standard_normal((n, n), dtype=np.float32) for _ in range(2))
    return a, b, np.sort(rng.choice(n, ROWS, replace=False))


def matmul_error(out_rows: np.ndarray, a: np.ndarray, b: np.ndarray, rows: np.ndarray, dtype: str) -> float:
    """||C - C_exact|| / ||C_exact|| over the checked rows, C_exact the float64 product of the rounded inputs."""
    import torch  # on the CPU only: converting to bfloat16, which NumPy lacks

    rounded = lambda x: torch.from_numpy(x).to(getattr(torch, dtype)).double().numpy()
    exact = rounded(a[rows]) @ rounded(b)
    return float(np.linalg.norm(out_rows.astype(np.float64) - exact) / np.linalg.norm(exact))


# ---- one framework's measurements (run in its own process) ----


def measure_torch(PARTS: list[str]) -> dict[str, float]:  # noqa: N803 (the parts to run)
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    sync, out = torch.cuda.synchronize, {}
    if "matmul" in PARTS:
        for n in SIZES:
            a_np, b_np, rows = matmul_inputs(n)
            for name in DTYPES:
                a, b = (torch.from_numpy(x).cuda().to(getattr(torch, name)) for x in (a_np, b_np))
                out[f"matmul {n} {name} TFLOP/s"] = 2 * n**3 / timed(lambda a=a, b=b: a @ b, sync) / 1e12
                out[f"matmul {n} {name} error"] = matmul_error((a @ b)[rows].float().cpu().numpy(), a_np, b_np, rows,
                                                               name)  # fmt: skip
                del a, b
            torch.cuda.empty_cache()
    if "elementwise" in PARTS:
        rng = np.random.default_rng(0)
        a, b = (torch.from_numpy(rng.random(ELEMENTS, dtype=np.float32)).cuda() for _ in range(2))
        out["elementwise GB/s"] = 3 * 4 * ELEMENTS / timed(lambda: ((a + b) * a - b) * 0.5 + 1, sync) / 1e9
        dst = torch.empty_like(a)
        out["copy bandwidth GB/s"] = 2 * 4 * ELEMENTS / timed(lambda: dst.copy_(a), sync) / 1e9
        del a, b, dst
        torch.cuda.empty_cache()
    if "reduce" in PARTS:
        x = torch.from_numpy(np.random.default_rng(1).random(ELEMENTS, dtype=np.float32)).cuda()
        for name, shape, axis in REDUCTIONS:
            view = x.reshape(shape)
            fn = (lambda v=view: v.sum()) if axis is None else (lambda v=view, a=axis: v.sum(a))
            out[f"{name} GB/s"] = 4 * ELEMENTS / timed(fn, sync) / 1e9
        del x
        torch.cuda.empty_cache()
    if "launch" in PARTS:
        a, b = torch.arange(10, dtype=torch.float32, device="cuda"), torch.ones(10, device="cuda")
        out["eager add us/call"] = per_call(lambda: a + b, sync, 1000) * 1e6

        def chain(x):
            for _ in range(CHAIN):
                x = x + b
            return x

        out["jit chain us/kernel"] = per_call(lambda: chain(a), sync, 50) / CHAIN * 1e6
        static, graph = a.clone(), torch.cuda.CUDAGraph()
        stream = torch.cuda.Stream()
        with torch.cuda.stream(stream):
            chain(static)  # warm-up on a side stream, as torch.cuda.graphs asks
        torch.cuda.current_stream().wait_stream(stream)
        with torch.cuda.graph(graph):
            chain(static)
        out["jit chain (PyTorch CUDA graph) us/kernel"] = per_call(graph.replay, sync, 50) / CHAIN * 1e6
    if "mnist" in PARTS:
        from bench.mnist import torch_model, torch_step

        rng = np.random.default_rng(0)
        X = torch.from_numpy(rng.random((60000, 1, 28, 28), dtype=np.float32)).cuda()
        Y = torch.from_numpy(rng.integers(0, 10, 60000)).cuda()
        torch.manual_seed(0)
        model = torch_model().cuda()
        step = torch_step(model, torch.optim.Adam(model.parameters()), X, Y, device="cuda")

        out.update(_mnist_steps(step, rng))
    return out


def _mnist_steps(step: Callable[[np.ndarray], float], rng: np.random.Generator) -> dict[str, float]:
    times, loss = [], float("nan")
    for _ in range(STEPS):
        indices = rng.integers(0, 60000, BS, dtype=np.int32)
        start = time.perf_counter()
        loss = step(indices)
        times.append(time.perf_counter() - start)
    return {"mnist first step s": times[0], "mnist step ms": statistics.median(times[2:]) * 1e3, "mnist loss": loss}


def measure_lazy(name: str, PARTS: list[str]) -> dict[str, float]:  # noqa: N803
    """glassgrad or tinygrad, whose APIs match."""
    if name == "glassgrad":
        from examples.beautiful_mnist import Model
        from glassgrad import Context, Device, Tensor, TinyJit, dtypes, nn
    else:
        from tinygrad import Context, Device, Tensor, TinyJit, dtypes, nn

        from bench.mnist import TinygradModel as Model
    device = Device.DEFAULT
    assert device == os.environ["DEV"], f"{name} runs on {device}, not {os.environ['DEV']}"
    sync, out = Device[device].synchronize, {}
    if "matmul" in PARTS:
        for n in SIZES:
            a_np, b_np, rows = matmul_inputs(n)
            for dtype_name in DTYPES:
                a, b = (Tensor(x, device=device).cast(getattr(dtypes, dtype_name)).realize() for x in (a_np, b_np))
                mm = TinyJit(lambda x, y: (x @ y).realize())
                key = f"matmul {n} {dtype_name}"
                out[f"{key} TFLOP/s"] = 2 * n**3 / timed(lambda mm=mm, a=a, b=b: mm(a, b), sync) / 1e12
                c = mm(a, b).cast(dtypes.float32).numpy()
                out[f"{key} error"] = matmul_error(c[rows], a_np, b_np, rows, dtype_name)
                del a, b, mm, c
    if "elementwise" in PARTS:
        rng = np.random.default_rng(0)
        a, b = (Tensor(rng.random(ELEMENTS, dtype=np.float32), device=device).realize() for _ in range(2))
        chain5 = TinyJit(lambda x, y: (((x + y) * x - y) * 0.5 + 1).realize())
        out["elementwise GB/s"] = 3 * 4 * ELEMENTS / timed(lambda: chain5(a, b), sync) / 1e9
        del a, b, chain5
    if "reduce" in PARTS:
        x = Tensor(np.random.default_rng(1).random(ELEMENTS, dtype=np.float32), device=device).realize()
        expected = float(np.random.default_rng(1).random(ELEMENTS, dtype=np.float32).sum(dtype=np.float64))
        for name, shape, axis in REDUCTIONS:
            jitted = TinyJit(lambda v, shape=shape, axis=axis: v.reshape(shape).sum(axis).realize())
            out[f"{name} GB/s"] = 4 * ELEMENTS / timed(lambda jitted=jitted: jitted(x), sync) / 1e9
            total = float(jitted(x).numpy().astype(np.float64).sum())
            out[f"{name} error"] = abs(total - expected) / expected
            del jitted
        del x
    if "launch" in PARTS:
        a = Tensor(np.arange(10, dtype=np.float32), device=device).realize()
        b = Tensor(np.ones(10, dtype=np.float32), device=device).realize()
        out["eager add us/call"] = per_call(lambda: (a + b).realize(), sync, 300) * 1e6

        def chain(x, y):
            for _ in range(CHAIN):
                x = (x + y).realize()
            return x

        jitted = TinyJit(chain)
        out["jit chain us/kernel"] = per_call(lambda: jitted(a, b), sync, 50) / CHAIN * 1e6
        if name == "glassgrad":
            with Context(JIT_GRAPH=0):
                plain = TinyJit(chain)
                out["jit chain (JIT_GRAPH=0) us/kernel"] = per_call(lambda: plain(a, b), sync, 50) / CHAIN * 1e6
    if "mnist" in PARTS:
        rng = np.random.default_rng(0)
        X = Tensor(rng.random((60000, 1, 28, 28), dtype=np.float32), device=device).realize()
        Y = Tensor(rng.integers(0, 10, 60000, dtype=np.int32), device=device).realize()
        Tensor.manual_seed(0)
        model = Model()
        optimizer = nn.optim.Adam(nn.state.get_parameters(model))

        @TinyJit
        def train_step(samples):
            with Context(TRAINING=1) if name == "tinygrad" else Tensor.train():
                optimizer.zero_grad()
                loss = model(X[samples]).sparse_categorical_crossentropy(Y[samples]).backward()
                optimizer.step()
                return loss.realize()

        out.update(_mnist_steps(lambda i: train_step(Tensor(i, device=device).realize()).item(), rng))
    return out


# ---- the run: one process a framework, then the table ----


def card() -> str:
    try:
        query = ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"]
        return subprocess.run(query, capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown GPU"


def run_worker(framework: str) -> dict[str, float] | str:
    env = {"DEV": "CUDA"} | os.environ | {"PYTHONUNBUFFERED": "1"}  # DEV=CPU: a smoke test of the script
    done = subprocess.run([sys.executable, __file__, "--worker", framework], capture_output=True, text=True, env=env)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        return f"failed (exit {done.returncode}): {(done.stderr or done.stdout).strip()[-1500:]}"
    return json.loads(lines[-1])


def versions() -> str:
    import importlib.metadata

    found = []
    for name in ("torch", "tinygrad", "numpy"):
        try:
            found.append(f"{name} {importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            found.append(f"{name} missing")
    return ", ".join(found)


def main() -> None:
    print(f"# {card()}; python {sys.version.split()[0]}, {versions()}; {time.strftime('%Y-%m-%d %H:%M UTC')}")
    results = {}
    for fw in FRAMEWORKS:
        start = time.perf_counter()
        results[fw] = run_worker(fw)
        print(f"# {fw} figures: {json.dumps(results[fw])}", flush=True)
        print(f"# {fw}: {time.perf_counter() - start:.0f} s", flush=True)
    failed = {fw: r for fw, r in results.items() if isinstance(r, str)}
    for fw, why in failed.items():
        print(f"# {fw} {why}")
    ok = {fw: r for fw, r in results.items() if not isinstance(r, str)}
    for fw, r in ok.items():
        for key in [k for k, v in r.items() if isinstance(v, str)]:
            print(f"# {fw} {key}: {r.pop(key)}")
    torch_figures = ok.get("torch", {})
    if copy := torch_figures.get("copy bandwidth GB/s"):  # the elementwise target: a fraction of the card's copy
        for r in ok.values():
            if "elementwise GB/s" in r:
                r["elementwise / copy bandwidth"] = r["elementwise GB/s"] / copy
    keys = list(dict.fromkeys(k for r in ok.values() for k in r))
    others = [fw for fw in ok if fw != "torch"]
    print(f"{'work':<42}" + "".join(f"{fw:>14}" for fw in ok) + "".join(f"{fw + '/torch':>18}" for fw in others))
    for key in keys:
        ref = torch_figures.get(key) or torch_figures.get(key.replace(" (JIT_GRAPH=0)", ""))
        values = [r.get(key) for r in ok.values()]
        compared = ref and not any(word in key for word in ("error", "loss", "copy"))
        ratios = [ok[fw].get(key) / ref if ok[fw].get(key) is not None and compared else None for fw in others]
        cells = "".join(f"{_fmt(v):>14}" for v in values) + "".join(f"{_fmt(x, 'x'):>18}" for x in ratios)
        print(f"{key:<42}{cells}")


def _fmt(value: float | None, suffix: str = "") -> str:
    if value is None:
        return "-"
    return f"{value:.2e}" if 0 < abs(value) < 0.01 else f"{value:,.2f}{suffix}"


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        fw, figures = sys.argv[2], {}
        for part in PARTS:  # a part that fails costs its own figures only
            try:
                figures.update(measure_torch([part]) if fw == "torch" else measure_lazy(fw, [part]))
            except Exception as e:  # noqa: BLE001 (reported in the table's notes)
                figures[f"{part} failed"] = f"{type(e).__name__}: {str(e)[-600:]}"
                print(traceback.format_exc(), file=sys.stderr)
        print(json.dumps(figures), flush=True)
    else:
        main()
