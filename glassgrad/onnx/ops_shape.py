"""Shape and movement operators: Shape, Reshape, Slice, Gather, Scatter, Pad, Expand, Split and their kin."""

from __future__ import annotations

import math

from glassgrad.dtype import dtypes
from glassgrad.helpers import prod
from glassgrad.onnx.loader import onnx_dtype
from glassgrad.onnx.registry import OpContext, onnx_op
from glassgrad.onnx.runner import HOST, _on_host
from glassgrad.tensor import Tensor


def _axis(axis: int, ndim: int) -> int:
    return axis + ndim if axis < 0 else axis


def _axes_arg(ctx: OpContext, axes_input: Tensor | None, axes_attr: tuple[int, ...] | None) -> list[int] | None:
    """Axes given as an input (newer opsets) or an attribute (older ones)."""
    return ctx.ints(axes_input) if axes_input is not None else (list(axes_attr) if axes_attr is not None else None)


@onnx_op("Shape")
def shape(ctx: OpContext, data: Tensor, *, start: int = 0, end: int | None = None) -> Tensor:
    dims = list(data.shape)
    return Tensor(dims[slice(start, end)], dtype=dtypes.int64, device=HOST)


@onnx_op("Size")
def size(ctx: OpContext, data: Tensor) -> Tensor:
    return Tensor(data.numel(), dtype=dtypes.int64, device=HOST)


@onnx_op("Constant")
def constant(ctx: OpContext, *, value: Tensor | None = None, value_float: float | None = None,
             value_floats: tuple[float, ...] | None = None, value_int: int | None = None,
             value_ints: tuple[int, ...] | None = None) -> Tensor:  # fmt: skip
    if value is not None:
        return _on_host(value)
    if value_float is not None or value_floats is not None:
        return Tensor(
            value_float if value_floats is None else list(value_floats), dtype=dtypes.float32, device=ctx.device
        )
    if value_int is not None or value_ints is not None:
        return _on_host(Tensor(value_int if value_ints is None else list(value_ints), dtype=dtypes.int64, device=HOST))
    raise ctx.error("has no value attribute (sparse and string values are not supported)", unsupported=True)


@onnx_op("ConstantOfShape")
def constant_of_shape(ctx: OpContext, shape: Tensor, *, value: Tensor | None = None) -> Tensor:
    dims = ctx.ints(shape)
    if value is None:
        return Tensor.full(dims, 0.0, dtype=dtypes.float32, device=ctx.device)
    return value.reshape(()).to(ctx.device).expand(dims).contiguous() if dims else value.reshape(()).to(ctx.device)


@onnx_op("Reshape")
def reshape(ctx: OpContext, data: Tensor, shape: Tensor | None = None, *, allowzero: int = 0) -> Tensor:
    """0 copies the input's size at that position (unless allowzero); -1 is inferred."""
    dims = ctx.ints(shape)
    if not allowzero:
        dims = [data.shape[i] if d == 0 else d for i, d in enumerate(dims)]
    if -1 in dims:
        known = prod(d for d in dims if d != -1)
        dims[dims.index(-1)] = data.numel() // known if known else 0
    return data.reshape(dims)


@onnx_op("Flatten")
def flatten(ctx: OpContext, x: Tensor, *, axis: int = 1) -> Tensor:
    axis = _axis(axis, x.ndim)
    return x.reshape(prod(x.shape[:axis]), prod(x.shape[axis:]))


@onnx_op("Transpose")
def transpose(ctx: OpContext, x: Tensor, *, perm: tuple[int, ...] | None = None) -> Tensor:
    return x.permute(perm if perm is not None else tuple(reversed(range(x.ndim))))


@onnx_op("Squeeze")
def squeeze(ctx: OpContext, data: Tensor, axes_input: Tensor | None = None, *,
            axes: tuple[int, ...] | None = None) -> Tensor:  # fmt: skip
    chosen = _axes_arg(ctx, axes_input, axes)
    chosen = (
        [i for i, s in enumerate(data.shape) if s == 1] if chosen is None else [_axis(a, data.ndim) for a in chosen]
    )
    return data.reshape([s for i, s in enumerate(data.shape) if i not in chosen])


@onnx_op("Unsqueeze")
def unsqueeze(ctx: OpContext, data: Tensor, axes_input: Tensor | None = None, *,
              axes: tuple[int, ...] | None = None) -> Tensor:  # fmt: skip
    chosen = _axes_arg(ctx, axes_input, axes)
    ndim = data.ndim + len(chosen)
    chosen = {_axis(a, ndim) for a in chosen}
    dims = iter(data.shape)
    return data.reshape([1 if i in chosen else next(dims) for i in range(ndim)])


