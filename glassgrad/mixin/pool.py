"""Tensor methods for pooling: max and average pools over sliding windows."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from glassgrad.dtype import dtypes
from glassgrad.errors import ArgumentError
from glassgrad.helpers import prod
from glassgrad.mixin.conv import _check_input, _spatial_arg, _windows, padding_pairs
from glassgrad.mixin.linalg import _summed
from glassgrad.mixin.small_tensors import _arange
from glassgrad.mixin.spatial_nd import pool_rank

if TYPE_CHECKING:
    from glassgrad.tensor import Tensor


def _pool_geometry(x: Tensor, kernel_size: int | Sequence[int], stride: int | Sequence[int] | None,
                   padding: int | Sequence[int], dilation: int | Sequence[int], ceil_mode: bool, nd: int,
                   op: str) -> tuple[tuple[int, ...], ...]:  # fmt: skip
    """(kernel, stride, dilation, padding before, padding after (with ceil_mode's extra), output sizes) of a pooling;
    padding as torch's (an int or one per dim) or as tinygrad's (before and after, last dim first, as F.pad)."""
    _check_input(x, nd, op)
    kernel = _spatial_arg(kernel_size, nd, op, "kernel_size")
    stride = kernel if stride is None or (isinstance(stride, (list, tuple)) and not stride) else \
        _spatial_arg(stride, nd, op, "stride")  # fmt: skip
    dilation = _spatial_arg(dilation, nd, op, "dilation")
    pairs = padding_pairs(padding, nd, op)
    reach = tuple(d * (k - 1) + 1 for k, d in zip(kernel, dilation, strict=True))
    if any(2 * max(p) > r for p, r in zip(pairs, reach, strict=True)):
        raise ArgumentError(f"{op}: padding {padding} must be at most half of the (dilated) kernel size {reach}")
    sizes = x.shape[-nd:]
    if any(n + b + a < r for n, (b, a), r in zip(sizes, pairs, reach, strict=True)):
        raise ArgumentError(f"{op}: the input's spatial size {sizes} with padding {padding} is smaller than the "
                            f"(dilated) kernel {reach}")  # fmt: skip
    outs, after = [], []
    for n, s, (b, a), r in zip(sizes, stride, pairs, reach, strict=True):
        o = (n + b + a - r + (s - 1 if ceil_mode else 0)) // s + 1
        if ceil_mode and (o - 1) * s >= n + b:  # the last window must start inside the input or the left padding
            o -= 1
        outs.append(o)
        after.append(a + max(0, (o - 1) * s + r - (n + b + a)))
    return kernel, stride, dilation, tuple(b for b, _ in pairs), tuple(after), tuple(outs)


def _first_max(windows: Tensor) -> tuple[Tensor, Tensor]:
    """The max over the last axis and the position of its first occurrence (NaN counts as largest), as torch's
    max pooling; the value's gradient goes to that one element."""
    size = windows.shape[-1]
    biggest = windows.max(-1, keepdim=True)
    is_max = (windows == biggest) | (windows != windows)
    rank = type(windows).arange(size, 0, -1, device=windows.device)  # size .. 1: earlier elements rank higher
    first = is_max.where(rank, 0).max(-1, keepdim=True)
    value = (rank == first).where(windows, 0).sum(-1)
    return value, size - first.squeeze(-1)


def _input_index(position: Tensor, kernel: tuple[int, ...], stride: tuple[int, ...], padding: tuple[int, ...],
                 dilation: tuple[int, ...], sizes: tuple[int, ...]) -> Tensor:  # fmt: skip
    """torch's max-pool indices: a position inside each window as a flat index into the input's spatial dims."""
    nd, outs = len(kernel), position.shape[-len(kernel) :]
    flat = position.zeros_like()
    for j in range(nd):
        offset = (position // prod(kernel[j + 1 :])) % kernel[j]
        start = _arange(outs[j], position).reshape(outs[j], *(1,) * (nd - 1 - j))
        flat = flat * sizes[j] + start * stride[j] - padding[j] + offset * dilation[j]
    return flat.cast(dtypes.default_int)  # int32 as tinygrad's; PyTorch's int64 with default_int = int64


def _max_pool(x: Tensor, kernel_size: int | Sequence[int], stride: int | Sequence[int] | None,
              padding: int | Sequence[int], dilation: int | Sequence[int], ceil_mode: bool, return_indices: bool,
              nd: int, op: str) -> Tensor | tuple[Tensor, Tensor]:  # fmt: skip
    """torch's max_pool1d/2d/3d over the last nd dims (padding never wins: it reads as -inf)."""
    kernel, stride, dilation, padding, after, outs = _pool_geometry(x, kernel_size, stride, padding, dilation,
                                                                     ceil_mode, nd, op)  # fmt: skip
    lowest = -math.inf if dtypes.is_float(x.dtype) else dtypes.min(x.dtype)
    pads = ((0, 0),) * (x.ndim - nd) + tuple(zip(padding, after, strict=True))
    windows = _windows(x.pad(pads, value=lowest), kernel, stride, dilation)
    windows = windows.reshape(*x.shape[:-nd], *outs, prod(kernel))
    if not return_indices and (type(x).no_grad or not x.requires_grad):
        return windows.max(-1)  # ties only matter for the gradient
    value, position = _first_max(windows)
    if not return_indices:
        return value
    return value, _input_index(position, kernel, stride, padding, dilation, x.shape[-nd:])


def _avg_pool(x: Tensor, kernel_size: int | Sequence[int], stride: int | Sequence[int] | None,
              padding: int | Sequence[int], ceil_mode: bool, count_include_pad: bool, divisor_override: int | None,
              dilation: int | Sequence[int], nd: int, op: str) -> Tensor:  # fmt: skip
    """torch's avg_pool1d/2d/3d: window sums over the count of elements torch divides by."""
    kernel, stride, dilation, before, after, outs = _pool_geometry(x, kernel_size, stride, padding, dilation,
                                                                    ceil_mode, nd, op)  # fmt: skip
    x = x._float_input()
    pads = tuple(zip(before, after, strict=True))
    windows = _windows(x.pad(((0, 0),) * (x.ndim - nd) + pads), kernel, stride, dilation)
    window_axes = tuple(range(-nd, 0))
    sums = _summed(windows, None, window_axes, None, x.dtype)
    if divisor_override is not None:
        if isinstance(divisor_override, bool) or not isinstance(divisor_override, int) or divisor_override <= 0:
            raise ArgumentError(f"{op}: divisor_override must be a positive int, got {divisor_override!r}")
        return sums / divisor_override
    # the divisor counts what torch counts: the input, with count_include_pad the padding, never ceil_mode's overhang
    divisor: Tensor | int = 1
    requested = [a for _, a in padding_pairs(padding, nd, op)]  # the padding after asked for, not ceil_mode's
    geometry = zip(x.shape[-nd:], kernel, stride, dilation, before, requested, outs, strict=True)
    for j, (n, k, s, d, p, a, o) in enumerate(geometry):
        lo, hi = (-p, n + a) if count_include_pad else (0, n)
        counts = [sum(lo <= a * s - p + b * d < hi for b in range(k)) for a in range(o)]
        if len(set(counts)) == 1:
            divisor = divisor * counts[0]
        else:
            divisor = type(x)(counts, device=x.device).reshape(o, *(1,) * (nd - 1 - j)) * divisor
    return sums / divisor


class PoolMixin:
    """Tensor methods for pooling."""

    def max_pool1d(self: Tensor, kernel_size: int | Sequence[int] = 2, stride: int | Sequence[int] | None = None,
                   padding: int | Sequence[int] = 0, dilation: int | Sequence[int] = 1, ceil_mode: bool = False,
                   return_indices: bool = False) -> Tensor | tuple[Tensor, Tensor]:  # fmt: skip
        """torch's max_pool1d over the last dim of (N, C, L) or (C, L); the gradient goes to the first max."""
        return _max_pool(self, kernel_size, stride, padding, dilation, ceil_mode, return_indices, 1, "max_pool1d")

    def max_pool2d(self: Tensor, kernel_size: int | Sequence[int] = 2, stride: int | Sequence[int] | None = None,
                   padding: int | Sequence[int] = 0, dilation: int | Sequence[int] = 1, ceil_mode: bool = False,
                   return_indices: bool = False) -> Tensor | tuple[Tensor, Tensor]:  # fmt: skip
        """torch's max_pool2d over the last 2 dims of (N, C, H, W) or (C, H, W); the gradient goes to the first max."""
        return _max_pool(self, kernel_size, stride, padding, dilation, ceil_mode, return_indices,
                         pool_rank(kernel_size, 2), "max_pool2d")  # fmt: skip

    def max_pool3d(self: Tensor, kernel_size: int | Sequence[int] = 2, stride: int | Sequence[int] | None = None,
                   padding: int | Sequence[int] = 0, dilation: int | Sequence[int] = 1, ceil_mode: bool = False,
                   return_indices: bool = False) -> Tensor | tuple[Tensor, Tensor]:  # fmt: skip
        """torch's max_pool3d over the last 3 dims of (N, C, D, H, W) or (C, D, H, W)."""
        return _max_pool(self, kernel_size, stride, padding, dilation, ceil_mode, return_indices, 3, "max_pool3d")

    def avg_pool1d(self: Tensor, kernel_size: int | Sequence[int] = 2, stride: int | Sequence[int] | None = None,
                   padding: int | Sequence[int] = 0, ceil_mode: bool = False, count_include_pad: bool = True,
                   divisor_override: int | None = None, dilation: int | Sequence[int] = 1) -> Tensor:  # fmt: skip
        """torch's avg_pool1d over the last dim of (N, C, L) or (C, L) (dilation: tinygrad's extra)."""
        return _avg_pool(self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, dilation,
                         1, "avg_pool1d")  # fmt: skip

    def avg_pool2d(self: Tensor, kernel_size: int | Sequence[int] = 2, stride: int | Sequence[int] | None = None,
                   padding: int | Sequence[int] = 0, ceil_mode: bool = False, count_include_pad: bool = True,
                   divisor_override: int | None = None, dilation: int | Sequence[int] = 1) -> Tensor:  # fmt: skip
        """torch's avg_pool2d over the last 2 dims of (N, C, H, W) or (C, H, W) (dilation: tinygrad's extra)."""
        return _avg_pool(self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, dilation,
                         pool_rank(kernel_size, 2), "avg_pool2d")  # fmt: skip

    def avg_pool3d(self: Tensor, kernel_size: int | Sequence[int] = 2, stride: int | Sequence[int] | None = None,
                   padding: int | Sequence[int] = 0, ceil_mode: bool = False, count_include_pad: bool = True,
                   divisor_override: int | None = None, dilation: int | Sequence[int] = 1) -> Tensor:  # fmt: skip
        """torch's avg_pool3d over the last 3 dims of (N, C, D, H, W) or (C, D, H, W)."""
        return _avg_pool(self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, dilation,
                         3, "avg_pool3d")  # fmt: skip
