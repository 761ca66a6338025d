"""Train a GPT-2-shaped model on a text file, byte by byte: AdamW, TinyJit, a progress line with loss and tokens/s.

python examples/gpt2_train.py                          # the project's own docs as text; 4 layers, 256 wide, 300 steps
TEXT=book.txt STEPS=2000 python examples/gpt2_train.py
LAYERS=12 WIDTH=768 HEADS=12 CTX=256 BATCH=8 DTYPE=bfloat16 python examples/gpt2_train.py   # GPT-2 small's width
CUDA=1 GPUS=2 BATCH=8 python examples/gpt2_train.py    # data-parallel: BATCH windows a GPU, one process each
CUDA=1 SHARD=1 GPUS=2 BATCH=8 python examples/gpt2_train.py   # the same in one process, the batch split by shard

The tokens are the text's bytes (vocabulary 256), so any file trains and nothing is downloaded. The last tenth of the
text is held out: its loss is printed at the end, beside a sample the model writes after the text's first bytes
(SAMPLE=64 bytes of it; SAMPLE=0: none).
DTYPE=bfloat16 or float16 casts the model (weights, activations and AdamW's state); the loss is taken in float32.
GPUS=N runs N processes through glassgrad's launcher, the model in DistributedDataParallel: every process draws the
same N * BATCH windows a step and trains on its BATCH of them, so the losses printed (averaged over the processes)
are those of one process with BATCH=N*BATCH, and tokens/s counts all of them. SHARD=1 GPUS=N trains the same way in
one process: the model copied onto N devices of the default device's kind (CUDA:0..N-1, or CPU:0..N-1 without
CUDA=1), each step's N * BATCH windows split across them (Tensor.shard, glassgrad/nn/parallel.py); its losses are
those of GPUS=N too. tokens/s leaves out the first two steps (compiling, capturing).
"""

from __future__ import annotations

import os
import pathlib
import sys
import time
from collections.abc import Callable

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import glassgrad.distributed as dist  # noqa: E402
from glassgrad import Tensor, TinyJit, autocast, dtypes, getenv, nn  # noqa: E402
from glassgrad.distributed.run import relaunch  # noqa: E402
from glassgrad.dtype import DType  # noqa: E402
from glassgrad.models.gpt2 import GPT2, Generator, GPT2Config  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]


def read_text() -> bytes:
    """$TEXT's bytes, else the project's README and docs (text that ships with it)."""
    if path := os.environ.get("TEXT"):
        if not os.path.isfile(path):
            raise SystemExit(f"gpt2_train: TEXT={path} is not a file (name a text file to train on)")
        return pathlib.Path(path).read_bytes()
    return b"\n\n".join(p.read_bytes() for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))])


def batches(data: np.ndarray, batch: int, length: int, rng: np.random.Generator, part: slice = slice(None),
            devices: tuple[str, ...] | None = None):  # fmt: skip
    """Endless (inputs, next tokens) pairs of `batch` random windows of `length` + 1 bytes (`part` of them), split
    across `devices` along the batch axis where given."""
    while True:
        starts = rng.integers(0, len(data) - length - 1, batch)
        windows = np.stack([data[s : s + length + 1] for s in starts[part]]).astype(np.int32)
        x, y = Tensor(windows[:, :-1]), Tensor(windows[:, 1:])
        yield (x, y) if devices is None else (x.shard(devices, 0), y.shard(devices, 0))


def train_step(model: Callable[[Tensor], Tensor], optimizer: nn.optim.Optimizer, mixed: DType | None = None,
               across_processes: bool = False) -> TinyJit:  # fmt: skip
    """The training step, captured by TinyJit: step(x, y) is the cross-entropy of model(x) (classes last, taken in
    float32) against y, backward, an optimizer step; it returns the loss (bench/model_rows.py times it for every
    model). `mixed`: a 16-bit dtype runs the forward under autocast (float32 weights, 16-bit products);
    `across_processes`: the loss returned is the mean of every process's (data-parallel training)."""

    @TinyJit
    def step(x: Tensor, y: Tensor) -> Tensor:
        with Tensor.train(), autocast(dtype=mixed, enabled=mixed is not None):
            optimizer.zero_grad()
            loss = model(x).float().sparse_categorical_crossentropy(y).backward()
            optimizer.step()
            if across_processes:  # the loss of the whole batch: the mean of the processes' losses
                loss = loss.detach().contiguous()
                dist.all_reduce(loss, dist.ReduceOp.AVG)
            return loss.realize()

    return step


