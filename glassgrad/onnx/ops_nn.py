"""Neural-network operators: matrix products, convolution, pooling, normalization, dropout, losses."""

from __future__ import annotations

import math

from glassgrad.dtype import dtypes
from glassgrad.helpers import prod
from glassgrad.onnx.registry import OpContext, onnx_op
from glassgrad.tensor import Tensor

# ---- matrix products ----


@onnx_op("MatMul")
def matmul(ctx: OpContext, a: Tensor, b: Tensor) -> Tensor:
    return a.matmul(b)


@onnx_op("Gemm")
def gemm(ctx: OpContext, a: Tensor, b: Tensor, c: Tensor | None = None, *, alpha: float = 1.0, beta: float = 1.0,
         transA: int = 0, transB: int = 0) -> Tensor:  # fmt: skip
    out = (a.T if transA else a).matmul(b.T if transB else b)
    if alpha != 1.0:
        out = out * alpha
    if c is not None:
        out = out + (c * beta if beta != 1.0 else c)
    return out.cast(a.dtype)


@onnx_op("Det")
def det(ctx: OpContext, x: Tensor) -> Tensor:
    """Determinant of the last two axes by Gaussian elimination with partial pivoting, all in tensor ops: each
    column's largest entry becomes the pivot (rows swapped through one-hot masks), rows below are eliminated."""
    n = x.shape[-1]
    a, result = x, Tensor.ones(*x.shape[:-2], dtype=x.dtype, device=x.device)
    rows = Tensor.arange(n, device=x.device)
    for j in range(n):
        column = (rows >= j).where(a[..., :, j].abs(), -1)  # rows above j cannot be pivots
        pivot_row = column.argmax(-1).unsqueeze(-1)  # (..., 1)
        is_pivot, is_j = (rows == pivot_row).unsqueeze(-1), (rows == j).reshape(n, 1)
        row_p, row_j = (is_pivot * a).sum(-2, keepdim=True), a[..., j : j + 1, :]
        a = a + is_j * (row_p - row_j) + is_pivot * (row_j - row_p)  # swap rows j and pivot_row (a no-op if equal)
        pivot = a[..., j, j]
        result = result * (pivot_row.squeeze(-1) != j).where(-pivot, pivot)
        factors = ((rows > j) & (pivot != 0).unsqueeze(-1)).where(a[..., :, j] / pivot.unsqueeze(-1), 0)
        # a buffer per step: fused, each step would inline every earlier one several times over
        a = (a - factors.unsqueeze(-1) * a[..., j : j + 1, :]).contiguous()
    return result.cast(x.dtype)


@onnx_op("Einsum")
def einsum(ctx: OpContext, *operands: Tensor, equation: str) -> Tensor:
    return Tensor.einsum(equation.replace(" ", ""), *operands)


# ---- padding shared by convolution and pooling ----


def _spatial_pads(ctx: OpContext, sizes: tuple[int, ...], kernel: tuple[int, ...], strides: tuple[int, ...],
                  dilations: tuple[int, ...], pads: tuple[int, ...] | None,
                  auto_pad: str) -> list[tuple[int, int]]:  # fmt: skip
    """(begin, end) padding of each spatial axis from `pads` or `auto_pad` (SAME_* pads to ceil(n / stride))."""
    nd = len(sizes)
    if auto_pad in ("NOTSET", ""):
        pads = pads or (0,) * (2 * nd)
        return [(pads[i], pads[i + nd]) for i in range(nd)]
    if auto_pad == "VALID":
        return [(0, 0)] * nd
    if auto_pad not in ("SAME_UPPER", "SAME_LOWER"):
        raise ctx.error(f"auto_pad {auto_pad!r} is not one of NOTSET, VALID, SAME_UPPER, SAME_LOWER")
    out = []
    for n, k, s, d in zip(sizes, kernel, strides, dilations):
        total = max((math.ceil(n / s) - 1) * s + (k - 1) * d + 1 - n, 0)
        small, big = total // 2, total - total // 2
        out.append((small, big) if auto_pad == "SAME_UPPER" else (big, small))
    return out


def _geometry(ctx: OpContext, x: Tensor, kernel: tuple[int, ...], strides, dilations, pads, auto_pad):
    nd = len(kernel)
    strides = tuple(strides or (1,) * nd)
    dilations = tuple(dilations or (1,) * nd)
    return strides, dilations, _spatial_pads(ctx, x.shape[2:], kernel, strides, dilations, pads, auto_pad)


