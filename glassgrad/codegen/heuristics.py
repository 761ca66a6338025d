"""Hand-coded heuristics: which optimization actions a kernel gets by default (NOOPT=1 turns them off)."""

from __future__ import annotations

from dataclasses import dataclass

from glassgrad.codegen.opt import MAX_BLOCK_THREADS, Opt, block_threads, main_reduce
from glassgrad.helpers import prod
from glassgrad.uop.ops import Ops, UOp
from glassgrad.uop.rewrite import graph_rewrite
from glassgrad.uop.symbolic import _as_term, _sum_terms, simplify, symbolic

MAX_LANES = 32  # scalar outputs computed per iteration: enough registers to hide latency, few enough not to spill
MAX_ACCUMULATORS = 16  # vector accumulators of a register-blocked kernel: half the 32 AVX-512 registers
MAX_UNROLL_ACCUMULATORS = 24  # with vector lanes along the reduce, loads take fewer registers: more accumulators
VECTOR_BYTES = 64  # the widest vector the CPU computes on in one instruction (AVX-512)
L2_BUDGET = 1 << 20  # bytes of one input a tile may keep in cache: half of a 2 MiB L2
LONG_REDUCE = 64  # a reduction this long amortizes an output's lane-by-lane stores
SMALL_REDUCE = 5  # reduced axes this short (a 3x3 or 5x5 window) are unrolled completely
MANY_TILES = 8  # tiles enough that threads taking whole ones stay about equally busy, however many there are
INTERLEAVED_ROWS = 2  # rows a plain vector reduction reads side by side (4 gains no more on this machine)
MAX_UNROLLED_TERMS = 512  # lanes times unrolled terms per iteration: a 3x3 window over a 4x8 block still unrolls
# GPU blocks (renderers with has_local): where a kernel has few outputs, threads share each one's reduction (GROUP)
GROUP_BELOW = 8192  # outputs this few leave the GPU idle with one thread each...
GROUP_FROM = 128  # ...and reductions at least this long are worth splitting
GROUP_THREADS = 256  # threads that share one output's reduction
MIN_BLOCKS = 512  # blocks a grouped kernel should have at least: register blocks (UPCASTs) give way below this
WARP = 32  # threads that load together
FAR = 1 << 30  # how far apart an access that is not affine along a loop counts


@dataclass
class Access:
    """How one memory access (a load, or the output store) moves along each loop of the kernel lowered without opts:
    `steps[axis]` is its index's step per iteration of that loop (0: it stays put), None where it is not affine or
    its padding guard changes along the loop."""

    steps: dict[int, int | None]
    is_store: bool


def _accesses(ast: UOp) -> tuple[list[Access], set[int]]:
    """Every load and store of the kernel lowered without opts, with its step along each loop; and the loops left
    once simplified (a one-hot sum's loop collapses into one load)."""
    from glassgrad.codegen.gather import collapse_gathers
    from glassgrad.codegen.lowerer import lower_kernel

    found = []
    sink = simplify(lower_kernel(ast))
    for node in sink.toposort():
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
    return found, {u.arg for u in graph_rewrite(sink, symbolic + collapse_gathers).toposort() if u.op is Ops.RANGE}


def _vector_width(size: int, itemsize: int, vector_lanes: tuple[int, ...]) -> int:
    """The most lanes (at most one 64-byte vector) that divide `size`; 1 when none does."""
    return max((n for n in vector_lanes if size % n == 0 and n * itemsize <= VECTOR_BYTES), default=1)


def _vector_axis(ast: UOp, accesses: list[Access], vector_lanes: tuple[int, ...]) -> Opt | None:
    """A vector UPCAST of the innermost output axis, when the output and every input that moves along it step by one
    element: each lane's loads and stores then become one vector load or store. In a long reduction another output
    axis may take the lanes instead, where every input steps by one element or stays along it and its vectors are
    wider (a convolution's output channels, 16 lanes, over its output width of 28, 4): each lane then stores on its
    own, once per LONG_REDUCE terms or more."""
    shape = ast.src[0].src[1].arg.shape
    axes = [a for a in range(len(shape)) if shape[a] > 1]
    if not axes or not vector_lanes:
        return None
    itemsize = ast.src[0].src[0].dtype.base.itemsize

    def width(axis: int, moving: list[Access]) -> int:
        if any(acc.steps.get(axis, 0) not in (0, 1) for acc in moving) or not any(
            acc.steps.get(axis) == 1 for acc in moving
        ):
            return 1
        return _vector_width(shape[axis], itemsize, vector_lanes)

    inner = axes[-1]
    best = (width(inner, accesses) if any(acc.is_store and acc.steps.get(inner) == 1 for acc in accesses) else 1, inner)
    reduce = main_reduce(ast)
    if reduce is not None and prod(reduce.src[0].shape[a] for a in reduce.arg[1]) >= LONG_REDUCE:
        loads = [acc for acc in accesses if not acc.is_store]
        best = max([best] + [(width(a, loads), a) for a in axes[:-1]], key=lambda wa: (wa[0], wa[1] == inner, wa[1]))
    return Opt("UPCAST", best[1], best[0]) if best[0] > 1 else None


