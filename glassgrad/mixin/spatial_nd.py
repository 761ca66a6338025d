"""tinygrad's reading of the "2d" spatial ops as N-dimensional: conv2d with a weight of any rank, max_pool2d and
avg_pool2d with a kernel of any length, and max_unpool2d, the partial inverse of max pooling.

PyTorch's 2d names take 2 spatial dims; tinygrad's take as many as the weight or the kernel has, so both readings
agree wherever PyTorch's applies.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from glassgrad.dtype import dtypes
from glassgrad.gradient import custom_gradient
from glassgrad.helpers import prod

if TYPE_CHECKING:
    from glassgrad.tensor import Tensor


def conv_rank(weight: Any, default: int) -> int:
    """The spatial dims of a convolution: the weight's rank less (out, in) channels, or `default` for anything
    that is not a tensor of at least 3 dims (its own checks then say what is wrong)."""
    return weight.ndim - 2 if getattr(weight, "ndim", 0) >= 3 else default


def pool_rank(kernel_size: int | Sequence[int], default: int) -> int:
    """The spatial dims of a pooling: as many as kernel_size has, or `default` for an int."""
    return len(kernel_size) if isinstance(kernel_size, (tuple, list)) and kernel_size else default


class SpatialNdMixin:
    """max_unpool2d."""

    def max_unpool2d(self: Tensor, indices: Tensor, kernel_size: int | Sequence[int] = (2, 2),
                     stride: int | Sequence[int] | None = None, dilation: int | Sequence[int] = 1,
                     padding: int | Sequence[int] = 0, output_size: Sequence[int] | None = None) -> Tensor:  # fmt: skip
        """Each value put back where max_pool2d(return_indices=True) found it, zeros elsewhere (tinygrad's order)."""
        # over the last len(kernel_size) dims; torch.nn.functional.max_unpool2d's result
        nd = pool_rank(kernel_size, 2)
        if not isinstance(indices, type(self)) or not dtypes.is_int(indices.dtype):
            raise TypeError(f"max_unpool2d: indices must be an integer tensor (from max_pool2d), got {indices!r}")
        if indices.shape != self.shape or self.ndim < nd + 1:
            raise RuntimeError(f"max_unpool2d: indices of shape {indices.shape} must have the input's shape "
                               f"{self.shape}, which needs channels and {nd} spatial dims")  # fmt: skip
        outs = _unpooled_sizes(self.shape[-nd:], kernel_size, stride, dilation, padding, output_size, nd)
        lead, count, flat_indices = self.shape[:-nd], prod(outs), indices.reshape(*self.shape[:-nd], -1)
        n = flat_indices.shape[-1]
        hits = flat_indices.unsqueeze(-1).eq(type(self).arange(count, device=self.device))  # [..., input, output]
        # overlapping windows can name one spot twice: the last element written wins, as in PyTorch
        inputs = type(self).arange(n, device=self.device).reshape(n, 1)
        last = hits.where(inputs, -1).max(-2, keepdim=True)
        flat = self.reshape(*lead, n, 1)
        spread = inputs.eq(last).where(flat, 0).sum(-2).cast(self.dtype)
        # each input gets the gradient at its spot, however many share it (PyTorch's gather)
        spread = custom_gradient(spread, (flat,), lambda g, _: (g.gather(-1, flat_indices).unsqueeze(-1),))
        return spread.reshape(*lead, *outs)


def _unpooled_sizes(sizes: tuple[int, ...], kernel_size: Any, stride: Any, dilation: Any, padding: Any,
                    output_size: Sequence[int] | None, nd: int) -> tuple[int, ...]:  # fmt: skip
    """output_size's last nd sizes, or the input size a max pooling of these arguments came from."""
    if output_size is not None:
        return tuple(output_size)[-nd:]

    def per_dim(value: Any) -> tuple[int, ...]:
        return (value,) * nd if isinstance(value, int) else tuple(value)

    kernel = per_dim(kernel_size)
    geometry = zip(sizes, kernel, per_dim(stride if stride is not None else kernel), per_dim(dilation),
                   per_dim(padding), strict=True)  # fmt: skip
    return tuple((n - 1) * s - 2 * p + d * (k - 1) + 1 for n, k, s, d, p in geometry)
