"""Lowering: a kernel AST (shapes and views) becomes loops and index math (RANGE, INDEX, LOAD, REDUCE, STORE)."""

from __future__ import annotations

import itertools

from glassgrad.codegen.opt import Opt, main_reduce
from glassgrad.dtype import DType, dtypes
from glassgrad.helpers import prod
from glassgrad.uop.ops import GroupOp, Ops, UOp

IDX = dtypes.int  # index arithmetic is int32


def make_range(axis: int, size: int, dtype=IDX) -> UOp:
    """A loop variable running 0 .. size-1; a size-1 dimension needs no loop and is the constant 0."""
    if size == 1:
        return UOp.const(dtype, 0)
    return UOp(Ops.RANGE, dtype, (UOp.const(dtype, size),), arg=axis)


def index_dtype(ast: UOp) -> DType:
    """int32 index math, unless some view spans 2**31 elements or more: then int64, so no index wraps."""
    for node in ast.toposort():
        if node.op is Ops.VIEW and any(prod(v.shape) >= 2**31 for v in node.arg.views):
            return dtypes.int64
    return IDX


def unravel(flat: UOp, shape: tuple[int, ...]) -> list[UOp]:
    """Row-major multi-index of a flat index into `shape`."""
    idxs, stride = [], 1
    for size in reversed(shape):
        idxs.append(flat.const_like(0) if size == 1 else (flat // stride) % size)
        stride *= size
    return list(reversed(idxs))


class Lowerer:
    """Computes the value of each AST node at given index expressions, memoized per (node, indices).

    `unroll` maps a reduced axis to a number of lanes: that loop then runs size/lanes times and each
    iteration combines `lanes` values, which the C compiler can keep in registers and vectorize.
    """

    def __init__(self, first_free_axis: int, unroll: dict[int, int] | None = None, unrolled: UOp | None = None,
                 idx_dtype: DType = IDX):  # fmt: skip
        self.next_axis, self.idx_dtype = first_free_axis, idx_dtype
        self.unroll, self.unrolled = unroll or {}, unrolled  # UNROLL acts on the loops of one REDUCE_AXIS
        self.memo: dict[tuple[UOp, tuple[UOp, ...]], UOp] = {}
        self.reduce_ranges: dict[UOp, dict[int, UOp]] = {}

    def value(self, node: UOp, idxs: tuple[UOp, ...]) -> UOp:
        key = (node, idxs)
        if key not in self.memo:
            self.memo[key] = self._lower(node, idxs)
        return self.memo[key]

    def _lower(self, node: UOp, idxs: tuple[UOp, ...]) -> UOp:
        if node.op is Ops.CONST:
            return node
        if node.op is Ops.ARANGE:
            return idxs[0].cast(node.dtype)
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
        src = node.src[0]
        inner = src if src.op is Ops.CONST else self.value(src, tuple(unravel(flat, src.shape)))
        return inner if _is_true(valid) else valid.where(inner, inner.const_like(0))

    def _unroll(self, node: UOp, axis: int) -> int:
        return self.unroll.get(axis, 1) if node is self.unrolled else 1

    def _ranges_of(self, node: UOp) -> dict[int, UOp]:
        """One loop per reduced axis of a REDUCE_AXIS node, shared by every place the node is lowered, so that
        reductions evaluated at several output positions (upcast lanes) run in one loop."""
        if node not in self.reduce_ranges:
            ranges = {}
            for axis in node.arg[1]:
                size = node.src[0].shape[axis]
                ranges[axis] = make_range(self.next_axis, size // self._unroll(node, axis), self.idx_dtype)
                self.next_axis += 1
            self.reduce_ranges[node] = ranges
        return self.reduce_ranges[node]

    def _lower_reduce(self, node: UOp, idxs: tuple[UOp, ...]) -> UOp:
        """A reduction opens a loop for each reduced axis and accumulates over it (unrolled lanes combined first)."""
        op, axes = node.arg
        src = node.src[0]
        if prod(src.shape[a] for a in axes) == 0:
            return UOp.const(node.dtype, reduce_identity(op, node.dtype))
        ranges = self._ranges_of(node)
        lanes = []
        for combo in itertools.product(*(range(self._unroll(node, a)) for a in axes)):
            inner = list(idxs)
            for axis, lane in zip(axes, combo):
                amount = self._unroll(node, axis)
                inner[axis] = ranges[axis] * amount + lane if amount > 1 else ranges[axis]
            lanes.append(self.value(src, tuple(inner)))
        value = combine_tree(op, lanes)
        loops = [r for r in ranges.values() if r.op is Ops.RANGE]
        return UOp(Ops.REDUCE, value.dtype, (value, *loops), arg=op) if loops else value


def combine_tree(op: Ops, values: list[UOp]) -> UOp:
    """values[0] op values[1] op ... as a balanced tree, so the terms can be computed side by side."""
    while len(values) > 1:
        pairs = [values[i].alu(op, values[i + 1]) for i in range(0, len(values) - 1, 2)]
        values = pairs + ([values[-1]] if len(values) % 2 else [])
    return values[0]


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


def lower_kernel(ast: UOp, opts: tuple[Opt, ...] = ()) -> UOp:
    """SINK(STORE(buffer, VIEW, value)...) -> SINK of stores into INDEXed buffers inside RANGE loops.

    UPCAST opts split an output axis into a loop and lanes: each lane gets its own store (and accumulator)."""
    # every buffer stays a kernel argument, even one no value needs (an empty input, an empty output)
    stores: list[UOp] = sorted((n for n in ast.toposort() if n.op is Ops.DEFINE_GLOBAL), key=lambda n: n.arg)
    shape = ast.src[0].src[1].arg.shape
    if prod(shape) == 0:  # nothing to compute: an empty output
        return UOp(Ops.SINK, dtypes.void, tuple(stores), arg=ast.arg)
    upcast = {o.axis: o.amount for o in opts if o.op == "UPCAST"}
    unroll = {o.axis: o.amount for o in opts if o.op == "UNROLL"}
    idx_dtype = index_dtype(ast)
    out_ranges = [make_range(axis, size // upcast.get(axis, 1), idx_dtype) for axis, size in enumerate(shape)]
    lowerer = Lowerer(len(shape), unroll, main_reduce(ast), idx_dtype)
    for combo in itertools.product(*(range(upcast.get(a, 1)) for a in range(len(shape)))):
        idxs = tuple(r * upcast[a] + lane if a in upcast else r for a, (r, lane) in enumerate(zip(out_ranges, combo)))
        for store in ast.src:
            buf, view, value = store.src
            idx, valid = view.arg.to_indexed(list(idxs))
            index = UOp(Ops.INDEX, buf.dtype, (buf, idx) if _is_true(valid) else (buf, idx, valid))
            stores.append(UOp(Ops.STORE, dtypes.void, (index, lowerer.value(value, idxs))))
    return UOp(Ops.SINK, dtypes.void, tuple(stores), arg=ast.arg)
