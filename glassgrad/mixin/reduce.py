"""Tensor methods for reductions: sums and products, statistics, arg-reductions, cumulative ops, softmax, sorting.

Every method is composed from the REDUCE_AXIS primitive (`Tensor._reduce`), elementwise ops and movement ops, so
gradients follow from the derivative table. Integer results (indices) are int32, glassgrad's default int, where
PyTorch returns int64.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, NamedTuple

from glassgrad.autocast import float32_under_autocast
from glassgrad.dtype import DType, dtypes
from glassgrad.errors import ArgumentError, EmptyReductionError
from glassgrad.gradient import custom_gradient
from glassgrad.helpers import prod as product
from glassgrad.mixin.small_tensors import _arange
from glassgrad.mixin.split_reduce import split_reduce
from glassgrad.uop.ops import Ops, UOp

if TYPE_CHECKING:
    from glassgrad.tensor import Tensor

Axis = int | tuple[int, ...] | list[int] | None


class ValuesIndices(NamedTuple):
    """What sort, topk, cummax and cummin return: unpacks as a pair, or read .values and .indices as in PyTorch."""

    values: Tensor
    indices: Tensor


# Cumulative sums and products along an axis longer than this run in blocks of this size: O(n * BLOCK) work.
CUMULATIVE_BLOCK = 64


def _pick_axis(axis, dim, op: str):
    """PyTorch calls it `dim`, tinygrad `axis`: accept either, not both."""
    if axis is not None and dim is not None:
        raise TypeError(f"{op}: got both axis={axis} and dim={dim}; pass only one")
    return dim if dim is not None else axis


def _one_axis(x: Tensor, axis, op: str, default: int | None = None) -> int:
    """A single dimension, wrapped to 0..ndim-1 (a 0-d tensor has one dimension, 0 or -1, as in PyTorch)."""
    if axis is None:
        if default is None:
            raise TypeError(f"{op}: a dimension is required (pass dim=)")
        axis = default
    if isinstance(axis, bool) or not isinstance(axis, int):
        raise TypeError(f"{op}: dim must be a single int, got {axis!r}")
    return x._axis(axis, op)


def _axes(x: Tensor, axis: Axis, op: str) -> tuple[int, ...]:
    """The dimensions to reduce, wrapped and sorted: all of them when `axis` is None."""
    if axis is None:
        return tuple(range(x.ndim))
    listed = tuple(axis) if isinstance(axis, (tuple, list)) else (axis,)
    for a in listed:
        if isinstance(a, bool) or not isinstance(a, int):
            raise TypeError(f"{op}: dims must be ints, got {axis!r}")
    axes = tuple(sorted({x._axis(a, op) for a in listed}))  # a 0-d tensor's one dimension is 0 or -1
    if len(axes) != len(listed) and x.ndim:
        raise ArgumentError(f"{op}: dim {axis} names a dimension more than once")
    return axes if x.ndim else ()


def _drop_axes(x: Tensor, axes: tuple[int, ...]) -> Tensor:
    """Remove the (size-1) dimensions `axes` that a reduction kept."""
    return x.reshape(tuple(s for i, s in enumerate(x.shape) if i not in axes))


def _check_not_empty(x: Tensor, axes: tuple[int, ...], op: str) -> None:
    """max, min and the arg-reductions have no identity: reducing an empty dimension has no answer."""
    for a in axes:
        if x.shape[a] == 0:
            raise EmptyReductionError(f"{op}: cannot reduce dimension {a} of size 0 in a tensor of shape {x.shape} "
                                      f"({op} of nothing is undefined); use a dimension with elements")  # fmt: skip


def _accumulating(x: Tensor) -> Tensor:
    """Sums and products of bools and small ints accumulate in 32 bits, as PyTorch's do in 64."""
    if x.dtype == dtypes.bool or (dtypes.is_int(x.dtype) and x.dtype.itemsize < 4):
        return x.cast(dtypes.uint32 if dtypes.is_unsigned(x.dtype) else dtypes.int32)
    return x


