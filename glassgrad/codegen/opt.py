"""Optimization actions: small, separately tested changes to a kernel's loop structure."""

from __future__ import annotations

from dataclasses import dataclass

from glassgrad.helpers import prod
from glassgrad.uop.ops import Ops, UOp

THREAD_OPS = ("LOCAL", "GROUP")  # actions that give a kernel a block of threads: only renderers with blocks take them
MAX_BLOCK_THREADS = 1024  # the most threads a CUDA block holds


@dataclass(frozen=True)
class Opt:
    """UPCAST(axis, n): compute n neighbouring outputs along an output axis per iteration, in registers.
    UNROLL(axis, n): combine n neighbouring terms of a reduced axis per iteration of its loop.
    TILE(axis, n): keep n iterations of an output axis's loop; the rest becomes a loop outside every other.
    LOCAL(axis, n): n neighbouring outputs along an output axis go to n threads of one block (a GPU's).
    GROUP(axis, n): n threads of a block share a reduced axis's loop, each taking every n-th iteration, and combine
    their partial results through shared memory.
    CHUNK(axis, n): a reduced axis's loop runs n iterations at a time; the chunks are a loop just inside the one
    threads split, outside every other output loop, each chunk adding its sums into the output: a chunk of every
    operand stays in cache while all the register blocks read it (`chunkable` kernels only, on a CPU)."""

    op: str
    axis: int
    amount: int
    # TC(0, i), a kernel's only action: the whole kernel as a tiled matrix product (tensor cores, or SIMT units for
    # float32) with the renderer's configuration i (codegen/tensor_cores.py)

    def __repr__(self) -> str:
        return f"{self.op}({self.axis}, {self.amount})"


def block_threads(opts: tuple[Opt, ...] | list[Opt]) -> int:
    """Threads of one block that the LOCAL and GROUP actions ask for (1: none)."""
    return prod(o.amount for o in opts if o.op in THREAD_OPS)


def main_reduce(ast: UOp) -> UOp | None:
    """The outermost REDUCE_AXIS of a kernel: the one whose loops UNROLL and GROUP act on."""
    for node in reversed(ast.src[0].src[2].toposort() if ast.src and ast.src[0].op is Ops.STORE else []):
        if node.op is Ops.REDUCE_AXIS:
            return node
    return None


def chunkable(ast: UOp) -> bool:
    """Whether a kernel may take CHUNK: `chunked_sum` finds the sum its chunks add into the output."""
    return chunked_sum(ast) is not None


def chunked_sum(ast: UOp) -> tuple[UOp, UOp | None] | None:
    """The stored value's part that a CHUNK splits, and the term added to it once (None: none), for a kernel that
    stores its main reduction, a sum, as it is or through a view (a view is linear: each chunk's part of it adds up
    to the whole), maybe plus a term the sum does not reach (a tied weight's two gradients, one a product summed
    over the tokens, added in the one kernel: the first chunk adds the term), and reads nothing of the buffer it
    stores into (an assign in place: later chunks would read what earlier ones stored). None where it may not."""
    if len(ast.src) != 1 or ast.src[0].op is not Ops.STORE or len(ast.src[0].src) != 3:  # (4 sources: a scatter)
        return None
    if any(n.op is Ops.LOAD and n.src[0] is ast.src[0].src[0] for n in ast.toposort()):
        return None
    value, once, main = ast.src[0].src[2], None, main_reduce(ast)
    if value.op is Ops.ADD:
        value, once = next(((a, b) for a, b in (value.src, value.src[::-1]) if _under_views(a) is main
                            and main not in b.toposort()), (value, None))  # fmt: skip
    reduce = _under_views(value)
    return (value, once) if reduce.op is Ops.REDUCE_AXIS and reduce.arg[0] is Ops.ADD and reduce is main else None


def _under_views(x: UOp) -> UOp:
    while x.op is Ops.VIEW:
        x = x.src[0]
    return x
