"""Data-parallel training in one process (glassgrad/nn/parallel.py, Tensor.shard): the examples' models trained on a
batch split over CPU:0/CPU:1 take the steps one device takes on the whole batch, and the steps two processes take
(the launcher, DistributedDataParallel over the copy backend); on two GPUs the same with NCCL."""

from __future__ import annotations

import importlib.util
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from distributed_worker import train_gpt2
from glassgrad import Device, Tensor, nn
from glassgrad.engine.realize import buffer_of
from glassgrad.nn.parallel import local_devices, replicate
from glassgrad.uop.ops import Ops
from test_distributed import launch
from test_distributed_gpu import _why_not

ROOT = pathlib.Path(__file__).resolve().parents[1]
WORKER = ROOT / "test" / "distributed_worker.py"
TWO = ("CPU", "CPU:1")


def test_local_devices_follow_the_default_device():
    assert local_devices(1) == (Device.canonicalize(Device.DEFAULT),)
    assert local_devices(3, "CPU") == ("CPU", "CPU:1", "CPU:2")
    assert local_devices(2, "cuda:1") == ("CUDA", "CUDA:1")
    with pytest.raises(ValueError, match="count must be at least 1, got 0"):
        local_devices(0)


class Tied:
    """Two layers sharing one weight (as GPT-2's head shares the token embedding), and a buffer."""

    def __init__(self):
        self.a = nn.Linear(3, 3)
        self.b = nn.Linear(3, 3)
        self.b.weight = self.a.weight
        self.count = Tensor([5], requires_grad=False)


def test_replicate_moves_each_tensor_once_and_back():
    model = Tied()
    before = {k: v.numpy() for k, v in nn.state.get_state_dict(model).items()}
    replicate(model, TWO)
    assert model.b.weight is model.a.weight
    for name, t in nn.state.get_state_dict(model).items():
        assert t.device == TWO and [buffer_of(s.base).device for s in t.uop.src] == list(TWO), name
        np.testing.assert_array_equal(t.numpy(), before[name])
    assert model.a.weight.requires_grad is not False and model.count.requires_grad is False  # as they were
    replicate(model, "CPU:1")
    for name, t in nn.state.get_state_dict(model).items():
        assert t.device == "CPU:1"
        np.testing.assert_array_equal(t.numpy(), before[name])


# ---- GPT-2 (examples/gpt2_train.py's step): split, one device, two processes ----


def two_processes(mode: str, folder: pathlib.Path, **env: str) -> list[dict]:
    done = launch(str(WORKER), mode, str(folder), **env)
    assert done.returncode == 0, done.stdout + done.stderr
    return [dict(np.load(folder / f"rank{r}.npz")) for r in range(2)]


def each_copy(t: Tensor, devices: tuple[str, ...]) -> list[np.ndarray]:
    """The values of every device's copy of `t` (a tensor copied onto `devices`)."""
    assert t.device == devices and t.uop.op is Ops.MULTI and t.uop.arg is None
    return [t.to(d).numpy() for d in devices]


def assert_adam_close(found: dict[str, np.ndarray], want: dict[str, np.ndarray], lr: float, steps: int) -> None:
    """The states after `steps` Adam steps of two runs agree. Adam moves an element by about lr a step whatever its
    gradient's size, so where a gradient is rounding noise (GPT-2's key biases: softmax ignores what they add to a
    query's scores; a bias whose channel BatchNorm re-centres) the runs may step apart, by at most 2 lr a step; all
    but a few elements agree closely."""
    assert found.keys() == want.keys()
    close = [np.isclose(found[k], w, rtol=1e-4, atol=1e-5) for k, w in want.items()]
    agree, total = sum(int(c.sum()) for c in close), sum(c.size for c in close)
    assert agree > 0.99 * total, f"only {agree} of {total} elements agree closely"
    for name, w in want.items():
        assert np.abs(found[name] - w).max(initial=0) <= 2 * lr * steps, name


def check_gpt2_runs_agree(devices: tuple[str, ...], ranks: list[dict]) -> None:
    """The losses and final weights of 5 steps: split over `devices` 2 rows each, on devices[0] with all 4 rows,
    and each rank of two processes with its 2 rows. Every device ends with the same weights and AdamW state."""
    split, model, optimizer = train_gpt2(slice(None), devices)
    for t in [*nn.state.get_parameters(model), *optimizer.m, *optimizer.v]:
        first, *others = each_copy(t.realize(), devices)
        for other in others:
            np.testing.assert_array_equal(other, first)
    split_weights = {k: v.numpy() for k, v in nn.state.get_state_dict(model).items()}
    old, Device.DEFAULT = Device.DEFAULT, devices[0]
    try:
        whole, model, _ = train_gpt2(slice(None))
        whole_weights = {k: v.numpy() for k, v in nn.state.get_state_dict(model).items()}
    finally:
        Device.DEFAULT = old
    assert whole[-1] < whole[0]  # it learned: the steps did something
    np.testing.assert_allclose(split, whole, rtol=1e-5)
    for rank, found in enumerate(ranks):
        np.testing.assert_allclose(found["losses"], whole, rtol=1e-5, err_msg=f"rank {rank}")
    assert_adam_close(split_weights, whole_weights, 3e-3, 5)
    for found in ranks:
        assert_adam_close({k: v for k, v in found.items() if k != "losses"}, whole_weights, 3e-3, 5)


