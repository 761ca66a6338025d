"""The beautiful_mnist training step on real MNIST: glassgrad vs PyTorch (eager) vs tinygrad 0.14, on the CPU or GPU.

Run: python bench/mnist.py
     STEPS=100 BS=512 SEED=42 FRAMEWORKS=torch,glassgrad,tinygrad python bench/mnist.py   (the defaults)
     CUDA=1 python bench/mnist.py    (all three on the GPU: PyTorch on "cuda", tinygrad with DEV=CUDA)

Each framework builds the same network (examples/beautiful_mnist.py's Model), trains it with Adam in training mode
on the same seed-chosen batches for STEPS steps, then scores the full 10,000 test images. A step's time runs from
handing over the batch indices to having the loss as a Python float. glassgrad and tinygrad compile on step 1 and
capture their TinyJit on step 2, so the median is taken over steps 3..STEPS (lower is better); the ratios divide it
by PyTorch's and tinygrad's median. "test s" is the test pass (compilation included for glassgrad and tinygrad);
"total s" runs from the framework's first tensor to its test accuracy (data setup, model, all steps, test pass).
"""

from __future__ import annotations

import importlib.util
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import numpy as np  # noqa: E402

from bench.common import header, tinygrad_on  # noqa: E402
from glassgrad import getenv  # noqa: E402

STEPS, BS, SEED = getenv("STEPS", 100), getenv("BS", 512), getenv("SEED", 42)  # as examples/beautiful_mnist.py
ON_GPU = bool(getenv("CUDA", 0))  # glassgrad's default device is then CUDA; the others follow
FRAMEWORKS = ("torch", "glassgrad", "tinygrad")
COLUMNS = ("first step s", "median step ms", "test s", "total s", "test acc %", "last loss", "vs torch", "vs tinygrad")


@dataclass
class Result:
    """What one framework's run measured."""

    framework: str
    step_seconds: list[float]
    total_seconds: float
    eval_seconds: float
    accuracy: float
    final_loss: float

    @property
    def median(self) -> float:
        """Median step time over steps 3..STEPS (nan when there are fewer than 3 steps)."""
        return statistics.median(self.step_seconds[2:]) if len(self.step_seconds) > 2 else float("nan")


def load_mnist() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """MNIST from glassgrad.nn.datasets as uint8 NumPy arrays: images (N, 1, 28, 28), labels (N,)."""
    from glassgrad.nn.datasets import mnist

    return tuple(t.numpy() for t in mnist())  # type: ignore[return-value]


def time_steps(step: Callable[[np.ndarray], float], batches: np.ndarray) -> tuple[list[float], float]:
    """Seconds each step(indices) took, and the last loss; step must return the loss as a float."""
    times, loss = [], float("nan")
    for indices in batches:
        start = time.perf_counter()
        loss = step(indices)
        times.append(time.perf_counter() - start)
    return times, loss


def torch_model():
    """examples/beautiful_mnist.py's network as a torch.nn.Sequential."""
    from torch import nn

    return nn.Sequential(
        nn.Conv2d(1, 32, 5), nn.ReLU(), nn.Conv2d(32, 32, 5), nn.ReLU(), nn.BatchNorm2d(32), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3), nn.ReLU(), nn.Conv2d(64, 64, 3), nn.ReLU(), nn.BatchNorm2d(64), nn.MaxPool2d(2),
        nn.Flatten(1), nn.Linear(576, 10),
    )  # fmt: skip


def torch_step(model, optimizer, X, Y, device: str = "cpu") -> Callable[[np.ndarray], float]:
    """One eager PyTorch training step on the samples picked by an index array; it returns the loss."""
    import torch
    import torch.nn.functional as F

    def step(indices: np.ndarray) -> float:
        samples = torch.from_numpy(indices).long().to(device)
        optimizer.zero_grad()
        loss = F.cross_entropy(model(X[samples]), Y[samples])
        loss.backward()
        optimizer.step()
        return loss.item()

    return step


def run_torch(data, batches: np.ndarray) -> Result:
    """PyTorch eager on the CPU: an nn.Sequential of the same layers, torch.optim.Adam."""
    import torch

    start = time.perf_counter()
    torch.manual_seed(SEED)
    device = "cuda" if ON_GPU else "cpu"
    x_train, y_train, x_test, y_test = (torch.from_numpy(a).to(device) for a in data)
    x_train, x_test, y_train, y_test = x_train.float() / 255.0, x_test.float() / 255.0, y_train.long(), y_test.long()
    model = torch_model().to(device)
    step = torch_step(model, torch.optim.Adam(model.parameters()), x_train, y_train, device)
    model.train()
    times, loss = time_steps(step, batches)
    model.eval()
    evaluated = time.perf_counter()
    with torch.no_grad():
        accuracy = (model(x_test).argmax(dim=1) == y_test).float().mean().item() * 100
    end = time.perf_counter()
    return Result(f"torch ({device})", times, end - start, end - evaluated, accuracy, loss)


def run_glassgrad(data, batches: np.ndarray) -> Result:
    """glassgrad: examples/beautiful_mnist.py's Model and its TinyJit-captured Adam step."""
    from examples.beautiful_mnist import Model, adam_train_step
    from glassgrad import Tensor

    start = time.perf_counter()
    Tensor.manual_seed(SEED)
    X_train, Y_train, X_test, Y_test = (Tensor(a) for a in data)
    X_train, X_test = X_train.float() / 255.0, X_test.float() / 255.0
    Tensor.realize(X_train, Y_train, X_test, Y_test)
    model = Model()
    train_step = adam_train_step(model, X_train, Y_train)
    times, loss = time_steps(lambda indices: train_step(Tensor(indices).realize()).item(), batches)
    evaluated = time.perf_counter()
    with Tensor.train(False):
        accuracy = ((model(X_test).argmax(axis=1) == Y_test).mean() * 100).item()
    end = time.perf_counter()
    return Result("glassgrad (CUDA)" if ON_GPU else "glassgrad", times, end - start, end - evaluated, accuracy, loss)