def _in_float32(x: Tensor, fn: Callable[[Tensor], Tensor]) -> Tensor:
    """fn(x), computed in float32 where x is half or bfloat16 and rounded back once, as PyTorch accumulates them: a
    16-bit running sum stops growing once its terms fall under half its last place."""
    if x.dtype not in (dtypes.float16, dtypes.bfloat16):
        return fn(x)
    return fn(x.cast(dtypes.float32)).cast(x.dtype)


def _mean(x: Tensor, axes: tuple[int, ...], keepdim: bool) -> Tensor:
    """The sum over `axes` divided by the count; NaN over an empty dim."""
    count = product(x.shape[a] for a in axes)
    total = x.sum(axes, keepdim)
    return total.div(count) if count else total * math.nan


def _in_wider(x: Tensor, fn: Callable[[Tensor], Tensor]) -> Tensor:
    """fn(x) computed in float32 for half and bfloat16 and in float64 for float32, rounded back once, as PyTorch's CPU
    variance accumulates: a std whose variance overflows the dtype (of values near 3e38 in float32) stays finite."""
    if x.dtype != dtypes.float32:
        return _in_float32(x, fn)
    return fn(x.cast(dtypes.float64)).cast(x.dtype)


def _variance(x: Tensor, axes: tuple[int, ...], keepdim: bool, dof: int | float, root: bool, whole: bool) -> Tensor:
    """sum((x - mean)^2) / max(0, dof) over `axes` (its square root where `root`), computed wider (`_in_wider`).

    The gradient is PyTorch's formula in x's dtype, as PyTorch computes it: 2 / dof * g * (x - mean) (inf / 0 for dof
    0), none through the mean, whose share is 0 but where a value is infinite (x - mean is then +-inf for the finite
    values, their gradient too, where the derived one is NaN everywhere); std's g / (2 std) first (0 where std is 0,
    and where 2 std overflows the dtype, as in PyTorch). Over no dim given (`whole`) with dof <= 0 it is PyTorch's
    g * inf, NaN where x equals the mean."""

    def value(w: Tensor) -> Tensor:
        var = (w - _mean(w, axes, keepdim=True)).square().sum(axes, keepdim).div(max(0, dof))
        return var.sqrt() if root else var

    kept = tuple(1 if i in axes else s for i, s in enumerate(x.shape))

    def rule(g: Tensor, x: Tensor) -> tuple[Tensor]:
        if root:
            std = _variance(x, axes, keepdim, dof, root, whole)
            g = std.eq(0).where(0, g / (std * 2))
        g, mean = g.reshape(kept).expand(x.shape), x.mean(axes, keepdim=True)
        if whole and dof <= 0:
            return (g * x.eq(mean).where(math.nan, math.inf),)
        return ((2 / dof if dof else math.inf) * g * (x - mean),)

    return custom_gradient(_in_wider(x, value), (x,), rule)


def _softmax(x: Tensor, axis: int) -> Tensor:
    e = (x - x._max_for_stability(axis)).exp()
    return e / e.sum(axis, keepdim=True)


def _log_softmax(x: Tensor, axis: int) -> Tensor:
    shifted = x - x._max_for_stability(axis)
    return shifted - shifted.exp().sum(axis, keepdim=True).log()


def _logsumexp_kept(x: Tensor, axes: tuple[int, ...]) -> Tensor:
    """log(sum(exp(x))) over `axes` (kept), shifted by the max so exp does not overflow."""
    m = x._reduce(Ops.MAX, axes, True, "logsumexp").detach()
    m = (m.eq(math.inf) | m.eq(-math.inf)).where(0.0, m)  # an all-(-inf) or +inf slice: shifting would give nan
    return (x - m).exp().sum(axes, keepdim=True).log() + m


def _logsumexp(x: Tensor, axes: tuple[int, ...], keepdim: bool) -> Tensor:
    # PyTorch's gradient g * exp(x - logsumexp): 0 for a finite x where the result is +inf (the chain rule through
    # the shift gave g / inf * exp(3e38) = 0 * inf = NaN), exp(0) = 1 for each of two 3e38s whose sum rounded
    out = custom_gradient(
        _logsumexp_kept(x, axes), (x,), lambda g, x: (g.expand(x.shape) * (x - _logsumexp_kept(x, axes)).exp(),)
    )
    return out if keepdim else _drop_axes(out, axes)


