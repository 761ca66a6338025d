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
PAGE_BYTES = 4096  # a load stepping this far a term reads a page a term...
TLB_PAGES = 96  # ...and a sweep over more pages than the first-level TLB holds misses it on the rest (Golden Cove: 96)
MISS_BYTES = 24  # what a TLB miss costs, in bytes moved: the second-level TLB's 7 cycles or so, against memory's
# 64-byte line in 20 (one core: X.T @ dY of 1024 tokens, X's rows 32 KB apart, a 2 MB output a tile: unchunked 103 ms,
# chunks of 64 terms 57, of 128 62; 128 tokens, rows 16 KB apart, 32 MB of output a tile: 2 chunks 94 ms, one 82-87;
# a 3x3 convolution of 256 channels at 8x8, batch 32: whole 62.5 ms, chunks of 16 channels 39.7, 32 33.8, 64 45.2)


def chunk_opt(ast: UOp, opts: list[Opt], accesses: list[Access], summed: list[int], cache_bytes: int) -> Opt | None:
    """CHUNK of the outermost `summed` axis of a contraction (the main reduce's axes left once gathers are folded into
    loads) that some load steps along by STRIDED_BYTES or more: the chunk length that moves the fewest bytes
    (`_bytes_moved`), where that is fewer than the whole reduction's, and leaves a chunk MIN_CHUNK_STEPS steps.
    None for a renderer with no cache (`cache_bytes` 0), a kernel whose sum is not stored as it is, or whose loads no
    output block shares (a row sum: nothing is read twice)."""
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
    size, unroll = full[loops[outer]], next((o.amount for o in opts if o.op == "UNROLL" and o.axis == loops[outer]), 1)
    inner_steps = prod(full[a] for a in summed) // size / prod(o.amount for o in opts if o.op == "UNROLL")
    out_bytes = ast.src[0].src[0].dtype.base.itemsize * prod(shape) // iterations
    out_spill = max(0.0, 1 - cache_bytes / out_bytes)  # the part of the output that chunks read again from memory

    def moved(n: int) -> float:
        extra = 2 * (size // n - 1) * out_bytes * out_spill  # each chunk after the first reads and writes the output
        chunk = {**sizes, outer: n}
        return extra + _bytes_moved(loads, chunk, list(loops), size // n, inner, reduce.dtype.itemsize, cache_bytes)

    lengths = [n for n in range(unroll, size, unroll) if size % n == 0 and n * inner_steps >= MIN_CHUNK_STEPS]
    best = min(reversed([*lengths, size]), key=moved)  # (of equal costs, the fewest chunks)
    return Opt("CHUNK", loops[outer], best) if best < size else None


def _bytes_moved(loads: list[Access], sizes: dict[int, int], summed: list[int], chunks: int,
                 inner: list[tuple[int, int]], itemsize: int, cache_bytes: int) -> float:  # fmt: skip
    """Bytes the loads move from memory, or the cost of their TLB misses in bytes, in one iteration of the loop threads
    split, summing a chunk (the `summed` loops of these `sizes`) `chunks` times. A load that stays put along an
    `inner` loop reads the same bytes again in each of its iterations: from memory for the part of what one iteration
    reads (every load) that falls out of `cache_bytes`. A sweep of a chunk over more pages than the TLB holds misses
    it on the rest."""
    moved, extent, outside = sum(_footprint(acc, sizes, itemsize) for acc in loads), dict(sizes), 1
    for axis, trips in inner:
        extent[axis] //= trips  # what one iteration of this loop reads
        read = [_footprint(acc, extent, itemsize) for acc in loads]
        miss = max(0.0, 1 - cache_bytes / max(sum(read), 1))
        moved += miss * outside * (trips - 1) * sum(r for r, acc in zip(read, loads) if acc.steps.get(axis, 0) == 0)
        outside *= trips
    pages = sum(_pages(acc, sizes, summed, itemsize) for acc in loads)
    misses = pages * max(0.0, 1 - TLB_PAGES / pages) if pages else 0.0  # the part of a sweep's pages the TLB misses
    return chunks * (moved + MISS_BYTES * misses * outside)  # every inner iteration sweeps the chunk once


def _pages(acc: Access, sizes: dict[int, int], summed: list[int], itemsize: int) -> float:
    """Pages a load steps onto in one sweep of the `summed` loops: along each, one an iteration where it steps a page
    or more (or is not affine), else the part of a page it steps (X's rows of 32 KB over 8 images of 128 tokens:
    1024; of 1.5 KB: 384)."""
    steps = [(acc.steps.get(loop, 0), sizes[loop]) for loop in summed if acc.steps.get(loop, 0) != 0]
    if not steps:
        return 0.0
    return prod(n if step is None else max(1.0, n * min(1.0, abs(step) * itemsize / PAGE_BYTES)) for step, n in steps)


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


def _far_apart(loads: list[Access], loop: int, itemsize: int) -> bool:
    """Whether some load steps STRIDED_BYTES or more per iteration of the loop (or moves along it otherwise)."""
    moving = [acc.steps.get(loop) for acc in loads if acc.steps.get(loop, 0) != 0]
    return any(step is None or abs(step) * itemsize >= STRIDED_BYTES for step in moving)


def _footprint(acc: Access, sizes: dict[int, int], itemsize: int) -> int:
    """Bytes a load reads over loops of these sizes: its elements, or where fewer, the span of its addresses (a
    convolution's window reads its input at y + ky: 18 rows for 16 outputs by 3 taps, not 48)."""
    elements = prod(n for loop, n in sizes.items() if acc.steps.get(loop, 0) != 0)
    steps = [(acc.steps.get(loop, 0), n) for loop, n in sizes.items()]
    if any(step is None for step, _ in steps):
        return itemsize * elements
    return itemsize * min(elements, 1 + sum(abs(step) * (n - 1) for step, n in steps))
