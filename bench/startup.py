"""Startup: the first training step cold (an empty cache folder) and warm, and the cost of one eager op; glassgrad
beside PyTorch (and tinygrad 0.14 where it is installed), each case in a fresh process.

Run: python bench/startup.py                      # the CPU's cases
     python bench/startup.py --device CUDA        # the GPU's (skipped where there is no GPU)
     python bench/startup.py --only mnist,add --repeats 3

Cases (`--only` picks some):
- mnist: examples/beautiful_mnist.py's network, Adam, batch 512 of random MNIST-shaped images; seconds from calling
  the first training step to its loss as a Python float (no TinyJit: the first call of a TinyJit runs it so too).
- resnet18: ResNet-18 (CIFAR stem, 10 classes), SGD with momentum, batch 32 of random 3x32x32 images; the same.
- add: an eager `(a + b).realize()` on two realized 10-element float32 tensors (PyTorch: `a + b`), median
  microseconds a call over groups of calls (a group ends in a synchronize on a GPU).
- eager: the mnist step's median seconds without TinyJit (default mode) over its median under TinyJit, in one
  process (steady state: both compiled; PyTorch has no TinyJit and shows its eager step only).
"cold" runs with GLASSGRAD_CACHE_DIR (tinygrad: CACHEDB) pointing at a new empty folder, "warm" runs again on
what cold left there; PyTorch keeps nothing between processes, so its two columns are two fresh runs. With
--repeats N every figure is the median of N (cold: each on a new folder). The issue's targets are printed beside.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import numpy as np  # noqa: E402

from bench.common import header, lazy_mnist_step  # noqa: E402

CASES = ("mnist", "resnet18", "add", "eager")
FRAMEWORKS = ("torch", "glassgrad", "tinygrad")
# the targets (issue 23): (CPU, GPU) per case and cache state; None: none set
TARGETS = {("mnist", "cold"): (10, 2), ("mnist", "warm"): (2, None), ("resnet18", "cold"): (20, 5),
           ("resnet18", "warm"): (4, 1.5), ("add", "warm"): (25, 20), ("eager", "warm"): (1.5, 1.5)}  # fmt: skip
UNITS = {"mnist": "s", "resnet18": "s", "add": "us", "eager": "x JIT"}
MNIST_BATCH, RESNET_BATCH, EAGER_STEPS = 512, 32, 8


# ---- the workers: one case, one framework, in this process ----


def lazy_framework(name: str, device: str):
    """(Tensor, nn, TinyJit, training-mode context, synchronize) of glassgrad or tinygrad (the same API)."""
    if name == "glassgrad":
        from glassgrad import Device, Tensor, TinyJit, nn

        return Tensor, nn, TinyJit, Tensor.train, lambda: Device[device].synchronize()
    from tinygrad import Context, Device, Tensor, TinyJit, nn  # noqa: F811  (reads DEV, set by the parent)

    return Tensor, nn, TinyJit, lambda: Context(TRAINING=1), lambda: Device[device].synchronize()


def mnist_lazy(name: str, device: str):
    """The mnist step (a function of a batch's indices that returns the loss tensor) and its batches."""
    Tensor, nn, TinyJit, training, _ = lazy_framework(name, device)
    if name == "glassgrad":
        from examples.beautiful_mnist import Model
    else:
        from bench.mnist import TinygradModel as Model
    rng = np.random.default_rng(0)
    step = lazy_mnist_step(Tensor, nn, training, Model, rng)
    batches = [Tensor(rng.integers(0, 1024, MNIST_BATCH, dtype=np.int32)).realize() for _ in range(2 * EAGER_STEPS)]
    return step, batches, TinyJit


def resnet_glassgrad(device: str):
    from glassgrad import Tensor, nn
    from glassgrad.models.resnet import resnet18

    rng = np.random.default_rng(0)
    Tensor.manual_seed(0)
    model = resnet18(num_classes=10, cifar_stem=True)
    optimizer = nn.optim.SGD(nn.state.get_parameters(model), lr=0.01, momentum=0.9)
    images = Tensor(rng.standard_normal((RESNET_BATCH, 3, 32, 32), dtype=np.float32)).realize()
    labels = Tensor(rng.integers(0, 10, RESNET_BATCH, dtype=np.int32)).realize()

    def step():
        with Tensor.train():
            optimizer.zero_grad()
            loss = model(images).sparse_categorical_crossentropy(labels).backward()
            optimizer.step()
            return loss.item()

    return step


def cpu_seconds() -> float:
    """CPU time this process (every thread) and the children it waited for (the C compiler) have used."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def grouped_us(call, sync, calls: int = 100, groups: int = 40) -> list[float]:
    """Median microseconds of call() over groups of `calls` calls, each group ending in sync() (after warm-up):
    [wall, CPU]."""
    for _ in range(calls):
        call()
    sync()
    times = []
    for _ in range(groups):
        start = (time.perf_counter(), cpu_seconds())
        for _ in range(calls):
            call()
        sync()
        times.append([(time.perf_counter() - start[0]) / calls, (cpu_seconds() - start[1]) / calls])
    return [statistics.median(column) * 1e6 for column in zip(*times)]


def timed(fn) -> list[float]:
    """[wall seconds, CPU seconds] of fn()."""
    start = (time.perf_counter(), cpu_seconds())
    fn()
    return [time.perf_counter() - start[0], cpu_seconds() - start[1]]


def medians(runs: list[list[float]]) -> list[float]:
    return [statistics.median(column) for column in zip(*runs)]


def worker_lazy(case: str, name: str, device: str) -> list[float]:
    Tensor, _, _, _, sync = lazy_framework(name, device)
    if case == "add":
        a, b = Tensor(np.arange(10, dtype=np.float32)).realize(), Tensor(np.ones(10, dtype=np.float32)).realize()
        return grouped_us(lambda: (a + b).realize(), sync)
    if case == "resnet18":
        return timed(resnet_glassgrad(device))
    step, batches, TinyJit = mnist_lazy(name, device)
    if case == "mnist":
        return timed(lambda: step(batches[0]).item())
    eager = [timed(lambda b=b: step(b).item()) for b in batches[:EAGER_STEPS]]
    jitted = TinyJit(step)
    jit = [timed(lambda b=b: jitted(b).item()) for b in batches[EAGER_STEPS:]]
    # both past their first runs and the capture
    return [e / j for e, j in zip(medians(eager[2:]), medians(jit[2:]), strict=True)]


def worker_torch(case: str, device: str) -> list[float]:
    import torch

    from bench.mnist import torch_model, torch_step
    from bench.torch_models import TorchResNet

    where = "cuda" if device == "CUDA" else "cpu"
    sync = torch.cuda.synchronize if where == "cuda" else (lambda: None)
    rng = np.random.default_rng(0)
    torch.manual_seed(0)
    if case == "add":
        a, b = torch.arange(10, dtype=torch.float32, device=where), torch.ones(10, device=where)
        return grouped_us(lambda: a + b, sync)
    if case == "resnet18":
        model = TorchResNet("basic", [2, 2, 2, 2], num_classes=10, cifar_stem=True).to(where)
        X = torch.from_numpy(rng.standard_normal((RESNET_BATCH, 3, 32, 32), dtype=np.float32)).to(where)
        Y = torch.from_numpy(rng.integers(0, 10, RESNET_BATCH)).to(where)
        step = torch_step(model, torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9), X, Y, where)
        return timed(lambda: step(np.arange(RESNET_BATCH)))
    model = torch_model().to(where)
    X = torch.from_numpy(rng.random((1024, 1, 28, 28), dtype=np.float32)).to(where)
    Y = torch.from_numpy(rng.integers(0, 10, 1024)).to(where)
    step = torch_step(model, torch.optim.Adam(model.parameters()), X, Y, where)
    batches = [rng.integers(0, 1024, MNIST_BATCH) for _ in range(EAGER_STEPS)]
    if case == "mnist":
        return timed(lambda: step(batches[0]))
    return medians([timed(lambda b=b: step(b)) for b in batches][2:])  # seconds: no JIT to divide by


def worker(case: str, name: str, device: str) -> None:
    value = worker_torch(case, device) if name == "torch" else worker_lazy(case, name, device)
    print("RESULT " + json.dumps(value))


# ---- the parent: fresh processes, cold and warm ----


def run_worker(case: str, name: str, device: str, cache: str) -> list[float] | None:
    """One fresh process measuring one case (None where it failed, its error printed)."""
    env = dict(os.environ, GLASSGRAD_CACHE_DIR=cache, CACHEDB=os.path.join(cache, "tinygrad.db"), DEV=device)
    done = subprocess.run([sys.executable, __file__, "--worker", case, name, device], capture_output=True, text=True,
                          env=env)  # fmt: skip
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT ") :])
    print(f"# {name} {case} failed:\n{done.stderr[-3000:]}", flush=True)
    return None


def cold_and_warm(case: str, name: str, device: str, repeats: int) -> dict[str, list[float] | None]:
    """The case's median figure from fresh processes on a new cache folder (cold), then on what they left (warm)."""
    colds, warms = [], []
    for _ in range(repeats):
        with tempfile.TemporaryDirectory(prefix="startup-cache-") as cache:
            colds.append(run_worker(case, name, device, cache) if case in ("mnist", "resnet18") else None)
            warms.append(run_worker(case, name, device, cache))
    return {
        "cold": medians(colds) if None not in colds else None,
        "warm": medians(warms) if None not in warms else None,
    }


def usable(name: str, device: str) -> str | None:
    """Why this framework cannot run on this device here (None: it can)."""
    probe = {"torch": "import torch; assert torch.cuda.is_available()" if device == "CUDA" else "import torch",
             "glassgrad": f"from glassgrad import Device; Device[{device!r}]",
             "tinygrad": "import tinygrad"}[name]  # fmt: skip
    env = dict(os.environ, DEV=device)
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env)
    if done.returncode == 0:
        return None
    last = (done.stderr.strip().splitlines() or ["failed"])[-1]
    return "not installed here" if "ModuleNotFoundError" in last else f"absent ({last[:80]})"


