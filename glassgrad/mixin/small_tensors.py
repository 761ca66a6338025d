"""Small tensors of indexing: positions (arange), masks, a scalar of a dtype, the one-hot sum that reads by index."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from glassgrad.dtype import dtypes, truncate

if TYPE_CHECKING:
    from glassgrad.tensor import Tensor


def _arange(n: int, device: str) -> Tensor:
    from glassgrad.tensor import Tensor

    return Tensor.arange(n, device=device)


def _bool_ones(shape: tuple[int, ...], device: str) -> Tensor:
    from glassgrad.tensor import Tensor

    return Tensor.ones(shape, dtype=dtypes.bool, device=device)


def _positions(t: Tensor, values: list[int]) -> Tensor:
    """A 1-d int32 index tensor on t's device."""
    from glassgrad.tensor import Tensor

    return Tensor(values, device=t.device, dtype=dtypes.int32) if values else _arange(0, t.device)


def _full_like_scalar(t: Tensor, value: Any) -> Tensor:
    """A 0-d tensor of t's dtype and device: it broadcasts against anything."""
    from glassgrad.tensor import Tensor

    return Tensor(truncate(t.dtype, value), device=t.device, dtype=t.dtype)


def _masked_sum(mask: Tensor, values: Tensor, axis: int) -> Tensor:
    """The sum over `axis` of the values where mask is true: with a one-hot mask, the one value it picks."""
    return mask.where(values, _full_like_scalar(values, 0)).sum(axis).cast(values.dtype)
