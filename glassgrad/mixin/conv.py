"""Tensor methods for convolution: sliding windows of the input times the weight, summed."""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from glassgrad.autocast import contraction_operands
from glassgrad.dtype import promote_types
from glassgrad.errors import ArgumentError
from glassgrad.gradient import custom_gradient
from glassgrad.helpers import prod
from glassgrad.mixin.arguments import _nn_tensor, _required_tensor
from glassgrad.mixin.linalg import _summed
from glassgrad.mixin.spatial_nd import conv_rank
from glassgrad.mixin.split_reduce import cache_sized_part
from glassgrad.uop.ops import GroupOp, Ops, UOp

if TYPE_CHECKING:
    from glassgrad.tensor import Tensor


def _spatial_arg(value: int | Sequence[int], nd: int, op: str, name: str, minimum: int = 1) -> tuple[int, ...]:
    """An int for every spatial dim, or a tuple of `nd` ints (torch's _pair and _triple), each at least `minimum`."""
    values = (value,) * nd if isinstance(value, int) else tuple(value)
    if len(values) != nd or any(isinstance(v, bool) or not isinstance(v, int) or v < minimum for v in values):
        raise ArgumentError(f"{op}: {name} must be an int or a tuple of {nd} ints, each at least {minimum}; "
                            f"got {value!r}")  # fmt: skip
    return values


