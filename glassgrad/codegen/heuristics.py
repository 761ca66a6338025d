"""Hand-coded heuristics: which optimization actions a kernel gets by default (NOOPT=1 turns them off)."""

from __future__ import annotations

from dataclasses import dataclass

from glassgrad.codegen.opt import Opt, main_reduce
from glassgrad.helpers import prod
from glassgrad.uop.ops import Ops, UOp
from glassgrad.uop.symbolic import _as_term, _sum_terms, simplify

MAX_LANES = 32  # scalar outputs computed per iteration: enough registers to hide latency, few enough not to spill
MAX_ACCUMULATORS = 16  # vector accumulators of a register-blocked kernel: half the 32 AVX-512 registers
MAX_UNROLL_ACCUMULATORS = 24  # with vector lanes along the reduce, loads take fewer registers: more accumulators
VECTOR_BYTES = 64  # the widest vector the CPU computes on in one instruction (AVX-512)
L2_BUDGET = 1 << 20  # bytes of one input a tile may keep in cache: half of a 2 MiB L2
SMALL_REDUCE = 5  # reduced axes this short (a 3x3 or 5x5 window) are unrolled completely
MANY_TILES = 8  # tiles enough that threads taking whole ones stay about equally busy, however many there are
MAX_UNROLLED_TERMS = 512  # lanes times unrolled terms per iteration: a 3x3 window over a 4x8 block still unrolls


@dataclass
class Access:
    """How one memory access (a load, or the output store) moves along each loop of the kernel lowered without opts:
    `steps[axis]` is its index's step per iteration of that loop (0: it stays put), None where it is not affine or
    its padding guard changes along the loop."""

    steps: dict[int, int | None]
    is_store: bool


def _accesses(ast: UOp) -> list[Access]:
    """Every load and store of the kernel lowered without opts, with its step along each loop."""
    from glassgrad.codegen.lowerer import lower_kernel

    found = []
    for node in simplify(lower_kernel(ast)).toposort():
        if node.op not in (Ops.LOAD, Ops.STORE):
            continue
        index = node.src[0]
        ranges = {u for u in index.toposort() if u.op is Ops.RANGE}
        guarded = {u for v in index.src[2:] for u in v.toposort() if u.op is Ops.RANGE}
        terms = [_as_term(t) for t in (_sum_terms(index.src[1]) or [index.src[1]])]
        steps: dict[int, int | None] = {}
        for r in ranges:
            direct = [f for base, f in terms if base is r]
            nested = any(base is not None and base is not r and r in base.toposort() for base, _ in terms)
            steps[r.arg] = None if nested or r in guarded or len(direct) != 1 else direct[0]
        found.append(Access(steps, node.op is Ops.STORE))
    return found


def _vector_width(size: int, itemsize: int, vector_lanes: tuple[int, ...]) -> int:
    """The most lanes (at most one 64-byte vector) that divide `size`; 1 when none does."""
    return max((n for n in vector_lanes if size % n == 0 and n * itemsize <= VECTOR_BYTES), default=1)


def _vector_axis(ast: UOp, accesses: list[Access], vector_lanes: tuple[int, ...]) -> Opt | None:
    """A vector UPCAST of the innermost output axis, when the output and every input that moves along it step by one
    element: each lane's loads and stores then become one vector load or store."""
    shape = ast.src[0].src[1].arg.shape
    axes = [a for a in range(len(shape)) if shape[a] > 1]
    if not axes or not vector_lanes:
        return None
    axis = axes[-1]
    if any(acc.steps.get(axis, 0) not in (0, 1) for acc in accesses):
        return None
    if not any(acc.is_store and acc.steps.get(axis) == 1 for acc in accesses):
        return None
    width = _vector_width(shape[axis], ast.src[0].src[0].dtype.base.itemsize, vector_lanes)
    return Opt("UPCAST", axis, width) if width > 1 else None


def _upcast_amount(size: int, room: int) -> int:
    """The most lanes (8, 4 or 2, or the whole axis when it is short) that divide `size` and fit in `room`."""
    choices = ([size] if size <= 8 else []) + [8, 4, 2]
    return next((a for a in choices if size % a == 0 and 1 < a <= room), 1)