@onnx_op("Concat")
def concat(ctx: OpContext, *inputs: Tensor, axis: int) -> Tensor:
    return inputs[0].cat(*inputs[1:], dim=axis)


@onnx_op("Split")
def split(ctx: OpContext, x: Tensor, split_input: Tensor | None = None, *, axis: int = 0,
          split: tuple[int, ...] | None = None, num_outputs: int | None = None) -> tuple[Tensor, ...]:  # fmt: skip
    """Sizes from the `split` input (or attribute); otherwise equal parts, the last smaller, one per output."""
    sizes = _axes_arg(ctx, split_input, split)
    axis = _axis(axis, x.ndim)
    if not sizes:
        parts = num_outputs or ctx.outputs
        chunk = math.ceil(x.shape[axis] / parts)
        sizes = [min(chunk, x.shape[axis] - i * chunk) for i in range(parts)]
    return tuple(x.split(sizes, axis))


def _slice_bounds(start: int, end: int, step: int, size: int) -> slice:
    """ONNX's clamping of one axis' start and end, as a Python slice."""
    if step == 0:
        raise ValueError("Slice: steps must not be 0")
    start = start + size if start < 0 else start
    end = end + size if end < 0 else end
    if step > 0:
        return slice(min(max(start, 0), size), min(max(end, 0), size), step)
    start, end = min(max(start, -1), size - 1), min(max(end, -1), size - 1)
    return slice(start, None if end < 0 else end, step) if start >= 0 else slice(0, 0, 1)


@onnx_op("Slice")
def slice_(ctx: OpContext, data: Tensor, starts: Tensor | None = None, ends: Tensor | None = None,
           axes_input: Tensor | None = None, steps: Tensor | None = None, *,
           axes: tuple[int, ...] | None = None, **attrs) -> Tensor:  # fmt: skip
    """starts/ends/axes/steps are inputs since opset 10 and attributes (without steps) before."""
    if attrs:  # opset < 10
        starts_list, ends_list = list(attrs.pop("starts")), list(attrs.pop("ends"))
        if attrs:
            raise ctx.error(f"attribute {', '.join(map(repr, attrs))} is not supported", unsupported=True)
    else:
        starts_list, ends_list = ctx.ints(starts), ctx.ints(ends)
    chosen = _axes_arg(ctx, axes_input, axes) or list(range(len(starts_list)))
    step_list = ctx.ints(steps) or [1] * len(starts_list)
    index = [slice(None)] * data.ndim
    for a, s, e, st in zip(chosen, starts_list, ends_list, step_list):
        a = _axis(a, data.ndim)
        index[a] = _slice_bounds(s, e, st, data.shape[a])
    return data[tuple(index)]


def _wrapped(indices: Tensor, size: int) -> Tensor:
    """Negative indices count from the end."""
    return (indices < 0).where(indices + size, indices)


@onnx_op("Gather")
def gather(ctx: OpContext, data: Tensor, indices: Tensor, *, axis: int = 0) -> Tensor:
    axis = _axis(axis, data.ndim)
    return data[(slice(None),) * axis + (_wrapped(indices, data.shape[axis]).to(data.device),)]


@onnx_op("GatherElements")
def gather_elements(ctx: OpContext, data: Tensor, indices: Tensor, *, axis: int = 0) -> Tensor:
    axis = _axis(axis, data.ndim)
    return data.gather(axis, _wrapped(indices, data.shape[axis]))


def _flat_positions(data: Tensor, indices: Tensor, batch_dims: int) -> tuple[Tensor, Tensor]:
    """GatherND/ScatterND's index tuples as positions into `data` with the indexed dims (and batch dims) merged."""
    k, batch = indices.shape[-1], data.shape[:batch_dims]
    indexed = data.shape[batch_dims : batch_dims + k]
    flat = data.reshape(prod(batch) * prod(indexed), *data.shape[batch_dims + k :])
    position = indices[..., 0].zeros_like()
    for j, n in enumerate(indexed):
        position = position * n + _wrapped(indices[..., j], n)
    if batch_dims:  # each batch element reads its own block of the merged dim
        batch_index = Tensor.arange(prod(batch), device=indices.device, dtype=indices.dtype).reshape(
            *batch, *(1,) * (indices.ndim - 1 - batch_dims))  # fmt: skip
        position = position + batch_index * prod(indexed)
    return flat, position


@onnx_op("GatherND")
def gather_nd(ctx: OpContext, data: Tensor, indices: Tensor, *, batch_dims: int = 0) -> Tensor:
    flat, position = _flat_positions(data, indices, batch_dims)
    return flat[position]


SCATTER_REDUCE = {"add": "sum", "mul": "prod", "max": "amax", "min": "amin"}


