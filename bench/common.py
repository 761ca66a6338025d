"""Shared pieces of the benchmark scripts: timing, and the frameworks compared side by side."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import statistics
import time
from collections.abc import Callable

import numpy as np


def median_seconds(fn: Callable[[], object], repeats: int = 7, warmup: int = 2) -> float:
    """Median wall time of fn() after warm-up runs (fn must finish its work before returning)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def versions() -> dict[str, str]:
    """Versions of the frameworks that are importable here."""
    found = {"python": platform.python_version()}
    for name in ("numpy", "torch", "tinygrad"):
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = "not installed"
    return found


def header(title: str) -> None:
    print(f"# {title}")
    print(f"# {cpu_model()}, {os.cpu_count()} cores; " + ", ".join(f"{k} {v}" for k, v in versions().items()))


def tinygrad_on(device: str):
    """tinygrad's Tensor with `device` as its default (its CPU device needs clang), or None when it is missing."""
    try:
        os.environ["DEV"] = device  # tinygrad reads its device from DEV when it is imported
        from tinygrad import Tensor as TinyTensor

        return TinyTensor
    except ImportError:
        return None


def tinygrad_cpu():
    """tinygrad's Tensor on its CPU device, or None when tinygrad is missing."""
    return tinygrad_on("CPU")


def print_table(rows: list[tuple[str, str, float]], unit: str, reference: str) -> None:
    """rows: (work, framework, value); prints each value and its ratio to `reference` for the same work."""
    refs = {work: value for work, fw, value in rows if fw == reference}
    print(f"{'work':<34} {'framework':<22} {unit:>12} {'vs ' + reference:>14}")
    for work, fw, value in rows:
        ratio = value / refs[work] if refs.get(work) else float("nan")
        print(f"{work:<34} {fw:<22} {value:12.2f} {ratio:13.2f}x")


def lazy_mnist_step(Tensor, nn, training, Model, rng: np.random.Generator) -> Callable:
    """examples/beautiful_mnist.py's training step (Adam, training mode) over 1,024 random MNIST-shaped images, for
    glassgrad or tinygrad (the same API; `training()` enters training mode): a function of a batch's indices (a
    tensor) that returns the realized loss."""
    images, labels = rng.random((1024, 1, 28, 28), dtype=np.float32), rng.integers(0, 10, 1024, dtype=np.int32)
    Tensor.manual_seed(0)
    X, Y = Tensor(images).realize(), Tensor(labels).realize()
    model = Model()
    optimizer = nn.optim.Adam(nn.state.get_parameters(model))

    def step(samples):
        with training():
            optimizer.zero_grad()
            loss = model(X[samples]).sparse_categorical_crossentropy(Y[samples]).backward()
            optimizer.step()
            return loss.realize()

    return step
