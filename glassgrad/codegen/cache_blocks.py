"""Cache blocking of a contraction's reduction on a CPU: the CHUNK action the heuristics choose, by its cost.

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
STRIDED_BYTES = 1024  # a load that steps this far a term reads lines no prefetcher follows, each from far away
# (a forward matmul steps 4 bytes along A's rows and 128 along B's packed panels: chunked, 6.9 -> 8.3 ms on one core;
# dY.T @ X steps 1.5 KB: 8.2 -> 7.5 ms, X.T @ dY 6 KB: 14.4 -> 9.7 ms)


def chunk_opt(ast: UOp, opts: list[Opt], accesses: list[Access], summed: list[int], cache_bytes: int) -> Opt | None:
    """CHUNK of the outermost `summed` axis of a contraction (the main reduce's axes left once gathers are folded into
    loads) whose operands outgrow `cache_bytes` (the renderer's share of a core's cache; 0: none) and some of which it
    steps along by STRIDED_BYTES or more: the longest chunk whose rows fit in the cache, where the bytes it saves
    (`_bytes_saved`) exceed what its chunks cost (each after the first reads and writes the output again). None
    for a kernel whose sum is not stored as it is, or whose loads no output block shares (a row sum: nothing is read
    twice), or where the whole reduction fits."""
    reduce = main_reduce(ast)
    if not cache_bytes or not summed or not chunkable(ast):
        return None
    shape, full = ast.src[0].src[1].arg.shape, reduce.src[0].shape
    loads = [acc for acc in accesses if not acc.is_store]
    if not any(acc.steps.get(a, 0) == 0 for acc in loads for a in range(len(shape)) if shape[a] > 1):
        return None
    if (nest := _output_loops(shape, opts)) is None:
        return None
    (axis, iterations), inner = nest
    loops = {len(shape) + i: a for i, a in enumerate(reduce.arg[1]) if a in summed}  # (they follow the output's)
    # all in one iteration of the loop threads split, which the chunks' loop runs inside: its share of its axis
    sizes = {**dict(enumerate(shape)), axis: shape[axis] // iterations, **{loop: full[a] for loop, a in loops.items()}}
    outer = min(loops)  # the outermost reduced axis: its chunks are the largest parts of the reduction
    if not _far_apart(loads, outer, reduce.dtype.itemsize):
        return None
    row_bytes = _bytes_a_term(loads, sizes, outer, reduce.dtype.itemsize)
    size, unroll = full[loops[outer]], next((o.amount for o in opts if o.op == "UNROLL" and o.axis == loops[outer]), 1)
    if size * row_bytes <= cache_bytes:
        return None
    lanes = prod(o.amount for o in opts if o.op == "UNROLL")
    inner_steps = prod(full[a] for a in summed) // size / lanes
    fits = [n for n in range(unroll, size, unroll) if size % n == 0 and n * row_bytes <= cache_bytes]
    if not fits or fits[-1] * inner_steps < MIN_CHUNK_STEPS:
        return None
    out_bytes = ast.src[0].src[0].dtype.base.itemsize * prod(shape) // iterations  # read and written again a chunk
    if 2 * (size // fits[-1] - 1) * out_bytes >= _bytes_saved(loads, sizes, inner, reduce.dtype.itemsize, cache_bytes):
        return None
    return Opt("CHUNK", loops[outer], fits[-1])


def _output_loops(shape: tuple[int, ...], opts: list[Opt]) -> tuple[tuple[int, int], list[tuple[int, int]]] | None:
    """(axis, iterations) of the output loops the lowerer makes, as codegen/lowerer.py orders them (TILE's outer loops
    first, then each axis's loop what UPCAST and TILE leave of it), those of one iteration or more: the first (threads
    split it; a CHUNK's loop comes just inside), and the others. None where there is none."""
    left, tiles = list(shape), []
    for o in opts:
        if o.op == "UPCAST":
            left[o.axis] //= o.amount
        elif o.op == "TILE":
            tiles.append((o.axis, left[o.axis] // o.amount))
            left[o.axis] = o.amount
    nest = [(a, n) for a, n in tiles + list(enumerate(left)) if n > 1]
    return (nest[0], nest[1:]) if nest else None


def _bytes_saved(loads: list[Access], sizes: dict[int, int], inner: list[tuple[int, int]], itemsize: int,
                 cache_bytes: int) -> float:  # fmt: skip
    """Bytes that chunks whose rows fit in the cache save the loads over loops of these `sizes` (one iteration of the
    loop threads split): a load that stays put along an `inner` loop is read again in each of its iterations, and,
    unchunked, the part of the operands (all that the loads read) that falls out of `cache_bytes` comes from memory
    again each time, not from the cache."""
    read = [_footprint(acc, sizes, itemsize) for acc in loads]
    spill = max(0.0, 1 - cache_bytes / max(sum(read), 1))
    again = [prod(n for axis, n in inner if acc.steps.get(axis, 0) == 0) - 1 for acc in loads]
    return spill * sum(r * n for r, n in zip(read, again))


def _far_apart(loads: list[Access], loop: int, itemsize: int) -> bool:
    """Whether some load steps STRIDED_BYTES or more per iteration of the loop (or moves along it otherwise)."""
    moving = [acc.steps.get(loop) for acc in loads if acc.steps.get(loop, 0) != 0]
    return any(step is None or abs(step) * itemsize >= STRIDED_BYTES for step in moving)


def _bytes_a_term(loads: list[Access], sizes: dict[int, int], loop: int, itemsize: int) -> int:
    """Bytes the loads that move along `loop` read over all the other loops for one iteration of it: a row of each
    operand (a bias added to an operand stays put: no part of a chunk)."""
    one = {**sizes, loop: 1}
    return sum(_footprint(acc, one, itemsize) for acc in loads if acc.steps.get(loop, 0) != 0)


def _footprint(acc: Access, sizes: dict[int, int], itemsize: int) -> int:
    """Bytes a load reads over loops of these sizes: its elements, or where fewer, the span of its addresses (a
    convolution's window reads its input at y + ky: 18 rows for 16 outputs by 3 taps, not 48)."""
    elements = prod(n for loop, n in sizes.items() if acc.steps.get(loop, 0) != 0)
    steps = [(acc.steps.get(loop, 0), n) for loop, n in sizes.items()]
    if any(step is None for step, _ in steps):
        return itemsize * elements
    return itemsize * min(elements, 1 + sum(abs(step) * (n - 1) for step, n in steps))