def main() -> None:
    parallel = "RANK" in os.environ  # one of several processes (GPUS=N, the launcher or torchrun)
    if parallel:
        dist.init_process_group()  # NCCL on CUDA:LOCAL_RANK where the default device is CUDA
    devices = nn.parallel.local_devices(getenv("GPUS", 1)) if getenv("SHARD", 0) and not parallel else None
    rank, world = (dist.get_rank(), dist.get_world_size()) if parallel else (0, len(devices) if devices else 1)
    cfg = GPT2Config(vocab_size=256, n_ctx=getenv("CTX", 128), n_embd=getenv("WIDTH", 256),
                     n_layer=getenv("LAYERS", 4), n_head=getenv("HEADS", 4))  # fmt: skip
    steps, batch, lr = getenv("STEPS", 300), getenv("BATCH", 16), float(os.environ.get("LR", "3e-4"))
    dtype = getattr(dtypes, os.environ.get("DTYPE", "float32"))
    data = np.frombuffer(read_text(), np.uint8)
    held_out = len(data) * 9 // 10
    if held_out - cfg.n_ctx - 1 <= 0 or len(data) - held_out - cfg.n_ctx - 1 <= 0:
        raise SystemExit(f"gpt2_train: {len(data):,} bytes of text are too few for windows of {cfg.n_ctx} (CTX)")
    dtypes.default_float = dtype  # the model's tensors are made in it
    model = GPT2(cfg).init_weights(getenv("SEED", 0))
    if devices is not None:
        nn.parallel.replicate(model, devices)  # before the optimizer: its state is made like the weights
    params = [p for p in nn.state.get_parameters(model) if p.requires_grad is not False]
    optimizer = nn.optim.AdamW(params, lr=lr)
    trained = dist.DistributedDataParallel(model) if parallel else model
    step = train_step(trained, optimizer, across_processes=parallel)
    rng = np.random.default_rng(getenv("SEED", 0))
    part = slice(rank * batch, (rank + 1) * batch) if parallel else slice(None)
    train = batches(data[:held_out], batch * world, cfg.n_ctx, rng, part, devices)
    say = print if rank == 0 else lambda *args, **kwargs: None
    say(f"GPT-2 shape: {cfg.n_layer} layers, {cfg.n_embd} wide, {cfg.n_head} heads, context {cfg.n_ctx}, {dtype}; "
        f"{held_out:,} bytes to train on, batch {batch}" + (f" x {world} processes" if parallel else "") +
        (f" x {world} devices {devices} in one process" if devices else "") +
        f", AdamW lr {lr}")  # fmt: skip
    start, losses, rate = time.perf_counter(), [], 0.0
    for i in range(1, steps + 1):
        losses.append(step(*next(train)).item())
        if i == 2:
            start = time.perf_counter()  # steps 1 and 2 compile and capture: tokens/s counts from here
        if i % max(1, steps // 50) == 0 or i == steps:
            rate = (i - 2) * batch * world * cfg.n_ctx / max(time.perf_counter() - start, 1e-9) if i > 2 else 0.0
            bar = "#" * (30 * i // steps)
            say(f"\r[{bar:<30}] step {i}/{steps}  loss {losses[-1]:.3f}  {rate:,.0f} tokens/s", end="", flush=True)
    say()
    if rank != 0:  # the held-out loss and the sample: rank 0's (every rank has the same weights)
        dist.destroy_process_group()
        return
    if devices is not None:  # the held-out loss and the sample on the first device, as one process would
        nn.parallel.replicate(model, devices[0])
    x, y = next(batches(data[held_out:], batch, cfg.n_ctx, np.random.default_rng(1)))
    held_out_loss = model(x).float().sparse_categorical_crossentropy(y).item()
    print(f"loss: first step {losses[0]:.3f}, last step {losses[-1]:.6f}, held-out text {held_out_loss:.3f}; "
          f"{rate:,.0f} tokens/s after step 2")  # fmt: skip
    prompt = list(data[:16])
    if getenv("SAMPLE", 64) > 0:
        sample = Generator(model).generate(prompt, min(getenv("SAMPLE", 64), cfg.n_ctx - len(prompt)))
        print("sample:", bytes(prompt + sample).decode("utf-8", errors="replace"))
    if parallel:
        dist.destroy_process_group()


if __name__ == "__main__":
    if getenv("GPUS", 1) > 1 and "RANK" not in os.environ and not getenv("SHARD", 0):
        relaunch(getenv("GPUS", 1))
    main()
