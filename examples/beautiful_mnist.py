"""Train a small convolutional network on MNIST to about 98-99% test accuracy, on whatever device is default.

python examples/beautiful_mnist.py            # CPU; CUDA=1 or PYTHON=1 choose another device
STEPS=100 BS=512 python examples/beautiful_mnist.py
CUDA=1 GPUS=2 python examples/beautiful_mnist.py    # data-parallel: one process a GPU, BS images each per step
CUDA=1 SHARD=1 GPUS=2 python examples/beautiful_mnist.py   # the same in one process, the batch split by shard

GPUS=N starts N processes through glassgrad's launcher (python -m glassgrad.distributed.run; run under it, or under
torchrun, the script joins that job instead); the model is wrapped in DistributedDataParallel, which averages the
gradients over the processes (through NCCL on GPUs; without CUDA=1 the processes train on the CPU).
SHARD=1 GPUS=N trains in one process instead: the model and the images copied onto N devices of the default
device's kind (CUDA:0..N-1, or CPU:0..N-1 without CUDA=1), each step's N * BS samples split across them
(Tensor.shard, glassgrad/nn/parallel.py). BatchNorm's statistics are then the whole batch's, so its steps are
those of one device with BS=N*BS; under the launcher each process normalizes its own BS images, as PyTorch's DDP.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import glassgrad.distributed as dist  # noqa: E402
from glassgrad import GlobalCounters, Tensor, TinyJit, getenv, nn  # noqa: E402
from glassgrad.distributed.run import relaunch  # noqa: E402
from glassgrad.nn.datasets import mnist  # noqa: E402


class Model:
    """Two 5x5 convolutions, batchnorm and max-pool, two 3x3 convolutions, batchnorm and max-pool, a linear layer."""

    def __init__(self):
        self.layers: list[Callable[[Tensor], Tensor]] = [
            nn.Conv2d(1, 32, 5), Tensor.relu,
            nn.Conv2d(32, 32, 5), Tensor.relu,
            nn.BatchNorm(32), Tensor.max_pool2d,
            nn.Conv2d(32, 64, 3), Tensor.relu,
            nn.Conv2d(64, 64, 3), Tensor.relu,
            nn.BatchNorm(64), Tensor.max_pool2d,
            lambda x: x.flatten(1), nn.Linear(576, 10),
        ]  # fmt: skip

    def __call__(self, x: Tensor) -> Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


def progress(step: int, total: int, text: str, started: float) -> None:
    """One line that rewrites itself: a bar, the step count, elapsed time and `text`."""
    width = 30
    done = width * step // total
    bar = "#" * done + "-" * (width - done)
    end = "\n" if step == total or not sys.stdout.isatty() else ""
    print(f"\r[{bar}] {step:4d}/{total} {time.perf_counter() - started:6.1f}s {text}", end=end, flush=True)


def adam_train_step(model: Model, X_train: Tensor, Y_train: Tensor) -> TinyJit:
    """The model's training step, captured by TinyJit: the loss on the images at `samples`, backward, an Adam
    step (bench/mnist.py times this step)."""
    optimizer = nn.optim.Adam(nn.state.get_parameters(model))

    @TinyJit
    def train_step(samples: Tensor) -> Tensor:
        with Tensor.train():
            optimizer.zero_grad()
            loss = model(X_train[samples]).sparse_categorical_crossentropy(Y_train[samples]).backward()
            optimizer.step()
            return loss

    return train_step


def main() -> float:
    parallel = "RANK" in os.environ  # one of several processes (GPUS=N, the launcher or torchrun)
    if parallel:
        dist.init_process_group()  # NCCL on CUDA:LOCAL_RANK where the default device is CUDA
    rank = dist.get_rank() if parallel else 0
    devices = nn.parallel.local_devices(getenv("GPUS", 1)) if getenv("SHARD", 0) and not parallel else None
    Tensor.manual_seed(getenv("SEED", 42) + rank)  # each process its own samples; DDP gives all rank 0's weights
    X_train, Y_train, X_test, Y_test = mnist()
    X_train, X_test = X_train.float() / 255.0, X_test.float() / 255.0
    model = dist.DistributedDataParallel(Model()) if parallel else Model()
    if devices is not None:  # every device holds the model and the images; each picks its part of the samples
        nn.parallel.replicate(model, devices)
        X_train, Y_train = X_train.to(devices), Y_train.to(devices)
        split = 0 if X_test.shape[0] % len(devices) == 0 else None  # a split must be even: else a copy on each
        X_test, Y_test = X_test.shard(devices, split), Y_test.shard(devices, split)
    Tensor.realize(X_train, Y_train, X_test, Y_test)
    train_step = adam_train_step(model, X_train, Y_train)
    batch_size, steps = getenv("BS", 512), getenv("STEPS", 100)  # 100 steps of 512: about 98% on the test set
    parts = len(devices) if devices else 1

    @TinyJit
    def test_accuracy() -> Tensor:
        with Tensor.train(False):
            return (model(X_test).argmax(axis=1) == Y_test).mean() * 100

    accuracy, started = float("nan"), time.perf_counter()
    for step in range(1, steps + 1):
        GlobalCounters.reset()
        samples = Tensor.randint(batch_size * parts, high=X_train.shape[0])
        samples = samples if devices is None else samples.shard(devices, 0)
        loss = train_step(samples.contiguous().realize())
        if step % getenv("EVAL_EVERY", 35) == 0 or step == steps:  # the full 10,000 test images
            accuracy = test_accuracy().item()
        text = f"loss {loss.item():6.3f}  test accuracy {accuracy:5.2f}%"
        if parallel:
            text += f"  ({dist.get_world_size()} processes)"
        elif devices is not None:
            text += f"  ({len(devices)} devices, one process)"
        if rank == 0:
            progress(step, steps, text, started)
    if parallel:
        dist.destroy_process_group()
    return accuracy


if __name__ == "__main__":
    if getenv("GPUS", 1) > 1 and "RANK" not in os.environ and not getenv("SHARD", 0):
        relaunch(getenv("GPUS", 1))
    final = main()
    if (target := getenv("TARGET_ACCURACY", 0.0)) and final < target:
        raise SystemExit(f"test accuracy {final:.2f}% is below the target {target}%")
