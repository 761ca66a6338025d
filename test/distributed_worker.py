"""One rank of test_distributed.py's jobs, started by glassgrad's launcher: `distributed_worker.py MODE DIR`
(TEST_BACKEND=nccl: on the GPUs, for test_distributed_gpu.py).

collectives: runs the cases of DIR/cases.json and saves each input and output to DIR/rank<r>.npz;
errors: makes the mistakes test_distributed.py expects messages for, writing each message to DIR/<case>.<r>.txt;
ddp: trains DIR/ddp.json's model on this rank's part of the batch, saving the losses and weights;
gpt2: trains a tiny GPT-2 with examples/gpt2_train.py's step on this rank's rows (test_data_parallel.py).
"""

from __future__ import annotations

import json
import os
import pathlib
import sys
import time
from typing import Any

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "examples"))

import numpy as np  # noqa: E402
from gpt2_train import train_step  # noqa: E402

import glassgrad.distributed as dist  # noqa: E402
from glassgrad import Tensor, TinyJit, dtypes, nn  # noqa: E402
from glassgrad.distributed.group import group  # noqa: E402
from glassgrad.models.gpt2 import GPT2, GPT2Config  # noqa: E402


def values(seed: int, shape: list[int], dtype: str) -> np.ndarray:
    """Random values each dtype holds exactly (bfloat16: small multiples of 1/4), so sums are exact for all."""
    rng = np.random.default_rng(seed)
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if dtype in ("uint8", "int8"):
        return rng.integers(0, 8, shape).astype(dtype)
    if dtype in ("float16", "float32", "float64", "bfloat16"):
        return (rng.integers(-32, 32, shape) / 4).astype("float32" if dtype == "bfloat16" else dtype)
    return rng.integers(-1000, 1000, shape).astype(dtype)