def _is_nan(x: Tensor) -> Tensor:
    """True where x is NaN (never, for ints and bools)."""
    return x.ne(x) if dtypes.is_float(x.dtype) else x.zeros_like(dtype=dtypes.bool)


def _lower_triangle(n: int, like: Tensor) -> Tensor:
    """mask[i, j] = j <= i: the elements that a cumulative op at i combines (on like's device)."""
    return _arange(n, like).reshape(n, 1) >= _arange(n, like).reshape(1, n)


def _pad_last(x: Tensor, before: int, after: int, value) -> Tensor:
    """Pad the last dimension with `value`."""
    return x.pad(((0, 0),) * (x.ndim - 1) + ((before, after),), value=value)


class ReduceMixin:
    """Reductions: sums and products, statistics, arg-reductions, cumulative ops, softmax, sorting."""

    # ---- the primitive: one REDUCE_AXIS node ----

    def _reduce_axis(self, op: Ops, axes: tuple[int, ...]) -> Tensor:
        """One REDUCE_AXIS node over `axes`, kept as size-1 dims."""
        return self._derived(UOp(Ops.REDUCE_AXIS, self.dtype, (self.uop,), (op, axes)), self)

    def _reduce(self, op: Ops, axis: int | Sequence[int] | None, keepdim: bool, name: str) -> Tensor:
        axes = tuple(range(self.ndim)) if axis is None else tuple(
            self._axis(a, name) for a in ((axis,) if isinstance(axis, int) else axis))  # fmt: skip
        axes = tuple(sorted(set(a for a in axes if self.ndim)))
        if axes and (split := split_reduce(self, op, axes)) is not None:  # a long reduction on a GPU: two kernels
            reduced = split
        else:
            reduced = self._reduce_axis(op, axes) if axes else self
        if keepdim or not axes:
            return reduced
        return reduced.reshape(tuple(s for i, s in enumerate(self.shape) if i not in axes))

    # ---- sums, products, extremes, means ----

    def sum(self: Tensor, axis: Axis = None, keepdim: bool = False, dtype: DType | str | None = None, *,
            dim: Axis = None) -> Tensor:  # fmt: skip
        """Sum over `dim` (all dims when None); bools and small ints sum as int32 or uint32 (PyTorch: int64)."""
        axes = _axes(self, _pick_axis(axis, dim, "sum"), "sum")
        x = self.cast(dtype) if dtype is not None else _accumulating(self)
        return _in_float32(x, lambda w: w._reduce(Ops.ADD, axes, keepdim, "sum"))

    def prod(self: Tensor, axis: Axis = None, keepdim: bool = False, dtype: DType | str | None = None, *,
             dim: Axis = None) -> Tensor:  # fmt: skip
        """Product over `dim` (all dims when None): one MUL reduction, its gradient exact at zeros; bools and small
        ints give int32."""
        axes = _axes(self, _pick_axis(axis, dim, "prod"), "prod")
        x = self.cast(dtype) if dtype is not None else _accumulating(self)
        return _in_float32(x, lambda w: w._reduce(Ops.MUL, axes, keepdim, "prod"))

    def max(self: Tensor, axis: Axis = None, keepdim: bool = False, *, dim: Axis = None) -> Tensor:
        """Largest value over `dim` (all dims when None): values only, as tinygrad (use argmax for the indices)."""
        axes = _axes(self, _pick_axis(axis, dim, "max"), "max")
        _check_not_empty(self, axes, "max")
        return self._reduce(Ops.MAX, axes, keepdim, "max")

    def min(self: Tensor, axis: Axis = None, keepdim: bool = False, *, dim: Axis = None) -> Tensor:
        """Smallest value over `dim` (all dims when None): values only, as tinygrad (use argmin for the indices)."""
        axes = _axes(self, _pick_axis(axis, dim, "min"), "min")
        _check_not_empty(self, axes, "min")
        return self._inverted()._reduce(Ops.MAX, axes, keepdim, "min")._inverted()

    def mean(self: Tensor, axis: Axis = None, keepdim: bool = False, dtype: DType | str | None = None, *,
             dim: Axis = None) -> Tensor:  # fmt: skip
        """Average over `dim` (all dims when None); integer inputs give float32; NaN over an empty dim."""
        axes = _axes(self, _pick_axis(axis, dim, "mean"), "mean")
        x = self.cast(dtype) if dtype is not None else self._float_input()
        return _in_float32(x, lambda w: _mean(w, axes, keepdim))

    # ---- statistics ----

    def _var(self: Tensor, axis: Axis, dim: Axis, keepdim: bool, correction: int | float, unbiased: bool | None,
             op: str, root: bool = False) -> Tensor:  # fmt: skip
        """The variance behind var, std (`root`), var_mean and std_mean; errors name `op`."""
        picked = _pick_axis(axis, dim, op)
        axes = _axes(self, picked, op)
        if unbiased is not None:
            correction = 1 if unbiased else 0
        dof = product(self.shape[a] for a in axes) - correction
        whole = picked is None or self.ndim == 0
        return _variance(self._float_input(), axes, keepdim, dof, root, whole)

    def var(self: Tensor, axis: Axis = None, keepdim: bool = False, correction: int | float = 1, *, dim: Axis = None,
            unbiased: bool | None = None) -> Tensor:  # fmt: skip
        """Variance over `dim`: sum((x - mean)^2) / (N - correction); unbiased=False is correction=0."""
        return self._var(axis, dim, keepdim, correction, unbiased, "var")

    def std(self: Tensor, axis: Axis = None, keepdim: bool = False, correction: int | float = 1, *, dim: Axis = None,
            unbiased: bool | None = None) -> Tensor:  # fmt: skip
        """Standard deviation over `dim`: the square root of var with the same `correction`."""
        return self._var(axis, dim, keepdim, correction, unbiased, "std", root=True)

    def var_mean(self: Tensor, axis: Axis = None, keepdim: bool = False, correction: int | float = 1, *,
                 dim: Axis = None, unbiased: bool | None = None) -> tuple[Tensor, Tensor]:  # fmt: skip
        """(var, mean) over `dim`, as torch.var_mean."""
        var = self._var(axis, dim, keepdim, correction, unbiased, "var_mean")
        return var, self.mean(_pick_axis(axis, dim, "var_mean"), keepdim)

    def std_mean(self: Tensor, axis: Axis = None, keepdim: bool = False, correction: int | float = 1, *,
                 dim: Axis = None, unbiased: bool | None = None) -> tuple[Tensor, Tensor]:  # fmt: skip
        """(std, mean) over `dim`, as torch.std_mean."""
        std = self._var(axis, dim, keepdim, correction, unbiased, "std_mean", root=True)
        return std, self.mean(_pick_axis(axis, dim, "std_mean"), keepdim)

    # ---- arg-reductions and logic ----

    def _first_index_of_max(self: Tensor, axis: int | None, keepdim: bool, op: str) -> Tensor:
        """The index of the first largest element along `axis` (over the flattened tensor when None), int32."""
        if axis is None:
            flat = self.reshape(-1)._first_index_of_max(0, False, op)
            return flat.reshape((1,) * self.ndim) if keepdim else flat
        x = self if self.ndim else self.reshape(1)
        _check_not_empty(x, (axis,), op)
        n = x.shape[axis]
        is_max = x.eq(x._reduce(Ops.MAX, axis, True, op)) | _is_nan(x)  # NaN beats every number, as in PyTorch
        # n - i is largest for the first i: its max picks the first of the maxima
        countdown = n - _arange(n, x).reshape(tuple(n if i == axis else 1 for i in range(x.ndim)))
        first = n - is_max.where(countdown, 0)._reduce(Ops.MAX, axis, keepdim, op)
        return first if self.ndim else first.reshape(())

    def argmax(self: Tensor, axis: int | None = None, keepdim: bool = False, *, dim: int | None = None) -> Tensor:
        """Index of the first largest value along `dim` (flattened when None), NaN largest; int32, not int64."""
        axis = _pick_axis(axis, dim, "argmax")
        axis = None if axis is None else _one_axis(self, axis, "argmax")
        return self._first_index_of_max(axis, keepdim, "argmax")

    def argmin(self: Tensor, axis: int | None = None, keepdim: bool = False, *, dim: int | None = None) -> Tensor:
        """Index of the first smallest value along `dim` (flattened when None), NaN smallest; int32, not int64."""
        axis = _pick_axis(axis, dim, "argmin")
        axis = None if axis is None else _one_axis(self, axis, "argmin")
        return self._inverted()._first_index_of_max(axis, keepdim, "argmin")

    def any(self: Tensor, axis: Axis = None, keepdim: bool = False, *, dim: Axis = None) -> Tensor:
        """True where some element along `dim` is nonzero (False over an empty dim); bool."""
        axes = _axes(self, _pick_axis(axis, dim, "any"), "any")
        return self.bool()._reduce(Ops.MAX, axes, keepdim, "any")

    def all(self: Tensor, axis: Axis = None, keepdim: bool = False, *, dim: Axis = None) -> Tensor:
        """True where every element along `dim` is nonzero (True over an empty dim); bool."""
        axes = _axes(self, _pick_axis(axis, dim, "all"), "all")
        return self.bool().logical_not()._reduce(Ops.MAX, axes, keepdim, "all").logical_not()

    # ---- softmax and friends: stable because the max is subtracted first ----

    def _max_for_stability(self: Tensor, axis: int) -> Tensor:
        """The max along `axis` (kept), detached: the softmax family's value does not depend on it."""
        return self._reduce(Ops.MAX, axis, True, "softmax").detach()

    def _softmax_input(self: Tensor, dtype: DType | str | None) -> Tensor:
        """The input cast to `dtype` first, as PyTorch's softmax(dtype=); ints become floats."""
        return self.cast(dtype) if dtype is not None else self._float_input()

    @float32_under_autocast
    def softmax(self: Tensor, axis: int | None = None, dtype: DType | str | None = None, *,
                dim: int | None = None) -> Tensor:  # fmt: skip
        """exp(x) / exp(x).sum(dim), along the last dimension unless `dim` (or `axis`) says otherwise."""
        axis = _one_axis(self, _pick_axis(axis, dim, "softmax"), "softmax", default=-1)
        return _in_float32(self._softmax_input(dtype), lambda x: _softmax(x, axis))

    @float32_under_autocast
    def log_softmax(self: Tensor, axis: int | None = None, dtype: DType | str | None = None, *,
                    dim: int | None = None) -> Tensor:  # fmt: skip
        """x - logsumexp(x, dim): the log of softmax, without rounding its small values to zero."""
        axis = _one_axis(self, _pick_axis(axis, dim, "log_softmax"), "log_softmax", default=-1)
        return _in_float32(self._softmax_input(dtype), lambda x: _log_softmax(x, axis))

    @float32_under_autocast
    def logsumexp(self: Tensor, axis: Axis = None, keepdim: bool = False, *, dim: Axis = None) -> Tensor:
        """log(exp(x).sum(dim)) without overflow (all dimensions when `dim` is None); -inf over an empty dim."""
        axes = _axes(self, _pick_axis(axis, dim, "logsumexp"), "logsumexp")
        return _in_float32(self._float_input(), lambda x: _logsumexp(x, axes, keepdim))

    # ---- cumulative ops: along one dimension, computed on the last ----

    def _along_last(self: Tensor, axis: int, fn):
        """fn's result(s) with dimension `axis` moved last for fn and back after; a 0-d tensor is one element."""
        x = self.reshape(1) if self.ndim == 0 else self
        out = fn(x.transpose(axis, -1))

        def back(t: Tensor) -> Tensor:
            return t.reshape(()) if self.ndim == 0 else t.transpose(axis, -1)

        return ValuesIndices(*(back(t) for t in out)) if isinstance(out, tuple) else back(out)

    def cumsum(self: Tensor, axis: int | None = None, dtype: DType | str | None = None, *,
               dim: int | None = None) -> Tensor:  # fmt: skip
        """Running sums along `dim` (0 by default); small ints and bools give int32. O(n * 64) work for length n."""
        axis = _one_axis(self, _pick_axis(axis, dim, "cumsum"), "cumsum", default=0)
        x = self.cast(dtype) if dtype is not None else _accumulating(self)
        return _in_float32(x, lambda w: w._along_last(axis, lambda t: _cumulative(t, "sum")))

    def cumprod(self: Tensor, axis: int | None = None, dtype: DType | str | None = None, *,
                dim: int | None = None) -> Tensor:  # fmt: skip
        """Running products along `dim` (0 by default), with gradients exact at zeros. O(n * 64) work for length n."""
        axis = _one_axis(self, _pick_axis(axis, dim, "cumprod"), "cumprod", default=0)
        x = self.cast(dtype) if dtype is not None else _accumulating(self)
        return _in_float32(x, lambda w: w._along_last(axis, lambda t: _cumulative(t, "prod")))

    def cummax(self: Tensor, axis: int | None = None, *, dim: int | None = None) -> ValuesIndices:
        """Running maxima along `dim` (0 by default) and their indices (the last on ties, int32); O(n^2) work."""
        axis = _one_axis(self, _pick_axis(axis, dim, "cummax"), "cummax", default=0)
        return self._along_last(axis, lambda t: _running_extreme(t, t))

    def cummin(self: Tensor, axis: int | None = None, *, dim: int | None = None) -> ValuesIndices:
        """Running minima along `dim` (0 by default) and their indices (the last on ties, int32); O(n^2) work."""
        axis = _one_axis(self, _pick_axis(axis, dim, "cummin"), "cummin", default=0)
        return self._along_last(axis, lambda t: _running_extreme(t, t._inverted()))

    # ---- sorting ----

    def sort(self: Tensor, dim: int | None = None, descending: bool = False, *, stable: bool = True,
             axis: int | None = None) -> ValuesIndices:  # fmt: skip
        """(values, int32 indices) sorted along `dim`: always stable, NaN largest; O(n^2) work for length n."""
        dim = _one_axis(self, _pick_axis(axis, dim, "sort"), "sort", default=-1)
        size = 1 if self.ndim == 0 else self.shape[dim]
        return self._along_last(dim, lambda t: _sorted(t, descending, size))

    def topk(self: Tensor, k: int, dim: int | None = None, largest: bool = True, sorted: bool = True, *,
             axis: int | None = None) -> ValuesIndices:  # fmt: skip
        """(values, int32 indices) of the k largest (or smallest) along `dim`, always sorted; O(n^2) work."""
        dim = _one_axis(self, _pick_axis(axis, dim, "topk"), "topk", default=-1)
        size, smallest = (self.shape[dim], 0) if self.ndim else (1, 1)
        if isinstance(k, bool) or not isinstance(k, int) or not smallest <= k <= size:
            raise ArgumentError(f"topk: k must be an int from {smallest} to {size} (the size of dimension {dim} of "
                                f"{self.shape}), got {k!r}")  # fmt: skip
        return self._along_last(dim, lambda t: _sorted(t, largest, k))