def _conv_padding(padding: int | Sequence[int] | str, nd: int, kernel: tuple[int, ...], stride: tuple[int, ...],
                  dilation: tuple[int, ...], op: str) -> list[tuple[int, int]]:  # fmt: skip
    """(before, after) per spatial dim from an int, one int per dim, 'valid', 'same', or 2 * nd ints in F.pad's
    order (last dim first: left, right, top, bottom)."""
    if isinstance(padding, str):
        if padding == "valid":
            return [(0, 0)] * nd
        if padding != "same":
            raise ArgumentError(f"{op}: padding must be an int, a tuple, 'same' or 'valid'; got {padding!r}")
        if any(s != 1 for s in stride):
            raise ArgumentError(f"{op}: padding='same' needs stride 1, got stride {stride}")
        totals = [d * (k - 1) for k, d in zip(kernel, dilation, strict=True)]
        return [(t // 2, t - t // 2) for t in totals]  # an odd total puts the extra element after, as torch does
    return padding_pairs(padding, nd, op, minimum=None)


def padding_pairs(padding: int | Sequence[int], nd: int, op: str, minimum: int | None = 0) -> list[tuple[int, int]]:
    """(before, after) per spatial dim from an int, one int per dim, or 2 * nd ints in F.pad's order (last dim first:
    left, right, top, bottom), each at least `minimum` (None: any int; a negative one crops, as tinygrad's)."""
    values = (padding,) * nd if isinstance(padding, int) else tuple(padding)
    low = -math.inf if minimum is None else minimum
    if len(values) not in (nd, 2 * nd) or any(isinstance(v, bool) or not isinstance(v, int) or v < low for v in values):
        least = "" if minimum is None else f", each at least {minimum}"
        raise ArgumentError(f"{op}: padding must be an int or a tuple of {nd} (one per spatial dim) or of {2 * nd} "
                            f"ints (before and after, last dim first, as F.pad){least}, or 'same' or 'valid'; "
                            f"got {padding!r}")  # fmt: skip
    if len(values) == nd:
        return [(p, p) for p in values]
    return [(values[2 * j], values[2 * j + 1]) for j in reversed(range(nd))]


# (shape, kernel, stride, dilation) -> the movement ops (op, arg) of _windows' view, in order. The view's ops depend
# only on the shape: built by the Tensor methods (which check each step) once, then made as the same nodes directly,
# a tenth of the time (a convolution's graph is mostly this view: about 75 of 190 us).
_window_views: dict[tuple, tuple[tuple[Ops, Any], ...]] = {}


WINDOW_VIEWS = 512  # shapes remembered; forgotten all at once beyond that


def _windows(x: Tensor, kernel: tuple[int, ...], stride: tuple[int, ...], dilation: tuple[int, ...]) -> Tensor:
    """Sliding windows over the last len(kernel) dims, as a view: (..., *sizes) -> (..., *outputs, *kernel)
    (see _build_windows)."""
    key = (x.shape, tuple(kernel), tuple(stride), tuple(dilation))
    if (steps := _window_views.get(key)) is None:
        view = _build_windows(x, kernel, stride, dilation)
        if len(_window_views) >= WINDOW_VIEWS:
            _window_views.clear()
        _window_views[key] = _movements_between(x.uop, view.uop)
        return view
    node = x.uop
    for op, arg in steps:
        node = UOp(op, node.dtype, (node,), arg)
    return x if node is x.uop else type(x)._derived(node, x)


def _movements_between(base: UOp, view: UOp) -> tuple[tuple[Ops, Any], ...]:
    """The movement ops that lead from `base` up to `view`, first to last."""
    steps = []
    while view is not base:
        assert view.op in GroupOp.Movement, f"{view.op} in a chain of movement ops"
        steps.append((view.op, view.arg))
        view = view.src[0]
    return tuple(reversed(steps))


def _build_windows(x: Tensor, kernel: tuple[int, ...], stride: tuple[int, ...], dilation: tuple[int, ...]) -> Tensor:
    """Sliding windows over the last len(kernel) dims, as a view: (..., *sizes) -> (..., *outputs, *kernel).

    Element [..., o, k] is x[..., o * stride + k * dilation]. Only movement ops: repeat a dim of size n R times and
    read the copies as k rows of length L = c * n + dilation; since L = dilation (mod n), row k starts k * dilation
    into the input. Keep the first outputs * stride of each row and every stride-th of those. The views compose into
    one strided view (plus the padding's mask), so a kernel indexes the windows with plain strides.
    """
    nd = len(kernel)
    batch, sizes = x.shape[:-nd], x.shape[-nd:]
    outs = [(n - d * (k - 1) - 1) // s + 1 for n, k, s, d in zip(sizes, kernel, stride, dilation, strict=True)]
    if all(s >= k * d for k, s, d in zip(kernel, stride, dilation, strict=True)):
        return _disjoint_windows(x, kernel, stride, dilation, outs)
    rows = [max(1, -(-(o * s - d) // n)) * n + d for n, o, s, d in zip(sizes, outs, stride, dilation, strict=True)]
    copies = [-(-(k * row) // n) for k, row, n in zip(kernel, rows, sizes, strict=True)]
    keep = [None] * len(batch)
    x = x.reshape(*batch, *(v for n in sizes for v in (1, n)))
    x = x.expand(*batch, *(v for r, n in zip(copies, sizes, strict=True) for v in (r, n)))
    x = x.reshape(*batch, *(r * n for r, n in zip(copies, sizes, strict=True)))
    x = x.shrink((*keep, *((0, k * row) for k, row in zip(kernel, rows, strict=True))))
    x = x.reshape(*batch, *(v for k, row in zip(kernel, rows, strict=True) for v in (k, row)))
    x = x.shrink((*keep, *(r for o, s in zip(outs, stride, strict=True) for r in (None, (0, o * s)))))
    x = x.reshape(*batch, *(v for k, o, s in zip(kernel, outs, stride, strict=True) for v in (k, o, s)))
    x = x.shrink((*keep, *(r for o in outs for r in (None, None, (0, 1)))))
    x = x.reshape(*batch, *(v for k, o in zip(kernel, outs, strict=True) for v in (k, o)))
    b = len(batch)
    return x.permute(*range(b), *(b + 2 * j + 1 for j in range(nd)), *(b + 2 * j for j in range(nd)))


def _disjoint_windows(x: Tensor, kernel: tuple[int, ...], stride: tuple[int, ...], dilation: tuple[int, ...],
                      outs: list[int]) -> Tensor:  # fmt: skip
    """_windows where no two windows share an element (stride >= kernel * dilation, as a 2x2 max-pool's): the input
    cut (or padded, never read) to outputs * stride, read as rows of `stride` elements, of which a window takes every
    dilation-th of the first kernel * dilation. Only reshapes and shrinks: the gradient is a view too, where the
    general construction's would sum over the repeated copies."""
    nd = len(kernel)
    batch, sizes = x.shape[:-nd], x.shape[-nd:]
    keep, b = [None] * len(batch), len(batch)
    x = x.pad(((0, 0),) * b + tuple((0, o * s - n) for n, o, s in zip(sizes, outs, stride, strict=True)))
    x = x.reshape(*batch, *(v for o, s in zip(outs, stride, strict=True) for v in (o, s)))
    x = x.shrink((*keep, *(r for k, d in zip(kernel, dilation, strict=True) for r in (None, (0, k * d)))))
    x = x.reshape(*batch, *(v for o, k, d in zip(outs, kernel, dilation, strict=True) for v in (o, k, d)))
    x = x.shrink((*keep, *(r for _ in range(nd) for r in (None, None, (0, 1)))))
    x = x.reshape(*batch, *(v for o, k in zip(outs, kernel, strict=True) for v in (o, k)))
    return x.permute(*range(b), *(b + 2 * j for j in range(nd)), *(b + 2 * j + 1 for j in range(nd)))


def _spatial_names(nd: int) -> tuple[str, ...]:
    return ("L",) if nd == 1 else ("H", "W") if nd == 2 else ("D", "H", "W")


def _check_input(x: Tensor, nd: int, op: str) -> None:
    if x.ndim not in (nd + 1, nd + 2):
        dims = ", ".join(_spatial_names(nd))
        raise ArgumentError(f"{op}: input must be (N, C, {dims}) or (C, {dims}), got shape {x.shape}")


def _batched(x: Tensor, nd: int) -> Tensor:
    return x.unsqueeze(0) if x.ndim == nd + 1 else x


def _convolve(x: Tensor, weight: Tensor, bias: Tensor | None, stride: tuple[int, ...],
              pads: list[tuple[int, int]], dilation: tuple[int, ...], groups: int, op: str) -> Tensor:  # fmt: skip
    """N-d convolution of a batched (N, C, *sizes) input, already checked: windows times weight, summed over
    (channels in the group, kernel offsets). Its gradients are written by hand (_conv_gradients)."""
    nd = len(stride)
    n, kernel = x.shape[0], weight.shape[2:]
    padded = tuple(s + before + after for s, (before, after) in zip(x.shape[2:], pads, strict=True))
    reach = tuple(d * (k - 1) + 1 for k, d in zip(kernel, dilation, strict=True))
    if any(p < r for p, r in zip(padded, reach, strict=True)):
        raise ArgumentError(f"{op}: the padded input {padded} is smaller than the (dilated) kernel {reach}")
    windows, w = _grouped_windows(x, weight, stride, pads, dilation, groups)
    # the input channels and kernel offsets go last, so that the reduction is the innermost loop
    order = (0, 1, 2, *range(4, 4 + nd), 3, *range(4 + nd, 4 + 2 * nd))
    result = promote_types(x.dtype, weight.dtype)
    out = _summed(windows.permute(order), w.permute(order), tuple(range(3 + nd, 4 + 2 * nd)), None, result)
    out = out.reshape(n, weight.shape[0], *windows.shape[4 : 4 + nd])
    rule = functools.partial(_conv_gradients, stride=stride, pads=pads, dilation=dilation, groups=groups, op=op)
    out = custom_gradient(out, (x, weight), rule)
    return out if bias is None else out + bias.reshape(1, weight.shape[0], *(1,) * nd)


def _grouped_windows(x: Tensor, weight: Tensor, stride: tuple[int, ...], pads: list[tuple[int, int]],
                     dilation: tuple[int, ...], groups: int) -> tuple[Tensor, Tensor]:  # fmt: skip
    """The padded input's sliding windows as (N, groups, 1, C_in / groups, *outputs, *kernel) and the weight as
    (1, groups, C_out / groups, C_in / groups, 1.., *kernel): their product broadcasts to every term of the sums."""
    nd = len(stride)
    n, channels, kernel = x.shape[0], x.shape[1], weight.shape[2:]
    out_channels, group_channels = weight.shape[0], channels // groups
    windows = _windows(x.pad(((0, 0), (0, 0), *pads)), kernel, stride, dilation)  # (N, C, *outputs, *kernel)
    windows = windows.reshape(n, groups, 1, group_channels, *windows.shape[2 : 2 + nd], *kernel)
    w = weight.reshape(1, groups, out_channels // groups, group_channels, *(1,) * nd, *kernel)
    return windows, w


def _conv_gradients(g: Tensor, x: Tensor, weight: Tensor, stride: tuple[int, ...], pads: list[tuple[int, int]],
                    dilation: tuple[int, ...], groups: int, op: str) -> tuple[Tensor, Tensor]:  # fmt: skip
    """The gradients of _convolve's output (before the bias) for its input and weight, given the output's gradient g.

    The input's is the transposed convolution of g with the same weight: input element i gets g[o] * w[k] wherever
    o * stride + k * dilation = i + pad_before, which is a convolution of g spread out by the stride (zeros
    between) and padded by dilation * (k - 1) - pad_before before, with each kernel flipped. Derived from the
    primitives instead, it would sum, for each input element, over every window that reads it (a col2im) a value
    computed per window element: a tensor kernel**nd times the input's size, or a slow fused kernel. The weight's is
    the sum over the batch and the outputs of g times the windows, as the primitives give it."""
    nd = len(stride)
    outs = g.shape[2:]
    geometry = zip(x.shape[2:], weight.shape[2:], stride, pads, dilation, outs, strict=True)
    spread_pads = [(d * (k - 1) - pad, size + pad - (o - 1) * s - 1) for size, k, s, (pad, _), d, o in geometry]
    dx = _transposed_convolve(g, weight, None, stride, spread_pads, dilation, groups, op).cast(x.dtype)
    windows, _ = _grouped_windows(x, weight, stride, pads, dilation, groups)
    n, out_channels = g.shape[:2]
    g = g.reshape(n, groups, out_channels // groups, 1, *outs, *(1,) * nd)
    item_bytes = prod(g.shape[1:]) * g.dtype.itemsize + prod(x.shape[1:]) * x.dtype.itemsize
    part = cache_sized_part(n, item_bytes, weight.numel(), weight.dtype, x.device)
    if part is None:
        return dx, _summed(g, windows, (0, *range(4, 4 + nd)), None, weight.dtype).reshape(weight.shape)

    # on the CPU, a part of the batch at a time: its operands stay in cache while each block of outputs reads them
    def parts(t: Tensor) -> Tensor:
        return t.reshape(n // part, part, *t.shape[1:])

    partial = _summed(parts(g), parts(windows), (1, *range(5, 5 + nd)), None, weight.dtype).contiguous()
    return dx, partial.sum(axis=0).reshape(weight.shape)


def _conv_weight(x: Tensor, weight: Any, groups: int, nd: int, op: str, layout: str) -> Tensor:
    """Check a convolution's input, its weight's rank (laid out as `layout`, then the kernel) and `groups`."""
    _check_input(x, nd, op)
    weight = _required_tensor(weight, x, op, "weight")
    if weight.ndim != nd + 2:
        dims = ", ".join("k" + s for s in _spatial_names(nd))
        raise ArgumentError(f"{op}: weight must be ({layout}, {dims}), got shape {weight.shape}")
    if isinstance(groups, bool) or not isinstance(groups, int) or groups < 1:
        raise ArgumentError(f"{op}: groups must be a positive int, got {groups!r}")
    return weight


def _conv_bias(x: Tensor, bias: Any, out_channels: int, op: str) -> Tensor | None:
    """None, or a bias with one value per output channel."""
    if bias is None:
        return None
    bias = _nn_tensor(bias, x, op, "bias")
    if bias.shape != (out_channels,):
        raise ArgumentError(f"{op}: bias must have shape ({out_channels},), one per output channel, got {bias.shape}")
    return bias


def _conv(x: Tensor, weight: Any, bias: Any, stride: int | Sequence[int], padding: int | Sequence[int] | str,
          dilation: int | Sequence[int], groups: int, nd: int, op: str) -> Tensor:  # fmt: skip
    """torch's conv1d/2d/3d: check the arguments, then convolve."""
    weight = _conv_weight(x, weight, groups, nd, op, "out_channels, in_channels / groups")
    channels, (out_channels, group_channels) = x.shape[-nd - 1], weight.shape[:2]
    if channels != group_channels * groups:
        raise ArgumentError(f"{op}: input has {channels} channels but weight expects {group_channels * groups} "
                            f"(groups={groups})")  # fmt: skip
    if out_channels % groups:
        raise ArgumentError(f"{op}: weight has {out_channels} output channels, which groups={groups} does not divide")
    x, weight, bias = contraction_operands(x, weight, _conv_bias(x, bias, out_channels, op))  # 16-bit under autocast
    stride = _spatial_arg(stride, nd, op, "stride")
    dilation = _spatial_arg(dilation, nd, op, "dilation")
    pads = _conv_padding(padding, nd, weight.shape[2:], stride, dilation, op)
    out = _convolve(_batched(x, nd), weight, bias, stride, pads, dilation, groups, op)
    return out if x.ndim == nd + 2 else out[0]


def _conv_transpose(x: Tensor, weight: Any, bias: Any, stride: int | Sequence[int], padding: int | Sequence[int],
                    output_padding: int | Sequence[int], groups: int, dilation: int | Sequence[int], nd: int,
                    op: str) -> Tensor:  # fmt: skip
    """torch's conv_transpose1d/2d/3d: a convolution, with the flipped kernel, of the input spread out by the stride.

    The stride - 1 zeros between inputs are multiplied too: stride**nd times the work of skipping them, kept for one
    code path (a sub-pixel split into stride**nd smaller convolutions would avoid it)."""
    weight = _conv_weight(x, weight, groups, nd, op, "in_channels, out_channels / groups")
    channels, kernel = x.shape[-nd - 1], weight.shape[2:]
    if channels != weight.shape[0]:
        raise ArgumentError(f"{op}: input has {channels} channels but weight expects {weight.shape[0]} (weight is "
                            f"(in_channels, out_channels / groups, ...))")  # fmt: skip
    if channels % groups:
        raise ArgumentError(f"{op}: the input's {channels} channels are not divisible by groups={groups}")
    out_channels = weight.shape[1] * groups
    x, weight, bias = contraction_operands(x, weight, _conv_bias(x, bias, out_channels, op))  # 16-bit under autocast
    stride = _spatial_arg(stride, nd, op, "stride")
    dilation = _spatial_arg(dilation, nd, op, "dilation")
    padding = _spatial_arg(padding, nd, op, "padding", minimum=0)
    output_padding = _spatial_arg(output_padding, nd, op, "output_padding", minimum=0)
    for extra, s, d in zip(output_padding, stride, dilation, strict=True):
        if extra >= s and extra >= d:
            raise ArgumentError(f"{op}: output_padding {output_padding} must be smaller than the stride {stride} or "
                                f"the dilation {dilation}")  # fmt: skip
    unbatched, x = x.ndim == nd + 1, _batched(x, nd)
    sizes = x.shape[2:]
    geometry = list(zip(sizes, kernel, stride, padding, dilation, output_padding, strict=True))
    outs = [(n - 1) * s - 2 * p + d * (k - 1) + extra + 1 for n, k, s, p, d, extra in geometry]
    if any(o <= 0 for o in outs):
        raise ArgumentError(f"{op}: the output size {tuple(outs)} is not positive for input {x.shape} and kernel "
                            f"{kernel}")  # fmt: skip
    pads = [(d * (k - 1) - p, d * (k - 1) - p + extra) for _, k, _, p, d, extra in geometry]
    out = _transposed_convolve(x, weight, bias, stride, pads, dilation, groups, op)
    return out[0] if unbatched else out


def _transposed_convolve(x: Tensor, weight: Tensor, bias: Tensor | None, stride: tuple[int, ...],
                         pads: list[tuple[int, int]], dilation: tuple[int, ...], groups: int,
                         op: str) -> Tensor:  # fmt: skip
    """The transposed convolution of a batched (N, C_in, *sizes) input with a weight (C_in, C_out / groups, *k): the
    input spread out by the stride (stride - 1 zeros between neighbours), padded (or cut, where negative) by `pads`,
    convolved with stride 1 by each kernel flipped.

    Where there are zeros (a stride or padding), the spread input gets a buffer of its own: read through the view's
    mask, every load of the convolution would test whether it falls in the zeros, which keeps it from being vector
    code (2.6x slower for beautiful_mnist's second convolution's input gradient on the CPU); the buffer is about the
    input's size times the stride**nd, a kernel**nd smaller than the sliding windows."""
    nd, channels, sizes, kernel = len(stride), x.shape[1], x.shape[2:], weight.shape[2:]
    # (n, 1) padded to (n, stride), flattened, cut after the last input
    spread = x.reshape(*x.shape[:2], *(v for n in sizes for v in (n, 1)))
    spread = spread.pad(((0, 0), (0, 0), *(r for s in stride for r in ((0, 0), (0, s - 1)))))
    spread = spread.reshape(*x.shape[:2], *(n * s for n, s in zip(sizes, stride, strict=True)))
    spread = spread.shrink((None, None, *((0, (n - 1) * s + 1) for n, s in zip(sizes, stride, strict=True))))
    # weight (C_in, C_out / g, *k) -> (C_out, C_in / g, *k), each kernel flipped
    w = weight.reshape(groups, channels // groups, weight.shape[1], *kernel).transpose(1, 2)
    # the flipped weight gets a buffer of its own (a kernel's size, tiny beside the product): read through the flip,
    # no chunk of it is contiguous and a tiled product copies it element by element
    w = w.reshape(weight.shape[1] * groups, channels // groups, *kernel).flip(*range(2, 2 + nd)).contiguous()
    if any(s > 1 for s in stride) or any(before > 0 or after > 0 for before, after in pads):
        spread, pads = spread.pad(((0, 0), (0, 0), *pads)).contiguous(), [(0, 0)] * nd
    return _convolve(spread, w, bias, (1,) * nd, pads, dilation, groups, op)


class ConvMixin:
    """Tensor methods for convolution."""

    def conv1d(self: Tensor, weight: Tensor, bias: Tensor | None = None, stride: int | Sequence[int] = 1,
               padding: int | Sequence[int] | str = 0, dilation: int | Sequence[int] = 1,
               groups: int = 1) -> Tensor:  # fmt: skip
        """torch's conv1d: input (N, C_in, L), weight (C_out, C_in / groups, k) -> (N, C_out, L_out)."""
        return _conv(self, weight, bias, stride, padding, dilation, groups, 1, "conv1d")

    def conv2d(self: Tensor, weight: Tensor, bias: Tensor | None = None, stride: int | Sequence[int] = 1,
               padding: int | Sequence[int] | str = 0, dilation: int | Sequence[int] = 1,
               groups: int = 1) -> Tensor:  # fmt: skip
        """torch's conv2d: input (N, C_in, H, W), weight (C_out, C_in / groups, kH, kW) -> (N, C_out, H_out, W_out)."""
        return _conv(self, weight, bias, stride, padding, dilation, groups, conv_rank(weight, 2), "conv2d")

    def conv3d(self: Tensor, weight: Tensor, bias: Tensor | None = None, stride: int | Sequence[int] = 1,
               padding: int | Sequence[int] | str = 0, dilation: int | Sequence[int] = 1,
               groups: int = 1) -> Tensor:  # fmt: skip
        """torch's conv3d: input (N, C_in, D, H, W), weight (C_out, C_in / groups, kD, kH, kW)."""
        return _conv(self, weight, bias, stride, padding, dilation, groups, 3, "conv3d")

    def conv_transpose1d(self: Tensor, weight: Tensor, bias: Tensor | None = None, stride: int | Sequence[int] = 1,
                         padding: int | Sequence[int] = 0, output_padding: int | Sequence[int] = 0, groups: int = 1,
                         dilation: int | Sequence[int] = 1) -> Tensor:  # fmt: skip
        """torch's conv_transpose1d: input (N, C_in, L), weight (C_in, C_out / groups, k)."""
        return _conv_transpose(self, weight, bias, stride, padding, output_padding, groups, dilation, 1,
                               "conv_transpose1d")  # fmt: skip

    def conv_transpose2d(self: Tensor, weight: Tensor, bias: Tensor | None = None, stride: int | Sequence[int] = 1,
                         padding: int | Sequence[int] = 0, output_padding: int | Sequence[int] = 0, groups: int = 1,
                         dilation: int | Sequence[int] = 1) -> Tensor:  # fmt: skip
        """torch's conv_transpose2d (conv2d's gradient): input (N, C_in, H, W), weight (C_in, C_out / groups, kH, kW)"""
        return _conv_transpose(self, weight, bias, stride, padding, output_padding, groups, dilation,
                               conv_rank(weight, 2), "conv_transpose2d")  # fmt: skip

    def conv_transpose3d(self: Tensor, weight: Tensor, bias: Tensor | None = None, stride: int | Sequence[int] = 1,
                         padding: int | Sequence[int] = 0, output_padding: int | Sequence[int] = 0, groups: int = 1,
                         dilation: int | Sequence[int] = 1) -> Tensor:  # fmt: skip
        """torch's conv_transpose3d: input (N, C_in, D, H, W), weight (C_in, C_out / groups, kD, kH, kW)."""
        return _conv_transpose(self, weight, bias, stride, padding, output_padding, groups, dilation, 3,
                               "conv_transpose3d")  # fmt: skip