def run_case(case: dict, rank: int, world: int) -> tuple[np.ndarray, np.ndarray]:
    kind, shape, dtype = case["kind"], case["shape"], getattr(dtypes, case["dtype"])
    x = values(case["seed"] * 100 + rank, shape, case["dtype"])
    t = Tensor(x, dtype=dtype)
    if kind == "all_reduce":
        dist.all_reduce(t, op=case["op"])
        out = t
    elif kind == "broadcast":
        dist.broadcast(t, src=case["src"])
        out = t
    elif kind == "all_gather":
        parts = [Tensor.empty(*shape, dtype=dtype) for _ in range(world)]
        dist.all_gather(parts, t)
        out = Tensor.stack(*parts)
    else:  # reduce_scatter: shape's first axis splits over the ranks
        out = Tensor.empty(shape[0] // world, *shape[1:], dtype=dtype)
        dist.reduce_scatter_tensor(out, t, op=case["op"])
    return x, out.numpy()


def collectives(folder: pathlib.Path) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    cases = json.loads((folder / "cases.json").read_text())
    saved = {}
    for i, case in enumerate(cases):
        saved[f"in{i}"], saved[f"out{i}"] = run_case(case, rank, world)
    # a TinyJit step with an all_reduce in it: the replays (steps 3 and 4) run the collective again
    step = TinyJit(lambda x: _reduced(x * 2))
    for n in range(4):
        saved[f"jit{n}"] = step(Tensor([float(rank + n), 1.0, -2.0]).realize()).numpy()
    np.savez(folder / f"rank{rank}.npz", **saved)


def _reduced(t: Tensor) -> Tensor:
    t = t.contiguous()
    dist.all_reduce(t, op="sum")
    return t + 1


class MLP:
    """The model test_distributed.py trains on 2 ranks and on one process: Linear, ReLU, Linear (seeded)."""

    def __init__(self, unused: bool = False):
        Tensor.manual_seed(7)
        self.l1, self.l2 = nn.Linear(5, 8), nn.Linear(8, 3)
        if unused:
            self.unused = nn.Linear(2, 2)

    def __call__(self, x: Tensor) -> Tensor:
        return self.l2(self.l1(x).relu())


def batch() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(3)
    return rng.standard_normal((8, 5)).astype(np.float32), rng.integers(0, 3, 8).astype(np.int32)


def train(model, steps: int, x: np.ndarray, y: np.ndarray) -> tuple[list[float], object]:
    """`steps` Adam steps of a TinyJit training step on (x, y) (the third step on are replays)."""
    optimizer = nn.optim.Adam(nn.state.get_parameters(model), lr=0.05)

    @TinyJit
    def step(x: Tensor, y: Tensor) -> Tensor:
        with Tensor.train():
            optimizer.zero_grad()
            loss = model(x).sparse_categorical_crossentropy(y).backward()
            optimizer.step()
            return loss

    losses = [step(Tensor(x), Tensor(y)).item() for _ in range(steps)]
    return losses, model


def ddp(folder: pathlib.Path) -> None:
    rank = dist.get_rank()
    x, y = batch()
    model = dist.DistributedDataParallel(MLP())
    losses, _ = train(model, 5, x[rank * 4 : rank * 4 + 4], y[rank * 4 : rank * 4 + 4])
    weights = {f"w_{k}": v.numpy() for k, v in nn.state.get_state_dict(model).items()}
    grads = {f"g_{k}": g.numpy() for k, g in accumulated_gradients(model, x, y, rank).items()}
    np.savez(folder / f"rank{rank}.npz", losses=np.array(losses), **weights, **grads)


def accumulated_gradients(model, x: np.ndarray, y: np.ndarray, rank: int | None) -> dict[str, Tensor]:
    """Two backward passes, on rows 0-1 and 2-3 of this rank's four (under DDP's no_sync for the first), or on the
    same rows of both ranks together (rank None): the gradients they leave."""
    for p in nn.state.get_parameters(model):
        p.grad = None
    ranks = [rank] if rank is not None else [0, 1]
    for half in (0, 1):
        rows = [r * 4 + half * 2 + i for r in ranks for i in (0, 1)]
        loss = model(Tensor(x[rows])).sparse_categorical_crossentropy(Tensor(y[rows]))
        if half == 0 and rank is not None:
            with model.no_sync():
                loss.backward()
        else:
            loss.backward()
    return {k: t.grad for k, t in nn.state.get_state_dict(model).items()}


TINY_GPT2 = GPT2Config(vocab_size=64, n_ctx=16, n_embd=32, n_layer=2, n_head=2)


def train_gpt2(rows: slice, devices: tuple[str, ...] | None = None, steps: int = 5) -> tuple[list, GPT2, Any]:
    """`steps` AdamW steps of examples/gpt2_train.py's TinyJit step on `rows` of each 4-row batch of TINY_GPT2:
    in this process (split across `devices` where given) or, once init_process_group ran, as this rank of a
    DistributedDataParallel job. The losses (of the whole batch), the model and its optimizer."""
    rng = np.random.default_rng(5)
    model = GPT2(TINY_GPT2).init_weights(0)
    if devices is not None:
        nn.parallel.replicate(model, devices)
    across_processes = dist.is_initialized()
    trained = dist.DistributedDataParallel(model) if across_processes else model
    optimizer = nn.optim.AdamW(nn.state.get_parameters(model), lr=3e-3)
    step = train_step(trained, optimizer, None, across_processes)
    losses = []
    for _ in range(steps):
        x, y = (Tensor(rng.integers(0, TINY_GPT2.vocab_size, (4, 16), dtype=np.int32)[rows]) for _ in range(2))
        losses.append(step(*((x, y) if devices is None else (x.shard(devices, 0), y.shard(devices, 0)))).item())
    return losses, model, optimizer


def gpt2(folder: pathlib.Path) -> None:
    rank = dist.get_rank()
    losses, model, _ = train_gpt2(slice(rank * 2, rank * 2 + 2))
    weights = {k: v.numpy() for k, v in nn.state.get_state_dict(model).items()}
    np.savez(folder / f"rank{rank}.npz", losses=np.array(losses), **weights)


def errors(folder: pathlib.Path) -> None:
    rank = dist.get_rank()
    cases = {
        "shapes": lambda: dist.all_reduce(Tensor.ones(2, 3) if rank == 0 else Tensor.ones(3, 2)),
        "kinds": lambda: dist.all_reduce(Tensor.ones(4)) if rank == 0 else dist.broadcast(Tensor.ones(4), src=0),
        "avg_ints": lambda: dist.all_reduce(Tensor([1, 2]), op="avg"),
        "gather_size": lambda: dist.all_gather_into_tensor(Tensor.empty(5), Tensor.ones(2)),
        "unused": unused_parameter,
    }
    for name, mistake in cases.items():
        try:
            mistake()
            message = "no error"
        except (RuntimeError, TypeError, ValueError) as e:
            message = f"{type(e).__name__}: {e}"
        (folder / f"{name}.{rank}.txt").write_text(message)
    if rank == 1:  # rank 1 never calls: rank 0's collective times out, naming it
        time.sleep(4)
        return
    group().timeout = 2.0
    try:
        dist.all_reduce(Tensor.ones(3))
        message = "no error"
    except dist.DistStoreError as e:
        message = f"{type(e).__name__}: {e}"
    (folder / "timeout.0.txt").write_text(message)


def unused_parameter() -> None:
    model = dist.DistributedDataParallel(MLP(unused=True))
    model(Tensor.ones(2, 5)).sum().backward()
    model(Tensor.ones(2, 5))


if __name__ == "__main__":
    mode, where = sys.argv[1], pathlib.Path(sys.argv[2])
    dist.init_process_group(backend=os.environ.get("TEST_BACKEND", "cpu"), timeout=120.0)
    {"collectives": collectives, "errors": errors, "ddp": ddp, "gpt2": gpt2}[mode](where)
    dist.destroy_process_group()
