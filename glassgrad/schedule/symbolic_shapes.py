"""Symbolic sizes in the scheduler: kernelize works on a graph whose movement ops give each symbolic size as a SymDim
(uop/variable.py: the most it can be, naming its expression of unbound variables), so a buffer and every view lay
the dim out at its largest and each kernel's AST is the same whatever value the variables have this call; the
tensors it answers for get their shapes back as bound expressions."""

from __future__ import annotations

import functools
import operator
from typing import Any

from glassgrad.dtype import dtypes
from glassgrad.uop.ops import GroupOp, Ops, UOp, size_sum
from glassgrad.uop.rewrite import PatternMatcher, UPat, graph_rewrite
from glassgrad.uop.variable import SymDim, shadow_arg, unbound, values_bound


def _symbolic_in(arg: Any) -> bool:
    if isinstance(arg, tuple):
        return any(_symbolic_in(a) for a in arg)
    return isinstance(arg, UOp)


def _shadow_movement(mv: UOp) -> UOp | None:
    return mv.replace(arg=shadow_arg(mv.arg)) if _symbolic_in(mv.arg) else None


def _shadow_pad(pad: UOp) -> UOp | None:
    """A symbolic dim padded back to a fixed size (mixin/symbolic_shapes.py pad): its room above the current size
    holds whatever the layout left there, so the pad is laid out from the largest size and zeros the elements from
    the current end on, a comparison with the kernel's Variable."""
    if not _symbolic_in(pad.arg):
        return None
    x, pairs, ends = pad.src[0], [], []
    for d, ((before, after), size) in enumerate(zip(pad.arg, x.shape, strict=True)):
        if not isinstance(after, UOp):
            pairs.append((before, after))
            continue
        total = size_sum(size.expr, before, unbound(after))  # (mixin/symbolic_shapes.py made it an int)
        pairs.append((before, total - before - int(size)))
        ends.append((d, total, size_sum(size.expr, before)))
    # the padded dims at their largest size, an int: a SHRINK to it (no crop) makes them fixed dims
    fixed = tuple((0, int(s)) if d in {e[0] for e in ends} else (0, s) for d, s in enumerate(x.shape))
    padded = pad.replace(src=(UOp(Ops.SHRINK, x.dtype, (x,), fixed),), arg=tuple(pairs))
    device = UOp(Ops.DEVICE, dtypes.void, (), pad.device)
    valid = [_positions_below(device, d, total, end, padded.shape) for d, total, end in ends]
    return functools.reduce(operator.and_, valid).where(padded, padded.const_like(0))


def _positions_below(device: UOp, axis: int, size: int, end: UOp, shape: tuple) -> UOp:
    """Whether each element's index along `axis` (of `size`) is below `end`, broadcast to `shape`."""
    index = UOp(Ops.ARANGE, dtypes.int, (device,), size)
    along = UOp(Ops.RESHAPE, dtypes.int, (index,), tuple(size if d == axis else 1 for d in range(len(shape))))
    return UOp(Ops.EXPAND, dtypes.int, (along,), shape).alu(Ops.CMPLT, end)


# a movement op's symbolic sizes as the SymDims kernels are built with (run by kernelize with its operand rules)
shadow_sizes = PatternMatcher([(UPat(Ops.PAD, name="pad"), _shadow_pad),
                               (UPat(GroupOp.Movement, name="mv"), _shadow_movement)])  # fmt: skip


def _pairs_of(original: Any, shadowed: Any, found: dict[SymDim, UOp]) -> None:
    if isinstance(original, tuple):
        for a, b in zip(original, shadowed, strict=True):
            _pairs_of(a, b, found)
    elif isinstance(original, UOp) and isinstance(shadowed, SymDim):
        found[shadowed] = original


def bound_sizes(twin: dict[UOp, UOp]) -> dict[SymDim, UOp]:
    """Each SymDim of a shadowed graph (`twin`: each node to its twin) and the bound size it stands for."""
    found: dict[SymDim, UOp] = {}
    for node, new in twin.items():
        if node.op in GroupOp.Movement and new.op is node.op and new.arg is not node.arg:
            _pairs_of(node.arg, new.arg, found)
    return found


def _restored(arg: Any, sizes: dict[SymDim, UOp]) -> Any:
    if isinstance(arg, tuple):
        return tuple(_restored(a, sizes) for a in arg)
    return sizes[arg] if isinstance(arg, SymDim) else arg


def _restore_movement(ctx: dict[SymDim, UOp], mv: UOp) -> UOp | None:
    return mv.replace(arg=_restored(mv.arg, ctx)) if _has_symdim(mv.arg) else None


def _has_symdim(arg: Any) -> bool:
    if isinstance(arg, tuple):
        return any(_has_symdim(a) for a in arg)
    return isinstance(arg, SymDim)


restore_sizes = PatternMatcher([(UPat(GroupOp.Movement, name="mv"), _restore_movement)])


def with_bound_sizes(node: UOp, sizes: dict[SymDim, UOp]) -> UOp:
    """A node of kernelize's answer (a view of a buffer) with its SymDims back as the bound sizes they stand for."""
    if not sizes or node.op not in GroupOp.Movement:
        return node
    return graph_rewrite(node, restore_sizes, sizes)


def _sizes_in(arg: Any) -> list[UOp]:
    if isinstance(arg, tuple):
        return [u for a in arg for u in _sizes_in(a)]
    return [arg] if isinstance(arg, UOp) else []


def symbolic_positions(order: list[UOp]) -> tuple[int, ...]:
    """The positions in `order` of the movement ops with a symbolic size (where bound_values looks; none in most
    graphs, so a realize of those looks nowhere)."""
    return tuple(i for i, node in enumerate(order) if node.op in GroupOp.Movement and _sizes_in(node.arg))


def bound_values(order: list[UOp]) -> dict[UOp, int]:
    """Each variable bound in the sizes of these nodes' movement ops, with its value; one variable bound to two
    values is a ValueError."""
    return values_bound(
        (u for node in order if node.op in GroupOp.Movement for u in _sizes_in(node.arg)), "in one realize"
    )
