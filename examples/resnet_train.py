"""Train a ResNet-18 (CIFAR stem) on Fashion-MNIST padded to 32x32 and repeated over 3 channels: CIFAR-shaped
images from data that is on this machine (CIFAR-10 is not; `apt-get install dataset-fashion-mnist`, or DATA=mnist for
the digits). A progress bar with the loss, images a second, and the test accuracy at the end.

    python examples/resnet_train.py                        # 400 steps of 128 images: about 90% on the test set
    BF16=1 CUDA=1 python examples/resnet_train.py          # mixed precision on a GPU (float32 weights)
    STEPS=50 WIDTH=16 BLOCKS=1,1,1,1 python examples/resnet_train.py   # a smaller, quicker run

Environment: STEPS, BS (batch), LR, WIDTH (first stage's channels), BLOCKS (blocks a stage), EVAL (test images;
all 10,000 by default), DATA (fashion or mnist), DATA_DIR (where the idx files are), BF16, SEED.
"""

from __future__ import annotations

import time

from glassgrad import GlobalCounters, Tensor, TinyJit, dtypes, getenv, nn
from glassgrad.amp import autocast
from glassgrad.models.resnet import BasicBlock, ResNet
from glassgrad.nn.datasets import mnist
from glassgrad.progress import trange

MEAN, STD = 0.2860, 0.3530  # Fashion-MNIST's pixel statistics (the digits' are close enough: 0.1307, 0.3081)


def cifar_shaped(images: Tensor) -> Tensor:
    """uint8 (N, 1, 28, 28) -> normalized float32 (N, 3, 32, 32): 2 pixels of padding around, the gray in 3 channels."""
    x = (images.float() / 255.0 - MEAN) / STD
    return x.pad((None, None, (2, 2), (2, 2)), value=-MEAN / STD).expand(-1, 3, -1, -1).contiguous()


def train_step(model: ResNet, optimizer: nn.optim.Optimizer, X: Tensor, Y: Tensor, mixed: bool) -> TinyJit:
    """One SGD step on the images at `samples`, flipped left-right at random (the usual CIFAR augmentation)."""

    @TinyJit
    def step(samples: Tensor) -> Tensor:
        with Tensor.train(), autocast(dtype=dtypes.bfloat16, enabled=mixed):
            x = X[samples]
            flip = Tensor.rand(samples.shape[0], 1, 1, 1) < 0.5
            x = flip.where(x.flip(3), x)
            optimizer.zero_grad()
            loss = model(x).float().sparse_categorical_crossentropy(Y[samples]).backward()
            optimizer.step()
            return loss.realize()

    return step


def accuracy(model: ResNet, X: Tensor, Y: Tensor, batch: int, mixed: bool) -> tuple[float, int]:
    """Percent of the test images classified right, `batch` at a time, and how many were scored (the whole batches:
    one compiled shape)."""
    right, scored = 0, X.shape[0] - X.shape[0] % batch

    @TinyJit
    def correct(x: Tensor, y: Tensor) -> Tensor:
        with Tensor.train(False), autocast(dtype=dtypes.bfloat16, enabled=mixed):
            return (model(x).argmax(axis=1) == y).sum().realize()

    for start in range(0, scored, batch):
        right += correct(X[start : start + batch].contiguous(), Y[start : start + batch].contiguous()).item()
    return 100.0 * right / scored, scored


def main() -> float:
    Tensor.manual_seed(getenv("SEED", 0))
    fashion = getenv("DATA", "fashion") != "mnist"
    X_train, Y_train, X_test, Y_test = mnist(fashion=fashion, path=getenv("DATA_DIR", "") or None)
    n_eval = min(getenv("EVAL", X_test.shape[0]), X_test.shape[0])
    X_train, X_test = cifar_shaped(X_train), cifar_shaped(X_test[:n_eval])
    Y_train, Y_test = Y_train.cast(dtypes.int32).contiguous(), Y_test[:n_eval].cast(dtypes.int32).contiguous()
    Tensor.realize(X_train, Y_train, X_test, Y_test)

    blocks = [int(b) for b in getenv("BLOCKS", "2,2,2,2").split(",")]
    model = ResNet(BasicBlock, blocks, num_classes=10, width=getenv("WIDTH", 64), cifar_stem=True)
    steps, batch, mixed = getenv("STEPS", 400), getenv("BS", 128), bool(getenv("BF16", 0))
    optimizer = nn.optim.SGD(nn.state.get_parameters(model), lr=getenv("LR", 0.05), momentum=0.9, nesterov=True,
                             weight_decay=5e-4)  # fmt: skip
    step = train_step(model, optimizer, X_train, Y_train, mixed)
    print(f"ResNet ({'-'.join(map(str, blocks))} blocks, width {model.conv1.weight.shape[0]}) on "
          f"{'Fashion-MNIST' if fashion else 'MNIST'} as 3x32x32, {steps} steps of {batch}"
          f"{', bf16 autocast' if mixed else ''}")  # fmt: skip

    bar, timed, timed_from = trange(steps, desc="training", unit="step"), 0.0, min(3, steps - 1)
    for i in range(steps):
        GlobalCounters.reset()
        started = time.perf_counter()
        samples = Tensor.randint(batch, high=X_train.shape[0]).contiguous().realize()
        loss = step(samples).item()
        timed += time.perf_counter() - started if i >= timed_from else 0.0  # the first steps compile
        rate = (i + 1 - timed_from) * batch / timed if i >= timed_from and timed else 0.0
        bar.set_description(f"loss {loss:6.3f}, {rate:7.0f} images/s", refresh=False)
        bar.update(1)
    bar.close()
    rate = (steps - timed_from) * batch / timed if timed else 0.0
    test, scored = accuracy(model, X_test, Y_test, min(getenv("EVAL_BS", 500), X_test.shape[0]), mixed)
    print(f"images/s: {rate:.0f} (after the first {timed_from} steps), test accuracy: {test:.2f}% of {scored}")
    return test


if __name__ == "__main__":
    final = main()
    if (target := getenv("TARGET_ACCURACY", 0.0)) and final < target:
        raise SystemExit(f"test accuracy {final:.2f}% is below the target {target}%")
