"""CPU kernels side by side: glassgrad (default opts, and BEAM=2 from its cache) vs NumPy, PyTorch and tinygrad 0.14.

Run: python bench/cpu.py                (all parts; PARTS=matmul,conv,elementwise,mnist picks some)
     MNIST_STEPS=8 python bench/cpu.py  (training steps per framework for the mnist part; median over steps 3..)

matmul: float32 N x N @ N x N, GFLOP/s (2*N^3 per product). conv: conv2d forward, batch 32, 32->64 channels, 3x3,
pad 1, 28x28, GFLOP/s. elementwise: y = exp(x*2+1)*0.5-3 over 16M float32 and a row sum of 4096x4096, GB/s (bytes
read plus written) beside the machine's copy bandwidth (NumPy copying 64 MiB into a preallocated array). mnist: the
beautiful_mnist training step, batch 512, ms. Every figure is a median after warm-up; ratios divide by PyTorch.
glassgrad "BEAM=2" runs each kernel with the opts a BEAM=2 search chose: the first call searches (its time is
printed), the timed calls read the choice from the disk cache. For the elementwise work, "glassgrad TinyJit" also
times the default kernels replayed by TinyJit (no graph building or scheduling per call), and "glassgrad kernels
alone" the same compiled kernels called back to back with no framework work around them (the floor of a call).
"""

from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import numpy as np  # noqa: E402

from bench.common import header, tinygrad_cpu  # noqa: E402
from bench.common import median_seconds as _median_seconds  # noqa: E402
from glassgrad import Context, Tensor, TinyJit, getenv  # noqa: E402
from glassgrad.engine import realize as engine  # noqa: E402
from glassgrad.engine.threads import captures  # noqa: E402

PARTS = [p for p in os.environ.get("PARTS", "matmul,conv,elementwise,mnist").split(",") if p]
MATMUL_SIZES = (512, 1024, 2048)
CONV = dict(batch=32, cin=32, cout=64, size=28, k=3)
N_ELEMENTWISE = 16 * 1024 * 1024
ROWS = COLS = 4096
MNIST_STEPS = getenv("MNIST_STEPS", 8)

# Memory-bound work runs at a third of its speed for the first few passes after other work went through memory (a hand C
# kernel shows it too; docs/benchmarks-history.md): every framework gets the same warm-up past that, and more runs to
# median
MEMORY_BOUND_RUNS = {"repeats": 21, "warmup": 5}
SETTLE_S = 0.5  # OpenBLAS's and OpenMP's worker threads spin a while after a call before they sleep
rows: list[tuple[str, str, float, str]] = []  # (work, framework, value, unit)


def median_seconds(fn, **kwargs) -> float:
    """bench.common.median_seconds after a pause: the previous framework's spinning threads would share the cores."""
    time.sleep(SETTLE_S)
    return _median_seconds(fn, **kwargs)


def record(work: str, framework: str, value: float, unit: str) -> None:
    rows.append((work, framework, value, unit))
    print(f"  {work:<28} {framework:<22} {value:10.2f} {unit}", flush=True)


def glassgrad_modes() -> list[tuple[str, dict]]:
    return [("glassgrad", {}), ("glassgrad BEAM=2", {"BEAM": 2})]


def time_glassgrad(make, flags: dict, repeats: int | None = None) -> float:
    """Median seconds of make().realize() under `flags` (MEMORY_BOUND_RUNS without `repeats`); kernels are compiled
    afresh for each set of flags."""
    engine._kernels.clear()  # the engine keeps one compiled kernel per AST; each mode must choose its own opts
    with Context(**flags):
        start = time.perf_counter()
        make().realize()
        if flags.get("BEAM"):
            print(f"  (BEAM=2 search and first run: {time.perf_counter() - start:.1f} s)", flush=True)
        runs = MEMORY_BOUND_RUNS if repeats is None else {"repeats": repeats, "warmup": 1}
        seconds = median_seconds(lambda: make().realize(), **runs)
    engine._kernels.clear()
    return seconds


def kernels_of(fn, arg) -> list:
    """The compiled kernels (ExecItems, with their buffers) that realizing fn(arg) runs."""
    captures().append(items := [])
    try:
        fn(arg).realize()
    finally:
        captures().remove(items)
    return items