class TinygradModel:
    """The same network written with tinygrad.nn (import tinygrad through bench.common.tinygrad_on first)."""

    def __init__(self):
        from tinygrad import Tensor, nn

        self.layers = [
            nn.Conv2d(1, 32, 5), Tensor.relu, nn.Conv2d(32, 32, 5), Tensor.relu, nn.BatchNorm(32), Tensor.max_pool2d,
            nn.Conv2d(32, 64, 3), Tensor.relu, nn.Conv2d(64, 64, 3), Tensor.relu, nn.BatchNorm(64), Tensor.max_pool2d,
            lambda x: x.flatten(1), nn.Linear(576, 10),
        ]  # fmt: skip

    def __call__(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def run_tinygrad(data, batches: np.ndarray) -> Result:
    """tinygrad 0.14 on its CPU (or CUDA) device: TinygradModel, its Adam and TinyJit (training mode is TRAINING=1)."""
    Tensor = tinygrad_on("CUDA" if ON_GPU else "CPU")
    from tinygrad import Context, TinyJit, nn

    start = time.perf_counter()
    Tensor.manual_seed(SEED)
    x_train, y_train, x_test, y_test = data
    X_train, X_test = Tensor(x_train).float() / 255.0, Tensor(x_test).float() / 255.0
    Y_train, Y_test = Tensor(y_train.astype(np.int32)), Tensor(y_test.astype(np.int32))
    Tensor.realize(X_train, Y_train, X_test, Y_test)
    model = TinygradModel()
    optimizer = nn.optim.Adam(nn.state.get_parameters(model))

    @TinyJit
    def train_step(samples):
        with Context(TRAINING=1):
            optimizer.zero_grad()
            loss = model(X_train[samples]).sparse_categorical_crossentropy(Y_train[samples]).backward()
            optimizer.step()
            return loss.realize()

    times, loss = time_steps(lambda indices: train_step(Tensor(indices).realize()).item(), batches)
    evaluated = time.perf_counter()
    with Context(TRAINING=0):
        accuracy = ((model(X_test).argmax(axis=1) == Y_test).mean() * 100).item()
    end = time.perf_counter()
    return Result(f"tinygrad 0.14 ({'CUDA' if ON_GPU else 'CPU'})", times, end - start, end - evaluated, accuracy, loss)


def chosen_frameworks() -> list[str]:
    """The FRAMEWORKS env var (comma list) checked against the known names, in the order given."""
    names = [n.strip() for n in os.environ.get("FRAMEWORKS", ",".join(FRAMEWORKS)).split(",") if n.strip()]
    if unknown := [n for n in names if n not in FRAMEWORKS]:
        raise SystemExit(f"FRAMEWORKS: unknown {', '.join(unknown)}; choose from {', '.join(FRAMEWORKS)}")
    return names


def installed(name: str) -> bool:
    """Whether a framework's package can be imported here (glassgrad always can)."""
    return name == "glassgrad" or importlib.util.find_spec(name) is not None  # no import: tinygrad reads DEV then


def ratio(value: float, reference: Result | None) -> str:
    """value / reference's median step time, or '-' where there is nothing to divide by."""
    if reference is None or not reference.median > 0 or value != value:
        return "-"
    return f"{value / reference.median:.2f}x"


def print_results(results: list[Result]) -> None:
    """The table: first step, median step, test pass, total, accuracy, and the ratios to PyTorch and tinygrad."""
    torch_ref = next((r for r in results if r.framework.startswith("torch")), None)
    tiny_ref = next((r for r in results if r.framework.startswith("tinygrad")), None)
    print(f"{'framework':<20} " + " ".join(COLUMNS))
    for r in results:
        median = f"{r.median * 1000:.1f}" if r.median == r.median else "-"
        times = (f"{r.step_seconds[0]:.2f}", median, f"{r.eval_seconds:.1f}", f"{r.total_seconds:.1f}")
        ratios = (ratio(r.median, torch_ref), ratio(r.median, tiny_ref))
        cells = (*times, f"{r.accuracy:.2f}", f"{r.final_loss:.3f}", *ratios)
        print(f"{r.framework:<20} " + " ".join(f"{cell:>{len(c)}}" for cell, c in zip(cells, COLUMNS)))


def main() -> None:
    names = chosen_frameworks()
    header(f"mnist: beautiful_mnist training step (Adam, batch {BS}, {STEPS} steps), median over steps 3..{STEPS}")
    if STEPS < 1:
        raise SystemExit(f"STEPS={STEPS}: train at least one step")
    if STEPS < 3:
        print(f"# STEPS={STEPS}: the median needs at least 3 steps, so it and the ratios are left blank")
    data = load_mnist()
    batches = np.random.default_rng(SEED).integers(0, data[0].shape[0], size=(STEPS, BS), dtype=np.int32)
    runners = {"torch": run_torch, "glassgrad": run_glassgrad, "tinygrad": run_tinygrad}
    results = []
    for name in names:
        if not installed(name):
            print(f"# {name} not installed: skipped")
            continue
        result = runners[name](data, batches)
        print(f"# {result.framework}: {result.total_seconds:.1f}s, test accuracy {result.accuracy:.2f}%", flush=True)
        results.append(result)
    print_results(results)


if __name__ == "__main__":
    main()