def hand_coded_opts(ast: UOp, vector_lanes: tuple[int, ...] = ()) -> list[Opt]:
    """A vector UPCAST of the innermost output axis where memory allows it; for reductions, UPCAST the output axes
    along which some input is constant (each value loaded once, used many times: a register-blocked matmul), UNROLL
    short reduced axes, and for a plain reduction UNROLL its innermost axis (as vector lanes where it is contiguous)."""
    if len(ast.src) != 1 or ast.src[0].op is not Ops.STORE:
        return []
    accesses = _accesses(ast)
    opts: list[Opt] = []
    if (vector := _vector_axis(ast, accesses, vector_lanes)) is not None:
        opts.append(vector)
    reduce = main_reduce(ast)
    if reduce is None:
        return opts
    shape = list(ast.src[0].src[1].arg.shape)
    loads = [acc for acc in accesses if not acc.is_store]
    full, reduced = reduce.src[0].shape, sorted(reduce.arg[1])
    if vector is None and (vector := _vector_unroll(reduce, len(shape), loads, vector_lanes)) is not None:
        opts.insert(0, vector)  # first, so that it is the one rendered as vector lanes
    if vector is not None and vector.op == "UPCAST":
        shape[vector.axis] //= vector.amount
    budget = MAX_LANES if vector is None else MAX_ACCUMULATORS if vector.op == "UPCAST" else MAX_UNROLL_ACCUMULATORS
    lanes = 1
    reused: set[int] = set()  # loads that already serve several lanes
    # output axes, innermost first, along which some load is constant; prefer one that helps a load not yet reused
    candidates = [a for a in reversed(range(len(shape))) if shape[a] > 1]
    upcasts = 0
    while upcasts < 2 and candidates:
        usable = [(a, {i for i, acc in enumerate(loads) if acc.steps.get(a, 0) == 0}) for a in candidates]
        usable = [(a, h) for a, h in usable if h and _upcast_amount(shape[a], budget // lanes) > 1]
        if not usable:
            break
        axis, helped = next(((a, h) for a, h in usable if h - reused), usable[0])
        # along the vector's own axis a few vectors are enough; the other axis takes the rest of the registers
        room = 2 if vector is not None and axis == vector.axis else budget // lanes
        amount = _upcast_amount(shape[axis], min(room, budget // lanes))
        if amount <= 1:
            candidates.remove(axis)
            continue
        opts.append(Opt("UPCAST", axis, amount))
        upcasts += 1
        lanes *= amount
        reused |= helped
        candidates.remove(axis)
    if vector is not None and vector.op == "UPCAST" and (tile := _panel_tile(ast, reduce, opts, vector)) is not None:
        opts.append(tile)
    for axis in reduced:
        if vector is not None and vector.op == "UNROLL" and axis == vector.axis:
            continue
        if 1 < full[axis] <= SMALL_REDUCE and lanes * full[axis] <= MAX_UNROLLED_TERMS:
            opts.append(Opt("UNROLL", axis, full[axis]))
            lanes *= full[axis]
    if lanes == 1 and vector is None:  # a plain reduction: several terms per iteration shorten the chain of adds
        inner = reduced[-1]
        amount = next((a for a in (8, 4, 2) if full[inner] % a == 0 and full[inner] > a), 1)
        if amount > 1:
            opts.append(Opt("UNROLL", inner, amount))
    return opts


def _panel_tile(ast: UOp, reduce: UOp, opts: list[Opt], vector: Opt) -> Opt | None:
    """TILE an output axis along which the register block moves so that the part of an input one tile reads along the
    whole reduction (a matmul's panel of B: K rows by the tile's columns) fits in half of L2: every row block then
    reads it from cache, and each thread takes whole tiles. That axis is the vector axis, or, where lanes take all of
    it (a matmul over packed panels of B), the next outer axis when no UPCAST splits it."""
    shape = list(ast.src[0].src[1].arg.shape)
    lanes = [1] * len(shape)
    for o in opts:
        if o.op == "UPCAST":
            shape[o.axis], lanes[o.axis] = shape[o.axis] // o.amount, lanes[o.axis] * o.amount
    axis = vector.axis
    if shape[axis] == 1:
        axis = next((a for a in reversed(range(vector.axis)) if shape[a] > 1), None)
        if axis is None or lanes[axis] > 1:
            return None
    width = lanes[axis] * prod(s * n for s, n in zip(shape[axis + 1 :], lanes[axis + 1 :]))
    panel_bytes = prod(reduce.src[0].shape[a] for a in reduce.arg[1]) * width * reduce.dtype.itemsize
    fits = L2_BUDGET // max(panel_bytes, 1)
    keeps = [n for n in (64, 32, 16, 8, 4, 2) if n <= fits and shape[axis] % n == 0]
    if not keeps or keeps[0] == shape[axis]:  # the whole axis's panel fits: nothing to tile
        return None
    # threads take whole tiles: an even number of them (or many) keeps two cores equally busy
    keep = next((n for n in keeps if (shape[axis] // n) % 2 == 0 or shape[axis] // n >= MANY_TILES), keeps[0])
    return Opt("TILE", axis, keep)


def _vector_unroll(reduce: UOp, n_out: int, loads: list[Access], vector_lanes: tuple[int, ...]) -> Opt | None:
    """A vector UNROLL of the innermost reduced axis when every load steps by one element (or stays) along it: each
    lane accumulates its own partial sum, combined after the loop (a row sum, a convolution's weight gradient)."""
    inner = max(reduce.arg[1])
    loop = n_out + list(reduce.arg[1]).index(inner)  # the main reduce's loops follow the output's
    if not all(acc.steps.get(loop, 0) in (0, 1) for acc in loads):
        return None
    width = _vector_width(reduce.src[0].shape[inner], reduce.dtype.itemsize, vector_lanes)
    return Opt("UNROLL", inner, width) if width > 1 else None
