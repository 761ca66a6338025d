"""Where one beautiful_mnist training step's time goes on the GPU: the host's work, the CUDA graph, each kernel.

A tool for tuning glassgrad's GPU path, not a comparison with other frameworks:
    CUDA=1 python bench/gpu_step_profile.py   (STEPS=30 replays; OUT=dir also writes the kernel list to dir/kernels.txt;
                                               PROFILE=1 adds Python's profile of the host's work)
It runs bench/mnist.py's glassgrad step under TinyJit and splits each replayed step (as bench/mnist.py times it, from
handing over the batch indices to the loss as a float) into: copying the indices in, the replay's Python up to the
graph's launch, and waiting for the GPU and the loss. Then it times the graph alone on the GPU (CUDA events) and each
of its kernels alone, launched one by one in the step's order with its real buffers, and compares the two: a graph
slower than its kernels' sum has gaps between them.
"""

from __future__ import annotations

import os
import pickle
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from glassgrad import getenv  # noqa: E402

STEPS = getenv("STEPS", 30)


def build_step():
    """bench/mnist.py's jitted glassgrad step, and the batches to feed it."""
    import numpy as np

    from bench import mnist
    from examples.beautiful_mnist import Model, adam_train_step
    from glassgrad import Tensor

    data = mnist.load_mnist()
    Tensor.manual_seed(mnist.SEED)
    X_train, Y_train = Tensor(data[0]).float() / 255.0, Tensor(data[1])
    Tensor.realize(X_train, Y_train)
    train_step = adam_train_step(Model(), X_train, Y_train)

    batches = np.random.default_rng(0).integers(0, data[0].shape[0], size=(STEPS + 3, 512), dtype=np.int32)
    return train_step, batches


def _name(item) -> str:
    spec = getattr(item.runner, "spec", None)
    return f"{spec.name} {spec.global_size} {spec.local_size}" if spec is not None else "copy"


def main() -> None:
    import glassgrad.engine.realize as realize
    from glassgrad import Tensor
    from glassgrad.engine.jit import _buffer_of_tensor
    from glassgrad.runtime.ops_cuda import EventTimer

    seen: dict = {}
    original = realize.get_kernel
    realize.get_kernel = lambda device, ast: seen.setdefault(ast) or original(device, ast)
    train_step, batches = build_step()
    for indices in batches[:3]:  # compile, capture, build the graph
        train_step(Tensor(indices).realize()).item()
    realize.get_kernel = original
    if out := os.environ.get("OUT"):  # the step's kernels, for bench/gpu_kernel_opts.py's ASTS=
        with open(os.path.join(out, "asts.pkl"), "wb") as f:
            pickle.dump(list(seen), f)
    phases = {"indices in": [], "replay (host)": [], "GPU + loss out": [], "step": []}
    for indices in batches[3:]:
        t0 = time.perf_counter()
        samples = Tensor(indices).realize()
        t1 = time.perf_counter()
        loss = train_step(samples)
        t2 = time.perf_counter()
        loss.item()
        t3 = time.perf_counter()
        for name, seconds in zip(phases, (t1 - t0, t2 - t1, t3 - t2, t3 - t0)):
            phases[name].append(seconds)
    for name, values in phases.items():
        print(f"{name:<16} median {statistics.median(values) * 1e3:7.3f} ms")
    if getenv("PROFILE", 0):  # the host's share: Python's profile of 20 steps, by time spent in each function
        import cProfile
        import pstats

        with cProfile.Profile() as profile:
            for indices in batches[3:23]:
                train_step(Tensor(indices).realize()).item()
        pstats.Stats(profile).sort_stats("tottime").print_stats(18)
    samples = Tensor(batches[0]).realize()
    train_step(samples).item()
    bufs = [list(item.bufs) for item in train_step.items]
    for i, position, _ in train_step.input_slots:
        bufs[i][position] = _buffer_of_tensor(samples)
    if train_step.graph:
        seconds = statistics.median(train_step.graph(bufs, wait=True) for _ in range(10))
        print(f"graph alone on the GPU: median {seconds * 1e3:7.3f} ms, {len(train_step.items)} items")
    replays = []
    for _ in range(10):
        with EventTimer(True) as timer:
            train_step(samples)
        replays.append(timer.seconds)
    print(f"a replay between CUDA events (host work included): median {statistics.median(replays) * 1e3:7.3f} ms")
    each: list[list[float]] = [[] for _ in train_step.items]
    for _ in range(5):
        for k, (item, item_bufs) in enumerate(zip(train_step.items, bufs)):
            each[k].append(item.runner([b.ensure_allocated() for b in item_bufs], wait=True) or 0.0)
    medians = [statistics.median(v) for v in each]
    print(f"kernels one by one: sum of medians {sum(medians) * 1e3:7.3f} ms")
    rows = sorted(zip(medians, (_name(item) for item in train_step.items)), reverse=True)
    lines = [f"{s * 1e6:9.1f} us  {name}" for s, name in rows]
    small = [s for s in medians if s < 30e-6]
    print(f"{len(small)} kernels under 30 us: {sum(small) * 1e3:.3f} ms together")
    print("\n".join(lines[:25]))
    if out := os.environ.get("OUT"):
        with open(os.path.join(out, "kernels.txt"), "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
