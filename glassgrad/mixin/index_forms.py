"""Index forms PyTorch and tinygrad accept beyond index.py's parser: a list that holds a tensor, a slice, None or
"..." is read as a tuple (t[[i, 2]] is t[i, 2], as both do), and a list of positions may hold 0-d int tensors
among its ints (t[:, [i, 2]], as torch.tensor([i, 2]) reads it) and bools, 0 or 1 there (t[[True, False, 2]] is
t[[1, 0, 2]] in PyTorch; a list of bools only is a mask)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from glassgrad.dtype import dtypes

if TYPE_CHECKING:
    from glassgrad.tensor import Tensor


def as_tuple_index(index: Any, tensor: type[Tensor]) -> Any:
    """A top-level list of index parts as the tuple it stands for; any other index as it is."""
    if isinstance(index, list) and any(isinstance(i, (slice, tensor)) or i is None or i is Ellipsis for i in index):
        return tuple(index)
    return index


def positions(item: Any, tensor: type[Tensor]) -> Any:
    """A (nested) list of positions with each 0-d int tensor in it read as its int (this realizes it), each bool as
    0 or 1."""
    if isinstance(item, list):
        return [positions(i, tensor) for i in item]
    if isinstance(item, bool):
        return int(item)
    if isinstance(item, tensor) and item.ndim == 0 and dtypes.is_int(item.dtype):
        return item.item()
    return item
