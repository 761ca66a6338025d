"""Tensor methods for the neural-network functions: convolution, pooling, normalization, attention and losses."""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from glassgrad.dtype import dtypes, promote_types
from glassgrad.errors import ArgumentError, DtypeError
from glassgrad.helpers import prod
from glassgrad.mixin.spatial_nd import conv_rank, pool_rank
from glassgrad.schedule.split_reduce import cache_sized_part
from glassgrad.tensor_checks import checked_index
from glassgrad.uop.ops import GroupOp, Ops, UOp

if TYPE_CHECKING:
    from glassgrad.tensor import Tensor


# ---- normalization, attention and losses: helpers ----

# The gap between 1.0 and the next float up (torch.finfo(dtype).eps): rms_norm's default eps.
_MACHINE_EPSILON = {dtypes.float16: 2.0**-10, dtypes.bfloat16: 2.0**-7, dtypes.float32: 2.0**-23,
                    dtypes.float64: 2.0**-52}  # fmt: skip
_LOSS_REDUCTIONS = ("mean", "sum", "none")


def _nn_tensor(value: Any, like: Tensor, op: str, name: str) -> Tensor | None:
    """An optional argument (weight, bias, target, ...) as a Tensor on `like`'s device; None stays None."""
    from glassgrad.tensor import Tensor

    if value is None:
        return None
    if not isinstance(value, Tensor):
        return Tensor(value, device=like.device)
    if value.device != like.device:
        raise ArgumentError(f"{op}: {name} is on {value.device} but the input is on {like.device}; move it with .to()")
    return value


def _param_of_shape(value: Any, like: Tensor, shape: tuple[int, ...], op: str, name: str) -> Tensor | None:
    """A per-feature parameter (weight, bias, running stats) that must have exactly `shape`."""
    t = _nn_tensor(value, like, op, name)
    if t is not None and t.shape != shape:
        raise ArgumentError(f"{op}: {name} has shape {t.shape} but the input {like.shape} needs {shape}")
    return t


def _trailing_shape(x: Tensor, normalized_shape: int | Sequence[int], op: str) -> tuple[int, ...]:
    """torch's `normalized_shape`: the last dimensions of the input, over which the statistics are taken."""
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    if not shape or len(shape) > x.ndim or x.shape[x.ndim - len(shape) :] != shape:
        raise ArgumentError(f"{op}: normalized_shape {shape} must be the last dimensions of the input, "
                            f"whose shape is {x.shape}")  # fmt: skip
    return shape


def _standardized(x: Tensor, axes: tuple[int, ...], eps: float) -> tuple[Tensor, Tensor, Tensor]:
    """(x - mean) / sqrt(var + eps) over `axes` with the biased variance; also the mean and variance (kept dims)."""
    mean = x.mean(axes, keepdim=True)
    centered = x - mean
    var = (centered * centered).mean(axes, keepdim=True)
    return centered * (var + eps).rsqrt(), mean, var


def _scale_and_shift(x: Tensor, weight: Tensor | None, bias: Tensor | None, shape: tuple[int, ...]) -> Tensor:
    """x * weight + bias, each parameter read through `shape` so that it broadcasts against x."""
    if weight is not None:
        x = x * weight.reshape(shape)
    return x + bias.reshape(shape) if bias is not None else x


def _running_stats_start(x: Tensor, op: str, args: tuple, momentum: float, eps: float, batch_stats: bool,
                         flag: str) -> tuple[tuple, Tensor | None]:  # fmt: skip
    """The shared start of batch_norm and instance_norm: the checked per-channel arguments, and, when batch
    statistics are off, the result normalized by the running statistics (None otherwise)."""
    running_mean, running_var, weight, bias = args
    args = _per_channel_args(x, op, running_mean=running_mean, running_var=running_var, weight=weight, bias=bias)
    _check_momentum(momentum, op)
    if batch_stats:
        return args, None
    running_mean, running_var, weight, bias = args
    if running_mean is None or running_var is None:
        raise ArgumentError(f"{op}: running_mean and running_var are required when {flag}")
    return args, x.batchnorm(weight, bias, running_mean, (running_var + eps).rsqrt())


def _per_channel_args(x: Tensor, op: str, **tensors: Any) -> list[Tensor | None]:
    """Check that x is (N, C, *) and that each per-channel tensor is None or of shape (C,); return them in order."""
    if x.ndim < 2:
        raise ArgumentError(f"{op}: input needs shape (N, C, *), got {x.shape}")
    return [_param_of_shape(value, x, (x.shape[1],), op, name) for name, value in tensors.items()]


def _channel_view(x: Tensor) -> tuple[int, ...]:
    """The shape (1, C, 1, ...) that lines a per-channel parameter up with an (N, C, ...) input."""
    return (1, x.shape[1]) + (1,) * (x.ndim - 2)


