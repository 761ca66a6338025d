"""Cache blocking of a contraction's reduction on a CPU: the CHUNK action the heuristics choose.

A register block of outputs sums over the whole reduction before the next block starts, so every block reads its
stripe of each operand from the first term to the last. Where the operands over the whole reduction outgrow the
cache (a weight gradient dW = X.T @ dY sums over 1024 tokens of X's 1536 features: 6 MB), each block reads them
from memory, and where the reduction is the operands' outer axis (rows 6 KB apart) no prefetcher follows the reads.
CHUNK(axis, n) sums n terms at a time into the output, every block over one chunk before the next chunk: the chunk's
rows of both operands stay in cache while all the blocks read them (X.T @ dY above, one thread: 16 -> 9 ms).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from glassgrad.codegen.opt import Opt, chunkable, main_reduce
from glassgrad.helpers import prod
from glassgrad.uop.ops import UOp

if TYPE_CHECKING:
    from glassgrad.codegen.heuristics import Access

MIN_CHUNK_STEPS = 64  # iterations of a chunk's loops at least (its terms over the unrolled lanes): each chunk reads
# and writes the outputs once more (a weight gradient in chunks of one image, 8 steps of 8 lanes: 56 -> 73 ms)
MAX_CHUNKS = 32  # each chunk after the first reads and writes the whole output again: beautiful_mnist's gather of
# its batch from the 60,000 training images (a one-hot contraction, 200 chunks of 300) ran 1.5 s a step, 5x the step
STRIDED_BYTES = 1024  # a load that steps this far a term reads lines no prefetcher follows, each from far away
# (a forward matmul steps 4 bytes along A's rows and 128 along B's packed panels: chunked, 6.9 -> 8.3 ms on one core;
# dY.T @ X steps 1.5 KB: 8.2 -> 7.5 ms, X.T @ dY 6 KB: 14.4 -> 9.7 ms)


def chunk_opt(ast: UOp, opts: list[Opt], accesses: list[Access], cache_bytes: int) -> Opt | None:
    """CHUNK of the outermost reduced axis of a contraction whose operands, over the whole reduction, outgrow
    `cache_bytes` (the renderer's share of a core's cache; 0: none) and some of which it steps along by STRIDED_BYTES
    or more: the longest chunk whose rows fit in it. None for a kernel whose sum is not stored as it is, or whose
    loads no output block shares (a row sum: nothing is read twice), or where the whole reduction fits."""
    reduce = main_reduce(ast)
    if not cache_bytes or reduce is None or not chunkable(ast):
        return None
    shape, full = ast.src[0].src[1].arg.shape, reduce.src[0].shape
    loads = [acc for acc in accesses if not acc.is_store]
    if not any(acc.steps.get(a, 0) == 0 for acc in loads for a in range(len(shape)) if shape[a] > 1):
        return None
    loops = {len(shape) + i: a for i, a in enumerate(reduce.arg[1])}  # the main reduce's loops follow the output's
    sizes = {**dict(enumerate(shape)), **{loop: full[a] for loop, a in loops.items()}}
    outer = min(loops)  # the outermost reduced axis: its chunks are the largest parts of the reduction
    if not _far_apart(loads, outer, reduce.dtype.itemsize):
        return None
    row_bytes = _bytes_a_term(loads, sizes, outer, reduce.dtype.itemsize)
    size, unroll = full[loops[outer]], next((o.amount for o in opts if o.op == "UNROLL" and o.axis == loops[outer]), 1)
    if size * row_bytes <= cache_bytes:
        return None
    lanes = prod(o.amount for o in opts if o.op == "UNROLL")
    inner_steps = prod(full[a] for a in reduce.arg[1]) // size / lanes
    fits = [n for n in range(unroll, size, unroll) if size % n == 0 and n * row_bytes <= cache_bytes]
    if not fits or fits[-1] * inner_steps < MIN_CHUNK_STEPS or size // fits[-1] > MAX_CHUNKS:
        return None
    return Opt("CHUNK", loops[outer], fits[-1])


def _far_apart(loads: list[Access], loop: int, itemsize: int) -> bool:
    """Whether some load steps STRIDED_BYTES or more per iteration of the loop (or moves along it otherwise)."""
    moving = [acc.steps.get(loop) for acc in loads if acc.steps.get(loop, 0) != 0]
    return any(step is None or abs(step) * itemsize >= STRIDED_BYTES for step in moving)


def _bytes_a_term(loads: list[Access], sizes: dict[int, int], loop: int, itemsize: int) -> int:
    """Bytes the loads that move along `loop` read over all the other loops for one iteration of it: a row of each
    operand (a bias added to an operand stays put: no part of a chunk)."""
    moving = [acc for acc in loads if acc.steps.get(loop, 0) != 0]
    return itemsize * sum(prod(s for other, s in sizes.items() if other != loop and acc.steps.get(other, 0) != 0)
                          for acc in moving)  # fmt: skip
