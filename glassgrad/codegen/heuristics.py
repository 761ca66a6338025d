"""Hand-coded heuristics: which optimization actions a kernel gets by default (NOOPT=1 turns them off)."""

from __future__ import annotations

from glassgrad.codegen.opt import Opt, main_reduce
from glassgrad.uop.ops import Ops, UOp
from glassgrad.uop.symbolic import simplify

MAX_LANES = 32  # outputs computed per iteration: enough registers to hide latency, few enough not to spill
SMALL_REDUCE = 5  # reduced axes this short (a 3x3 or 5x5 window) are unrolled completely


def _output_axes_read(ast: UOp) -> list[set[int]]:
    """For each load of the kernel, the output axes its address depends on (from the kernel lowered without opts).

    A load that does not depend on an output axis reads the same value at every position along it: upcasting that
    axis lets one load serve every lane."""
    from glassgrad.codegen.lowerer import lower_kernel

    n_out = len(ast.src[0].src[1].arg.shape)
    lowered = simplify(lower_kernel(ast))
    reads = []
    for node in lowered.toposort():
        if node.op is Ops.LOAD:
            reads.append({u.arg for u in node.src[0].toposort() if u.op is Ops.RANGE and u.arg < n_out})
    return reads


def _loads_constant_along(reads: list[set[int]], axis: int) -> set[int]:
    """The loads (by position) whose value does not change along `axis`."""
    return {i for i, axes in enumerate(reads) if axis not in axes}


def _upcast_amount(size: int, room: int) -> int:
    """The most lanes (8, 4 or 2, or the whole axis when it is short) that divide `size` and fit in `room`."""
    choices = ([size] if size <= 8 else []) + [8, 4, 2]
    return next((a for a in choices if size % a == 0 and 1 < a <= room), 1)


def hand_coded_opts(ast: UOp, vector_lanes: tuple[int, ...] = ()) -> list[Opt]:
    """UPCAST the output axes along which some input is broadcast (each value loaded once, used many times);
    UNROLL short reduced axes; for a plain reduction, UNROLL its innermost axis to break the add chain."""
    if len(ast.src) != 1 or ast.src[0].op is not Ops.STORE:
        return []
    reduce = main_reduce(ast)
    if reduce is None:
        return []
    full, out_shape = reduce.src[0].shape, ast.src[0].src[1].arg.shape
    reads = _output_axes_read(ast)
    opts: list[Opt] = []
    lanes = 1
    reduced = set(reduce.arg[1])
    reused: set[int] = set()  # loads that already serve several lanes
    # output axes, innermost first, along which some load is constant; prefer one that helps a load not yet reused
    candidates = [a for a in reversed(range(len(out_shape))) if out_shape[a] > 1]
    for _ in range(2):
        room = MAX_LANES // lanes
        usable = [(a, _loads_constant_along(reads, a)) for a in candidates
                  if _loads_constant_along(reads, a) and _upcast_amount(out_shape[a], room) > 1]  # fmt: skip
        if not usable:
            break
        axis, helped = next(((a, h) for a, h in usable if h - reused), usable[0])
        amount = _upcast_amount(out_shape[axis], MAX_LANES // lanes)
        opts.append(Opt("UPCAST", axis, amount))
        lanes *= amount
        reused |= helped
        candidates.remove(axis)
    for axis in sorted(reduced):
        if 1 < full[axis] <= SMALL_REDUCE and lanes * full[axis] <= 4 * MAX_LANES:
            opts.append(Opt("UNROLL", axis, full[axis]))
            lanes *= full[axis]
    if lanes == 1:  # a plain reduction (a row sum): several terms per iteration shorten the chain of adds
        inner = max(reduced)
        for amount in (8, 4, 2):
            if full[inner] % amount == 0 and full[inner] > amount:
                opts.append(Opt("UNROLL", inner, amount))
                break
    return opts
