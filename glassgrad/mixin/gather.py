"""Tensor methods that read or write by index tensors: gather, scatter, scatter_reduce, masked_fill, one_hot."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from glassgrad.dtype import dtypes
from glassgrad.errors import ArgumentError, DtypeError
from glassgrad.mixin.index import _inverse
from glassgrad.mixin.scatter_add import index_add, scatter_add, take_along
from glassgrad.mixin.small_tensors import _arange, _full_like_scalar, _masked_sum
from glassgrad.tensor_checks import checked_index, out_of_bounds

if TYPE_CHECKING:
    from glassgrad.tensor import Tensor


SCATTER_REDUCTIONS = ("sum", "prod", "mean", "amax", "amin")


def _check_index_tensor(index: Any, op: str, what: str) -> None:
    if not isinstance(index, GatherMixin):
        raise TypeError(f"{op}: {what} must be a Tensor, got {type(index).__name__}")
    if not dtypes.is_int(index.dtype):
        raise DtypeError(f"{op}: {what} must be an integer tensor, got {index.dtype}")


def _check_index(t: Tensor, dim: int, index: Tensor, op: str) -> None:
    """A gather's or scatter's index: an integer tensor of t's rank, no bigger than t but along `dim`."""
    _check_index_tensor(index, op, "index")
    if index.ndim != t.ndim:
        raise ArgumentError(f"{op}: index has {index.ndim} dimensions but input has {t.ndim}; they must match")
    for d, (i, s) in enumerate(zip(index.shape, t.shape, strict=True)):
        if d != dim and i > s:
            raise ArgumentError(f"{op}: index has shape {index.shape} but input has {t.shape}; index can't be bigger "
                                f"than input in dimension {d} (other than dim={dim})")  # fmt: skip


def _scatter_src(t: Tensor, dim: int, index: Tensor, src: Any, op: str) -> Tensor:
    """Check a scatter's arguments; the part of src that index covers (a number fills index's shape)."""
    _check_index(t, dim, index, op)
    if not isinstance(src, GatherMixin):
        return type(t).full(index.shape, src, dtype=t.dtype, device=t.device)
    if src.dtype != t.dtype:
        raise DtypeError(f"{op}: src has dtype {src.dtype} but the tensor has {t.dtype}; they must match")
    if src.ndim != t.ndim or any(i > s for i, s in zip(index.shape, src.shape, strict=True)):
        raise ArgumentError(f"{op}: src has shape {src.shape} but index has {index.shape}; src needs as many dims and "
                            "at least index's size in each")  # fmt: skip
    return src.shrink(tuple((0, i) for i in index.shape))


def _scatter_sum(t: Tensor, dim: int, index: Tensor, src: Tensor, mean: bool, include_self: bool) -> Tensor:
    """scatter_reduce's sum or mean: scatter-adds of src and, for a mean or without self, of the count of each place."""
    index = checked_index(index, t.shape[dim], out_of_bounds("scatter_reduce", dim, t.shape[dim]))
    total = scatter_add(t if include_self else t.zeros_like(), dim, index, src, "scatter_reduce")
    if not mean and include_self:
        return total
    ones = type(t).ones(index.shape, dtype=dtypes.int32, device=t.device)
    count = scatter_add(type(t).zeros(t.shape, dtype=dtypes.int32, device=t.device), dim, index, ones)
    if mean:  # integer means round down, as in PyTorch
        divisor = (count + 1 if include_self else count).maximum(1).cast(t.dtype)
        total = total.div(divisor, rounding_mode=None if dtypes.is_float(t.dtype) else "floor")
    return total if include_self else (count > 0).where(total, t)


class _ScatterParts:
    """A scatter along `dim` lined up with dim last: mask[..., i, p] says that src[..., i] goes to place p."""

    def __init__(self, t: Tensor, dim: int, index: Tensor, src: Tensor, op: str):
        self.order = [d for d in range(t.ndim) if d != dim] + [dim]
        self.target = t.permute(self.order)
        index = checked_index(index, t.shape[dim], out_of_bounds(op, dim, t.shape[dim]))
        mask = index.permute(self.order).unsqueeze(-1) == _arange(t.shape[dim], t)
        # index may be smaller than the tensor in the other dims: the places it does not reach get nothing
        grow = tuple((0, full - part) for part, full in zip(mask.shape[:-2], self.target.shape[:-1], strict=True))
        self.mask = mask.pad(grow + ((0, 0), (0, 0)))
        self.src = src.permute(self.order).unsqueeze(-1).pad(grow + ((0, 0), (0, 0)))

    def finish(self, lined_up: Tensor) -> Tensor:
        return lined_up.permute(_inverse(self.order))


