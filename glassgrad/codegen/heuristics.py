"""Hand-coded heuristics: which optimization actions a kernel gets by default (NOOPT=1 turns them off)."""

from __future__ import annotations

from glassgrad.codegen.opt import Opt, main_reduce
from glassgrad.helpers import prod
from glassgrad.uop.ops import Ops, UOp

MAX_LANES = 32  # outputs computed per iteration: enough registers to hide latency, few enough not to spill
SMALL_REDUCE = 5  # reduced axes this short (a 3x3 or 5x5 window) are unrolled completely


def _load_strides(ast: UOp, shape: tuple[int, ...]) -> list[tuple[int, ...]]:
    """For each load seen through a single view of the reduce's full shape, its strides per axis."""
    out = []
    for node in ast.toposort():
        if node.op is Ops.LOAD:
            st = node.src[1].arg
            if len(st.views) == 1 and st.shape == shape:
                out.append(st.views[0].strides)
    return out


def hand_coded_opts(ast: UOp) -> list[Opt]:
    """UPCAST the output axes along which some input is broadcast (each value loaded once, used many times);
    UNROLL short reduced axes; for a plain reduction, UNROLL its innermost axis to break the add chain."""
    if len(ast.src) != 1 or ast.src[0].op is not Ops.STORE:
        return []
    reduce = main_reduce(ast)
    if reduce is None:
        return []
    full = reduce.src[0].shape
    out_shape = ast.src[0].src[1].arg.shape
    if len(full) != len(out_shape) or any(o not in (f, 1) for o, f in zip(out_shape, full)):
        return []  # the reduce sits behind a reshape of the output: leave its loops alone
    strides = _load_strides(ast, full)
    opts: list[Opt] = []
    lanes = 1
    reduced = set(reduce.arg[1])
    # output axes, innermost first, that some input does not move along: values reused across lanes
    for axis in reversed(range(len(full))):
        if axis in reduced or full[axis] == 1:
            continue
        if not any(s[axis] == 0 for s in strides):
            continue
        for amount in (8, 4, 2):
            if full[axis] % amount == 0 and lanes * amount <= MAX_LANES:
                opts.append(Opt("UPCAST", axis, amount))
                lanes *= amount
                break
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
    return [o for o in opts if prod([o.amount]) > 1]
