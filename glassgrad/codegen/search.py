"""BEAM search's space: every action that might apply to a kernel, and which sequences of them are valid.

engine/beam.py times candidates built from these on the device and keeps the fastest.
"""

from __future__ import annotations

from glassgrad.codegen.opt import MAX_BLOCK_THREADS, THREAD_OPS, Opt, block_threads, chunkable, main_reduce
from glassgrad.helpers import prod
from glassgrad.uop.ops import UOp

UPCAST_AMOUNTS = (2, 3, 4, 8, 16)
UNROLL_AMOUNTS = (2, 4, 8, 16)
TILE_AMOUNTS = (2, 4, 8, 16)
LOCAL_AMOUNTS = (2, 4, 8, 16, 32, 64, 128, 256)  # a block's threads along an output axis
GROUP_AMOUNTS = (2, 4, 8, 16, 32, 64, 128, 256)  # threads sharing a reduced axis's loop (need not divide it)
CHUNK_AMOUNTS = (16, 32, 64, 128, 256, 512)  # terms of a reduced axis a CPU kernel sums while a chunk stays in cache
MAX_LANES = 256  # outputs and unrolled terms per iteration: beyond this the code stops fitting in registers


def output_shape(ast: UOp) -> tuple[int, ...]:
    return ast.src[0].src[1].arg.shape


def reduce_size(ast: UOp) -> int:
    reduce = main_reduce(ast)
    return prod(reduce.src[0].shape[a] for a in reduce.arg[1]) if reduce is not None else 1


def valid(ast: UOp, opts: tuple[Opt, ...], has_local: bool = False) -> bool:
    """Every action splits a loop into a whole number of pieces (a GROUP's threads share a loop of 2 or more
    iterations, evenly or not), each reduced axis is unrolled, grouped and chunked once, lanes stay few, and a block
    holds its threads; LOCAL and GROUP only where the renderer has blocks of threads (`has_local`), CHUNK only where
    it has none."""
    out, red = list(output_shape(ast)), {}
    reduce = main_reduce(ast)
    if reduce is not None:
        red = {a: reduce.src[0].shape[a] for a in reduce.arg[1]}
    if any(o.op == "TC" for o in opts):  # a tensor-core kernel takes no other action (the seeds hold each one)
        return False
    if not _valid_chunks(ast, opts, red, has_local):
        return False
    lanes, unrolled, grouped = 1, set(), set()
    for o in opts:
        if o.op in THREAD_OPS and not has_local:
            return False
        if o.op == "CHUNK":
            continue
        sizes = red if o.op in ("UNROLL", "GROUP") else out
        if o.axis not in (sizes if o.op in ("UNROLL", "GROUP") else range(len(out))) or o.amount < 2:
            return False
        if o.op == "GROUP":
            if o.axis in grouped:
                return False
            grouped.add(o.axis)
            continue
        if sizes[o.axis] % o.amount or sizes[o.axis] == o.amount and o.op == "TILE":
            return False
        if o.op == "UNROLL":
            if o.axis in unrolled:
                return False
            unrolled.add(o.axis)
        if o.op in ("UPCAST", "UNROLL"):
            lanes *= o.amount
        if o.op in ("UPCAST", "UNROLL", "LOCAL"):
            sizes[o.axis] //= o.amount
        else:
            sizes[o.axis] = o.amount
    shared = all(red[a] >= 2 for a in grouped)  # what UNROLL leaves of a grouped loop
    # chunks run inside an output loop that threads split: one must be left
    outer = not any(o.op == "CHUNK" for o in opts) or any(s > 1 for s in out) or any(o.op == "TILE" for o in opts)
    return lanes <= MAX_LANES and shared and outer and block_threads(opts) <= MAX_BLOCK_THREADS


def _valid_chunks(ast: UOp, opts: tuple[Opt, ...], red: dict[int, int], has_local: bool) -> bool:
    """CHUNKs on a CPU (no blocks), of a kernel that stores its sum as it is, one per reduced axis, each cutting it
    into 2 or more chunks that its UNROLL divides."""
    chunks = [o for o in opts if o.op == "CHUNK"]
    if not chunks:
        return True
    if has_local or not chunkable(ast) or len({o.axis for o in chunks}) < len(chunks):
        return False
    unroll = {o.axis: o.amount for o in opts if o.op == "UNROLL"}
    if any(o.axis not in red or red[o.axis] % o.amount or o.amount >= red[o.axis] for o in chunks):
        return False
    return not any(o.amount % unroll.get(o.axis, 1) for o in chunks)


def actions(ast: UOp, has_local: bool = False) -> list[Opt]:
    """Every single action that might apply to this kernel (LOCAL and GROUP where the renderer has blocks)."""
    out = output_shape(ast)
    reduce = main_reduce(ast)
    found = [Opt("UPCAST", a, n) for a in range(len(out)) for n in _amounts(UPCAST_AMOUNTS, out[a])]
    found += [Opt("TILE", a, n) for a in range(len(out)) for n in TILE_AMOUNTS]
    if has_local:
        found += [Opt("LOCAL", a, n) for a in range(len(out)) for n in _amounts(LOCAL_AMOUNTS, out[a])]
    if reduce is not None:
        full = reduce.src[0].shape
        found += [Opt("UNROLL", a, n) for a in reduce.arg[1] for n in _amounts(UNROLL_AMOUNTS, full[a])]
        if has_local:
            found += [Opt("GROUP", a, n) for a in reduce.arg[1] for n in GROUP_AMOUNTS if n <= full[a]]
        elif chunkable(ast):
            found += [Opt("CHUNK", a, n) for a in reduce.arg[1] for n in _chunk_amounts(full[a])]
    return found


def _chunk_amounts(size: int) -> list[int]:
    """The usual chunk lengths that divide the axis into 2 or more; where none does (45 terms), its divisors from 8."""
    usual = [n for n in CHUNK_AMOUNTS if n < size and size % n == 0]
    return usual or [n for n in range(8, min(size, CHUNK_AMOUNTS[-1] + 1)) if size % n == 0 and n < size]


def _amounts(amounts: tuple[int, ...], size: int) -> tuple[int, ...]:
    """The usual amounts, and the whole axis where it is short and none of them divides it (a 3x3 window, 5, 7)."""
    return amounts if size > max(amounts) or size in amounts else (*amounts, size)
