"""Reductions and the operators built on them: Reduce*, ArgMax/ArgMin, softmaxes, cumulative sums, TopK."""

from __future__ import annotations

import math

from glassgrad.dtype import dtypes
from glassgrad.onnx.registry import OpContext, onnx_op
from glassgrad.tensor import Tensor

# name -> (the reduction over the given axes, the value of an empty reduction)
REDUCTIONS = {
    "ReduceSum": (lambda x, axes, keep: x.sum(axes, keep), 0.0),
    "ReduceMean": (lambda x, axes, keep: x.mean(axes, keep), math.nan),
    "ReduceProd": (lambda x, axes, keep: x.prod(axes, keep), 1.0),
    "ReduceMax": (lambda x, axes, keep: x.max(axes, keep), -math.inf),
    "ReduceMin": (lambda x, axes, keep: x.min(axes, keep), math.inf),
    "ReduceL1": (lambda x, axes, keep: x.abs().sum(axes, keep), 0.0),
    "ReduceL2": (lambda x, axes, keep: x.square().sum(axes, keep).sqrt(), 0.0),
    "ReduceSumSquare": (lambda x, axes, keep: x.square().sum(axes, keep), 0.0),
    "ReduceLogSum": (lambda x, axes, keep: x.sum(axes, keep).log(), -math.inf),
    "ReduceLogSumExp": (lambda x, axes, keep: x.logsumexp(axes, keep), -math.inf),
}


def _reduce(name: str):
    reduce, empty_value = REDUCTIONS[name]

    def op(ctx: OpContext, data: Tensor, axes_input: Tensor | None = None, *, axes: tuple[int, ...] | None = None,
           keepdims: int = 1, noop_with_empty_axes: int = 0) -> Tensor:  # fmt: skip
        """Axes are an input since opset 13 (ReduceSum) or 18 (the others), an attribute before."""
        chosen = ctx.ints(axes_input) if axes_input is not None else list(axes or [])
        if not chosen:
            if noop_with_empty_axes:
                return data
            chosen = list(range(data.ndim))
        chosen = tuple(sorted({a + data.ndim if a < 0 else a for a in chosen}))
        if data.ndim == 0:
            return reduce(data, None, bool(keepdims))
        if any(data.shape[a] == 0 for a in chosen):  # nothing to reduce: the reduction's identity
            shape = tuple(1 if i in chosen else s for i, s in enumerate(data.shape))
            if not keepdims:
                shape = tuple(s for i, s in enumerate(shape) if i not in chosen)
            value = empty_value if dtypes.is_float(data.dtype) else _int_limit(data.dtype, empty_value)
            return Tensor.full(shape, value, dtype=data.dtype, device=data.device)
        return reduce(data, chosen, bool(keepdims)).cast(data.dtype)

    return op


def _int_limit(dtype, value: float) -> int:
    if value == math.inf:
        return dtypes.max(dtype)
    if value == -math.inf:
        return dtypes.min(dtype)
    return int(value)


for _name in REDUCTIONS:
    onnx_op(_name)(_reduce(_name))


def _arg_extreme(method: str):
    def op(ctx: OpContext, data: Tensor, *, axis: int = 0, keepdims: int = 1, select_last_index: int = 0) -> Tensor:
        """The first (or with select_last_index the last) position of the extreme value along `axis`, as int64."""
        axis = axis + data.ndim if axis < 0 else axis
        if select_last_index:
            flipped = getattr(data.flip(axis), method)(axis, keepdim=bool(keepdims))
            return (data.shape[axis] - 1 - flipped).cast(dtypes.int64)
        return getattr(data, method)(axis, keepdim=bool(keepdims)).cast(dtypes.int64)

    return op


onnx_op("ArgMax")(_arg_extreme("argmax"))
onnx_op("ArgMin")(_arg_extreme("argmin"))


def _softmax_like(fn):
    def op(ctx: OpContext, x: Tensor, *, axis: int | None = None) -> Tensor:
        """Along one axis since opset 13; before, over all axes from `axis` on (the input seen as 2-D)."""
        if ctx.opset >= 13:
            return fn(x, -1 if axis is None else axis)
        axis = 1 if axis is None else axis
        axis = axis + x.ndim if axis < 0 else axis
        return fn(x.reshape(*x.shape[:axis], -1), -1).reshape(x.shape)

    return op


def _one_hot_max(x: Tensor, axis: int) -> Tensor:
    """1 where the first maximum along `axis` is, 0 elsewhere."""
    axis = axis + x.ndim if axis < 0 else axis
    first = x.argmax(axis, keepdim=True)
    positions = Tensor.arange(x.shape[axis], device=x.device).reshape(x.shape[axis], *(1,) * (x.ndim - axis - 1))
    return (positions == first).cast(x.dtype)


onnx_op("Softmax")(_softmax_like(lambda x, axis: x.softmax(axis)))
onnx_op("LogSoftmax")(_softmax_like(lambda x, axis: x.log_softmax(axis)))
onnx_op("Hardmax")(_softmax_like(_one_hot_max))


def _cumulative(method: str):
    def op(ctx: OpContext, x: Tensor, axis: Tensor, *, exclusive: int = 0, reverse: int = 0) -> Tensor:
        axis = ctx.scalar(axis)
        axis = axis + x.ndim if axis < 0 else axis
        if reverse:
            x = x.flip(axis)
        out = getattr(x, method)(axis).cast(x.dtype)
        if exclusive:  # shift by one: the identity first, the last running value dropped
            identity = 0 if method == "cumsum" else 1
            pads = [(0, 0)] * x.ndim
            pads[axis] = (1, 0)
            out = out.pad(pads, value=identity).shrink(tuple((0, s) for s in x.shape))
        return out.flip(axis) if reverse else out

    return op


onnx_op("CumSum")(_cumulative("cumsum"))
onnx_op("CumProd")(_cumulative("cumprod"))


@onnx_op("TopK")
def top_k(ctx: OpContext, x: Tensor, k: Tensor, *, axis: int = -1, largest: int = 1,
          sorted: int = 1) -> tuple[Tensor, Tensor]:  # fmt: skip
    """The k largest (or smallest) values along `axis` and their int64 positions; ties keep the lower index."""
    values, indices = x.topk(int(ctx.scalar(k)), axis, largest=bool(largest))
    return values, indices.cast(dtypes.int64)
