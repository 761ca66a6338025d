"""Lowering: a kernel AST (shapes and views) becomes loops and index math (RANGE, INDEX, LOAD, REDUCE, STORE)."""

from __future__ import annotations

from glassgrad.dtype import dtypes
from glassgrad.helpers import prod
from glassgrad.uop.ops import GroupOp, Ops, UOp

IDX = dtypes.int  # index arithmetic is int32


def make_range(axis: int, size: int) -> UOp:
    """A loop variable running 0 .. size-1; a size-1 dimension needs no loop and is the constant 0."""
    if size == 1:
        return UOp.const(IDX, 0)
    return UOp(Ops.RANGE, IDX, (UOp.const(IDX, size),), arg=axis)


def unravel(flat: UOp, shape: tuple[int, ...]) -> list[UOp]:
    """Row-major multi-index of a flat index into `shape`."""
    idxs, stride = [], 1
    for size in reversed(shape):
        idxs.append(UOp.const(IDX, 0) if size == 1 else (flat // stride) % size)
        stride *= size
    return list(reversed(idxs))


class Lowerer:
    """Computes the value of each AST node at given index expressions, memoized per (node, indices)."""

    def __init__(self, first_free_axis: int):
        self.next_axis = first_free_axis
        self.memo: dict[tuple[UOp, tuple[UOp, ...]], UOp] = {}

    def value(self, node: UOp, idxs: tuple[UOp, ...]) -> UOp:
        key = (node, idxs)
        if key not in self.memo:
            self.memo[key] = self._lower(node, idxs)
        return self.memo[key]

    def _lower(self, node: UOp, idxs: tuple[UOp, ...]) -> UOp:
        if node.op is Ops.CONST:
            return node
        if node.op is Ops.ARANGE:
            return idxs[0]
        if node.op is Ops.LOAD:
            buf, view = node.src
            return load(buf, *view.arg.to_indexed(list(idxs)))
        if node.op is Ops.VIEW:
            return self._lower_view(node, idxs)
        if node.op is Ops.REDUCE_AXIS:
            return self._lower_reduce(node, idxs)
        if node.op in GroupOp.Elementwise:
            return node.replace(src=tuple(self.value(s, idxs) for s in node.src))
        raise NotImplementedError(f"cannot lower {node.op} inside a kernel")

    def _lower_view(self, node: UOp, idxs: tuple[UOp, ...]) -> UOp:
        """A view over an expression: index the expression through the view; outside its mask it is 0."""
        flat, valid = node.arg.to_indexed(list(idxs))
        inner = self.value(node.src[0], tuple(unravel(flat, node.src[0].shape)))
        return inner if _is_true(valid) else valid.where(inner, inner.const_like(0))

    def _lower_reduce(self, node: UOp, idxs: tuple[UOp, ...]) -> UOp:
        """A reduction opens a new loop for each reduced axis and accumulates over it."""
        op, axes = node.arg
        src = node.src[0]
        inner, ranges = list(idxs), []
        for axis in axes:
            inner[axis] = make_range(self.next_axis, src.shape[axis])
            self.next_axis += 1
            if inner[axis].op is Ops.RANGE:
                ranges.append(inner[axis])
        value = self.value(src, tuple(inner))
        if prod(src.shape[a] for a in axes) == 0:
            return value.const_like(reduce_identity(op, value.dtype))
        return UOp(Ops.REDUCE, value.dtype, (value, *ranges), arg=op) if ranges else value


def reduce_identity(op: Ops, dtype) -> object:
    """The starting value of an accumulator: 0 for sums, 1 for products, the dtype's minimum for max."""
    if op is Ops.ADD:
        return 0
    if op is Ops.MUL:
        return 1
    return dtypes.min(dtype)


def _is_true(u: UOp) -> bool:
    return u.op is Ops.CONST and u.arg is True


def load(buf: UOp, idx: UOp, valid: UOp) -> UOp:
    """A load from buf[idx]; where `valid` is false it reads 0 without touching memory."""
    base = buf.dtype.base
    index = UOp(Ops.INDEX, buf.dtype, (buf, idx) if _is_true(valid) else (buf, idx, valid))
    return UOp(Ops.LOAD, base, (index,))


def lower_kernel(ast: UOp) -> UOp:
    """SINK(STORE(buffer, VIEW, value)...) -> SINK of stores into INDEXed buffers inside RANGE loops."""
    stores = []
    shape = ast.src[0].src[1].arg.shape
    out_ranges = tuple(make_range(axis, size) for axis, size in enumerate(shape))
    lowerer = Lowerer(first_free_axis=len(shape))
    for store in ast.src:
        buf, view, value = store.src
        idx, valid = view.arg.to_indexed(list(out_ranges))
        index = UOp(Ops.INDEX, buf.dtype, (buf, idx) if _is_true(valid) else (buf, idx, valid))
        stores.append(UOp(Ops.STORE, dtypes.void, (index, lowerer.value(value, out_ranges))))
    return UOp(Ops.SINK, dtypes.void, tuple(stores), arg=ast.arg)
