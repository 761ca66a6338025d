"""Python overhead: glassgrad vs tinygrad 0.14 (CPU) vs PyTorch (CPU, eager), each in a fresh process.

Run: python bench/overhead.py
     BS=16 STEPS=12 FRAMEWORKS=torch,glassgrad,tinygrad python bench/overhead.py   (the defaults)

(a) `(a+b).realize()` on two realized 10-element tensors, median microseconds per call (PyTorch: `a+b`; it runs
    eagerly, so that is its whole cost; NumPy's `a+b` is printed as the floor).
(b) The beautiful_mnist training step the first time, without TinyJit, in a fresh process whose compiled-kernel
    caches on disk are warm (a warm-up process runs first): its wall time minus the time its kernels take (the
    median TinyJit step below). That is the cost of building, scheduling and lowering the step's graph.
(c) The same step under TinyJit, steady state: the median over steps of a step's wall time minus the time its
    kernels took (read from each framework's own kernel timer at DEBUG=2, with the output thrown away).
The overhead does not depend on the batch size (the graph is the same), so a small batch (BS) keeps the kernel
time, which (b) and (c) subtract, small beside it. Lower is better; the ratios divide by tinygrad's figure.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import numpy as np  # noqa: E402

from bench.common import header, lazy_mnist_step, median_seconds  # noqa: E402

BS, STEPS = int(os.environ.get("BS", 16)), int(os.environ.get("STEPS", 16))
FRAMEWORKS = ("torch", "glassgrad", "tinygrad")


def median_us(fn) -> float:
    """Median microseconds of fn() after a warm-up."""
    return median_seconds(fn, repeats=300, warmup=20) * 1e6


def mnist_like(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """1,024 random 28x28 images and labels: the step's cost does not depend on the pixels."""
    return rng.random((1024, 1, 28, 28), dtype=np.float32), rng.integers(0, 10, 1024, dtype=np.int32)


def framework(name: str):
    """(Tensor, nn, TinyJit, training-mode context, a context that times kernels at DEBUG=2, model class)."""
    if name == "glassgrad":
        from examples.beautiful_mnist import Model
        from glassgrad import Context, GlobalCounters, Tensor, TinyJit, nn

        return Tensor, nn, TinyJit, Tensor.train, lambda: Context(DEBUG=2), GlobalCounters, Model
    os.environ["DEV"] = "CPU"  # tinygrad reads its device when imported
    from tinygrad import Context, GlobalCounters, Tensor, TinyJit, nn

    from bench.mnist import TinygradModel

    return Tensor, nn, TinyJit, lambda: Context(TRAINING=1), lambda: Context(DEBUG=2), GlobalCounters, TinygradModel


def measure_lazy(name: str) -> dict[str, float]:
    """(a), (b) and (c) for glassgrad or tinygrad, whose APIs match."""
    Tensor, nn, TinyJit, training, timing, counters, Model = framework(name)
    a, b = Tensor(np.arange(10, dtype=np.float32)).realize(), Tensor(np.ones(10, dtype=np.float32)).realize()
    add_us = median_us(lambda: (a + b).realize())
    rng = np.random.default_rng(0)
    step = lazy_mnist_step(Tensor, nn, training, Model, rng)
    batches = [Tensor(rng.integers(0, 1024, BS, dtype=np.int32)).realize() for _ in range(STEPS + 2)]
    start = time.perf_counter()
    step(batches[0]).item()
    first = time.perf_counter() - start
    jitted = TinyJit(step)
    walls, overheads = [], []
    for i, samples in enumerate(batches[1:]):
        timed = i >= 2 and i % 2 == 1  # every other steady step also reads the kernel timer, the rest time the wall
        counters.reset()
        start = time.perf_counter()
        with timing() if timed else contextlib.nullcontext(), contextlib.redirect_stdout(io.StringIO()):
            jitted(samples).item()
        wall = time.perf_counter() - start
        if timed:  # the same step's wall time and kernel time, so the machine's load cancels out
            overheads.append(wall - counters.time_sum_s)
        elif i >= 2:
            walls.append(wall)
    step_s, overhead_s = statistics.median(walls), statistics.median(overheads)
    return {"add_us": add_us, "first_step_s": first, "jit_step_ms": step_s * 1e3,
            "schedule_lower_s": first - step_s, "jit_overhead_ms": overhead_s * 1e3}  # fmt: skip


def measure_torch() -> dict[str, float]:
    """(a) and the eager step for PyTorch: it has no graph to schedule, so its whole step is kernels and dispatch."""
    import torch

    from bench.mnist import torch_model, torch_step

    a, b = torch.arange(10, dtype=torch.float32), torch.ones(10)
    add_us = median_us(lambda: a + b)
    rng = np.random.default_rng(0)
    images, labels = mnist_like(rng)
    torch.manual_seed(0)
    X, Y = torch.from_numpy(images), torch.from_numpy(labels).long()
    model = torch_model()
    step = torch_step(model, torch.optim.Adam(model.parameters()), X, Y)

    batches = [rng.integers(0, 1024, BS) for _ in range(STEPS + 2)]
    start = time.perf_counter()
    step(batches[0])
    first = time.perf_counter() - start
    walls = []
    for samples in batches[1:]:
        start = time.perf_counter()
        step(samples)
        walls.append(time.perf_counter() - start)
    return {"add_us": add_us, "first_step_s": first, "jit_step_ms": statistics.median(walls[2:]) * 1e3}


def worker(name: str) -> None:
    result = measure_torch() if name == "torch" else measure_lazy(name)
    print("RESULT " + json.dumps(result))


def run_worker(name: str) -> dict[str, float] | None:
    """One fresh process measuring one framework (None if it failed, with its error printed)."""
    done = subprocess.run([sys.executable, __file__, "--worker", name], capture_output=True, text=True)
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT ") :])
    print(f"# {name} failed:\n{done.stderr[-2000:]}")
    return None


def fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def main() -> None:
    names = [n.strip() for n in os.environ.get("FRAMEWORKS", ",".join(FRAMEWORKS)).split(",") if n.strip()]
    header(f"overhead: (a) (a+b).realize() on 10 elements; (b), (c) the beautiful_mnist step at batch {BS}")
    numpy_a, numpy_b = np.arange(10, dtype=np.float32), np.ones(10, dtype=np.float32)
    print(f"# NumPy a+b: {median_us(lambda: numpy_a + numpy_b):.2f} us")
    results = {}
    for name in names:
        if name != "torch":
            run_worker(name)  # warm-up: fills the compiled-kernel caches on disk, so (b) times no compiler
        results[name] = run_worker(name)
        print(f"# {name}: {results[name]}", flush=True)
    tiny = results.get("tinygrad") or {}
    rows = [("(a) (a+b).realize(), us", "add_us", 1), ("(b) first step - kernels, s", "schedule_lower_s", 2),
            ("(c) JIT step - kernels, ms", "jit_overhead_ms", 2), ("    JIT step, ms", "jit_step_ms", 1),
            ("    first step, s", "first_step_s", 2)]  # fmt: skip
    print(f"{'':<30}" + "".join(f"{n:>14}" for n in names) + f"{'glassgrad/tinygrad':>20}")
    for label, key, digits in rows:
        values = [(results.get(n) or {}).get(key) for n in names]
        ours, theirs = (results.get("glassgrad") or {}).get(key), tiny.get(key)
        ratio = f"{ours / theirs:.2f}x" if ours is not None and theirs else "-"
        print(f"{label:<30}" + "".join(f"{fmt(v, digits):>14}" for v in values) + f"{ratio:>20}")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        worker(sys.argv[2])
    else:
        main()