# ---- cumulative ops on the last dimension ----


def _identity(x: Tensor, op: str):
    """The value that leaves a running sum, product or max unchanged."""
    if op == "sum":
        return 0
    if op == "prod":
        return 1
    return dtypes.min(x.dtype)


def _triangular(x: Tensor, op: str) -> Tensor:
    """out[..., i] = op(x[..., j] for j <= i), as one masked reduction over an (n, n) view: O(n^2) work."""
    n = x.shape[-1]
    rows = x.unsqueeze(-2).expand(*x.shape[:-1], n, n)
    window = _lower_triangle(n, x).where(rows, _identity(x, op))
    return window.sum(-1) if op == "sum" else window.prod(-1)


def _cumulative(x: Tensor, op: str) -> Tensor:
    """Running sums or products along the last dim; a long dim runs in blocks, then adds the blocks before each."""
    n = x.shape[-1]
    if n <= CUMULATIVE_BLOCK:
        return _triangular(x, op)
    blocks = -(-n // CUMULATIVE_BLOCK)
    padded = _pad_last(x, 0, blocks * CUMULATIVE_BLOCK - n, _identity(x, op))
    within = _triangular(padded.reshape(*x.shape[:-1], blocks, CUMULATIVE_BLOCK), op)
    block_totals = within[..., -1]
    # the running total of the blocks before each block: shift the running totals right by one
    before = _pad_last(_cumulative(block_totals, op), 1, 0, _identity(x, op))[..., :-1].unsqueeze(-1)
    combined = within + before if op == "sum" else within * before
    return combined.reshape(*x.shape[:-1], blocks * CUMULATIVE_BLOCK)[..., :n]


def _running_extreme(x: Tensor, key: Tensor) -> tuple[Tensor, Tensor]:
    """For each i, the element of x[..., :i+1] of largest key and its int32 index (the last of ties and NaNs)."""
    n = x.shape[-1]
    lower = _lower_triangle(n, x)
    rows = key.unsqueeze(-2).expand(*key.shape[:-1], n, n)  # [..., i, j]: key j, seen from position i
    running = lower.where(rows, dtypes.min(key.dtype))._reduce(Ops.MAX, (key.ndim,), True, "cummax")
    hits = lower & (rows.eq(running) | _is_nan(rows))
    indices = hits.where(_arange(n, x).reshape((1, n)), -1)._reduce(Ops.MAX, (key.ndim,), False, "cummax")
    # the values are picked by index, so that the gradient goes to that one element as in PyTorch
    one_hot = indices.unsqueeze(-1).eq(_arange(n, x).reshape((1, n)))
    return _sum_of_picked(one_hot, x.unsqueeze(-2)), indices


def _sum_of_picked(one_hot: Tensor, x: Tensor) -> Tensor:
    """Sum of x where one_hot is set along the last dimension: x itself where one element is set, in x's dtype."""
    picked = one_hot.where(x, 0)
    if x.dtype == dtypes.bool:
        return picked._reduce(Ops.MAX, (picked.ndim - 1,), False, "sort")
    return picked._reduce(Ops.ADD, (picked.ndim - 1,), False, "sort")


# ---- sorting on the last dimension ----


def _comes_before(a: Tensor, b: Tensor, descending: bool) -> Tensor:
    """a sorts strictly before b: by value, with NaN after every number (before it when descending)."""
    if descending:
        a, b = b, a
    if a.dtype == dtypes.bool:
        return a.logical_not() & b
    return (a < b) | (_is_nan(b) & _is_nan(a).logical_not())


def _stable_ranks(x: Tensor, descending: bool) -> Tensor:
    """Each element's place in a stable sort of the last dim: how many sort before it, equal ones if earlier."""
    n = x.shape[-1]
    mine, others = x.unsqueeze(-1), x.unsqueeze(-2)  # [..., i, j]: element i against element j
    same = mine.eq(others) | (_is_nan(mine) & _is_nan(others))
    earlier = _arange(n, x).reshape((1, n)) < _arange(n, x).reshape((n, 1))
    before = _comes_before(others, mine, descending) | (same & earlier)
    return before.cast(dtypes.int32)._reduce(Ops.ADD, (x.ndim,), False, "sort")


def _sorted(x: Tensor, descending: bool, count: int) -> tuple[Tensor, Tensor]:
    """The first `count` elements of the last dimension in stable sorted order, and their indices (int32)."""
    n = x.shape[-1]
    ranks = _stable_ranks(x, descending)
    one_hot = ranks.unsqueeze(-2).eq(_arange(count, x).reshape((count, 1)))  # [..., r, i]: element i has rank r
    return _sum_of_picked(one_hot, x.unsqueeze(-2)), _sum_of_picked(one_hot, _arange(n, x).reshape((1, n)))