def _update_running_stat(stat: Tensor | None, batch_value: Tensor, momentum: float) -> None:
    """running = (1 - momentum) * running + momentum * batch_value, written into the running tensor (lazily)."""
    if stat is not None:
        stat.assign(stat * (1 - momentum) + batch_value.detach().cast(stat.dtype) * momentum)


def _check_momentum(momentum: Any, op: str) -> None:
    if isinstance(momentum, bool) or not isinstance(momentum, (int, float)):
        raise TypeError(f"{op}: momentum must be a number, got {momentum!r}")


def _check_reduction(reduction: str, op: str) -> None:
    if reduction not in _LOSS_REDUCTIONS:
        raise ArgumentError(f"{op}: reduction must be one of {_LOSS_REDUCTIONS}, got {reduction!r}")


def _reduced(loss: Tensor, reduction: str) -> Tensor:
    """The loss per element ('none'), summed ('sum') or averaged over every element ('mean')."""
    if reduction == "none":
        return loss
    return loss.sum() if reduction == "sum" else loss.mean()


def _loss_target(x: Tensor, target: Any, Y: Any, op: str) -> Tensor:
    """The target, given as torch's `target` or tinygrad's `Y` (exactly one of them)."""
    if (target is None) == (Y is None):
        raise TypeError(f"{op}: pass the target once, as `target` (or tinygrad's name `Y`)")
    return _nn_tensor(target if Y is None else Y, x, op, "target")


def _elementwise_loss_operands(x: Tensor, target: Tensor, weight: Any, op: str) -> tuple[Tensor, Tensor | None]:
    """The difference x - target (broadcast as torch does) and the optional weight, which must have x's shape."""
    from glassgrad.tensor import _broadcast_shape

    _broadcast_shape(x.shape, target.shape, op)
    weight = _nn_tensor(weight, x, op, "weight")
    if weight is not None and weight.shape != x.shape:
        raise ArgumentError(f"{op}: weight has shape {weight.shape} but must have the input's shape {x.shape}")
    return x._float_input() - target, weight


def _weighted_reduced(loss: Tensor, weight: Tensor | None, reduction: str) -> Tensor:
    """mse_loss's and l1_loss's reduction: a weighted mean divides by the sum of the weights."""
    if weight is None:
        return _reduced(loss, reduction)
    loss = loss * weight
    return loss.sum() / weight.sum() if reduction == "mean" else _reduced(loss, reduction)


def _index_target(x: Tensor, target: Tensor, class_dim: int, op: str) -> Tensor:
    """Class-index targets: integers with the input's shape less its class dimension."""
    expected = x.shape[:class_dim] + x.shape[class_dim + 1 :]
    if target.shape != expected:
        raise ArgumentError(f"{op}: target has shape {target.shape} but input {x.shape} needs class indices of shape "
                            f"{expected}")  # fmt: skip
    if not dtypes.is_int(target.dtype):  # RuntimeError, as PyTorch's "expected target dtype to be Long"
        raise RuntimeError(f"{op}: class-index targets must be an integer dtype, got {target.dtype} (class "
                           f"probabilities take the input's shape {x.shape})")  # fmt: skip
    return target if target.dtype in (dtypes.int32, dtypes.int64) else target.cast(dtypes.int32)


def _class_index_loss(logp: Tensor, target: Tensor, class_dim: int, weight: Tensor | None, ignore_index: int,
                      reduction: str, label_smoothing: float, op: str) -> Tensor:  # fmt: skip
    """-log p(target class), with torch's class weights, ignore_index and label smoothing, reduced.

    The target class is picked by a one-hot mask (target == arange(C)) and a masked sum, so the loss fuses into the
    kernels of log_softmax and one reduction; 'mean' divides by the total weight of the targets that count.
    """
    from glassgrad.tensor import Tensor

    n_classes = logp.shape[class_dim]
    class_shape = (n_classes,) + (1,) * (logp.ndim - class_dim - 1)
    message = f"{op}: target {{value}} is not a class in 0..{n_classes - 1} (nor ignore_index={ignore_index})"
    target = checked_index(target, n_classes, message, allowed=ignore_index).unsqueeze(class_dim)
    counted = target != ignore_index
    picked = (target == Tensor.arange(n_classes, device=logp.device).reshape(class_shape)) & counted
    weighted = logp * weight.reshape(class_shape) if weight is not None else logp
    terms = picked.where(weighted, 0.0)
    if label_smoothing:  # (1 - e) * -log p(target) + e * mean over classes of -log p
        terms = terms * (1 - label_smoothing) + counted.where(weighted, 0.0) * (label_smoothing / n_classes)
    if reduction == "none":
        return -terms.sum(class_dim)
    if reduction == "sum":
        return -terms.sum()
    total_weight = picked.where(weight.reshape(class_shape), 0.0).sum() if weight is not None else counted.sum()
    return -terms.sum() / total_weight