@pytest.mark.usefixtures("on_the_cpu")
def test_gpt2_split_over_two_devices_one_device_and_two_processes_agree(tmp_path):
    check_gpt2_runs_agree(TWO, two_processes("gpt2", tmp_path, CUDA="0"))  # on the CPU, as the other two


@pytest.mark.skipif(_why_not() is not None, reason=str(_why_not()))
def test_gpt2_on_two_gpus_split_one_gpu_and_two_processes_agree(tmp_path):
    check_gpt2_runs_agree(("CUDA", "CUDA:1"), two_processes("gpt2", tmp_path, TEST_BACKEND="nccl"))


# ---- beautiful_mnist's model: split over two devices, and one device ----


def load_example(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "examples" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def mnist_setup(devices: tuple[str, ...] | None):
    """beautiful_mnist's Model (seeded) and 24 random images with labels, copied onto `devices` where given."""
    rng = np.random.default_rng(2)
    images = Tensor(rng.random((24, 1, 28, 28), dtype=np.float32))
    labels = Tensor(rng.integers(0, 10, 24, dtype=np.int32))
    Tensor.manual_seed(42)
    model = load_example("beautiful_mnist").Model()
    if devices is not None:
        replicate(model, devices)
        images, labels = images.to(devices), labels.to(devices)
    return model, images, labels


def mnist_samples(devices: tuple[str, ...] | None, step: int) -> Tensor:
    samples = Tensor(np.random.default_rng(step).integers(0, 24, 8, dtype=np.int32))
    return (samples if devices is None else samples.shard(devices, 0)).realize()


def mnist_gradients(devices: tuple[str, ...] | None) -> dict[str, np.ndarray]:
    """The parameters' gradients of one backward of the loss on 8 of the images, split over `devices` if given."""
    model, images, labels = mnist_setup(devices)
    samples = mnist_samples(devices, 0)
    with Tensor.train():
        model(images[samples]).sparse_categorical_crossentropy(labels[samples]).backward()
    return {k: t.grad.numpy() for k, t in nn.state.get_state_dict(model).items() if t.grad is not None}


def mnist_steps(devices: tuple[str, ...] | None, steps: int) -> tuple[list[float], dict[str, np.ndarray]]:
    """`steps` of beautiful_mnist's TinyJit Adam step: the losses and the final state (running statistics too)."""
    model, images, labels = mnist_setup(devices)
    step = load_example("beautiful_mnist").adam_train_step(model, images, labels)
    losses = [step(mnist_samples(devices, i)).item() for i in range(steps)]
    return losses, {k: v.numpy() for k, v in nn.state.get_state_dict(model).items()}


@pytest.mark.usefixtures("on_the_cpu")
def test_mnist_model_split_over_two_devices_steps_as_one_device():
    """BatchNorm's statistics over a split batch are the whole batch's (a sum over the split axis all-reduces): the
    gradients are one device's on the whole batch, and so are the losses of the Adam steps. Adam moves an element
    by about lr a step whatever its gradient's size, so where a gradient is rounding noise (the smallest here are
    ~1e-7) the two runs' weights may step apart (assert_adam_close)."""
    split, whole = mnist_gradients(TWO), mnist_gradients(None)
    assert split.keys() == whole.keys() and len(whole) == 14
    for name, g in whole.items():
        np.testing.assert_allclose(split[name], g, rtol=1e-4, atol=2e-5, err_msg=name)
    steps, lr = 3, 1e-3
    (split_losses, split_state), (losses, state) = mnist_steps(TWO, steps), mnist_steps(None, steps)
    np.testing.assert_allclose(split_losses, losses, rtol=1e-5)
    assert_adam_close(split_state, state, lr, steps)


@pytest.mark.slow
def test_beautiful_mnist_trains_split_over_two_devices():
    """SHARD=1 GPUS=2 trains in one process on CPU:0 and CPU:1 (bench/two_gpus.sh runs it on two GPUs); the loss
    falls."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SHARD": "1", "GPUS": "2", "STEPS": "4", "BS": "16",
           "EVAL_EVERY": "100", "CUDA": "0"}  # fmt: skip
    done = subprocess.run([sys.executable, str(ROOT / "examples" / "beautiful_mnist.py")], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=900)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    lines = [line for line in done.stdout.splitlines() if "(2 devices, one process)" in line]
    losses = [float(line.split("loss")[1].split()[0]) for line in lines]
    assert len(losses) == 4 and losses[-1] < losses[0], done.stdout
    assert float(lines[-1].split("test accuracy")[1].split("%")[0]) > 10  # scored on all 10,000 test images
