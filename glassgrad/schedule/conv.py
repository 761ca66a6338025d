"""Convolutions on the CPU: the padded input and the weight get buffers laid out for the kernel that reads them (on a
renderer with `buffers_windows`: the scheduler asks, naming no device).

A convolution is a sum of products of sliding windows over the padded input and the weight broadcast over the batch
and the output positions. Two rules rewrite such a product's operands:

- `buffer_padded_windows`: windows over a PAD read the padding through a mask, a test per load that keeps the C
  compiler from vector code. The padded input gets a buffer of its own (a copy a kernel**nd smaller than the
  windows), which the windows then read with plain strides.
- `pack_broadcast_weight`: the weight (C_out, C_in, *k) steps C_in * k**nd elements from one output channel to the
  next, so a vector of output channels is a gather. Copied to (C_in, *k, C_out), the reduced axes outside and the
  output axes inside, a vector of output channels is one load, and the heuristics (codegen/heuristics.py) give the
  kernel's vector lanes to the output channels (16 float32) instead of the output width (28 has 4 as its widest).
  A weight gradient's output gradient dY (N, C_out, H, W), broadcast over (C_in, *k), is the same case: copied to
  (N, H, W, C_out), its lanes are the output channels rather than 4 of a 20-wide row (beautiful_mnist's second
  weight gradient: 136 -> 93 ms, the copy 2 ms).

    sum_r x[pad(...)][window(o, r)] * w[o, r]  ->  sum_r P1[window(o, r)] * P2[r, o]
"""

from __future__ import annotations

from glassgrad.dtype import dtypes
from glassgrad.helpers import NOOPT, prod
from glassgrad.schedule.pack import movement, renderer_of, view_strides
from glassgrad.uop.ops import GroupOp, Ops, UOp
from glassgrad.uop.rewrite import PatternMatcher, UPat

WINDOW_DTYPES = (dtypes.float32, dtypes.float64)
MIN_REDUCED_AXES = 2  # a weight that varies along this many reduced axes (C_in and the kernel) is a convolution's:
# a matmul's operands vary along one, its B is packed by schedule/pack.py and its A is read as it lies
MIN_REUSE = 64  # products per weight element: fewer do not repay copying the weight


def _product(reduce: UOp) -> tuple[UOp, tuple[int, ...]] | None:
    """The MUL a float sum reduces (on a renderer that buffers windows), and the permutation between the MUL's axes
    and the sum's."""
    src = reduce.src[0]
    order = tuple(range(len(src.shape)))
    if src.op is Ops.PERMUTE:
        src, order = src.src[0], src.arg
    if NOOPT or src.op is not Ops.MUL or reduce.arg[0] is not Ops.ADD or reduce.dtype not in WINDOW_DTYPES:
        return None
    if (renderer := renderer_of(reduce)) is None or not renderer.buffers_windows:
        return None
    return src, order


def _with_operands(reduce: UOp, mul: UOp, order: tuple[int, ...], operands: tuple[UOp, ...]) -> UOp:
    product = mul.replace(src=operands)
    if reduce.src[0].op is Ops.PERMUTE:
        product = movement(Ops.PERMUTE, product, order)
    return reduce.replace(src=(product,))


def _padded_under_window(x: UOp) -> UOp | None:
    """The PAD below a chain of movement ops that repeats its elements (an EXPAND that grows), if there is one."""
    repeats = False
    while x.op in GroupOp.Movement:
        if x.op is Ops.PAD:
            return x if repeats else None
        repeats |= x.op is Ops.EXPAND and prod(x.arg) > prod(x.src[0].shape)
        x = x.src[0]
    return None


def buffer_padded_windows(reduce: UOp) -> UOp | None:
    """A sum of products whose operand reads windows over a PAD, reading a buffer of the padded input instead."""
    if (found := _product(reduce)) is None:
        return None
    mul, order = found
    pads = [_padded_under_window(s) for s in mul.src]
    if not any(pads):
        return None
    # one buffer per padded input, whichever sums read it (a convolution and its weight's gradient). Only the
    # window's own chain reads it: the other operand may hold the same PAD below a buffer made of it already (a
    # weight gradient's output gradient comes from the forward pass, whose convolution read the padded input's
    # buffer), and a buffer of that buffer would make the forward pass a second time
    operands = (s if pad is None else in_chain(s, pad, UOp(Ops.CONTIGUOUS, pad.dtype, (pad,)))
                for s, pad in zip(mul.src, pads))  # fmt: skip
    return _with_operands(reduce, mul, order, tuple(operands))


def in_chain(x: UOp, old: UOp, new: UOp) -> UOp:
    """The movement chain x with `old` (a node of the chain) replaced by `new`."""
    if x is old:
        return new
    return x.replace(src=(in_chain(x.src[0], old, new), *x.src[1:]))


def pack_broadcast_weight(reduce: UOp) -> UOp | None:
    """A broadcast operand read from a copy laid out (reduced axes, output axes), so that along the output axes it
    varies along (the output channels) it steps by one element: a convolution's weight, broadcast over the batch and
    the output positions, or a weight gradient's output gradient, broadcast over the input channels and the kernel.
    It must be constant along the innermost output axis (whose lanes it would otherwise share) and vary along two
    reduced axes or more: a matmul's operand varies along one (schedule/pack.py packs its B)."""
    if (found := _product(reduce)) is None:
        return None
    mul, order = found
    shape, reduced = reduce.src[0].shape, set(reduce.arg[1])
    outputs = [a for a in range(len(shape)) if a not in reduced]
    if len(sized := [a for a in outputs if shape[a] > 1]) < 2:
        return None
    for i, w in enumerate(mul.src):
        if w.op is not Ops.EXPAND or (strides := view_strides(w)) is None:
            continue
        strides = tuple(strides[a] for a in order)  # along the sum's axes
        varying = [a for a in outputs if strides[a] != 0 and shape[a] > 1]
        if not varying or strides[varying[-1]] == 1 or strides[sized[-1]] != 0:
            continue  # constant along every output, already inside, or not broadcast along the innermost output
        if sum(1 for a in reduced if strides[a] != 0 and shape[a] > 1) < MIN_REDUCED_AXES:
            continue
        kept = [(0, 1) if strides[a] == 0 else (0, shape[a]) for a in range(len(shape))]
        small = movement(Ops.SHRINK, movement(Ops.PERMUTE, w, order), kept)
        if prod(shape) < MIN_REUSE * prod(small.shape):
            continue
        # an output axis it steps along farther than along any reduced one stays outside: the parts of a sum split
        # over its batch (split_reduce.cache_sized_part) each keep their elements together, to be read from cache
        widest = max(strides[a] for a in reduced)
        outer = [a for a in varying[:-1] if strides[a] > widest]
        layout = outer + sorted(reduced) + [a for a in outputs if a not in outer]
        packed = UOp(Ops.CONTIGUOUS, w.dtype, (movement(Ops.PERMUTE, small, layout),))
        back = movement(Ops.EXPAND, movement(Ops.PERMUTE, packed, [layout.index(a) for a in range(len(shape))]), shape)
        operand = movement(Ops.PERMUTE, back, [order.index(a) for a in range(len(shape))])
        return _with_operands(reduce, mul, order, tuple(operand if j == i else s for j, s in enumerate(mul.src)))
    return None


window_buffers = PatternMatcher([
    (UPat(Ops.REDUCE_AXIS, name="reduce"), buffer_padded_windows),
    (UPat(Ops.REDUCE_AXIS, name="reduce"), pack_broadcast_weight),
])  # fmt: skip