def _upcast_amount(size: int, room: int) -> int:
    """The most lanes (8, 4 or 2, or the whole axis when it is short) that divide `size` and fit in `room`."""
    choices = ([size] if size <= 8 else []) + [8, 4, 2]
    return next((a for a in choices if size % a == 0 and 1 < a <= room), 1)


def hand_coded_opts(ast: UOp, vector_lanes: tuple[int, ...] = (), has_local: bool = False) -> list[Opt]:
    """A vector UPCAST of the innermost output axis where memory allows it; for reductions, UPCAST the output axes
    along which some input is constant (each value loaded once, used many times: a register-blocked matmul), UNROLL
    short reduced axes, and for a plain reduction UNROLL its innermost axis (as vector lanes where it is contiguous).
    With blocks of threads (`has_local`, a GPU), a kernel with few outputs and a long reduction GROUPs it."""
    if len(ast.src) != 1 or ast.src[0].op is not Ops.STORE:
        return []
    accesses, live = _accesses(ast)
    opts = _register_opts(ast, vector_lanes, accesses)
    if not has_local or (reduce := main_reduce(ast)) is None or not any(_block(ast, reduce, opts, accesses, live)):
        return opts
    # threads sharing the loop shorten each one's chain of adds already; unrolled, neighbours would read apart
    opts = _register_opts(ast, vector_lanes, accesses, plain_unroll=False)
    shape = ast.src[0].src[1].arg.shape
    while True:
        local, groups = _block(ast, reduce, opts, accesses, live)
        blocks = prod(shape) // prod(o.amount for o in opts + local if o.op in ("UPCAST", "LOCAL"))
        if blocks >= MIN_BLOCKS or not (upcasts := [o for o in opts if o.op == "UPCAST"]):
            return local + opts + groups  # a LOCAL first: it takes its axis's neighbouring outputs, before an UPCAST
        opts.remove(upcasts[-1])  # too few blocks to fill the GPU: fewer outputs a block, more blocks