def _scatter(ctx: OpContext, data: Tensor, axis: int, index: Tensor, updates: Tensor, reduction: str) -> Tensor:
    if reduction == "none":
        return data.scatter(axis, index, updates)
    if reduction not in SCATTER_REDUCE:
        raise ctx.error(f"reduction {reduction!r} is not supported", unsupported=True)
    return data.scatter_reduce(axis, index, updates, SCATTER_REDUCE[reduction])


@onnx_op("ScatterElements", "Scatter")
def scatter_elements(ctx: OpContext, data: Tensor, indices: Tensor, updates: Tensor, *, axis: int = 0,
                     reduction: str = "none") -> Tensor:  # fmt: skip
    axis = _axis(axis, data.ndim)
    return _scatter(ctx, data, axis, _wrapped(indices, data.shape[axis]), updates, reduction)


@onnx_op("ScatterND")
def scatter_nd(ctx: OpContext, data: Tensor, indices: Tensor, updates: Tensor, *, reduction: str = "none") -> Tensor:
    flat, position = _flat_positions(data, indices, 0)
    rest = flat.shape[1:]
    position = position.reshape(-1, *(1,) * len(rest)).expand(position.numel(), *rest)
    updates = updates.reshape(-1, *rest)
    return _scatter(ctx, flat, 0, position, updates, reduction).reshape(data.shape)


@onnx_op("Expand")
def expand(ctx: OpContext, x: Tensor, shape: Tensor) -> Tensor:
    """Broadcast both ways: a 1 in `shape` keeps the input's size."""
    dims = ctx.ints(shape)
    ndim = max(len(dims), x.ndim)
    have = (1,) * (ndim - x.ndim) + x.shape
    want = (1,) * (ndim - len(dims)) + tuple(dims)
    return x.reshape(have).expand([h if w == 1 else w for h, w in zip(have, want)])


@onnx_op("Tile")
def tile(ctx: OpContext, x: Tensor, repeats: Tensor) -> Tensor:
    return x.repeat(ctx.ints(repeats))


@onnx_op("Range")
def range_(ctx: OpContext, start: Tensor, limit: Tensor, delta: Tensor) -> Tensor:
    first, stop, step = ctx.scalar(start), ctx.scalar(limit), ctx.scalar(delta)
    count = max(math.ceil((stop - first) / step), 0)
    return (Tensor.arange(count, device=ctx.device).cast(start.dtype) * step + first).cast(start.dtype)


PAD_MODES = {"constant": "constant", "reflect": "reflect", "edge": "replicate", "wrap": "circular"}


@onnx_op("Pad")
def pad(ctx: OpContext, data: Tensor, pads_input: Tensor | None = None, constant_value: Tensor | None = None,
        axes: Tensor | None = None, *, mode: str = "constant", pads: tuple[int, ...] | None = None,
        value: float = 0.0) -> Tensor:  # fmt: skip
    """pads = [begin of each axis..., end of each axis...]; negative values crop."""
    if mode not in PAD_MODES:
        raise ctx.error(f"mode {mode!r} is not supported", unsupported=True)
    amounts = ctx.ints(pads_input) if pads_input is not None else list(pads)
    chosen = [_axis(a, data.ndim) for a in (ctx.ints(axes) or range(data.ndim))]
    pairs: list[tuple[int, int]] = [(0, 0)] * data.ndim
    for i, a in enumerate(chosen):
        pairs[a] = (amounts[i], amounts[i + len(chosen)])
    fill = ctx.scalar(constant_value, value) if mode == "constant" else None
    # crop first (negative amounts), then pad the rest
    data = data[tuple(slice(max(-b, 0), s - max(-e, 0)) for (b, e), s in zip(pairs, data.shape))]
    grow = [(max(b, 0), max(e, 0)) for b, e in pairs]
    if not any(b or e for b, e in grow):
        return data
    return data.pad(grow, mode=PAD_MODES[mode], value=fill)