def bench_matmul(torch, tiny) -> None:
    for n in MATMUL_SIZES:
        bench_matmul_size(n, torch, tiny)


def bench_matmul_size(n: int, torch, tiny) -> None:
    work, flops, repeats = f"matmul N={n} GFLOP/s", 2 * n**3, 7 if n < 2048 else 5
    rng = np.random.default_rng(n)
    a, b = rng.random((n, n), dtype=np.float32), rng.random((n, n), dtype=np.float32)
    record(work, "numpy", flops / median_seconds(lambda: a @ b, repeats=repeats) / 1e9, "GFLOP/s")
    if torch is not None:
        ta, tb = torch.from_numpy(a), torch.from_numpy(b)
        record(work, "torch", flops / median_seconds(lambda: ta @ tb, repeats=repeats) / 1e9, "GFLOP/s")
    ga, gb = Tensor(a).realize(), Tensor(b).realize()
    assert np.allclose((ga @ gb).numpy(), a @ b, rtol=1e-3, atol=1e-3), "glassgrad's matmul differs from NumPy"
    for name, flags in glassgrad_modes():
        record(work, name, flops / time_glassgrad(lambda: ga @ gb, flags, repeats) / 1e9, "GFLOP/s")
    if tiny is not None:
        xa, xb = tiny(a).realize(), tiny(b).realize()
        seconds = median_seconds(lambda: (xa @ xb).realize(), repeats=3 if n >= 2048 else repeats, warmup=1)
        record(work, "tinygrad 0.14 (CPU)", flops / seconds / 1e9, "GFLOP/s")


def bench_conv(torch, tiny) -> None:
    c = CONV
    rng = np.random.default_rng(1)
    x = rng.standard_normal((c["batch"], c["cin"], c["size"], c["size"]), dtype=np.float32)
    w = rng.standard_normal((c["cout"], c["cin"], c["k"], c["k"]), dtype=np.float32)
    flops = 2 * c["batch"] * c["cout"] * c["size"] ** 2 * c["cin"] * c["k"] ** 2
    work = "conv2d GFLOP/s"
    if torch is not None:
        tx, tw = torch.from_numpy(x), torch.from_numpy(w)
        f = torch.nn.functional.conv2d
        record(work, "torch", flops / median_seconds(lambda: f(tx, tw, padding=1)) / 1e9, "GFLOP/s")
        expected = f(tx, tw, padding=1).numpy()
    gx, gw = Tensor(x).realize(), Tensor(w).realize()
    if torch is not None:
        assert np.allclose(gx.conv2d(gw, padding=1).numpy(), expected, rtol=1e-3, atol=1e-3), "conv differs"
    for name, flags in glassgrad_modes():
        record(work, name, flops / time_glassgrad(lambda: gx.conv2d(gw, padding=1), flags, 5) / 1e9, "GFLOP/s")
    if tiny is not None:
        xx, xw = tiny(x).realize(), tiny(w).realize()
        seconds = median_seconds(lambda: xx.conv2d(xw, padding=1).realize(), repeats=5, warmup=1)
        record(work, "tinygrad 0.14 (CPU)", flops / seconds / 1e9, "GFLOP/s")