def _register_opts(ast: UOp, vector_lanes: tuple[int, ...], accesses: list[Access], plain_unroll: bool = True
                   ) -> list[Opt]:  # fmt: skip
    """hand_coded_opts' choice within one thread: vector lanes, register blocks, unrolls (with `plain_unroll`, of a
    plain reduction's innermost axis too)."""
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
    # vector lanes across an outer output axis (a convolution's output channels): a block like a matmul's
    out_shape = ast.src[0].src[1].arg.shape
    inner = max((a for a in range(len(out_shape)) if out_shape[a] > 1), default=None)
    across = vector is not None and vector.op == "UPCAST" and vector.axis != inner
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
        # along the vector's own axis a few vectors are enough; the other axis takes the rest of the registers (with
        # lanes across an outer axis, the output channels, as many vectors as the block over the inner axis leaves)
        room = 2 if vector is not None and axis == vector.axis and not across else budget // lanes
        amount = _upcast_amount(shape[axis], min(room, budget // lanes))
        if amount <= 1:
            candidates.remove(axis)
            continue
        opts.append(Opt("UPCAST", axis, amount))
        upcasts += 1
        lanes *= amount
        reused |= helped
        candidates.remove(axis)
    if vector is not None and vector.op == "UNROLL" and lanes == 1 and (rows := _interleaved_rows(shape)) is not None:
        opts.append(rows)
        lanes *= rows.amount
    if vector is not None and vector.op == "UPCAST" and (tile := _panel_tile(ast, reduce, opts, vector)) is not None:
        opts.append(tile)
    for axis in reduced:
        if across:  # unrolled, its terms would be summed as a tree before the accumulator: adds, not multiply-adds
            break
        if vector is not None and vector.op == "UNROLL" and axis == vector.axis:
            continue
        if 1 < full[axis] <= SMALL_REDUCE and lanes * full[axis] <= MAX_UNROLLED_TERMS:
            opts.append(Opt("UNROLL", axis, full[axis]))
            lanes *= full[axis]
    if lanes == 1 and vector is None and plain_unroll:  # a plain reduction: several terms a step shorten the chain
        inner = reduced[-1]
        amount = next((a for a in (8, 4, 2) if full[inner] % a == 0 and full[inner] > a), 1)
        if amount > 1:
            opts.append(Opt("UNROLL", inner, amount))
    return opts


def _interleaved_rows(shape: list[int]) -> Opt | None:
    """For a reduction whose vector lanes run along its contiguous reduced axis and where no load is shared between
    outputs (a row sum): UPCAST the innermost output axis by INTERLEAVED_ROWS, so that each iteration reads that many
    rows side by side. Two memory streams a core keep more cache-line reads in flight than one, and the accumulators'
    chains of adds are independent (a 4096x4096 row sum on one core: 2.6 -> 2.4 ms)."""
    axis = next((a for a in reversed(range(len(shape))) if shape[a] > 1), None)
    if axis is None or shape[axis] % INTERLEAVED_ROWS:
        return None
    return Opt("UPCAST", axis, INTERLEAVED_ROWS)


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


def _block(ast: UOp, reduce: UOp, opts: list[Opt], accesses: list[Access], live: set[int]) -> tuple[list[Opt], ...]:
    """(LOCALs, GROUPs) for a reduction on a GPU, so that each warp's loads are coalesced and the GPU has work.

    With fewer than GROUP_BELOW outputs (after the upcasts) and a reduction of GROUP_FROM terms or more, up to
    GROUP_THREADS threads share each output's reduction. They take the reduced axes along which the loads move least
    first, so that neighbouring threads read neighbouring addresses (a weight gradient's sum over the batch and the
    image: its contiguous x axis, then y, not the batch). Where no reduced axis is contiguous but an output axis is (a
    column sum), a LOCAL gives a warp's threads neighbouring outputs first. With many outputs, a warp shares each one's
    reduction only where the reduced axis is contiguous and no output axis is (a long row sum)."""
    shape = ast.src[0].src[1].arg.shape
    upcast = {a: prod(o.amount for o in opts if o.op == "UPCAST" and o.axis == a) for a in range(len(shape))}
    unroll = {o.axis: o.amount for o in opts if o.op == "UNROLL"}
    sizes = {a: reduce.src[0].shape[a] // unroll.get(a, 1) for a in reduce.arg[1]}
    loop = {a: len(shape) + i for i, a in enumerate(reduce.arg[1])}  # the main reduce's loops follow the output's
    axes = [a for a in reduce.arg[1] if sizes[a] >= 2 and loop[a] in live]  # a one-hot sum's loop is gone: no GROUP
    if not axes or prod(sizes[a] for a in axes) < GROUP_FROM:
        return [], []
    loads = [acc for acc in accesses if not acc.is_store]

    def spread(loop: int) -> int:
        return sum(FAR if (s := acc.steps.get(loop, 0)) is None else abs(s) for acc in loads)

    def coalesced(loop: int, store: bool = False) -> bool:  # every access steps by at most one element, some by one
        moving = [acc.steps.get(loop, 0) for acc in accesses if store or not acc.is_store]
        return all(s in (0, 1, -1) for s in moving) and any(s in (1, -1) for s in moving)

    axes.sort(key=lambda a: (spread(loop[a]), -sizes[a]))
    outputs = [a for a in range(len(shape)) if shape[a] // upcast[a] > 1 and coalesced(a, store=True)]
    local: list[Opt] = []
    if not coalesced(loop[axes[0]]) and outputs:
        axis = outputs[-1]
        amount = max(n for n in range(1, WARP + 1) if shape[axis] // upcast[axis] % n == 0)
        local = [Opt("LOCAL", axis, amount)] if 2 * amount > WARP else []
    blocks = prod(shape) // prod(upcast.values()) // block_threads(local)
    # a LOCAL's outputs take part of a block: larger blocks where the blocks are few (a column sum into 4096 outputs)
    room = min(MAX_BLOCK_THREADS, max(GROUP_THREADS, (GROUP_THREADS << 8) // blocks)) if local else GROUP_THREADS
    room //= block_threads(local)
    if blocks >= GROUP_BELOW:  # enough threads already
        if local or outputs or not coalesced(loop[axes[0]]) or sizes[axes[0]] < 2 * WARP:
            return [], []
        room = WARP
    groups: list[Opt] = []
    for axis in axes:
        threads = block_threads(groups)
        share = room // threads  # threads a block still has for this axis
        if share < 2 or 2 * threads > room:
            break
        # the whole axis where it fits; else even shares where they keep whole warps (or the block is small)
        divisor = max(n for n in range(1, min(sizes[axis], share) + 1) if sizes[axis] % n == 0)
        even = divisor == sizes[axis] or 2 * divisor > share and (divisor % WARP == 0 or share < WARP)
        groups.append(Opt("GROUP", axis, divisor if even else share))
    return local, groups
