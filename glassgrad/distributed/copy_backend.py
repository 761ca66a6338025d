"""The copy-based backend ("cpu", alias "gloo"): every rank's bytes cross the store and each rank combines them.

It is slow (all data goes through rank 0's store) and exact in what it promises: the same results on every rank,
reductions folded in rank order in the tensor's dtype, so CI can test every collective without a GPU. Each
message carries its sender's description of the call first, so a rank whose tensor differs is named at once.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from glassgrad.distributed.group import ProcessGroup
from glassgrad.dtype import DType
from glassgrad.engine.threads import captures
from glassgrad.runtime.device import Buffer
from glassgrad.tensor import Tensor

FOLD: dict[str, Callable[[Tensor, Tensor], Tensor]] = {
    "sum": Tensor.add,
    "avg": Tensor.add,
    "product": Tensor.mul,
    "max": Tensor.maximum,
    "min": Tensor.minimum,
}


def check_same_call(kind: str, calls: list[str], rank: int) -> None:
    """Raise, naming every rank's call, where the ranks did not make the same one (a kind, a shape, a dtype...)."""
    if len(set(calls)) > 1:
        described = ", ".join(f"rank {r} called {c}" for r, c in enumerate(calls))
        raise RuntimeError(f"glassgrad.distributed: {kind}: the ranks' calls differ: {described} (this is rank "
                           f"{rank}); every rank must pass tensors of the same shape and dtype, and the same op "
                           "and src")  # fmt: skip


@contextmanager
def _uncaptured() -> Iterator[None]:
    """The kernels run inside are this collective's own: a TinyJit capturing the caller's step must not record them
    (a replay runs the collective again, which runs them again)."""
    saved = list(captures())
    captures().clear()
    try:
        yield
    finally:
        captures().extend(saved)


def reduce_bytes(chunks: list[bytes], dtype: DType, op: str) -> bytes:
    """The elementwise reduction `op` of the ranks' values, folded in rank order in `dtype` (avg: the sum divided by
    the number of ranks)."""
    if not chunks[0]:
        return b""
    with _uncaptured():
        tensors = [Tensor.frombuffer(c, dtype, device="CPU") for c in chunks]
        total = functools.reduce(FOLD[op], tensors)
        if op == "avg":
            total = total / len(chunks)
        return bytes(total.cast(dtype).data())


class StoreCollective:
    """A collective through the store, run as an ExecItem's runner (so TinyJit records and replays it) on the
    buffers (output, input)."""

    def __init__(self, group: ProcessGroup, kind: str, call: str, op: str, root: int):
        self.group, self.kind, self.call, self.op, self.root = group, kind, call, op, root

    def __call__(self, bufs: list[Buffer], wait: bool) -> None:
        out, src = bufs
        g = self.group
        sends = self.kind != "broadcast" or g.rank == self.root
        messages = g.exchange(self.kind, self.call.encode() + b"\n" + (src.as_bytes() if sends else b""))
        calls, _, chunks = zip(*(m.partition(b"\n") for m in messages))
        check_same_call(self.kind, [c.decode() for c in calls], g.rank)
        if self.kind == "broadcast":
            result = chunks[self.root]
        elif self.kind == "all_gather":
            result = b"".join(chunks)
        else:
            result = reduce_bytes(list(chunks), src.dtype, self.op)
            if self.kind == "reduce_scatter":
                result = result[g.rank * out.nbytes : (g.rank + 1) * out.nbytes]
        if out.nbytes:
            out.copyin(result)
