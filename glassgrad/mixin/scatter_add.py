"""The scatter-add, values added into a tensor at the places an index tensor names, and the lookup whose gradient it is.

`scatter_add` builds the SCATTER_ADD primitive: its own kernel, which runs over the added values, reads each one's
place from the index and adds it there (schedule/kernelize.py, codegen/lowerer.py), after a kernel that stores the
tensor added into. `take_along` reads a tensor at an index's places (gather, advanced indexing, nn.Embedding) as a
one-hot sum, which codegen makes one load per output; its gradient is a scatter-add of the output's gradient, not
the one-hot sum's own (a sum over every index for each row of the table: 52 of GPT-2's 82 ms on an H200).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from glassgrad.dtype import DType, dtypes
from glassgrad.gradient import custom_gradient
from glassgrad.mixin.small_tensors import _arange, _masked_sum
from glassgrad.shape import ShapeError
from glassgrad.tensor_checks import checked_index, out_of_bounds
from glassgrad.uop.ops import Ops, UOp

if TYPE_CHECKING:
    from glassgrad.tensor import Tensor


def _accumulator(dtype: DType) -> DType:
    """The dtype a scatter adds in: float32 for the 16- and 8-bit floats (rounded once, at the end, as a sum is), int32
    for bool and the 8- and 16-bit ints (whose low bits the int32 sum has: they wrap around alike), else its own."""
    if dtype.itemsize >= 4:
        return dtype
    return dtypes.float32 if dtypes.is_float(dtype) else dtypes.uint32 if dtypes.is_unsigned(dtype) else dtypes.int32


def scatter_add(base: Tensor, dim: int, index: Tensor, src: Tensor, op: str = "scatter_add") -> Tensor:
    """base with each src[i] added at index[i] along dim (i any position of index): out[index[i][j]][j] += src[i][j]
    for dim=0. index and src have one shape, no larger than base's along the other dims; the caller checks index
    (tensor_checks.checked_index: a place outside dim raises, naming the op)."""
    for name, t in (("index", index), ("src", src)):
        if t.device != base.device:  # a kernel reads every buffer on its own device
            raise ValueError(f"{op}: {name} is on {t.device} but the tensor is on {base.device}; move it with .to()")
    if index.numel() == 0:
        return base
    wide = _accumulator(base.dtype)
    total, added = base.cast(wide), src.cast(wide)
    node = UOp(Ops.SCATTER_ADD, wide, (total.uop, index.uop, added.uop), dim)
    return total._derived(node, total, added).cast(base.dtype)


def take_along(x: Tensor, dim: int, index: Tensor) -> Tensor:
    """x's values along dim at the places index holds (gather without checking index: the caller checks it), index no
    larger than x along the other dims. Its gradient is a scatter-add of the output's gradient."""
    part = x.shrink(tuple(None if d == dim else (0, index.shape[d]) for d in range(x.ndim)))
    onehot = index.unsqueeze(-1) == _arange(x.shape[dim], x)
    out = _masked_sum(onehot, part.unsqueeze(-1).transpose(dim, -1), -1)  # dim moved last, size 1 where it was
    return with_scatter_gradient(out, x, index.shape[dim], lambda g, x: scatter_add(x.zeros_like(), dim, index, g))


def with_scatter_gradient(out: Tensor, x: Tensor, reads: int, gradient: Callable[[Tensor, Tensor], Tensor]) -> Tensor:
    """`out`, a one-hot lookup of `x` where `reads` lookups pick along each line of x, with `gradient(g, x)` (a
    scatter-add) as x's gradient. With one lookup a line the one-hot sum's own gradient is a select, which fuses into
    its readers, and stays: with more it sums over the lookups for each element of x."""
    return out if reads <= 1 else custom_gradient(out, (x,), lambda g, x: (gradient(g, x),))


def index_add(t: Tensor, dim: int, index: Tensor, source: Tensor, alpha: Any) -> Tensor:
    """t with alpha * source's slice i along dim added to t's slice index[i], as torch.index_add."""
    for name, arg in (("index", index), ("source", source)):
        if not isinstance(arg, type(t)):
            raise TypeError(f"index_add: {name} must be a Tensor, got {type(arg).__name__}")
    if not dtypes.is_int(index.dtype):  # the classes PyTorch raises
        raise RuntimeError(f"index_add: index must be an integer tensor, got {index.dtype}")
    if index.ndim > 1:
        raise IndexError(f"index_add: index must be a vector (0-d or 1-d), got shape {index.shape}")
    if source.dtype != t.dtype:
        raise RuntimeError(f"index_add: source has dtype {source.dtype} but the tensor has {t.dtype}; they must match")
    if t.ndim == 0:
        return index_add(t.reshape(1), 0, index, source.reshape(-1), alpha).reshape(())
    dim = t._axis(dim, "index_add")
    expected = t.shape[:dim] + (index.numel(),) + t.shape[dim + 1 :]
    if source.shape != expected:
        raise ShapeError(f"index_add: source has shape {source.shape} but must be {expected}: the tensor's {t.shape} "
                         f"with dim {dim} as long as index ({index.numel()})")  # fmt: skip
    size = t.shape[dim]
    index = checked_index(index.reshape(-1), size, out_of_bounds("index_add", dim, size), broadcast_shape=source.shape)
    index = index.reshape(tuple(-1 if d == dim else 1 for d in range(t.ndim))).expand(source.shape)
    added = source if isinstance(alpha, (int, float)) and alpha == 1 else source * alpha
    return scatter_add(t, dim, index, added, "index_add")
