"""Hand-coded heuristics: which optimization actions a kernel gets by default (NOOPT=1 turns them off)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from glassgrad.codegen.cache_blocks import chunk_opt
from glassgrad.codegen.gather import fold_gathers
from glassgrad.codegen.lowerer import lower_kernel, scatter_store
from glassgrad.codegen.opt import MAX_BLOCK_THREADS, Opt, block_threads, main_reduce
from glassgrad.helpers import L2_BUDGET, prod
from glassgrad.renderer import Renderer
from glassgrad.uop.ops import Ops, UOp
from glassgrad.uop.symbolic import _as_term, _sum_terms, simplify

MAX_LANES = 32  # scalar outputs computed per iteration: enough registers to hide latency, few enough not to spill
MAX_ACCUMULATORS = 16  # vector accumulators of a register-blocked kernel: half the 32 AVX-512 registers
MAX_UNROLL_ACCUMULATORS = 24  # with vector lanes along the reduce, loads take fewer registers: more accumulators
VECTOR_BYTES = 64  # the widest vector the CPU computes on in one instruction (AVX-512)
VECTOR_REGISTERS = 32  # AVX-512's register file: a block's accumulators and the vectors each step loads share it
MIN_BLOCK = 16  # accumulators a block across output channels has at least before it takes a second column axis
CC_VECTOR_BYTES = 32  # GCC -O2 vectorizes a loop with a guarded load itself (masked 256-bit vectors), but only one
# whose length is a multiple of its vector: its "very cheap" cost model allows no scalar remainder loop
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
# GPU register blocks of a convolution (_window_opts): rows of outputs that share input rows across a window
WINDOW_ACCUMULATORS = 64  # outputs a thread's block holds at most (the rest of its registers hold its loads)
MAX_WINDOW_LANES = 8  # output rows (say) a thread's block takes along the window's axis at most
GROUPED_ACCUMULATORS = 128  # a grouped kernel's block over the window axes and one more: few outputs, long sums
MIN_GROUPED_BLOCKS = 128  # a grouped kernel with a block of window axes keeps it down to this many blocks
GROUPED_LANES = 128  # scalar outputs a thread of another grouped convolution kernel computes at most
GROUPED_REUSE = 8  # output channels (say) a grouped window block takes at most, beside its window
GROUPED_ROWS = 2  # summed rows a thread of such a kernel takes at once (they share input rows)...
SHARED_ROWS = 4  # ...where that leaves the threads at least this many of them to share
FAR = 1 << 30  # how far apart an access that is not affine along a loop counts


@dataclass
class Access:
    """How one memory access (a load, or the output store) moves along each loop of the kernel lowered without opts:
    `steps[axis]` is its index's step per iteration of that loop (0: it stays put), None where it is not affine or
    its padding guard changes along the loop; `guarded`: the loops its padding guard depends on."""

    steps: dict[int, int | None]
    is_store: bool
    guarded: frozenset[int] = frozenset()
    spread: dict[int, float] = field(default_factory=dict)  # elements the address moves per iteration, on average


def _mean_step(index: UOp, r: UOp) -> float:
    """How far `index` moves per iteration of loop `r` on average, where steps give up (None): through integer
    divisions and remainders by constants (a pooling window's x // 2 moves half an element); FAR for an index read
    from memory or built otherwise."""
    if index is r:
        return 1.0
    if index.op in (Ops.CONST, Ops.RANGE) or r not in index.toposort():
        return 0.0
    if index.op is Ops.ADD:
        return sum(_mean_step(x, r) for x in index.src)
    if index.op in (Ops.MUL, Ops.IDIV, Ops.MOD) and index.src[1].op is Ops.CONST and index.src[1].arg:
        inner, c = _mean_step(index.src[0], r), abs(index.src[1].arg)
        return inner * c if index.op is Ops.MUL else inner / c if index.op is Ops.IDIV else min(inner, c)
    return float(FAR)


def _accesses(ast: UOp) -> tuple[list[Access], frozenset[int]]:
    """Every load and store of the kernel lowered without opts, its one-hot sums folded into loads (codegen/gather.py),
    with its step along each loop; and the loops that fold (no loop is left there to unroll, chunk or share)."""
    found = []
    # (a scatter's loops in order too: loop i is axis i)
    sink, folded = fold_gathers(simplify(lower_kernel(ast, atomics=True)))
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
        spread = {u.arg: float(abs(steps[u.arg])) if steps[u.arg] is not None else _mean_step(index.src[1], u)
                  for u in ranges}  # fmt: skip
        found.append(Access(steps, node.op is Ops.STORE, frozenset(r.arg for r in guarded), spread))
    return found, folded


def _summed(ast: UOp, folded: frozenset[int]) -> list[int]:
    """The main reduce's axes whose loops the kernel runs: all but those the gather rule folds into a load (a gather
    written as a one-hot sum is a load: its table's axis is no reduction to unroll, chunk or share)."""
    reduce, n_out = main_reduce(ast), len(ast.src[0].src[1].arg.shape)
    return [] if reduce is None else [a for i, a in enumerate(reduce.arg[1]) if n_out + i not in folded]


def _vector_width(size: int, itemsize: int, vector_lanes: tuple[int, ...]) -> int:
    """The most lanes (at most one 64-byte vector) that divide `size`; 1 when none does."""
    return max((n for n in vector_lanes if size % n == 0 and n * itemsize <= VECTOR_BYTES), default=1)


def _vector_axis(ast: UOp, accesses: list[Access], vector_lanes: tuple[int, ...], summed: list[int]) -> Opt | None:
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
    if summed and prod(main_reduce(ast).src[0].shape[a] for a in summed) >= LONG_REDUCE:
        loads = [acc for acc in accesses if not acc.is_store]
        best = max([best] + [(width(a, loads), a) for a in axes[:-1]], key=lambda wa: (wa[0], wa[1] == inner, wa[1]))
    return Opt("UPCAST", best[1], best[0]) if best[0] > 1 else None


def _guarded_lanes(ast: UOp, accesses: list[Access], summed: list[int]) -> Opt | None:
    """An elementwise kernel that reads through a padding guard changing along its innermost axis (a padded copy):
    that axis UPCAST into scalar lanes, as many as divide it up to MAX_LANES. Each lane's guard then tests the loop
    against its own constants, true outright for the lanes inside the padding, so the test that stays (the other
    axes') is made once for all lanes, not once per element (a convolution's padded input, rows of 30, copied 1.7x
    faster). Not where the row is a multiple of CC_VECTOR_BYTES: GCC makes that loop masked vectors itself, faster
    than scalar lanes (rows of 56: 8.4 ms with 28 lanes, 6.7 ms as GCC's vectors)."""
    shape = ast.src[0].src[1].arg.shape
    inner = max((a for a in range(len(shape)) if shape[a] > 1), default=None)
    if inner is None or summed:
        return None
    if shape[inner] * ast.src[0].src[0].dtype.base.itemsize % CC_VECTOR_BYTES == 0:
        return None
    if not any(inner in acc.guarded for acc in accesses if not acc.is_store):
        return None
    amount = max(n for n in range(1, MAX_LANES + 1) if shape[inner] % n == 0)
    return Opt("UPCAST", inner, amount) if amount > 1 else None


def _upcast_amount(size: int, room: int, widest: int = 8) -> int:
    """The most lanes (8, 4 or 2, or the whole axis when it is short; 16 too where `widest` allows) that divide `size`
    and fit in `room`."""
    choices = ([size] if size <= 8 else []) + [n for n in (16, 8) if n <= widest] + [4, 2]
    return next((a for a in choices if size % a == 0 and 1 < a <= room), 1)


def hand_coded_opts(ast: UOp, vector_lanes: tuple[int, ...] = (), has_local: bool = False, cache_bytes: int = 0
                    ) -> list[Opt]:  # fmt: skip
    """A vector UPCAST of the innermost output axis where memory allows it; for reductions, UPCAST the output axes
    along which some input is constant (each value loaded once, used many times: a register-blocked matmul), UNROLL
    short reduced axes, and for a plain reduction UNROLL its innermost axis (as vector lanes where it is contiguous).
    With blocks of threads (`has_local`, a GPU), a kernel with few outputs and a long reduction GROUPs it; without,
    a contraction whose operands outgrow `cache_bytes` (Renderer.cache_bytes) sums its reduction in CHUNKs."""
    if len(ast.src) != 1 or ast.src[0].op is not Ops.STORE:
        return []
    if scatter_store(ast.src[0]):  # vector lanes where its rows are contiguous; a GPU's threads take an element each
        vector = None if has_local else _vector_axis(ast, _accesses(ast)[0], vector_lanes, [])
        return [vector] if vector is not None else []
    accesses, folded = _accesses(ast)
    summed = _summed(ast, folded)
    opts = _register_opts(ast, vector_lanes, accesses, summed)
    if has_local and (window := _window_opts(ast, accesses)) is not None:
        opts = window
    elif has_local:
        opts = _threads_keep_their_row(ast, opts, accesses)
    if not has_local and not opts and (lanes := _guarded_lanes(ast, accesses, summed)) is not None:
        return [lanes]
    if not has_local:
        chunk = chunk_opt(ast, opts, accesses, summed, cache_bytes)
        return opts if chunk is None else [*opts, chunk]
    if not summed:
        return opts
    reduce = main_reduce(ast)
    if not any(_block(ast, reduce, opts, accesses, summed)):
        return opts
    # threads sharing the loop shorten each one's chain of adds already; unrolled, neighbours would read apart
    # a convolution's grouped kernel (a weight gradient) takes a larger block: GROUPED_LANES, down to MIN_GROUPED_BLOCKS
    # blocks (H100, MNIST's first weight gradient, a 5x5 window over a batch-innermost input: kx by 5 and 16 output
    # channels, 160 blocks, 145 us, against 8 channels' 169 and 4 channels' 262)
    conv = bool(_window_pairs(ast, accesses))
    budget = GROUPED_LANES if conv else MAX_LANES
    opts = _grouped_window_opts(ast, accesses) or _register_opts(
        ast, vector_lanes, accesses, summed, plain_unroll=False, lanes_budget=budget, widest=16 if conv else 8
    )
    least = MIN_GROUPED_BLOCKS if conv else MIN_BLOCKS
    shape = ast.src[0].src[1].arg.shape
    while True:
        local, groups = _block(ast, reduce, opts, accesses, summed)
        blocks = prod(shape) // prod(o.amount for o in opts + local if o.op in ("UPCAST", "LOCAL"))
        if blocks >= least or not (upcasts := [o for o in opts if o.op == "UPCAST"]):
            return local + opts + groups  # a LOCAL first: it takes its axis's neighbouring outputs, before an UPCAST
        opts.remove(upcasts[-1])  # too few blocks to fill the GPU: fewer outputs a block, more blocks


def renderer_opts(ast: UOp, renderer: Renderer | None) -> list[Opt]:
    """hand_coded_opts for what a renderer declares: its vectors, its blocks of threads, its cache."""
    if renderer is None:
        return hand_coded_opts(ast)
    return hand_coded_opts(ast, renderer.vector_lanes, renderer.has_local, renderer.cache_bytes)


def _threads_keep_their_row(ast: UOp, opts: list[Opt], accesses: list[Access]) -> list[Opt]:
    """`opts` less the scalar UPCAST of the output axis the store steps along by one, where the whole reduction is
    unrolled (a pooling window: no loop left, so the upcast shares no loaded row, only values the cache holds
    anyway): that axis stays with the threads, whose loads and stores then stay coalesced. (H100, MNIST's 2x2 max
    pool after a bias, ReLU and batch norm: 2x2 outputs a thread put neighbouring threads 4 floats apart.)"""
    reduce, shape = main_reduce(ast), ast.src[0].src[1].arg.shape
    unrolled = {o.axis: o.amount for o in opts if o.op == "UNROLL"}
    if reduce is None or any(unrolled.get(a) != reduce.src[0].shape[a] for a in reduce.arg[1]):
        return opts
    store = next(acc for acc in accesses if acc.is_store)
    row = [a for a in range(len(shape)) if shape[a] > 1 and store.steps.get(a) == 1]
    return [o for o in opts if not (o.op == "UPCAST" and o.axis in row)]


def _window_pairs(ast: UOp, accesses: list[Access]) -> list[tuple[int, int]]:
    """(output axis, reduced axis) pairs along which some load steps alike, nonzero: a convolution's output row and
    kernel row (its input is read at y + ky), innermost output axes first."""
    reduce = main_reduce(ast)
    if reduce is None:
        return []
    shape = ast.src[0].src[1].arg.shape
    loop = {r: len(shape) + i for i, r in enumerate(reduce.arg[1])}  # the main reduce's loops follow the output's
    loads = [acc for acc in accesses if not acc.is_store]

    def alike(a: int, r: int) -> bool:
        return any((s := acc.steps.get(a)) not in (0, None) and acc.steps.get(loop[r]) == s for acc in loads)

    return [(a, r) for a in reversed(range(len(shape))) if shape[a] > 1 for r in reduce.arg[1] if alike(a, r)]


def _window_opts(ast: UOp, accesses: list[Access]) -> list[Opt] | None:
    """A GPU's register block for a convolution with many outputs, or None for other kernels.

    The output axis the store steps along by one (a row's x) stays with the threads, so that a warp's loads and stores
    are coalesced. The block takes an output axis paired with a short reduced axis (the output rows y and the kernel
    rows ky, reading input rows y + ky), unrolled: w rows of outputs read w + k - 1 input rows, not w * k. Then the
    output axes along which some load stays put (output channels: the input is reused; the batch: the weight is) fill
    the block up to WINDOW_ACCUMULATORS. (H100, beautiful_mnist's 5x5 convolution: 715 -> 343 us; its input gradient,
    a transposed convolution, 1299 -> 420 us.)"""
    reduce, shape = main_reduce(ast), ast.src[0].src[1].arg.shape
    store = next((acc for acc in accesses if acc.is_store), None)
    if reduce is None or store is None:
        return None
    thread = max((a for a in range(len(shape)) if shape[a] > 1 and store.steps.get(a) == 1), default=None)
    full = reduce.src[0].shape
    pairs = [(a, r) for a, r in _window_pairs(ast, accesses) if a != thread and 1 < full[r] <= SMALL_REDUCE]
    if thread is None or not pairs:
        return None
    axis, kernel = pairs[0]
    # as many rows as the window is long, or the next size that divides the axis (more rows share more input rows,
    # but leave fewer accumulators for the reuse axes)
    lanes = next((d for d in range(full[kernel], MAX_WINDOW_LANES + 1) if shape[axis] % d == 0), None)
    lanes = lanes or max((d for d in range(2, full[kernel]) if shape[axis] % d == 0), default=1)
    opts = [Opt("UPCAST", axis, lanes)] if lanes > 1 else []
    loads = [acc for acc in accesses if not acc.is_store]
    reuse = [a for a in reversed(range(len(shape))) if a not in (thread, axis) and shape[a] > 1
             and any(acc.steps.get(a, 0) == 0 for acc in loads)][:2]  # fmt: skip
    room = WINDOW_ACCUMULATORS // lanes
    outer = 2 if len(reuse) == 2 and shape[reuse[1]] % 2 == 0 and room >= 4 else 1  # the second: two, say 2 images
    if reuse and (first := _upcast_amount(shape[reuse[0]], room // outer)) > 1:
        opts.append(Opt("UPCAST", reuse[0], first))
    if outer > 1:
        opts.append(Opt("UPCAST", reuse[1], outer))
    return opts + [Opt("UNROLL", kernel, full[kernel])]


def _grouped_window_opts(ast: UOp, accesses: list[Access]) -> list[Opt] | None:
    """A GPU's register block for a kernel whose threads share long sums and whose outputs are a window's (a
    convolution's weight gradient: dw[co, ci, ky, kx] sums dy[n, co, y, x] * x[n, ci, y + ky, x + kx]): the window's
    output axes whole, where short (each input value a thread loads serves a row of the window), then the output axis
    along which the loads of the window stay put (the output channels, dy reused), up to GROUPED_ACCUMULATORS. None
    where no output axis pairs with a reduced one. (H100, beautiful_mnist's 5x5 weight gradient: 1338 -> 698 us.)"""
    shape = ast.src[0].src[1].arg.shape
    window = sorted({a for a, _ in _window_pairs(ast, accesses) if shape[a] <= MAX_WINDOW_LANES}, reverse=True)
    loads = [acc for acc in accesses if not acc.is_store]
    moving = [acc for acc in loads if any(acc.steps.get(a, 0) != 0 for a in window)]
    # only where the window's input lies along a row (steps by one along an axis of it): the threads that share the
    # sum then read neighbouring addresses. (An input laid out batch-innermost, the first convolution's of MNIST as
    # glassgrad gathers it, ran 265 -> 977 us with its window blocked, against 193 us without.)
    if not window or not all(any(acc.steps.get(a) == 1 for a in window) for acc in moving):
        return None
    opts = [Opt("UPCAST", a, shape[a]) for a in window]
    lanes = prod(shape[a] for a in window)
    reuse = [a for a in reversed(range(len(shape))) if a not in window and shape[a] > 1
             and any(acc.steps.get(a, 0) == 0 for acc in moving)]  # fmt: skip
    if reuse and (amount := _upcast_amount(shape[reuse[0]], min(GROUPED_REUSE, GROUPED_ACCUMULATORS // lanes))) > 1:
        opts.append(Opt("UPCAST", reuse[0], amount))
    # the summed axis that pairs with the window's rows (y with ky), unrolled: a thread's neighbouring rows y, y + 1
    # share input rows, k + 1 rows loaded for 2k row products (the threads split what is left of the loop)
    reduce = main_reduce(ast)
    full, loop = reduce.src[0].shape, {r: len(shape) + i for i, r in enumerate(reduce.arg[1])}
    # (H100, MNIST's 3x3 weight gradients: over 8 rows 2 a thread, 76 us; over 6, 101 us without, 141 with)
    rows = [r for a, r in _window_pairs(ast, accesses) if a in window and full[r] % GROUPED_ROWS == 0
            and full[r] // GROUPED_ROWS >= SHARED_ROWS
            and all(acc.steps.get(loop[r], 0) != 1 for acc in moving)]  # fmt: skip
    if GROUPED_ROWS > 1 and rows:
        opts.append(Opt("UNROLL", rows[0], GROUPED_ROWS))
    return opts


def _register_opts(ast: UOp, vector_lanes: tuple[int, ...], accesses: list[Access], summed: list[int],
                   plain_unroll: bool = True, lanes_budget: int = MAX_LANES, widest: int = 8) -> list[Opt]:  # fmt: skip
    """hand_coded_opts' choice within one thread: vector lanes, register blocks (up to `lanes_budget` scalar outputs,
    `widest` along one axis), unrolls (with `plain_unroll`, of a plain reduction's innermost axis too), of the
    `summed` axes only (a kernel with none is elementwise)."""
    opts: list[Opt] = []
    if (vector := _vector_axis(ast, accesses, vector_lanes, summed)) is not None:
        opts.append(vector)
    reduce = main_reduce(ast)
    if not summed:
        return opts
    shape = list(ast.src[0].src[1].arg.shape)
    loads = [acc for acc in accesses if not acc.is_store]
    full, reduced = reduce.src[0].shape, sorted(summed)
    if vector is None and (vector := _vector_unroll(reduce, reduced, len(shape), loads, vector_lanes)) is not None:
        opts.insert(0, vector)  # first, so that it is the one rendered as vector lanes
    if vector is not None and vector.op == "UPCAST":
        shape[vector.axis] //= vector.amount
    budget = lanes_budget if vector is None else MAX_ACCUMULATORS if vector.op == "UPCAST" else MAX_UNROLL_ACCUMULATORS
    # vector lanes across an outer output axis (a convolution's output channels): a block like a matmul's
    out_shape = ast.src[0].src[1].arg.shape
    inner = max((a for a in range(len(out_shape)) if out_shape[a] > 1), default=None)
    across = vector is not None and vector.op == "UPCAST" and vector.axis != inner
    lanes = 1
    reused: set[int] = set()  # loads that already serve several lanes
    # output axes, innermost first, along which some load is constant; prefer one that helps a load not yet reused
    candidates = [a for a in reversed(range(len(shape))) if shape[a] > 1]
    upcasts = 0
    if across and (block := _across_block(shape, inner, vector.axis, loads)):
        opts += block
        lanes, upcasts = prod(o.amount for o in block), 2  # the block is the register block: no other upcast
    while upcasts < 2 and candidates:
        usable = [(a, {i for i, acc in enumerate(loads) if acc.steps.get(a, 0) == 0}) for a in candidates]
        usable = [(a, h) for a, h in usable if h and _upcast_amount(shape[a], budget // lanes) > 1]
        if not usable:
            break
        axis, helped = next(((a, h) for a, h in usable if h - reused), usable[0])
        # along the vector's own axis a few vectors are enough; the other axis takes the rest of the registers (with
        # lanes across an outer axis, the output channels, as many vectors as the block over the inner axis leaves)
        room = 2 if vector is not None and axis == vector.axis and not across else budget // lanes
        amount = _upcast_amount(shape[axis], min(room, budget // lanes), widest)
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
    if vector is not None and vector.op == "UPCAST" and (tile := _panel_tile(ast, reduce, summed, opts, vector)):
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


def _across_block(shape: list[int], inner: int, axis: int, loads: list[Access]) -> list[Opt]:
    """With vector lanes across an outer output axis (a convolution's output channels), a register block of `a`
    outputs along the innermost axis by `b` vectors along the lanes' axis, where some load stays put along each (the
    weight along the width, the input along the channels): a*b accumulators, each step one multiply-add into each
    from a scalar broadcast and b vector loads, leaving b registers for the loaded vectors (VECTOR_REGISTERS in all).
    Blocks whose a + b loads a step are no more than their multiply-adds come first (two of each a cycle, on ports of
    their own; b = 1 never is: then any), then the most accumulators, then the widest: a block's lanes store one by
    one, and fewer vectors of channels touch fewer output planes and write longer runs of each row (14 x 2 ran 5-10%
    faster than 7 x 4 at widths 14, 28 and 56 with 64 or 128 channels; 28 x 1, 29 loads a step, was slower than
    14 x 2, as 25 x 1 than 10 x 2 in A.T @ B). Empty where no load stays put along one of the two axes."""
    if not all(any(acc.steps.get(a, 0) == 0 for acc in loads) for a in (inner, axis)):
        return []

    def divisors(n: int) -> list[int]:
        return [d for d in range(1, n + 1) if n % d == 0]

    def rank(f: tuple[int, ...]) -> tuple:
        a, b = prod(f[:-1]), f[-1]
        return (a + b <= a * b, a * b, f[0])

    def best(columns: list[int]) -> tuple[int, ...]:
        """(a per column axis..., b): the best block whose columns are those axes' upcasts together."""
        fits = [(*a, b) for a in itertools.product(*(divisors(shape[c]) for c in columns))
                for b in divisors(shape[axis]) if prod(a) * b + b <= VECTOR_REGISTERS]  # fmt: skip
        return max(fits, key=rank)

    blocks = {(inner,): best([inner])}
    if prod(blocks[(inner,)]) < MIN_BLOCK:  # a short inner axis (a weight gradient's 5-wide kernel row) takes a second
        blocks |= {(inner, o): best([inner, o]) for o in _column_axes(shape, inner, axis, loads)}
    chosen = max(blocks, key=lambda c: rank(blocks[c]))
    return [Opt("UPCAST", ax, n) for ax, n in zip((*chosen, axis), blocks[chosen]) if n > 1]


def _column_axes(shape: list[int], inner: int, axis: int, loads: list[Access]) -> list[int]:
    """Output axes besides `inner` along which the loads that give the lanes (those stepping by one along `axis`) stay
    put while another load moves: more columns of a block, each one more scalar broadcast a step."""
    vectors = [acc for acc in loads if acc.steps.get(axis) == 1]
    stays = lambda o: all(acc.steps.get(o, 0) == 0 for acc in vectors) and any(acc.steps.get(o) for acc in loads)
    return [o for o in range(inner) if o != axis and shape[o] > 1 and vectors and stays(o)]


def _interleaved_rows(shape: list[int]) -> Opt | None:
    """For a reduction whose vector lanes run along its contiguous reduced axis and where no load is shared between
    outputs (a row sum): UPCAST the innermost output axis by INTERLEAVED_ROWS, so that each iteration reads that many
    rows side by side. Two memory streams a core keep more cache-line reads in flight than one, and the accumulators'
    chains of adds are independent (a 4096x4096 row sum on one core: 2.6 -> 2.4 ms)."""
    axis = next((a for a in reversed(range(len(shape))) if shape[a] > 1), None)
    if axis is None or shape[axis] % INTERLEAVED_ROWS:
        return None
    return Opt("UPCAST", axis, INTERLEAVED_ROWS)


def _panel_tile(ast: UOp, reduce: UOp, summed: list[int], opts: list[Opt], vector: Opt) -> Opt | None:
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
    panel_bytes = prod(reduce.src[0].shape[a] for a in summed) * width * reduce.dtype.itemsize
    fits = L2_BUDGET // max(panel_bytes, 1)
    keeps = [n for n in (64, 32, 16, 8, 4, 2) if n <= fits and shape[axis] % n == 0]
    if not keeps or keeps[0] == shape[axis]:  # the whole axis's panel fits: nothing to tile
        return None
    # threads take whole tiles: an even number of them (or many) keeps two cores equally busy
    keep = next((n for n in keeps if (shape[axis] // n) % 2 == 0 or shape[axis] // n >= MANY_TILES), keeps[0])
    return Opt("TILE", axis, keep)


def _vector_unroll(reduce: UOp, summed: list[int], n_out: int, loads: list[Access], vector_lanes: tuple[int, ...]
                   ) -> Opt | None:  # fmt: skip
    """A vector UNROLL of the innermost reduced axis when every load steps by one element (or stays) along it: each
    lane accumulates its own partial sum, combined after the loop (a row sum, a convolution's weight gradient)."""
    inner = max(summed)
    loop = n_out + list(reduce.arg[1]).index(inner)  # the main reduce's loops follow the output's
    if not all(acc.steps.get(loop, 0) in (0, 1) for acc in loads):
        return None
    width = _vector_width(reduce.src[0].shape[inner], reduce.dtype.itemsize, vector_lanes)
    return Opt("UNROLL", inner, width) if width > 1 else None


def _block(ast: UOp, reduce: UOp, opts: list[Opt], accesses: list[Access], summed: list[int]
           ) -> tuple[list[Opt], ...]:  # fmt: skip
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
    axes = [a for a in summed if sizes[a] >= 2]  # a one-hot sum's loop is gone: no GROUP
    if not axes or prod(reduce.src[0].shape[a] for a in axes) < GROUP_FROM:  # the terms, before the unroll: a
        return [], []  # LayerNorm's 768 unrolled by 8 is still a long row (96 steps a thread left 4096 rows at 57 GB/s)
    loads = [acc for acc in accesses if not acc.is_store]

    def spread(loop: int) -> float:  # a pooling window's x // 2 moves by half an element: near, not FAR
        return sum(acc.spread.get(loop, 0.0) for acc in loads)

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
    if blocks >= GROUP_BELOW:  # enough threads already, unless each reads a long row alone: a warp then shares it
        # (a step each lane at least: attention's softmax rows of 256 at T=256, 12288 of them, ran a thread a row,
        # 96 blocks of 128 on a 132-multiprocessor GPU, at 330 GB/s)
        if local or outputs or not coalesced(loop[axes[0]]) or sizes[axes[0]] < WARP:
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
