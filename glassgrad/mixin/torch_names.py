"""Tensor methods under the names PyTorch and tinygrad users reach for: shapes, matrix products, comparisons,
new tensors like this one, and tinygrad's small helpers (replace; sequential is composition.py's).

Each is a thin layer over a method that exists already; the checks are PyTorch's, with its exception classes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from glassgrad.dtype import DType, dtypes
from glassgrad.shape import ShapeError, int_args

if TYPE_CHECKING:
    from glassgrad.tensor import Tensor


class TorchNamesMixin:
    """PyTorch's and tinygrad's names for things Tensor already does."""

    # ---- shape ----

    def size(self: Tensor, dim: int | None = None) -> tuple[int, ...] | int:
        """The shape, or the size of dimension `dim`, as torch.Tensor.size."""
        if dim is None:
            return self.shape
        if self.ndim == 0:
            raise IndexError(f"size: dimension {dim} does not exist: the tensor is 0-d (shape ())")
        return self.shape[self._axis(dim, "size")]

    def t(self: Tensor) -> Tensor:
        """The transpose of a matrix; a 0-d or 1-d tensor is returned as it is (torch.Tensor.t)."""
        if self.ndim > 2:
            raise RuntimeError(f"t: expects a tensor with at most 2 dimensions, got shape {self.shape}; "
                               "use transpose(dim0, dim1) or permute")  # fmt: skip
        return self if self.ndim < 2 else self.transpose(0, 1)

    def unflatten(self: Tensor, dim: int, sizes: Sequence[int]) -> Tensor:
        """Split dimension `dim` into `sizes` (one may be -1); the inverse of flatten."""
        dim = self._axis(dim, "unflatten")
        sizes = int_args(tuple(sizes), "unflatten", "sizes must be integers")
        if not sizes:
            raise ShapeError("unflatten: sizes must not be empty")
        try:
            return self.reshape(self.shape[:dim] + sizes + self.shape[dim + 1 :])
        except ShapeError:
            raise ShapeError(f"unflatten: sizes {sizes} do not multiply to {self.shape[dim]}, the size of dimension "
                             f"{dim} of {self.shape}") from None  # fmt: skip

    # ---- matrix products ----

    def mm(self: Tensor, mat2: Tensor) -> Tensor:
        """The product of two matrices, (n, k) @ (k, m); no broadcasting (torch.mm)."""
        for name, x in (("self", self), ("mat2", mat2)):
            if x.ndim != 2:
                raise RuntimeError(f"mm: {name} must be a matrix (2-d), got shape {x.shape}; use matmul to broadcast")
        return self.matmul(mat2)

    def bmm(self: Tensor, mat2: Tensor) -> Tensor:
        """Batched product of matrices, (b, n, k) @ (b, k, m); no broadcasting (torch.bmm)."""
        for name, x in (("self", self), ("mat2", mat2)):
            if x.ndim != 3:
                raise RuntimeError(f"bmm: {name} must be a batch of matrices (3-d), got shape {x.shape}")
        if self.shape[0] != mat2.shape[0]:
            raise RuntimeError(f"bmm: batch sizes differ: {self.shape} and {mat2.shape}; use matmul to broadcast")
        return self.matmul(mat2)

    # ---- reductions and selection ----

    def amax(self: Tensor, dim: int | Sequence[int] | None = (), keepdim: bool = False, *,
             axis: int | Sequence[int] | None = None) -> Tensor:  # fmt: skip
        """The largest value over `dim` (all dims when dim is () or None), as torch.amax."""
        return self.max(_amax_axes(dim, axis), keepdim)

    def amin(self: Tensor, dim: int | Sequence[int] | None = (), keepdim: bool = False, *,
             axis: int | Sequence[int] | None = None) -> Tensor:  # fmt: skip
        """The smallest value over `dim` (all dims when dim is () or None), as torch.amin."""
        return self.min(_amax_axes(dim, axis), keepdim)

    def index_select(self: Tensor, dim: int, index: Tensor) -> Tensor:
        """The entries at positions `index` (an int tensor of at most 1 dim) along `dim` (torch.index_select)."""
        dim = self._axis(dim, "index_select")
        if not isinstance(index, type(self)):
            raise TypeError(f"index_select: index must be an integer tensor, got {_described(index)}")
        if not dtypes.is_int(index.dtype):
            raise RuntimeError(f"index_select: index must be an integer tensor, got dtype {index.dtype}")
        if index.ndim > 1:
            raise IndexError(f"index_select: index must be a vector (at most 1 dim), got shape {index.shape}")
        if self.ndim == 0:  # a 0-d tensor has one entry to select
            if index.numel() != 1:
                raise RuntimeError(f"index_select: a 0-d tensor takes one index, got {index.numel()}")
            return self.reshape(1)[index.reshape(1)].reshape(())
        return self[(slice(None),) * dim + (index.reshape(-1),)]

    # ---- comparisons, as methods ----

    def gt(self: Tensor, other: Any) -> Tensor:
        """Elementwise self > other (torch.gt)."""
        return self > other

    def lt(self: Tensor, other: Any) -> Tensor:
        """Elementwise self < other (torch.lt)."""
        return self < other

    def ge(self: Tensor, other: Any) -> Tensor:
        """Elementwise self >= other (torch.ge)."""
        return self >= other

    def le(self: Tensor, other: Any) -> Tensor:
        """Elementwise self <= other (torch.le)."""
        return self <= other

    # ---- tensors like this one ----

    def is_floating_point(self: Tensor) -> bool:
        """Whether the dtype is a floating point type."""
        return dtypes.is_float(self.dtype)

    def empty_like(self: Tensor, dtype: DType | str | None = None, device: str | None = None, **kwargs) -> Tensor:
        """A tensor of this one's shape whose values are not set (dtype and device are this one's unless given)."""
        return type(self).empty(self.shape, dtype=dtype or self.dtype, device=device or self.device, **kwargs)

    def new_full(self: Tensor, size: Sequence[int], fill_value: Any, *, dtype: DType | str | None = None,
                 device: str | None = None, requires_grad: bool = False) -> Tensor:  # fmt: skip
        """A tensor of `size` filled with `fill_value`, of this one's dtype and device unless given (torch)."""
        return type(self).full(size, fill_value, dtype=dtype or self.dtype, device=device or self.device,
                               requires_grad=requires_grad or None)  # fmt: skip

    def new_zeros(self: Tensor, *size: int, dtype: DType | str | None = None, device: str | None = None,
                  requires_grad: bool = False) -> Tensor:  # fmt: skip
        """Zeros of `size`, of this tensor's dtype and device unless given (torch.Tensor.new_zeros)."""
        return self.new_full(int_args(size, "new_zeros"), 0, dtype=dtype, device=device, requires_grad=requires_grad)

    def new_ones(self: Tensor, *size: int, dtype: DType | str | None = None, device: str | None = None,
                 requires_grad: bool = False) -> Tensor:  # fmt: skip
        """Ones of `size`, of this tensor's dtype and device unless given (torch.Tensor.new_ones)."""
        return self.new_full(int_args(size, "new_ones"), 1, dtype=dtype, device=device, requires_grad=requires_grad)

    # ---- tinygrad's helpers ----

    def replace(self: Tensor, x: Tensor, allow_shape_mismatch: bool = False) -> Tensor:
        """This tensor, now standing for `x`'s values (same shape unless allowed; dtype and device may differ)."""
        # it keeps its own requires_grad and leaf status: a parameter loaded this way stays a parameter
        if not isinstance(x, type(self)):
            raise TypeError(f"replace: expects a Tensor, got {_described(x)}")
        if x.shape != self.shape and not allow_shape_mismatch:
            raise ShapeError(f"replace: the new value has shape {x.shape} but the tensor has shape {self.shape}")
        if self._requires_grad and not dtypes.is_float(x.dtype):
            raise RuntimeError(f"replace: this tensor requires grad, but the new value has dtype {x.dtype}")
        self.uop, self._autograd_uop = x.uop, None
        return self


def _amax_axes(dim: int | Sequence[int] | None, axis: int | Sequence[int] | None) -> int | tuple[int, ...] | None:
    """torch.amax's dim: () or None reduces every dimension; tinygrad spells it axis."""
    if axis is not None:
        if dim != ():
            raise TypeError(f"amax/amin: got both dim={dim} and axis={axis}; pass only one")
        dim = axis
    if dim is None or (isinstance(dim, (tuple, list)) and not dim):
        return None
    return dim if isinstance(dim, int) else tuple(dim)


def _described(value: Any) -> str:
    return f"{type(value).__name__} {value!r}"[:80]