def bench_elementwise(torch, tiny) -> None:
    rng = np.random.default_rng(2)
    x, m = rng.random(N_ELEMENTWISE, dtype=np.float32), rng.random((ROWS, COLS), dtype=np.float32)
    chain_bytes, rowsum_bytes = 2 * x.nbytes, m.nbytes + ROWS * 4
    dst = np.empty_like(x)
    record("copy GB/s (machine)", "numpy", chain_bytes / median_seconds(lambda: np.copyto(dst, x)) / 1e9, "GB/s")
    chain, rowsum = "5-op chain GB/s", "row sum GB/s"

    def measure(work: str, framework: str, nbytes: int, fn) -> None:  # the same warm-up and repeats for everyone
        record(work, framework, nbytes / median_seconds(fn, **MEMORY_BOUND_RUNS) / 1e9, "GB/s")

    measure(chain, "numpy", chain_bytes, lambda: np.exp(x * 2.0 + 1.0) * 0.5 - 3.0)
    measure(rowsum, "numpy", rowsum_bytes, lambda: m.sum(axis=1))
    if torch is not None:
        tx, tm = torch.from_numpy(x), torch.from_numpy(m)
        measure(chain, "torch", chain_bytes, lambda: (tx * 2 + 1).exp() * 0.5 - 3)
        measure(rowsum, "torch", rowsum_bytes, lambda: tm.sum(dim=1))
    gx, gm = Tensor(x).realize(), Tensor(m).realize()
    assert np.allclose(((gx * 2 + 1).exp() * 0.5 - 3).numpy(), np.exp(x * 2.0 + 1.0) * 0.5 - 3.0, rtol=1e-5, atol=1e-5)
    assert np.allclose(gm.sum(axis=1).numpy(), m.sum(axis=1), rtol=1e-4), "glassgrad's row sum differs"
    works = [
        (chain, chain_bytes, lambda t: (t * 2 + 1).exp() * 0.5 - 3, gx),
        (rowsum, rowsum_bytes, lambda t: t.sum(axis=1), gm),
    ]
    for name, flags in glassgrad_modes():
        for work, nbytes, fn, arg in works:
            record(work, name, nbytes / time_glassgrad(lambda fn=fn, arg=arg: fn(arg), flags) / 1e9, "GB/s")
    # TinyJit replays the same kernels without building and scheduling the graph again; "kernels alone" runs its
    # captured kernels straight (no graph, no schedule, no replay checks): the floor any per-call Python adds to
    for work, nbytes, fn, arg in works:
        step = TinyJit(lambda t, fn=fn: fn(t).realize())
        measure(work, "glassgrad TinyJit", nbytes, lambda step=step, arg=arg: step(arg))
        measure(work, "glassgrad kernels alone", nbytes, lambda items=kernels_of(fn, arg): [i.run() for i in items])
    if tiny is not None:
        xx, xm = tiny(x).realize(), tiny(m).realize()
        measure(chain, "tinygrad 0.14 (CPU)", chain_bytes, lambda: ((xx * 2 + 1).exp() * 0.5 - 3).realize())
        measure(rowsum, "tinygrad 0.14 (CPU)", rowsum_bytes, lambda: xm.sum(axis=1).realize())


def bench_mnist() -> None:
    """The beautiful_mnist training step through bench/mnist.py's runners (few steps: the step, not the accuracy)."""
    import bench.mnist as mn

    data = mn.load_mnist()
    batches = np.random.default_rng(mn.SEED).integers(0, data[0].shape[0], size=(MNIST_STEPS, mn.BS), dtype=np.int32)
    runners = [("torch", mn.run_torch), ("glassgrad", mn.run_glassgrad), ("tinygrad 0.14 (CPU)", mn.run_tinygrad)]
    for name, run in runners:
        if name != "glassgrad" and not mn.installed(name.split()[0]):
            continue
        result = run(data, batches)
        record("mnist step ms", name, result.median * 1000, "ms")


def print_table() -> None:
    """Every figure and its ratio to PyTorch (and to NumPy) for the same work."""
    refs = {(w, fw): v for w, fw, v, _ in rows}
    print(f"\n{'work':<28} {'framework':<22} {'value':>10} {'vs torch':>9} {'vs numpy':>9}")
    for work, fw, value, unit in rows:
        cells = []
        for ref in ("torch", "numpy"):
            r = refs.get((work, ref))
            lower_better = unit == "ms"
            cells.append(f"{(r / value if lower_better else value / r):8.2f}x" if r else f"{'-':>9}")
        print(f"{work:<28} {fw:<22} {value:10.2f} {cells[0]:>9} {cells[1]:>9}")


def main() -> None:
    header("cpu: matmul, conv2d, elementwise and reduction kernels, the MNIST training step")
    print(f"# load average {os.getloadavg()[0]:.2f}, threads: NUM_CPU_THREADS={os.environ.get('NUM_CPU_THREADS', '-')}")
    try:
        import torch
    except ImportError:
        torch = None
    tiny = tinygrad_cpu()
    if "matmul" in PARTS:
        bench_matmul(torch, tiny)
    if "conv" in PARTS:
        bench_conv(torch, tiny)
    if "elementwise" in PARTS:
        bench_elementwise(torch, tiny)
    if "mnist" in PARTS:
        bench_mnist()
    print_table()


if __name__ == "__main__":
    main()