def _repeat_heads(t: Tensor, query: Tensor, op: str) -> Tensor:
    """Grouped-query attention: each of key's/value's heads (dim -3) serves query.shape[-3] // heads query heads."""
    if t.ndim < 3 or query.ndim < 3 or query.shape[-3] % t.shape[-3]:
        raise ArgumentError(f"{op}: enable_gqa needs heads at dim -3 with query's heads a multiple of key's and "
                            f"value's, got query {query.shape} and {t.shape}")  # fmt: skip
    heads, repeats = t.shape[-3], query.shape[-3] // t.shape[-3]
    grouped = t.unsqueeze(-3).expand(*t.shape[:-2], repeats, *t.shape[-2:])
    return grouped.reshape(*t.shape[:-3], heads * repeats, *t.shape[-2:])


def _softmax_of_masked(scores: Tensor) -> Tensor:
    """Softmax over the last dim that gives 0, not nan, in a row whose scores are all -inf (every key masked out)."""
    top = scores.max(-1, keepdim=True).detach()
    fully_masked = top == -math.inf
    e = (scores - fully_masked.where(0.0, top)).exp()
    return e / fully_masked.where(1.0, e.sum(-1, keepdim=True))


def _check_same_shape(x: Tensor, target: Tensor, op: str) -> None:
    if target.shape != x.shape:
        raise ArgumentError(f"{op}: target has shape {target.shape} but must have the input's shape {x.shape}")


def _broadcast_weight(value: Any, x: Tensor, op: str, name: str) -> Tensor | None:
    """An optional weight that must broadcast to the input's shape."""
    from glassgrad.tensor import _broadcast_shape

    t = _nn_tensor(value, x, op, name)
    if t is not None and _broadcast_shape(t.shape, x.shape, f"{op}: {name}") != x.shape:
        raise ArgumentError(f"{op}: {name} of shape {t.shape} must broadcast to the input's shape {x.shape}")
    return t