class GatherMixin:
    """Tensor methods that read or write by index tensors."""

    def gather(self, dim: int, index: Tensor) -> Tensor:
        """out[i][j] = self[index[i][j]][j] for dim=0: the values along `dim` at the positions in `index`."""
        dim = self._axis(dim, "gather")
        _check_index(self, dim, index, "gather")
        if self.ndim == 0:
            return self.reshape(1).gather(0, index.reshape(1)).reshape(())
        index = checked_index(index, self.shape[dim], out_of_bounds("gather", dim, self.shape[dim]))
        return take_along(self, dim, index)

    def _take_along(self, dim: int, index: Tensor) -> Tensor:
        """gather without checking index (SCATTER_ADD's derivative, gradient.py: its index was checked)."""
        return take_along(self, dim, index)

    def scatter(self, dim: int, index: Tensor, src: Tensor | float | None = None, *, value: float | None = None,
                reduce: str | None = None) -> Tensor:  # fmt: skip
        """A copy of self with self[index[i][j]][j] = src[i][j] for dim=0; src may be a tensor or a number."""
        if (src is None) == (value is None):
            raise TypeError("scatter: pass exactly one of src (a tensor or a number) and value")
        src = value if src is None else src
        if self.ndim == 0:
            flat_src = src.reshape(-1) if hasattr(src, "reshape") else src
            return self.reshape(1).scatter(0, index.reshape(-1), flat_src, reduce=reduce).reshape(())
        dim = self._axis(dim, "scatter")
        src = _scatter_src(self, dim, index, src, "scatter")
        if reduce is not None:
            reductions = {"add": "sum", "multiply": "prod"}
            if reduce not in reductions:
                raise ArgumentError(f"scatter: reduce must be None, 'add' or 'multiply', got {reduce!r}")
            return self.scatter_reduce(dim, index, src, reductions[reduce])
        if index.numel() == 0:
            return self
        parts = _ScatterParts(self, dim, index, src, "scatter")
        m = parts.mask.shape[-2]
        entry = _arange(m, self).reshape(m, 1)
        # where several entries of index name the same place the last one is written (as PyTorch on the CPU)
        winner = parts.mask.where(entry, -1).max(-2, keepdim=True)
        placed = _masked_sum(entry == winner, parts.src, -2)
        return parts.finish((winner.squeeze(-2) >= 0).where(placed, parts.target))

    def scatter_reduce(self, dim: int, index: Tensor, src: Tensor, reduce: str, *, include_self: bool = True
                       ) -> Tensor:  # fmt: skip
        """A copy of self with src reduced into the places index names: sum, prod, mean, amax or amin."""
        if reduce not in SCATTER_REDUCTIONS:
            raise ArgumentError(f"scatter_reduce: reduce must be one of {', '.join(SCATTER_REDUCTIONS)}, "
                                f"got {reduce!r}")  # fmt: skip
        if self.ndim == 0:
            return self.reshape(1).scatter_reduce(0, index.reshape(-1), src.reshape(-1), reduce,
                                                  include_self=include_self).reshape(())  # fmt: skip
        dim = self._axis(dim, "scatter_reduce")
        src = _scatter_src(self, dim, index, src, "scatter_reduce")
        if index.numel() == 0:
            return self
        if reduce in ("sum", "mean"):
            return _scatter_sum(self, dim, index, src, reduce == "mean", include_self)
        parts = _ScatterParts(self, dim, index, src, "scatter_reduce")
        mask, target = parts.mask, parts.target
        identity = {"prod": 1, "amax": dtypes.min(self.dtype), "amin": dtypes.max(self.dtype)}[reduce]
        values = mask.where(parts.src, _full_like_scalar(self, identity))
        if include_self:  # one reduction over self and src together: ties share the gradient evenly, as PyTorch
            values = values.cat(target.unsqueeze(-2), dim=-2)
        total = {"prod": values.prod, "amax": values.max, "amin": values.min}[reduce](-2)
        return parts.finish(total if include_self else (mask.sum(-2) > 0).where(total, target))

    def index_add(self, dim: int, index: Tensor, source: Tensor, *, alpha: Any = 1) -> Tensor:
        """A copy of self with alpha * source's slice i along dim added to self's slice index[i] (index 1-d)."""
        return index_add(self, dim, index, source, alpha)

    def index_add_(self, dim: int, index: Tensor, source: Tensor, *, alpha: Any = 1) -> Tensor:
        """index_add written into this tensor (an assign); not on a tensor autograd tracks."""
        added = index_add(self, dim, index, source, alpha)
        if added.requires_grad:  # an assign ends autograd's graph: the gradient would not flow through it
            raise RuntimeError(
                "index_add_: this tensor or source requires grad, and an in-place write would cut the "
                "gradient; use index_add (out of place), or write inside `with Tensor.no_grad():`"
            )
        return self.assign(added)

    def masked_fill(self, mask: Tensor, value: Any) -> Tensor:
        """value where mask is true, else self (mask broadcasts with self)."""
        if not isinstance(mask, GatherMixin) or mask.dtype != dtypes.bool:
            got = mask.dtype if isinstance(mask, GatherMixin) else type(mask).__name__
            raise DtypeError(f"masked_fill: mask must be a bool tensor, got {got}")
        if not isinstance(value, GatherMixin):
            return mask.where(_full_like_scalar(self, value), self)
        if value.ndim != 0:
            raise ArgumentError(f"masked_fill: value must be a number or a 0-d tensor, got shape {value.shape}")
        return mask.where(value.cast(self.dtype), self)

    def one_hot(self, num_classes: int = -1) -> Tensor:
        """One-hot encoding on a new last axis, of dtypes.default_int (tinygrad's int32; int64, PyTorch's, once
        dtypes.default_int is int64); num_classes=-1 realizes max()+1."""
        _check_index_tensor(self, "one_hot", "the tensor")
        if num_classes == -1:
            if self.numel() == 0:
                raise ArgumentError("one_hot: cannot infer num_classes from an empty tensor; pass num_classes")
            num_classes = int(self.max().item()) + 1
        if not isinstance(num_classes, int) or num_classes < 0:
            raise ArgumentError(f"one_hot: num_classes must be -1 or a non-negative int, got {num_classes!r}")
        classes = checked_index(self, num_classes, f"one_hot: class {{value}} is outside 0..{num_classes - 1}")
        return (classes.unsqueeze(-1) == _arange(num_classes, self)).cast(dtypes.default_int)
