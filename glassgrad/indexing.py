"""Tensor indexing with ints, slices (any step), None and Ellipsis, built from movement ops."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from glassgrad.tensor import Tensor


def _expand_ellipsis(index: tuple, ndim: int) -> list:
    """The index with `...` replaced by enough full slices, and missing trailing dims as full slices."""
    if sum(i is Ellipsis for i in index) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    consumed = sum(1 for i in index if i is not None and i is not Ellipsis)
    if consumed > ndim:
        raise IndexError(f"too many indices for tensor of dimension {ndim}: got {consumed}")
    filler = [slice(None)] * (ndim - consumed)
    if Ellipsis in index:
        at = index.index(Ellipsis)
        return list(index[:at]) + filler + list(index[at + 1 :])
    return list(index) + filler


def _take_every(t: Tensor, dim: int, step: int) -> Tensor:
    """Every `step`-th element along `dim`, starting with the first: pad, split the dim in two, keep column 0."""
    size = t.shape[dim]
    count = -(-size // step)
    padded = t.pad(tuple((0, count * step - size) if i == dim else None for i in range(t.ndim)))
    split = padded.reshape(t.shape[:dim] + (count, step) + t.shape[dim + 1 :])
    first = split.shrink(tuple((0, 1) if i == dim + 1 else None for i in range(split.ndim)))
    return first.reshape(t.shape[:dim] + (count,) + t.shape[dim + 1 :])


def basic_index(t: Tensor, index: Any) -> Tensor:
    """t[index] for ints, slices, None and Ellipsis: a view, never a copy."""
    from glassgrad.tensor import Tensor

    if isinstance(index, Tensor) or (isinstance(index, (list, tuple)) and any(isinstance(i, (Tensor, list))
                                                                              for i in index)):  # fmt: skip
        from glassgrad.advanced_index import advanced_index

        return advanced_index(t, index)
    index = _expand_ellipsis(index if isinstance(index, tuple) else (index,), t.ndim)
    crops, flips, steps, final_shape = [], [], [], []
    dim = 0
    for item in index:
        if item is None:
            final_shape.append(1)
            continue
        size = t.shape[dim]
        if isinstance(item, bool) or not isinstance(item, (int, slice)):
            raise IndexError(f"index {item!r} of type {type(item).__name__} is not supported; "
                             "use ints, slices, None, ... or integer tensors")  # fmt: skip
        if isinstance(item, int):
            if not -size <= item < size:
                raise IndexError(f"index {item} is out of bounds for dimension {dim} with size {size}")
            crops.append((item % size, item % size + 1))
            steps.append(1)
        else:
            start, stop, step = item.indices(size)
            count = len(range(start, stop, step))
            lo = start if step > 0 else start + (count - 1) * step
            crops.append((lo, lo + (count - 1) * abs(step) + 1) if count else (0, 0))
            if step < 0:
                flips.append(dim)
            steps.append(abs(step))
            final_shape.append(count)
        dim += 1
    x = t.shrink(tuple(crops)) if t.ndim else t
    x = x.flip(*flips) if flips else x
    for d, step in enumerate(steps):
        if step > 1 and x.shape[d] > 1:
            x = _take_every(x, d, step)
    return x.reshape(tuple(final_shape))