@onnx_op("DepthToSpace")
def depth_to_space(ctx: OpContext, x: Tensor, *, blocksize: int, mode: str = "DCR") -> Tensor:
    n, c, h, w = x.shape
    b = blocksize
    if mode == "DCR":
        y = x.reshape(n, b, b, c // (b * b), h, w).permute(0, 3, 4, 1, 5, 2)
    else:
        y = x.reshape(n, c // (b * b), b, b, h, w).permute(0, 1, 4, 2, 5, 3)
    return y.reshape(n, c // (b * b), h * b, w * b)


@onnx_op("SpaceToDepth")
def space_to_depth(ctx: OpContext, x: Tensor, *, blocksize: int, mode: str = "DCR") -> Tensor:
    """DepthToSpace's inverse: DCR puts the block offsets before the channels, CRD after."""
    n, c, h, w = x.shape
    b = blocksize
    order = (0, 3, 5, 1, 2, 4) if mode == "DCR" else (0, 1, 3, 5, 2, 4)
    y = x.reshape(n, c, h // b, b, w // b, b).permute(*order)
    return y.reshape(n, c * b * b, h // b, w // b)


@onnx_op("EyeLike")
def eye_like(ctx: OpContext, x: Tensor, *, dtype: int | None = None, k: int = 0) -> Tensor:
    out_dtype = x.dtype if dtype is None else onnx_dtype(dtype, f"{ctx.op} (node {ctx.node!r})")
    rows, cols = x.shape
    r = Tensor.arange(rows, device=x.device).reshape(rows, 1)
    c = Tensor.arange(cols, device=x.device).reshape(1, cols)
    return (c - r == k).cast(out_dtype)


@onnx_op("OneHot")
def one_hot(ctx: OpContext, indices: Tensor, depth: Tensor, values: Tensor, *, axis: int = -1) -> Tensor:
    """values = [off, on]; negative indices count from the end; the new axis goes at `axis`."""
    n = int(ctx.scalar(depth))
    axis = _axis(axis, indices.ndim + 1)
    idx = indices.cast(dtypes.int64) if dtypes.is_float(indices.dtype) else indices
    idx = _wrapped(idx, n).unsqueeze(axis)
    positions = Tensor.arange(n, device=indices.device).reshape(n, *(1,) * (indices.ndim - axis))
    off, on = values[0], values[1]
    return (idx == positions).where(on, off)


@onnx_op("Trilu")
def trilu(ctx: OpContext, x: Tensor, k: Tensor | None = None, *, upper: int = 1) -> Tensor:
    diagonal = int(ctx.scalar(k, 0))
    return x.triu(diagonal) if upper else x.tril(diagonal)


@onnx_op("Compress")
def compress(ctx: OpContext, x: Tensor, condition: Tensor, *, axis: int | None = None) -> Tensor:
    """The slices along `axis` (of the flattened input without one) where `condition` is true."""
    keep = [i for i, c in enumerate(ctx.values(condition)) if c]
    if axis is None:
        x, axis = x.flatten(), 0
    axis = _axis(axis, x.ndim)
    keep = [i for i in keep if i < x.shape[axis]]
    index = Tensor(keep, dtype=dtypes.int64, device=x.device) if keep else None
    if index is None:
        return x.shrink(tuple((0, 0) if d == axis else None for d in range(x.ndim)))
    return x[(slice(None),) * axis + (index,)]


@onnx_op("NonZero")
def non_zero(ctx: OpContext, x: Tensor) -> Tensor:
    """The positions of the non-zero elements, one row per axis (its size depends on the data)."""
    import numpy as np

    positions = np.stack(np.nonzero(x.numpy())) if x.ndim else np.zeros((0, int(bool(x.item()))), np.int64)
    return Tensor(positions.astype(np.int64).reshape(x.ndim, -1), device=ctx.device)


@onnx_op("ReverseSequence")
def reverse_sequence(ctx: OpContext, x: Tensor, sequence_lens: Tensor, *, batch_axis: int = 1,
                     time_axis: int = 0) -> Tensor:  # fmt: skip
    """Each batch element's first sequence_lens[b] steps reversed, the rest kept."""
    steps = x.shape[time_axis]
    t = Tensor.arange(steps, device=x.device, dtype=dtypes.int64)
    lens = sequence_lens.cast(dtypes.int64)
    shape = [1] * x.ndim
    shape[time_axis], t_shape = steps, [1] * x.ndim
    t_shape[time_axis] = steps
    len_shape = [1] * x.ndim
    len_shape[batch_axis] = x.shape[batch_axis]
    t, lens = t.reshape(t_shape), lens.reshape(len_shape)
    source = (t < lens).where(lens - 1 - t, t).expand(x.shape)
    return x.gather(time_axis, source)


@onnx_op("CenterCropPad")
def center_crop_pad(ctx: OpContext, x: Tensor, shape: Tensor, *, axes: tuple[int, ...] | None = None) -> Tensor:
    """Crop or pad each axis to the target size around its center (the extra element goes at the end)."""
    sizes = ctx.ints(shape)
    chosen = [_axis(a, x.ndim) for a in (axes if axes is not None else range(x.ndim))]
    for a, want in zip(chosen, sizes):
        have = x.shape[a]
        if want < have:
            start = (have - want) // 2
            x = x.shrink(tuple((start, start + want) if d == a else None for d in range(x.ndim)))
        elif want > have:
            before = (want - have) // 2
            x = x.pad(tuple((before, want - have - before) if d == a else (0, 0) for d in range(x.ndim)))
    return x