def _pad_spatial(x: Tensor, pairs: list[tuple[int, int]], value: float = 0.0) -> Tensor:
    if not any(b or e for b, e in pairs):
        return x
    return x.pad(((0, 0), (0, 0), *pairs), value=value)


def _check_nd(ctx: OpContext, nd: int) -> None:
    if not 1 <= nd <= 3:
        raise ctx.error(f"{nd}-D spatial input is not supported (1 to 3 spatial dims)", unsupported=True)


# ---- convolution ----


@onnx_op("Conv")
def conv(ctx: OpContext, x: Tensor, w: Tensor, b: Tensor | None = None, *, auto_pad: str = "NOTSET",
         dilations=None, group: int = 1, kernel_shape=None, pads=None, strides=None) -> Tensor:  # fmt: skip
    nd = w.ndim - 2
    _check_nd(ctx, nd)
    strides, dilations, pairs = _geometry(ctx, x, w.shape[2:], strides, dilations, pads, auto_pad)
    conv_nd = (Tensor.conv1d, Tensor.conv2d, Tensor.conv3d)[nd - 1]
    return conv_nd(_pad_spatial(x, pairs), w, b, strides, 0, dilations, group)


@onnx_op("CausalConvWithState")
def causal_conv_with_state(ctx: OpContext, x: Tensor, w: Tensor, b: Tensor | None = None,
                           past_state: Tensor | None = None, *,
                           activation: str = "none") -> tuple[Tensor, Tensor]:  # fmt: skip
    """A depthwise causal conv1d that continues from the last k - 1 inputs of the previous call (zeros at the
    start); returns the output (optionally SiLU'd) and the state for the next call."""
    if activation not in ("none", "silu", "swish"):
        raise ctx.error(f"activation {activation!r} is not one of none, silu, swish")
    batch, channels, _ = x.shape
    k = w.shape[2]
    state = past_state if past_state is not None else Tensor.zeros(batch, channels, k - 1, dtype=x.dtype,
                                                                    device=x.device)  # fmt: skip
    padded = state.cat(x, dim=2)
    out = padded.conv1d(w, b, groups=channels).cast(x.dtype)
    if activation != "none":
        out = out.float().silu().cast(x.dtype)
    return out, padded[:, :, padded.shape[2] - (k - 1) :]


