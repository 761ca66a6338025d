"""Tensor methods that find things: argsort, and the ones whose output shape depends on the values (nonzero,
masked_select, unique).

A lazy graph needs every shape before anything runs, so the data-dependent ones realize what decides the shape
(the mask, or the values) and read it on the host; the values they pick are then gathered lazily, so masked_select
still has a gradient. tinygrad's `size=` gives a fixed shape instead (padded with fill_value, or cut).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from glassgrad.dtype import dtypes

if TYPE_CHECKING:
    from glassgrad.tensor import Tensor


class SearchMixin:
    """argsort, nonzero, masked_select, unique."""

    def argsort(self: Tensor, dim: int | None = -1, descending: bool = False, *, stable: bool = False,
                axis: int | None = None) -> Tensor:  # fmt: skip
        """The int32 indices that sort the values along `dim` (ties keep their order: the sort is always stable)."""
        return self.sort(dim if axis is None else axis, descending).indices

    def masked_select(self: Tensor, mask: Tensor, size: int | None = None, fill_value: Any = 0) -> Tensor:
        """The elements where the bool `mask` is true, 1-d; realizes the mask (`size`: padded or cut to size)."""
        if not isinstance(mask, type(self)) or mask.dtype != dtypes.bool:
            what = mask.dtype if isinstance(mask, type(self)) else type(mask).__name__
            raise RuntimeError(f"masked_select: expected a bool tensor as the mask, got {what}")
        # both broadcast (as PyTorch's); a bool promotes to any dtype, so x keeps its own
        x, spread_mask = self._binary_operands(mask, "masked_select")
        return _picked(x.flatten(), _true_positions(spread_mask.ne(0)), size, fill_value)

    def nonzero(self: Tensor, size: int | None = None, fill_value: int = 0, *,
                as_tuple: bool = False) -> Tensor | tuple[Tensor, ...]:  # fmt: skip
        """The int32 coordinates of the nonzero elements, (count, ndim); realizes self (`size`: padded or cut)."""
        # as_tuple gives one 1-d tensor per dimension, as torch.nonzero
        flat = _true_positions(self.ne(0).reshape(-1))
        if size is not None:
            flat = flat[:size]
        rows = [_coordinates(p, self.shape) for p in flat]
        if size is not None:
            rows += [[fill_value] * self.ndim] * (size - len(rows))
        out = type(self)(rows, device=self.device, dtype=dtypes.int32).reshape(len(rows), self.ndim)
        if not as_tuple:
            return out
        if self.ndim == 0:  # torch's one index tensor of zeros
            return (type(self).zeros(len(rows), device=self.device, dtype=dtypes.int32),)
        return tuple(out[:, d] for d in range(self.ndim))

    def unique(self: Tensor, sorted: bool = True, return_inverse: bool = False, return_counts: bool = False,
               dim: int | None = None) -> Tensor | tuple[Tensor, ...]:  # fmt: skip
        """The distinct values (or slices along `dim`) in ascending order, as torch.unique; realizes, no gradient."""
        # inverse: where each element went; counts: how often each value occurs (both int32); each NaN is distinct
        if dim is None:
            items = self.reshape(-1).tolist()
        else:
            dim = self._axis(dim, "unique")
            moved = self.transpose(0, dim) if self.ndim else self.reshape(1)
            items = [tuple(_flat(row)) for row in moved.tolist()]
        order = _distinct(items)
        index_of = {key: i for i, key in enumerate(order) if not _is_nan(key)}
        values = order if dim is None else [list(key) for key in order]
        inverse = [index_of[key] if not _is_nan(key) else order.index(key) for key in items]
        if dim is None:
            out = type(self)(values, device=self.device, dtype=self.dtype).reshape(len(values))
        else:
            out = _rebuilt(self, moved, values, dim)
        extras = []
        if return_inverse:
            inverse_shape = self.shape if dim is None else (self.shape[dim] if self.ndim else 1,)
            extras.append(type(self)(inverse, device=self.device, dtype=dtypes.int32).reshape(inverse_shape))
        if return_counts:
            counts = [0] * len(order)
            for i in inverse:
                counts[i] += 1
            extras.append(type(self)(counts, device=self.device, dtype=dtypes.int32).reshape(len(counts)))
        return (out, *extras) if extras else out


def _true_positions(mask: Tensor) -> list[int]:
    """The flat positions where a bool tensor is true, read on the host (this realizes it)."""
    return [i for i, v in enumerate(mask.reshape(-1).tolist()) if v]


def _picked(flat: Tensor, positions: list[int], size: int | None, fill_value: Any) -> Tensor:
    """flat's elements at `positions` (gathered lazily, so they keep their gradient), fitted to `size`."""
    if size is not None:
        positions = positions[:size]
    index = type(flat)(positions, device=flat.device, dtype=dtypes.int32).reshape(len(positions))
    picked = flat[index]
    if size is None or len(positions) == size:
        return picked
    return picked.pad(((0, size - len(positions)),), value=fill_value)


def _coordinates(position: int, shape: tuple[int, ...]) -> list[int]:
    """The coordinates of a flat (row-major) position in `shape`."""
    coords = []
    for s in reversed(shape):
        coords.append(position % s)
        position //= s
    return coords[::-1]


def _flat(nested: Any) -> list[Any]:
    if isinstance(nested, list):
        return [v for item in nested for v in _flat(item)]
    return [nested]


def _is_nan(key: Any) -> bool:
    return isinstance(key, float) and math.isnan(key)


def _distinct(items: list[Any]) -> list[Any]:
    """The distinct items in ascending order; NaNs (each distinct, as PyTorch's) last."""
    return sorted({key for key in items if not _is_nan(key)}) + [key for key in items if _is_nan(key)]


def _rebuilt(x: Tensor, moved: Tensor, slices: list[list[Any]], dim: int) -> Tensor:
    """The distinct slices (each flattened) as a tensor with `dim` back in its place."""
    shape = (len(slices), *moved.shape[1:])
    out = type(x)(slices, device=x.device, dtype=x.dtype).reshape(shape)
    return out.transpose(0, dim) if x.ndim else out.reshape(len(slices))