# ---- convolution and pooling: helpers ----


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
    values = (padding,) * nd if isinstance(padding, int) else tuple(padding)
    if len(values) not in (nd, 2 * nd) or any(isinstance(v, bool) or not isinstance(v, int) or v < 0 for v in values):
        raise ArgumentError(f"{op}: padding must be a non-negative int, a tuple of {nd} (one per spatial dim) or "
                            f"of {2 * nd} (before and after, last dim first, as F.pad), 'same' or 'valid'; "
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


def _conv_operand(value: Any, like: Tensor, op: str, name: str) -> Tensor:
    """A weight or bias as a Tensor on the input's device."""
    from glassgrad.tensor import Tensor

    if not isinstance(value, Tensor):
        return Tensor(value, device=like.device)
    if value.device != like.device:
        raise ArgumentError(f"{op}: {name} is on {value.device} but the input is on {like.device}; move it with .to()")
    return value


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
    from glassgrad.gradient import custom_gradient
    from glassgrad.mixin.linalg import _summed

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
    from glassgrad.mixin.linalg import _summed

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
    weight = _conv_operand(weight, x, op, "weight")
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
    bias = _conv_operand(bias, x, op, "bias")
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
    bias = _conv_bias(x, bias, out_channels, op)
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
    bias = _conv_bias(x, bias, out_channels, op)
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
    w = w.reshape(weight.shape[1] * groups, channels // groups, *kernel).flip(*range(2, 2 + nd))
    if any(s > 1 for s in stride) or any(before > 0 or after > 0 for before, after in pads):
        spread, pads = spread.pad(((0, 0), (0, 0), *pads)).contiguous(), [(0, 0)] * nd
    return _convolve(spread, w, bias, (1,) * nd, pads, dilation, groups, op)


def _pool_geometry(x: Tensor, kernel_size: int | Sequence[int], stride: int | Sequence[int] | None,
                   padding: int | Sequence[int], dilation: int | Sequence[int], ceil_mode: bool, nd: int,
                   op: str) -> tuple[tuple[int, ...], ...]:  # fmt: skip
    """(kernel, stride, dilation, padding, padding after (with ceil_mode's extra), output sizes) of a pooling."""
    _check_input(x, nd, op)
    kernel = _spatial_arg(kernel_size, nd, op, "kernel_size")
    stride = kernel if stride is None or (isinstance(stride, (list, tuple)) and not stride) else \
        _spatial_arg(stride, nd, op, "stride")  # fmt: skip
    dilation = _spatial_arg(dilation, nd, op, "dilation")
    padding = _spatial_arg(padding, nd, op, "padding", minimum=0)
    reach = tuple(d * (k - 1) + 1 for k, d in zip(kernel, dilation, strict=True))
    if any(2 * p > r for p, r in zip(padding, reach, strict=True)):
        raise ArgumentError(f"{op}: padding {padding} must be at most half of the (dilated) kernel size {reach}")
    sizes = x.shape[-nd:]
    if any(n + 2 * p < r for n, p, r in zip(sizes, padding, reach, strict=True)):
        raise ArgumentError(f"{op}: the input's spatial size {sizes} with padding {padding} is smaller than the "
                            f"(dilated) kernel {reach}")  # fmt: skip
    outs, after = [], []
    for n, s, p, r in zip(sizes, stride, padding, reach, strict=True):
        o = (n + 2 * p - r + (s - 1 if ceil_mode else 0)) // s + 1
        if ceil_mode and (o - 1) * s >= n + p:  # the last window must start inside the input or the left padding
            o -= 1
        outs.append(o)
        after.append(p + max(0, (o - 1) * s + r - (n + 2 * p)))
    return kernel, stride, dilation, padding, tuple(after), tuple(outs)


def _first_max(windows: Tensor) -> tuple[Tensor, Tensor]:
    """The max over the last axis and the position of its first occurrence (NaN counts as largest), as torch's
    max pooling; the value's gradient goes to that one element."""
    from glassgrad.tensor import Tensor

    size = windows.shape[-1]
    biggest = windows.max(-1, keepdim=True)
    is_max = (windows == biggest) | (windows != windows)
    rank = Tensor.arange(size, 0, -1, device=windows.device)  # size .. 1: earlier elements rank higher
    first = is_max.where(rank, 0).max(-1, keepdim=True)
    value = (rank == first).where(windows, 0).sum(-1)
    return value, size - first.squeeze(-1)


def _input_index(position: Tensor, kernel: tuple[int, ...], stride: tuple[int, ...], padding: tuple[int, ...],
                 dilation: tuple[int, ...], sizes: tuple[int, ...]) -> Tensor:  # fmt: skip
    """torch's max-pool indices: a position inside each window as a flat index into the input's spatial dims."""
    from glassgrad.tensor import Tensor

    nd, outs = len(kernel), position.shape[-len(kernel) :]
    flat = position.zeros_like()
    for j in range(nd):
        offset = (position // prod(kernel[j + 1 :])) % kernel[j]
        start = Tensor.arange(outs[j], device=position.device).reshape(outs[j], *(1,) * (nd - 1 - j))
        flat = flat * sizes[j] + start * stride[j] - padding[j] + offset * dilation[j]
    return flat.cast(dtypes.int64)


def _max_pool(x: Tensor, kernel_size: int | Sequence[int], stride: int | Sequence[int] | None,
              padding: int | Sequence[int], dilation: int | Sequence[int], ceil_mode: bool, return_indices: bool,
              nd: int, op: str) -> Tensor | tuple[Tensor, Tensor]:  # fmt: skip
    """torch's max_pool1d/2d/3d over the last nd dims (padding never wins: it reads as -inf)."""
    from glassgrad.tensor import Tensor

    kernel, stride, dilation, padding, after, outs = _pool_geometry(x, kernel_size, stride, padding, dilation,
                                                                     ceil_mode, nd, op)  # fmt: skip
    lowest = -math.inf if dtypes.is_float(x.dtype) else dtypes.min(x.dtype)
    pads = ((0, 0),) * (x.ndim - nd) + tuple(zip(padding, after, strict=True))
    windows = _windows(x.pad(pads, value=lowest), kernel, stride, dilation)
    windows = windows.reshape(*x.shape[:-nd], *outs, prod(kernel))
    if not return_indices and (Tensor.no_grad or not x.requires_grad):
        return windows.max(-1)  # ties only matter for the gradient
    value, position = _first_max(windows)
    if not return_indices:
        return value
    return value, _input_index(position, kernel, stride, padding, dilation, x.shape[-nd:])


def _avg_pool(x: Tensor, kernel_size: int | Sequence[int], stride: int | Sequence[int] | None,
              padding: int | Sequence[int], ceil_mode: bool, count_include_pad: bool, divisor_override: int | None,
              dilation: int | Sequence[int], nd: int, op: str) -> Tensor:  # fmt: skip
    """torch's avg_pool1d/2d/3d: window sums over the count of elements torch divides by."""
    from glassgrad.mixin.linalg import _summed
    from glassgrad.tensor import Tensor

    kernel, stride, dilation, padding, after, outs = _pool_geometry(x, kernel_size, stride, padding, dilation,
                                                                     ceil_mode, nd, op)  # fmt: skip
    x = x._float_input()
    pads = tuple(zip(padding, after, strict=True))
    windows = _windows(x.pad(((0, 0),) * (x.ndim - nd) + pads), kernel, stride, dilation)
    window_axes = tuple(range(-nd, 0))
    sums = _summed(windows, None, window_axes, None, x.dtype)
    if divisor_override is not None:
        if isinstance(divisor_override, bool) or not isinstance(divisor_override, int) or divisor_override <= 0:
            raise ArgumentError(f"{op}: divisor_override must be a positive int, got {divisor_override!r}")
        return sums / divisor_override
    # the divisor counts what torch counts: the input, with count_include_pad the padding, never ceil_mode's overhang
    divisor: Tensor | int = 1
    for j, (n, k, s, d, p, o) in enumerate(zip(x.shape[-nd:], kernel, stride, dilation, padding, outs, strict=True)):
        lo, hi = (-p, n + p) if count_include_pad else (0, n)
        counts = [sum(lo <= a * s - p + b * d < hi for b in range(k)) for a in range(o)]
        if len(set(counts)) == 1:
            divisor = divisor * counts[0]
        else:
            divisor = Tensor(counts, device=x.device).reshape(o, *(1,) * (nd - 1 - j)) * divisor
    return sums / divisor


class NNMixin:
    """Tensor methods for the neural-network functions: convolution, pooling, normalization, attention and losses."""

    # ---- convolution and pooling ----

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

    # ---- normalization ----

    def layernorm(self: Tensor, axis: int | Sequence[int] = -1, eps: float = 1e-5) -> Tensor:
        """Normalize to zero mean and unit variance over `axis`, without scale or shift (tinygrad's layernorm)."""
        axes = tuple(self._axis(a, "layernorm") for a in ((axis,) if isinstance(axis, int) else axis))
        return _standardized(self._float_input(), axes, eps)[0]

    def layer_norm(self: Tensor, normalized_shape: int | Sequence[int], weight: Tensor | None = None,
                   bias: Tensor | None = None, eps: float = 1e-5) -> Tensor:  # fmt: skip
        """torch's layer_norm: normalize over the last dims `normalized_shape`, then scale by weight and add bias."""
        shape = _trailing_shape(self, normalized_shape, "layer_norm")
        weight = _param_of_shape(weight, self, shape, "layer_norm", "weight")
        bias = _param_of_shape(bias, self, shape, "layer_norm", "bias")
        out = self.layernorm(tuple(range(-len(shape), 0)), eps)
        return _scale_and_shift(out, weight, bias, shape)

    def rms_norm(self: Tensor, normalized_shape: int | Sequence[int], weight: Tensor | None = None,
                 eps: float | None = None) -> Tensor:  # fmt: skip
        """torch's rms_norm: x / sqrt(mean(x**2) + eps) over the last dims, times weight (eps: the dtype's epsilon)."""
        shape = _trailing_shape(self, normalized_shape, "rms_norm")
        weight = _param_of_shape(weight, self, shape, "rms_norm", "weight")
        x = self._float_input()
        eps = _MACHINE_EPSILON[x.dtype] if eps is None else eps
        out = x * ((x * x).mean(tuple(range(-len(shape), 0)), keepdim=True) + eps).rsqrt()
        return _scale_and_shift(out, weight, None, shape)

    def group_norm(self: Tensor, num_groups: int, weight: Tensor | None = None, bias: Tensor | None = None,
                   eps: float = 1e-5) -> Tensor:  # fmt: skip
        """torch's group_norm: normalize each group of C/num_groups channels of an (N, C, *) input, per sample."""
        weight, bias = _per_channel_args(self, "group_norm", weight=weight, bias=bias)
        n, channels = self.shape[:2]
        if isinstance(num_groups, bool) or not isinstance(num_groups, int) or num_groups <= 0 or channels % num_groups:
            raise ArgumentError(f"group_norm: num_groups={num_groups!r} must be a positive int that divides the "
                                f"{channels} channels of the input {self.shape}")  # fmt: skip
        grouped = self._float_input().reshape(n, num_groups, self.numel() // max(n * num_groups, 1))
        out = _standardized(grouped, (2,), eps)[0].reshape(self.shape)
        return _scale_and_shift(out, weight, bias, _channel_view(self))

    def batchnorm(self: Tensor, weight: Tensor | None, bias: Tensor | None, mean: Tensor, invstd: Tensor,
                  axis: int | Sequence[int] = 1) -> Tensor:  # fmt: skip
        """(x - mean) * invstd * weight + bias with statistics given per channel along `axis` (tinygrad's batchnorm)."""
        axes = tuple(self._axis(a, "batchnorm") for a in ((axis,) if isinstance(axis, int) else axis))
        channels = tuple(self.shape[a] for a in axes)
        view = tuple(s if i in axes else 1 for i, s in enumerate(self.shape))

        def per_channel(value: Any, name: str) -> Tensor | None:
            t = _nn_tensor(value, self, "batchnorm", name)
            if t is None or t.shape == channels:
                return t if t is None else t.reshape(view)
            if t.ndim == self.ndim and all(s in (1, v) for s, v in zip(t.shape, view, strict=True)):
                return t  # already laid out to broadcast against the input
            raise ArgumentError(f"batchnorm: {name} has shape {t.shape} but the input {self.shape} with axis={axis} "
                                f"needs {channels} (or {view})")  # fmt: skip

        weight, bias = per_channel(weight, "weight"), per_channel(bias, "bias")
        mean, invstd = per_channel(mean, "mean"), per_channel(invstd, "invstd")
        if mean is None or invstd is None:
            raise ArgumentError("batchnorm: mean and invstd are required; weight and bias may be None")
        x = self._float_input() - mean
        if weight is not None:
            x = x * weight
        x = x * invstd
        return x + bias if bias is not None else x

    def batch_norm(self: Tensor, running_mean: Tensor | None, running_var: Tensor | None,
                   weight: Tensor | None = None, bias: Tensor | None = None, training: bool = False,
                   momentum: float = 0.1, eps: float = 1e-5) -> Tensor:  # fmt: skip
        """torch's batch_norm over (N, C, *): batch statistics when training, assigning the running ones (lazily)."""
        (running_mean, running_var, weight, bias), from_running = _running_stats_start(
            self, "batch_norm", (running_mean, running_var, weight, bias), momentum, eps, training, "training=False"
        )
        if from_running is not None:
            return from_running
        count = self.numel() // self.shape[1] if self.shape[1] else 0
        if count <= 1:
            raise ArgumentError(f"batch_norm: expected more than 1 value per channel when training, got {self.shape}")
        axes = (0, *range(2, self.ndim))
        _, mean, var = _standardized(self._float_input(), axes, eps)
        _update_running_stat(running_mean, mean.reshape(self.shape[1]), momentum)
        _update_running_stat(running_var, var.reshape(self.shape[1]) * (count / (count - 1)), momentum)
        return self.batchnorm(weight, bias, mean, (var + eps).rsqrt())

    def instance_norm(self: Tensor, running_mean: Tensor | None = None, running_var: Tensor | None = None,
                      weight: Tensor | None = None, bias: Tensor | None = None, use_input_stats: bool = True,
                      momentum: float = 0.1, eps: float = 1e-5) -> Tensor:  # fmt: skip
        """torch's instance_norm: normalize each channel of each sample of an (N, C, *) input over its positions."""
        (running_mean, running_var, weight, bias), from_running = _running_stats_start(
            self,
            "instance_norm",
            (running_mean, running_var, weight, bias),
            momentum,
            eps,
            use_input_stats,
            "use_input_stats=False",
        )
        if from_running is not None:
            return from_running
        count = prod(self.shape[2:])
        if count <= 1:
            raise ArgumentError(f"instance_norm: expected more than 1 spatial element per channel, got {self.shape}")
        out, mean, var = _standardized(self._float_input(), tuple(range(2, self.ndim)), eps)
        _update_running_stat(running_mean, mean.mean(0).reshape(self.shape[1]), momentum)
        _update_running_stat(running_var, (var * (count / (count - 1))).mean(0).reshape(self.shape[1]), momentum)
        return _scale_and_shift(out, weight, bias, _channel_view(self))

    # ---- attention ----

    def scaled_dot_product_attention(self: Tensor, key: Tensor, value: Tensor, attn_mask: Tensor | None = None,
                                     dropout_p: float = 0.0, is_causal: bool = False, scale: float | None = None,
                                     enable_gqa: bool = False) -> Tensor:  # fmt: skip
        """softmax(query @ key.T * scale + mask) @ value for query (..., L, E), key (..., S, E), value (..., S, Ev)."""
        from glassgrad.tensor import Tensor, _broadcast_shape

        op = "scaled_dot_product_attention"
        query, key, value = self, _nn_tensor(key, self, op, "key"), _nn_tensor(value, self, op, "value")
        for name, t in (("query", query), ("key", key), ("value", value)):
            if t.ndim < 2:
                raise ArgumentError(f"{op}: {name} needs shape (..., length, features), got {t.shape}")
        if query.shape[-1] != key.shape[-1]:
            raise ArgumentError(f"{op}: query {query.shape} and key {key.shape} differ in their last dimension "
                                f"({query.shape[-1]} != {key.shape[-1]})")  # fmt: skip
        if key.shape[-2] != value.shape[-2]:
            raise ArgumentError(f"{op}: key {key.shape} and value {value.shape} differ in length (dim -2: "
                                f"{key.shape[-2]} != {value.shape[-2]})")  # fmt: skip
        if isinstance(dropout_p, bool) or not isinstance(dropout_p, (int, float)) or not 0 <= dropout_p <= 1:
            raise ArgumentError(f"{op}: dropout_p must be a probability in [0, 1], got {dropout_p!r}")
        if enable_gqa:
            key, value = _repeat_heads(key, query, op), _repeat_heads(value, query, op)
        length, source_length = query.shape[-2], key.shape[-2]
        scores = query.matmul(key.transpose(-2, -1)) * (1 / math.sqrt(query.shape[-1]) if scale is None else scale)
        if is_causal:
            if attn_mask is not None:
                raise ArgumentError(f"{op}: pass attn_mask or is_causal=True, not both")
            rows = Tensor.arange(length, device=self.device).reshape(length, 1)
            attn_mask = Tensor.arange(source_length, device=self.device).reshape(1, source_length) <= rows
        if attn_mask is not None:
            attn_mask = _nn_tensor(attn_mask, self, op, "attn_mask")
            _broadcast_shape(attn_mask.shape, scores.shape, f"{op}: attn_mask")
            if attn_mask.dtype == dtypes.bool:
                scores = attn_mask.where(scores, -math.inf)
            elif dtypes.is_float(attn_mask.dtype):
                scores = scores + attn_mask
            else:
                raise DtypeError(f"{op}: attn_mask must be bool (True = attend) or float (added to the scores), "
                                 f"got {attn_mask.dtype}")  # fmt: skip
        weights = scores.softmax(-1) if attn_mask is None else _softmax_of_masked(scores)
        if dropout_p:
            weights = weights.dropout(dropout_p)
        return weights.matmul(value)

    # ---- losses ----

    def cross_entropy(self: Tensor, target: Tensor | None = None, weight: Tensor | None = None,
                      ignore_index: int = -100, reduction: str = "mean", label_smoothing: float = 0.0, *,
                      Y: Tensor | None = None) -> Tensor:  # fmt: skip
        """torch's cross_entropy of logits (N, C, *) against class indices (N, *) or class probabilities (N, C, *)."""
        op = "cross_entropy"
        target = _loss_target(self, target, Y, op)
        _check_reduction(reduction, op)
        if not 0.0 <= label_smoothing <= 1.0:
            raise ArgumentError(f"{op}: label_smoothing must be between 0 and 1, got {label_smoothing}")
        if self.ndim == 0:
            raise ArgumentError(f"{op}: input needs shape (C,) or (N, C, *), got a 0-d tensor")
        class_dim = 0 if self.ndim == 1 else 1
        n_classes = self.shape[class_dim]
        weight = _param_of_shape(weight, self, (n_classes,), op, "weight")
        logp = self.log_softmax(class_dim)
        if target.shape != self.shape or not dtypes.is_float(target.dtype):
            target = _index_target(self, target, class_dim, op)
            return _class_index_loss(logp, target, class_dim, weight, ignore_index, reduction, label_smoothing, op)
        probs = target * (1 - label_smoothing) + label_smoothing / n_classes if label_smoothing else target
        if weight is not None:
            logp = logp * weight.reshape((n_classes,) + (1,) * (self.ndim - class_dim - 1))
        loss = -(logp * probs).sum(class_dim)
        return _reduced(loss, reduction)

    def nll_loss(self: Tensor, target: Tensor | None = None, weight: Tensor | None = None, ignore_index: int = -100,
                 reduction: str = "mean", *, Y: Tensor | None = None) -> Tensor:  # fmt: skip
        """torch's nll_loss: -input[n, target[n]] for log-probabilities (N, C, *) and class indices (N, *)."""
        op = "nll_loss"
        target = _loss_target(self, target, Y, op)
        _check_reduction(reduction, op)
        if self.ndim == 0:
            raise ArgumentError(f"{op}: input needs shape (C,) or (N, C, *), got a 0-d tensor")
        class_dim = 0 if self.ndim == 1 else 1
        weight = _param_of_shape(weight, self, (self.shape[class_dim],), op, "weight")
        target = _index_target(self, target, class_dim, op)
        return _class_index_loss(self._float_input(), target, class_dim, weight, ignore_index, reduction, 0.0, op)

    def sparse_categorical_crossentropy(self: Tensor, Y: Tensor, ignore_index: int = -1, label_smoothing: float = 0.0,
                                        reduction: str = "mean") -> Tensor:  # fmt: skip
        """tinygrad's cross entropy of logits (..., C) (classes last) against class indices Y (...)."""
        op = "sparse_categorical_crossentropy"
        _check_reduction(reduction, op)
        if not 0.0 <= label_smoothing <= 1.0:
            raise ArgumentError(f"{op}: label_smoothing must be between 0 and 1, got {label_smoothing}")
        if self.ndim == 0:
            raise ArgumentError(f"{op}: input needs shape (..., C) with the classes last, got a 0-d tensor")
        Y = _nn_tensor(Y, self, op, "Y")
        if Y.shape != self.shape[:-1]:
            raise ArgumentError(f"{op}: Y has shape {Y.shape} but input {self.shape} needs class indices of shape "
                                f"{self.shape[:-1]}")  # fmt: skip
        if Y.dtype == dtypes.bool:
            raise DtypeError(f"{op}: Y must hold class indices (integers, or whole floats), got {Y.dtype}")
        class_dim = self.ndim - 1
        return _class_index_loss(self.log_softmax(class_dim), Y, class_dim, None, ignore_index, reduction,
                                 label_smoothing, op)  # fmt: skip

    def binary_crossentropy(self: Tensor, target: Tensor | None = None, weight: Tensor | None = None,
                            reduction: str = "mean", *, Y: Tensor | None = None) -> Tensor:  # fmt: skip
        """torch's binary_cross_entropy of probabilities: -(y log x + (1 - y) log(1 - x)), logs clamped at -100."""
        op = "binary_crossentropy"
        target = _loss_target(self, target, Y, op)
        _check_reduction(reduction, op)
        _check_same_shape(self, target, op)
        weight = _broadcast_weight(weight, self, op, "weight")
        x = self._float_input()
        loss = -(target * x.log().maximum(-100.0) + (1 - target) * (1 - x).log().maximum(-100.0))
        return _reduced(loss * weight if weight is not None else loss, reduction)

    def binary_crossentropy_logits(self: Tensor, target: Tensor | None = None, weight: Tensor | None = None,
                                   reduction: str = "mean", pos_weight: Tensor | None = None, *,
                                   Y: Tensor | None = None) -> Tensor:  # fmt: skip
        """torch's binary_cross_entropy_with_logits: binary cross entropy of sigmoid(x), computed stably."""
        op = "binary_crossentropy_logits"
        target = _loss_target(self, target, Y, op)
        _check_reduction(reduction, op)
        _check_same_shape(self, target, op)
        weight = _broadcast_weight(weight, self, op, "weight")
        pos_weight = _broadcast_weight(pos_weight, self, op, "pos_weight")
        x = self._float_input()
        # -log(sigmoid(x)) = log(1 + exp(-|x|)) + max(-x, 0), which never overflows
        neg_log_sigmoid = (1 + (-x.abs()).exp()).log() + (-x).maximum(0)
        positive = neg_log_sigmoid if pos_weight is None else neg_log_sigmoid * (1 + (pos_weight - 1) * target)
        loss = (1 - target) * x + positive
        return _reduced(loss * weight if weight is not None else loss, reduction)

    def binary_cross_entropy(self: Tensor, target: Tensor, weight: Tensor | None = None,
                             reduction: str = "mean") -> Tensor:  # fmt: skip
        """torch's name for binary_crossentropy."""
        return self.binary_crossentropy(target, weight, reduction)

    def binary_cross_entropy_with_logits(self: Tensor, target: Tensor, weight: Tensor | None = None,
                                         reduction: str = "mean",
                                         pos_weight: Tensor | None = None) -> Tensor:  # fmt: skip
        """torch's name for binary_crossentropy_logits."""
        return self.binary_crossentropy_logits(target, weight, reduction, pos_weight)

    def mse_loss(self: Tensor, target: Tensor, reduction: str = "mean", weight: Tensor | None = None) -> Tensor:
        """torch's mse_loss: (x - target)**2, reduced (a weighted mean divides by the sum of the weights)."""
        _check_reduction(reduction, "mse_loss")
        diff, weight = _elementwise_loss_operands(self, _nn_tensor(target, self, "mse_loss", "target"), weight,
                                                  "mse_loss")  # fmt: skip
        return _weighted_reduced(diff * diff, weight, reduction)

    def l1_loss(self: Tensor, target: Tensor, reduction: str = "mean", weight: Tensor | None = None) -> Tensor:
        """torch's l1_loss: |x - target|, reduced (a weighted mean divides by the sum of the weights)."""
        _check_reduction(reduction, "l1_loss")
        diff, weight = _elementwise_loss_operands(self, _nn_tensor(target, self, "l1_loss", "target"), weight,
                                                  "l1_loss")  # fmt: skip
        return _weighted_reduced(diff.abs(), weight, reduction)

    def smooth_l1_loss(self: Tensor, target: Tensor, reduction: str = "mean", beta: float = 1.0) -> Tensor:
        """torch's smooth_l1_loss: 0.5 d**2 / beta where |d| < beta, else |d| - 0.5 beta."""
        _check_reduction(reduction, "smooth_l1_loss")
        if beta < 0:
            raise ArgumentError(f"smooth_l1_loss: beta must be non-negative, got {beta}")
        diff, _ = _elementwise_loss_operands(self, _nn_tensor(target, self, "smooth_l1_loss", "target"), None,
                                             "smooth_l1_loss")  # fmt: skip
        d = diff.abs()
        loss = d if beta == 0 else (d < beta).where(0.5 * diff * diff / beta, d - 0.5 * beta)
        return _reduced(loss, reduction)

    def huber_loss(self: Tensor, target: Tensor, reduction: str = "mean", delta: float = 1.0,
                   weight: Tensor | None = None) -> Tensor:  # fmt: skip
        """torch's huber_loss: 0.5 d**2 where |d| < delta, else delta * (|d| - 0.5 delta); a weighted mean is a mean."""
        _check_reduction(reduction, "huber_loss")
        if delta <= 0:
            raise ArgumentError(f"huber_loss: delta must be positive, got {delta}")
        diff, weight = _elementwise_loss_operands(self, _nn_tensor(target, self, "huber_loss", "target"), weight,
                                                  "huber_loss")  # fmt: skip
        d = diff.abs()
        loss = (d < delta).where(0.5 * diff * diff, delta * (d - 0.5 * delta))
        return _reduced(loss * weight if weight is not None else loss, reduction)
