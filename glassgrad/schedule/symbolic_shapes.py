"""Symbolic sizes in the scheduler: kernelize works on a graph whose movement ops give each symbolic size as a SymDim
(uop/variable.py: the most it can be, naming its expression of unbound variables), so a buffer and every view lay
the dim out at its largest and each kernel's AST is the same whatever value the variables have this call; the
tensors it answers for get their shapes back as bound expressions."""

from __future__ import annotations

from typing import Any

from glassgrad.uop.ops import GroupOp, Ops, UOp
from glassgrad.uop.rewrite import PatternMatcher, UPat, graph_rewrite
from glassgrad.uop.variable import SymDim, shadow_arg


def _symbolic_in(arg: Any) -> bool:
    if isinstance(arg, tuple):
        return any(_symbolic_in(a) for a in arg)
    return isinstance(arg, UOp)


def _shadow_movement(mv: UOp) -> UOp | None:
    return mv.replace(arg=shadow_arg(mv.arg)) if _symbolic_in(mv.arg) else None


# a movement op's symbolic sizes as the SymDims kernels are built with (run by kernelize with its operand rules)
shadow_sizes = PatternMatcher([(UPat(GroupOp.Movement, name="mv"), _shadow_movement)])


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


def bound_values(order: list[UOp]) -> dict[UOp, int]:
    """Each variable bound in the sizes of these nodes' movement ops, with its value; one variable bound to two
    values is a ValueError."""
    found: dict[UOp, int] = {}
    for size in (u for node in order if node.op in GroupOp.Movement for u in _sizes_in(node.arg)):
        for bind in (n for n in size.toposort() if n.op is Ops.BIND):
            var, value = bind.unbind()
            if found.setdefault(var, value) != value:
                raise ValueError(f"Variable {var.arg[0]} is bound to both {found[var]} and {value} in one realize")
    return found
