"""Adjacent axes that every view of a kernel steps through as one become one axis.

A batchnorm's sums over (512, 32, 20, 20) read each 20x20 image as 400 floats in a row, but a kernel looping over
rows of 20 gets vectors of 4 (the widest that divides 20) and 100 short inner loops. Where every load and the store
step through two neighbouring axes as through one (the outer's stride is the inner's times its size, or both are
broadcast), and both are summed or both are not, the two become one axis of 400: 16-float vectors, one loop. The
axes are merged in the kernel's AST, before the optimizer sees it, so its names, actions and BEAM choices are those
of the merged kernel. Axes of size 1 are left as they are (nothing is gained, and a kernel keeps its axis numbers).
"""

from __future__ import annotations

from glassgrad.uop.ops import GroupOp, Ops, UOp
from glassgrad.uop.variable import SymDim
from glassgrad.uop.view import ShapeTracker

# the ops of a kernel whose shapes all come from its views and its reductions' axes
_PLAIN = GroupOp.Elementwise | {Ops.SINK, Ops.STORE, Ops.LOAD, Ops.DEFINE_GLOBAL, Ops.VIEW, Ops.CONST,
                                Ops.REDUCE_AXIS}  # fmt: skip


def merge_axes(sink: UOp) -> UOp:
    """The kernel with every mergeable pair of adjacent axes merged (the same kernel where none is)."""
    nodes = sink.toposort()
    views = [n for n in nodes if n.op is Ops.VIEW]
    reduces = {n.arg[1] for n in nodes if n.op is Ops.REDUCE_AXIS}
    if (
        any(n.op not in _PLAIN for n in nodes)
        or any(v.src and v.src[0].op is not Ops.CONST for v in views)  # a view of a computed value: its own shape
        or len(reduces) > 1
        or len({len(v.arg.shape) for v in views}) != 1
    ):
        return sink
    trackers = {v: v.arg for v in views}
    reduced = set(next(iter(reduces), ()))
    while (found := _merge_one(trackers, reduced)) is not None:
        axis, trackers = found
        reduced = {a - (a > axis) for a in reduced if a != axis + 1}
    if all(trackers[v] is v.arg for v in views):
        return sink
    return _rebuilt(nodes, trackers, tuple(sorted(reduced)))


def _full_shape(trackers: dict[UOp, ShapeTracker]) -> tuple[int, ...]:
    """The kernel's shape before its reductions: the largest size any view has along each axis."""
    return tuple(max(sizes) for sizes in zip(*(st.shape for st in trackers.values()), strict=True))


def _merge_one(trackers: dict[UOp, ShapeTracker], reduced: set[int]) -> tuple[int, dict[UOp, ShapeTracker]] | None:
    """The innermost axis that merges with the next one in every view, and the trackers with it merged; or None."""
    shape = _full_shape(trackers)
    if 0 in shape:
        return None
    # a symbolic axis stays one: its loop runs to a kernel parameter, which a merged axis could not
    symbolic = {a for st in trackers.values() for a, s in enumerate(st.shape) if isinstance(s, SymDim)}
    for axis in reversed(range(len(shape) - 1)):
        if shape[axis] == 1 or shape[axis + 1] == 1 or (axis in reduced) != (axis + 1 in reduced):
            continue
        if axis in symbolic or axis + 1 in symbolic:
            continue
        merged = {v: _merged(st, axis) for v, st in trackers.items()}
        if all(st is not None for st in merged.values()):
            return axis, merged
    return None


def _merged(st: ShapeTracker, axis: int) -> ShapeTracker | None:
    """The tracker with `axis` and the next one as one axis, when its one view can hold that. (Through a stack of
    views the merged index would be divided back into the lower view's axes: the division costs more than a loop.)"""
    if len(st.views) > 1:
        return None
    shape = st.shape
    view = st.views[0].reshape((*shape[:axis], shape[axis] * shape[axis + 1], *shape[axis + 2 :]))
    return None if view is None else ShapeTracker((view,))


def _rebuilt(nodes: list[UOp], trackers: dict[UOp, ShapeTracker], reduced: tuple[int, ...]) -> UOp:
    """The kernel again, its views and reductions over the merged axes (every other node follows its sources)."""
    new: dict[UOp, UOp] = {}
    for node in nodes:
        src = tuple(new[s] for s in node.src)
        if node.op is Ops.VIEW:
            new[node] = UOp(Ops.VIEW, node.dtype, src, trackers[node])
        elif node.op is Ops.REDUCE_AXIS:
            new[node] = UOp(Ops.REDUCE_AXIS, node.dtype, src, (node.arg[0], reduced))
        else:
            new[node] = node if src == node.src else node.replace(src=src)
    return new[nodes[-1]]
