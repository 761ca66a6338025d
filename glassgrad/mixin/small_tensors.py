"""Small tensors of indexing: positions (arange), masks, a scalar of a dtype, the one-hot sum that reads by index."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from glassgrad.dtype import dtypes, truncate

if TYPE_CHECKING:
    from glassgrad.tensor import Tensor


def _arange(n: int, like: Tensor) -> Tensor:
    """0, 1, ..., n-1 on like's device."""
    return type(like).arange(n, device=like.device)


def _bool_ones(shape: tuple[int, ...], like: Tensor) -> Tensor:
    """True everywhere, on like's device."""
    return type(like).ones(shape, dtype=dtypes.bool, device=like.device)


def _positions(t: Tensor, values: list[int]) -> Tensor:
    """A 1-d int32 index tensor on t's device."""
    return type(t)(values, device=t.device, dtype=dtypes.int32) if values else _arange(0, t)


def _full_like_scalar(t: Tensor, value: Any) -> Tensor:
    """A 0-d tensor of t's dtype and device: it broadcasts against anything."""
    return type(t)(truncate(t.dtype, value), device=t.device, dtype=t.dtype)


def _masked_sum(mask: Tensor, values: Tensor, axis: int) -> Tensor:
    """The sum over `axis` of the values where mask is true: with a one-hot mask, the one value it picks."""
    return mask.where(values, _full_like_scalar(values, 0)).sum(axis).cast(values.dtype)