def cell(value: list[float] | None, unit: str) -> str:
    """The wall figure, and in brackets the CPU time's (this host is shared: the CPU time is the steadier)."""
    if value is None:
        return "-"
    digits = 1 if unit == "us" else 2
    return f"{value[0]:.{digits}f} ({value[1]:.{digits}f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="CPU", choices=("CPU", "CUDA"))
    parser.add_argument("--only", default=",".join(CASES), help=f"cases, comma-separated: {', '.join(CASES)}")
    parser.add_argument("--frameworks", default=",".join(FRAMEWORKS))
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()
    device, cases = args.device, [c for c in args.only.split(",") if c]
    header(f"startup on {device}: first steps cold and warm, eager ops; each figure from a fresh process")
    print(f"# load: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f} (1, 5, 15 min)")
    names = []
    for name in args.frameworks.split(","):
        if (why := usable(name, device)) is None:
            names.append(name)
        else:
            print(f"# {name} on {device}: {why}; skipped")
    if "glassgrad" not in names:
        return
    rows = []
    for case in cases:
        runs = [n for n in names if n != "tinygrad" or case != "resnet18"]  # tinygrad has no ResNet of its own
        figures = {n: cold_and_warm(case, n, device, args.repeats) for n in runs}
        rows.append((case, figures))
        print(f"# {case}: {json.dumps(figures)}", flush=True)
    columns = [(n, state) for n in names for state in ("cold", "warm")]
    print(f"\n{'case':<24}" + "".join(f"{f'{n} {s}':>17}" for n, s in columns) + f"{'target cold / warm':>22}")
    for case, figures in rows:
        unit, gpu = UNITS[case], device == "CUDA"
        targets = [TARGETS.get((case, state), (None, None))[gpu] for state in ("cold", "warm")]
        target = " / ".join("-" if t is None else f"<= {t}" for t in targets)
        values = "".join(f"{cell(figures.get(n, {}).get(s), unit):>17}" for n, s in columns)
        print(f"{f'{case} ({unit})':<24}{values}{target:>22}")
    print("wall (CPU: this process and its compilers); eager: glassgrad's step without TinyJit over its TinyJit step,")
    print("PyTorch's column its eager step in s")


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--worker":
        worker(*sys.argv[2:])
    else:
        main()