@onnx_op("ConvTranspose")
def conv_transpose(ctx: OpContext, x: Tensor, w: Tensor, b: Tensor | None = None, *, auto_pad: str = "NOTSET",
                   dilations=None, group: int = 1, kernel_shape=None, output_padding=None, output_shape=None,
                   pads=None, strides=None) -> Tensor:  # fmt: skip
    """The full transposed convolution, then cropped by `pads` (or to `output_shape`) and grown by output_padding."""
    nd = w.ndim - 2
    _check_nd(ctx, nd)
    kernel, sizes = w.shape[2:], x.shape[2:]
    strides = tuple(strides or (1,) * nd)
    dilations = tuple(dilations or (1,) * nd)
    extra = tuple(output_padding or (0,) * nd)
    full = [(n - 1) * s + (k - 1) * d + 1 + e for n, k, s, d, e in zip(sizes, kernel, strides, dilations, extra)]
    if pads is None and (output_shape is not None or auto_pad in ("SAME_UPPER", "SAME_LOWER")):
        # the padding that gives output_shape (default: input * stride), split as the reference splits it
        want = list(output_shape)[-nd:] if output_shape is not None else [n * s for n, s in zip(sizes, strides)]
        totals = [f - o for f, o in zip(full, want)]
        begins = [t // 2 if auto_pad == "SAME_UPPER" else t - t // 2 for t in totals]
    else:
        pads = (0,) * (2 * nd) if pads is None or auto_pad == "VALID" else pads
        begins = list(pads[:nd])
        want = list(output_shape)[-nd:] if output_shape is not None else \
            [f - pads[i] - pads[i + nd] for i, f in enumerate(full)]  # fmt: skip
    transpose_nd = (Tensor.conv_transpose1d, Tensor.conv_transpose2d, Tensor.conv_transpose3d)[nd - 1]
    y = transpose_nd(x, w, None, strides, 0, 0, group, dilations)
    y = _window(y, begins, want)
    return y if b is None else y + b.reshape(-1, *(1,) * nd)


@onnx_op("Col2Im")
def col2im(ctx: OpContext, x: Tensor, image_shape: Tensor, block_shape: Tensor, *, dilations=None, pads=None,
           strides=None) -> Tensor:  # fmt: skip
    """im2col's inverse: each column holds one block; overlapping blocks add up. It is a transposed convolution, per
    channel, with one-hot kernels that put each of a block's entries at its offset."""
    image, block = ctx.ints(image_shape), ctx.ints(block_shape)
    nd, k = len(block), prod(block)
    strides, dilations = tuple(strides or (1,) * nd), tuple(dilations or (1,) * nd)
    pads = tuple(pads or (0,) * (2 * nd))
    outs = [(n + pads[i] + pads[i + nd] - d * (b - 1) - 1) // s + 1
            for i, (n, b, s, d) in enumerate(zip(image, block, strides, dilations))]  # fmt: skip
    channels = x.shape[1] // k
    cols = x.reshape(x.shape[0], channels * k, *outs)
    kernels = Tensor.eye(k, dtype=x.dtype, device=x.device).reshape(k, 1, *block).repeat(channels, *(1,) * (nd + 1))
    _check_nd(ctx, nd)
    transpose_nd = (Tensor.conv_transpose1d, Tensor.conv_transpose2d, Tensor.conv_transpose3d)[nd - 1]
    y = transpose_nd(cols, kernels, None, strides, 0, 0, channels, dilations)
    return _window(y, list(pads[:nd]), image)


def _window(y: Tensor, begins: list[int], lengths: list[int]) -> Tensor:
    """The spatial window [begin, begin + length) of each axis of y, zeros where it reaches past y's edges."""
    pairs = [(max(-b, 0), max(b + n - s, 0)) for b, n, s in zip(begins, lengths, y.shape[2:])]
    y = _pad_spatial(y, pairs)
    starts = [max(b, 0) for b in begins]
    return y[(slice(None), slice(None), *(slice(s, s + n) for s, n in zip(starts, lengths)))]


# ---- pooling ----


def _pool_args(ctx: OpContext, x: Tensor, kernel_shape, strides, dilations, pads, auto_pad):
    kernel = tuple(kernel_shape)
    _check_nd(ctx, len(kernel))
    strides, dilations, pairs = _geometry(ctx, x, kernel, strides, dilations, pads, auto_pad)
    return kernel, strides, dilations, pairs


def _pool_nd(x: Tensor, method: str, nd: int):
    return getattr(x, f"{method}_pool{nd}d")


def _cropped(y: Tensor, sizes, kernel, strides, dilations, pairs, ceil_mode: int) -> Tensor:
    """ONNX's output size: with ceil_mode the last window must start inside the input or its left padding (the
    pooling above ran on pre-padded input, where the right padding counted as input)."""
    if not ceil_mode:
        return y
    outs = []
    for n, k, s, d, (b, e) in zip(sizes, kernel, strides, dilations, pairs):
        o = math.ceil((n + b + e - d * (k - 1) - 1) / s + 1)
        outs.append(o - 1 if (o - 1) * s >= n + b else o)
    return y[(slice(None), slice(None), *(slice(0, o) for o in outs))]


@onnx_op("MaxPool")
def max_pool(ctx: OpContext, x: Tensor, *, kernel_shape, auto_pad: str = "NOTSET", ceil_mode: int = 0,
             dilations=None, pads=None, storage_order: int = 0, strides=None) -> tuple[Tensor, Tensor]:  # fmt: skip
    """Y, and the int64 flat positions (over the whole input) of each window's maximum."""
    kernel, strides, dilations, pairs = _pool_args(ctx, x, kernel_shape, strides, dilations, pads, auto_pad)
    nd = len(kernel)
    symmetric = all(b == e and 2 * b <= d * (k - 1) + 1 for (b, e), k, d in zip(pairs, kernel, dilations))
    padding = [b for b, _ in pairs] if symmetric else 0
    sizes = x.shape[2:]
    if not symmetric:
        lowest = -math.inf if dtypes.is_float(x.dtype) else dtypes.min(x.dtype)
        x = _pad_spatial(x, pairs, lowest)
    wants_indices = ctx.outputs > 1
    pool = _pool_nd(x, "max", nd)
    out = pool(kernel, strides, padding, dilations, bool(ceil_mode), return_indices=wants_indices)
    if not wants_indices:
        return out if symmetric else _cropped(out, sizes, kernel, strides, dilations, pairs, ceil_mode)
    if not symmetric:
        raise ctx.error("the Indices output with asymmetric pads is not supported", unsupported=True)
    values, position = out
    spatial = x.shape[2:]
    if storage_order:  # column-major positions within each (n, c) plane
        if nd != 2:
            raise ctx.error("storage_order=1 is supported for 2-D pooling only", unsupported=True)
        position = (position % spatial[1]) * spatial[0] + position // spatial[1]
    plane = Tensor.arange(x.shape[0] * x.shape[1], device=x.device, dtype=dtypes.int64)
    plane = plane.reshape(x.shape[0], x.shape[1], *(1,) * nd) * prod(spatial)
    return values, position.cast(dtypes.int64) + plane


@onnx_op("AveragePool")
def average_pool(ctx: OpContext, x: Tensor, *, kernel_shape, auto_pad: str = "NOTSET", ceil_mode: int = 0,
                 count_include_pad: int = 0, dilations=None, pads=None, strides=None) -> Tensor:  # fmt: skip
    """Window sums divided by the number of input elements (and, with count_include_pad, padding) they cover."""
    kernel, strides, dilations, pairs = _pool_args(ctx, x, kernel_shape, strides, dilations, pads, auto_pad)
    pool = lambda t: _pool_nd(t, "avg", len(kernel))(kernel, strides, 0, bool(ceil_mode), True, None, dilations)
    if count_include_pad or not any(b or e for b, e in pairs):
        y = pool(_pad_spatial(x, pairs))
    else:
        sums = _sum_pool(x, kernel, strides, dilations, pairs, ceil_mode)
        ones = Tensor.ones(1, 1, *x.shape[2:], device=x.device, dtype=x.dtype)
        y = sums / _sum_pool(ones, kernel, strides, dilations, pairs, ceil_mode)
    return _cropped(y, x.shape[2:], kernel, strides, dilations, pairs, ceil_mode)


def _sum_pool(x: Tensor, kernel, strides, dilations, pairs, ceil_mode: int) -> Tensor:
    pool = _pool_nd(_pad_spatial(x, pairs), "avg", len(kernel))
    return pool(kernel, strides, 0, bool(ceil_mode), True, 1, dilations)


@onnx_op("LpPool")
def lp_pool(ctx: OpContext, x: Tensor, *, kernel_shape, auto_pad: str = "NOTSET", ceil_mode: int = 0,
            dilations=None, p: int = 2, pads=None, strides=None) -> Tensor:  # fmt: skip
    kernel, strides, dilations, pairs = _pool_args(ctx, x, kernel_shape, strides, dilations, pads, auto_pad)
    y = _sum_pool(x.abs().pow(p), kernel, strides, dilations, pairs, ceil_mode).pow(1.0 / p).cast(x.dtype)
    return _cropped(y, x.shape[2:], kernel, strides, dilations, pairs, ceil_mode)


@onnx_op("GlobalAveragePool")
def global_average_pool(ctx: OpContext, x: Tensor) -> Tensor:
    return x.mean(tuple(range(2, x.ndim)), keepdim=True)


@onnx_op("GlobalMaxPool")
def global_max_pool(ctx: OpContext, x: Tensor) -> Tensor:
    return x.max(tuple(range(2, x.ndim)), keepdim=True)


@onnx_op("GlobalLpPool")
def global_lp_pool(ctx: OpContext, x: Tensor, *, p: int = 2) -> Tensor:
    return x.abs().pow(p).sum(tuple(range(2, x.ndim)), keepdim=True).pow(1.0 / p).cast(x.dtype)


@onnx_op("MaxUnpool")
def max_unpool(ctx: OpContext, x: Tensor, indices: Tensor, output_shape: Tensor | None = None, *, kernel_shape,
               pads=None, strides=None) -> Tensor:  # fmt: skip
    """Each value written at its flat position (over the whole output); zeros elsewhere."""
    nd = len(kernel_shape)
    strides = tuple(strides or (1,) * nd)
    pads = tuple(pads or (0,) * (2 * nd))
    spatial = [(n - 1) * s + k - pads[i] - pads[i + nd]
               for i, (n, s, k) in enumerate(zip(x.shape[2:], strides, kernel_shape))]  # fmt: skip
    shape = (*x.shape[:2], *spatial)
    flat = Tensor.zeros(prod(shape), dtype=x.dtype, device=x.device)
    y = flat.scatter(0, indices.flatten(), x.flatten()).reshape(shape)
    if output_shape is None:
        return y
    return _window(y, [0] * nd, ctx.ints(output_shape)[2:])  # a larger output_shape: zeros after


# ---- normalization ----


def _channel(t: Tensor, ndim: int) -> Tensor:
    """A per-channel vector shaped to broadcast over (N, C, ...)."""
    return t.reshape(-1, *(1,) * (ndim - 2))


@onnx_op("BatchNormalization")
def batch_normalization(ctx: OpContext, x: Tensor, scale: Tensor, bias: Tensor, mean: Tensor, var: Tensor, *,
                        epsilon: float = 1e-5, momentum: float = 0.9, training_mode: int = 0,
                        spatial: int = 1) -> Tensor | tuple[Tensor, ...]:  # fmt: skip
    """Inference uses the running statistics; training_mode uses the batch's and also returns updated running ones."""
    if not training_mode:
        invstd = (_channel(var, x.ndim) + epsilon).rsqrt()
        return ((x - _channel(mean, x.ndim)) * invstd * _channel(scale, x.ndim) + _channel(bias, x.ndim)).cast(x.dtype)
    axes = (0, *range(2, x.ndim))
    batch_mean, batch_var = x.mean(axes), x.var(axes, correction=0)
    y = (x - _channel(batch_mean, x.ndim)) * (_channel(batch_var, x.ndim) + epsilon).rsqrt()
    y = y * _channel(scale, x.ndim) + _channel(bias, x.ndim)
    running_mean = mean * momentum + batch_mean * (1 - momentum)
    running_var = var * momentum + batch_var * (1 - momentum)
    return y.cast(x.dtype), running_mean.cast(mean.dtype), running_var.cast(var.dtype)


def _normalized(x: Tensor, axes: tuple[int, ...], epsilon: float) -> tuple[Tensor, Tensor, Tensor]:
    """(x - mean) * invstd over `axes` in float32 at least, with the mean and invstd (axes kept)."""
    work = x.float() if x.dtype in (dtypes.float16, dtypes.bfloat16) else x
    mean = work.mean(axes, keepdim=True)
    invstd = ((work - mean).square().mean(axes, keepdim=True) + epsilon).rsqrt()
    return (work - mean) * invstd, mean, invstd


@onnx_op("InstanceNormalization")
def instance_normalization(ctx: OpContext, x: Tensor, scale: Tensor, bias: Tensor, *,
                           epsilon: float = 1e-5) -> Tensor:  # fmt: skip
    y, _, _ = _normalized(x, tuple(range(2, x.ndim)), epsilon)
    return (y * _channel(scale, x.ndim) + _channel(bias, x.ndim)).cast(x.dtype)


@onnx_op("LayerNormalization")
def layer_normalization(ctx: OpContext, x: Tensor, scale: Tensor, bias: Tensor | None = None, *, axis: int = -1,
                        epsilon: float = 1e-5, stash_type: int = 1) -> tuple[Tensor, Tensor, Tensor]:  # fmt: skip
    axis = axis + x.ndim if axis < 0 else axis
    y, mean, invstd = _normalized(x, tuple(range(axis, x.ndim)), epsilon)
    y = y * scale
    if bias is not None:
        y = y + bias
    return y.cast(x.dtype), mean, invstd


@onnx_op("GroupNormalization")
def group_normalization(ctx: OpContext, x: Tensor, scale: Tensor, bias: Tensor, *, num_groups: int,
                        epsilon: float = 1e-5, stash_type: int = 1) -> Tensor:  # fmt: skip
    """Scale and bias are per channel (opset 21) or per group (opset 18)."""
    n, c = x.shape[:2]
    grouped = x.reshape(n, num_groups, -1)
    y, _, _ = _normalized(grouped, (2,), epsilon)
    if scale.shape[0] == num_groups and num_groups != c:
        y = y * scale.reshape(num_groups, 1) + bias.reshape(num_groups, 1)
        return y.reshape(x.shape).cast(x.dtype)
    return (y.reshape(x.shape) * _channel(scale, x.ndim) + _channel(bias, x.ndim)).cast(x.dtype)


@onnx_op("RMSNormalization")
def rms_normalization(ctx: OpContext, x: Tensor, scale: Tensor, *, axis: int = -1, epsilon: float = 1e-5,
                      stash_type: int = 1) -> Tensor:  # fmt: skip
    axis = axis + x.ndim if axis < 0 else axis
    work = x.float() if x.dtype in (dtypes.float16, dtypes.bfloat16) else x
    rms = (work.square().mean(tuple(range(axis, x.ndim)), keepdim=True) + epsilon).rsqrt()
    return (work * rms * scale).cast(x.dtype)


@onnx_op("LpNormalization")
def lp_normalization(ctx: OpContext, x: Tensor, *, axis: int = -1, p: int = 2) -> Tensor:
    norm = x.abs().sum(axis, keepdim=True) if p == 1 else x.square().sum(axis, keepdim=True).sqrt()
    return (norm == 0).where(0, x / norm).cast(x.dtype)


@onnx_op("MeanVarianceNormalization")
def mean_variance_normalization(ctx: OpContext, x: Tensor, *, axes: tuple[int, ...] = (0, 2, 3)) -> Tensor:
    mean = x.mean(axes, keepdim=True)
    std = ((x - mean).square().mean(axes, keepdim=True)).sqrt()
    return ((x - mean) / (std + 1e-9)).cast(x.dtype)


@onnx_op("LRN")
def lrn(ctx: OpContext, x: Tensor, *, size: int, alpha: float = 1e-4, beta: float = 0.75, bias: float = 1.0) -> Tensor:
    """Each element divided by (bias + alpha / size * the sum of squares over `size` neighbouring channels)**beta."""
    before, after = (size - 1) // 2, math.ceil((size - 1) / 2)
    sq = x.square().pad(((0, 0), (before, after), *((0, 0),) * (x.ndim - 2)))
    c = x.shape[1]
    window = sum(sq[:, i : i + c] for i in range(size))
    return (x / (bias + alpha / size * window).pow(beta)).cast(x.dtype)


# ---- dropout and losses ----


@onnx_op("Dropout")
def dropout(ctx: OpContext, data: Tensor, ratio_input: Tensor | None = None, training_mode: Tensor | None = None, *,
            seed: int | None = None, ratio: float = 0.5, is_test: int = 0) -> tuple[Tensor, Tensor]:  # fmt: skip
    """Inference: the input unchanged and an all-true mask. Training-mode dropout draws random numbers (not
    supported), except with ratio 0. Before opset 12 the ratio was an attribute and (before 7) is_test one too."""
    drop = ctx.scalar(ratio_input, ratio)
    if training_mode is not None and ctx.scalar(training_mode) and drop != 0:
        raise ctx.error("training-mode dropout draws random numbers and is not supported", unsupported=True)
    return data, Tensor.ones(*data.shape, dtype=dtypes.bool, device=data.device)


def _loss_reduced(loss: Tensor, weights: Tensor | None, reduction: str, ctx: OpContext) -> Tensor:
    if reduction == "none":
        return loss
    if reduction == "sum":
        return loss.sum()
    if reduction == "mean":
        return loss.sum() / (weights.sum() if weights is not None else loss.numel())
    raise ctx.error(f"reduction {reduction!r} is not one of none, sum, mean")


def _nll(ctx: OpContext, logp: Tensor, target: Tensor, weight: Tensor | None, ignore_index: int | None,
         reduction: str) -> Tensor:  # fmt: skip
    """-logp[n, target[n, ...], ...] times the class weight; ignored targets weigh 0."""
    keep = target != ignore_index if ignore_index is not None else None
    safe = keep.where(target, 0) if keep is not None else target
    picked = logp.gather(1, safe.unsqueeze(1)).squeeze(1)
    w = weight[safe] if weight is not None else None
    if keep is not None:
        w = keep.where(w if w is not None else 1.0, 0.0).cast(logp.dtype)
    loss = -picked * w if w is not None else -picked
    return _loss_reduced(loss, w, reduction, ctx).cast(logp.dtype)


@onnx_op("NegativeLogLikelihoodLoss")
def nll_loss(ctx: OpContext, logp: Tensor, target: Tensor, weight: Tensor | None = None, *,
             ignore_index: int | None = None, reduction: str = "mean") -> Tensor:  # fmt: skip
    return _nll(ctx, logp, target, weight, ignore_index, reduction)


@onnx_op("SoftmaxCrossEntropyLoss")
def softmax_cross_entropy_loss(ctx: OpContext, scores: Tensor, labels: Tensor, weights: Tensor | None = None, *,
                               ignore_index: int | None = None,
                               reduction: str = "mean") -> tuple[Tensor, Tensor]:  # fmt: skip
    logp = scores.log_softmax(1)
    return _nll(ctx, logp, labels, weights, ignore_index, reduction), logp
