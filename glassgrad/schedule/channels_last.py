"""Convolutions read channels-last (on a renderer that `prefers_channels_last` for the operands' dtype: the scheduler
asks, naming no device).

A tiled contraction copies each operand's tile 16 bytes at a time where 16 bytes of neighbours along k or along its
rows lie side by side in memory (codegen/operand_chunks.py), else element by element. A convolution over an NCHW
input sums over (c, kh, kw): along k a chunk moves along the kernel's width, a few elements; along the rows, along the
output's width, which crosses an image row wherever that width is no multiple of the chunk (28, 14, 7) and steps by
the stride. Laid out channels-last (N, *S, C) and summed over (kh, kw, c), a chunk is channels of one pixel: side by
side in memory, the padding's guard the same for every lane.

`channels_last_operands` rewrites a convolution's sum (a sum over several axes at once: channels and kernel offsets,
or batch and output positions; a matmul's is over one) of a product whose operands read tensors (N, C, *S) of rank 3
or more through movement ops: the windows over the (padded) input, the weight (C_out, C_in, *k), a weight gradient's
output gradient (N, C_out, *S), an input gradient's spread output gradient. Where an operand as it lies would be copied
element by element (no 16-byte chunk along the innermost axis of its k or of its rows, no plain strides), and the sum
reads its base's channels (axis 1, at least MIN_CHANNELS) along an axis that is no batch axis, the base gets a buffer
of its own laid out channels-last -- the permute goes into the CONTIGUOUS that makes it where it is one not made yet
(an input gradient's spread), else a copy (the padded input, shared by the forward sum and the weight gradient) -- and
the sum's axes are reordered so that the channels are the last of their kind (the reduced axes, or the output axes only
that operand reads). The other operand gets the same where the new order would leave it element by element (the
weight). Where output axes move (a weight gradient's), the sum gets a buffer of its own, read back through the inverse
permute. The rule fires only where fewer operands are copied element by element after than before.

    sum_{c,kh,kw} X[n, c, oh+kh, ow+kw] * W[o, c, kh, kw] -> sum_{kh,kw,c} Xl[n, oh+kh, ow+kw, c] * Wl[o, kh, kw, c]
"""

from __future__ import annotations

from glassgrad.helpers import NOOPT, prod
from glassgrad.schedule.conv import in_chain
from glassgrad.schedule.pack import movement, renderer_of
from glassgrad.uop.ops import GroupOp, Ops, UOp, fresh_unique
from glassgrad.uop.rewrite import PatternMatcher, UPat
from glassgrad.uop.view import chain_view

SUMMED_AXES = 2  # a convolution sums over several axes at once (channels and kernel offsets, or batch and positions);
# a matmul over one
MIN_CHANNELS = 8  # channels in a chunk of 16 bytes of 16-bit floats: fewer (an RGB image's 3) cross pixels anyway


def _uncast(operand: UOp) -> UOp:
    """The operand under its cast to the product's dtype (a 16-bit operand's float32), where it has one."""
    return operand.src[0] if operand.op is Ops.CAST else operand


def _base(operand: UOp) -> UOp | None:
    """The tensor of rank 3 or more that an operand's movement chain (under a cast) reads: the padded input where the
    chain pads, else the lowest node of the chain's run of such ranks from the top."""
    x, found = _uncast(operand), None
    while (shape := x.shape) is not None and len(shape) >= 3:
        if x.op is Ops.PAD:
            return x
        found = x
        if x.op not in GroupOp.Movement:
            break
        x = x.src[0]
    return found


def _laid_out(x: UOp) -> bool:
    """Whether x is a channels-last buffer read back as (N, C, *S) already."""
    rank = len(x.shape)
    return x.op is Ops.CONTIGUOUS and (inner := x.src[0]).op is Ops.PERMUTE and inner.arg == (0, *range(2, rank), 1)


def _strides(operand: UOp, base: UOp) -> tuple[int, ...] | None:
    """The operand's strides over its base's elements row-major, along the sum's axes; None where one view does not
    hold them."""
    chain = in_chain(operand, base, UOp(Ops.CONTIGUOUS, base.dtype, (base,)))
    views = chain_view(_uncast(chain)).views
    return views[0].strides if len(views) == 1 else None


def _channels_axis(operand: UOp, base: UOp, batch: set[int]) -> int | None:
    """The sum's axis that reads the base's channels (axis 1): at least MIN_CHANNELS of them, and no batch axis."""
    if _laid_out(base) or (strides := _strides(operand, base)) is None:
        return None
    shape = operand.shape
    channels = [a for a in range(len(shape)) if strides[a] == prod(base.shape[2:]) and shape[a] > 1]
    if len(channels) != 1 or shape[channels[0]] < MIN_CHANNELS or channels[0] in batch:
        return None
    return channels[0]


def _channels_last(operand: UOp, base: UOp) -> UOp:
    """The operand reading its base from a channels-last buffer: a CONTIGUOUS not made yet lays its value out so."""
    rank = len(base.shape)
    if base.op is Ops.CONTIGUOUS:
        buffer = base.replace(src=(movement(Ops.PERMUTE, base.src[0], (0, *range(2, rank), 1)), *base.src[1:]))
    else:
        buffer = UOp(Ops.CONTIGUOUS, base.dtype, (movement(Ops.PERMUTE, base, (0, *range(2, rank), 1)),))
    return in_chain(operand, base, movement(Ops.PERMUTE, buffer, (0, rank - 1, *range(1, rank - 1))))


def _last_of_kind(axes: list[int], axis: int, kind: set[int]) -> list[int]:
    """`axes` (an order of the sum's axes) with `axis` moved after the last other axis in `kind`."""
    rest = [a for a in axes if a != axis]
    at = max((i for i, a in enumerate(rest) if a in kind), default=None)
    return axes if at is None else rest[: at + 1] + [axis] + rest[at + 1 :]


def _under_cast(op: UOp, operand: UOp) -> UOp:
    """A movement op (like `op`) on the operand, under its cast: a chain over its base stays one chain."""
    if operand.op is Ops.CAST:
        return operand.replace(src=(_under_cast(op, operand.src[0]),))
    return movement(op.op, operand, op.arg)


def _product(reduce: UOp) -> UOp | None:
    """The product a sum reduces, over the sum's own axes: the views between them (a permute, a two-stage sum's
    reshape into parts, mixin/split_reduce.py) moved into each factor; None under NOOPT."""
    views, x = [], reduce.src[0]
    while x.op in (Ops.RESHAPE, Ops.PERMUTE):
        views.append(x)
        x = x.src[0]
    if NOOPT or x.op is not Ops.MUL or reduce.arg[0] is not Ops.ADD:
        return None
    operands = list(x.src)
    for view in reversed(views):
        operands = [_under_cast(view, s) for s in operands]
    return x.replace(src=tuple(operands))


def _layout(operand: UOp) -> tuple[int, ...] | None:
    """The operand's strides over the tensor its chain reads (its base's elements row-major, the padded input's
    where it pads), where one view holds them."""
    if (base := _base(operand)) is not None:
        return _strides(operand, base)
    views = chain_view(_uncast(operand)).views
    return views[0].strides if len(views) == 1 else None


def _copied_fast(operand: UOp, axes: list[int], reduced: set[int], own: set[int]) -> bool:
    """Whether a tiled product, summing in the order `axes`, copies the operand's tile 16 bytes at a time: chunks
    side by side along the innermost of its k (the reduced axes) or of its rows (the output axes only it reads), or
    plain strides along both. Not where one view does not hold its layout (a strided window's: it may cross rows)."""
    if (strides := _layout(operand)) is None:
        return False
    shape, lanes = operand.shape, 16 // _uncast(operand).dtype.itemsize
    k = [a for a in axes if a in reduced and shape[a] > 1]
    rows = [a for a in axes if a in own and shape[a] > 1]
    if any(group and strides[group[-1]] == 1 and shape[group[-1]] % lanes == 0 for group in (k, rows)):
        return True
    merges = lambda group: all(strides[a] == strides[b] * shape[b] for a, b in zip(group, group[1:]))  # noqa: E731
    return merges(k) and merges(rows)


def channels_last_operands(reduce: UOp) -> UOp | None:
    """A convolution's sum reading an operand channels-last where that copies it 16 bytes at a time and as it lies
    does not, its channels the innermost of their axes (see the module's docstring)."""
    if len(reduce.arg[1]) < SUMMED_AXES or (renderer := renderer_of(reduce)) is None:
        return None
    if (mul := _product(reduce)) is None or not any(renderer.prefers_channels_last(_uncast(s).dtype) for s in mul.src):
        return None
    shape, reduced = mul.shape, set(reduce.arg[1])
    reads = [{a for a in range(len(shape)) if shape[a] > 1 and _reads(s, a)} for s in mul.src]
    own = [reads[0] - reads[1] - reduced, reads[1] - reads[0] - reduced]
    batch = {a for a in range(len(shape)) if a not in reduced and all(a in r for r in reads)}
    axes = list(range(len(shape)))
    fast = [_copied_fast(s, axes, reduced, own[i]) for i, s in enumerate(mul.src)]
    if all(fast):
        return None
    laid_out: dict[int, tuple[UOp, int]] = {}  # operand -> (channels-last, its channels axis)
    for i, s in enumerate(mul.src):
        if (base := _base(s)) is not None and renderer.prefers_channels_last(_uncast(s).dtype):
            if (channels := _channels_axis(s, base, batch)) is not None:
                laid_out[i] = (_channels_last(s, base), channels)
    for i, (_, channels) in laid_out.items():  # the order the slow ones want
        if not fast[i]:
            axes = _last_of_kind(axes, channels, reduced if channels in reduced else own[i])
    operands = list(mul.src)
    for i, (operand, _) in laid_out.items():  # in that order, whichever is faster channels-last
        if not _copied_fast(operands[i], axes, reduced, own[i]) and _copied_fast(operand, axes, reduced, own[i]):
            operands[i] = operand
    if sum(_copied_fast(s, axes, reduced, own[i]) for i, s in enumerate(operands)) <= sum(fast):
        return None
    product = mul.replace(src=tuple(operands))
    if axes != sorted(axes):
        product = movement(Ops.PERMUTE, product, axes)
    summed = UOp(Ops.REDUCE_AXIS, reduce.dtype, (product,), (Ops.ADD, tuple(axes.index(a) for a in sorted(reduced))))
    if summed.shape == reduce.shape:  # only reduced axes moved
        return summed
    # the output's axes moved: the sum gets a buffer of its own, read back in the order asked for
    buffered = UOp(Ops.CONTIGUOUS, summed.dtype, (summed, fresh_unique()))
    return movement(Ops.PERMUTE, buffered, [axes.index(a) for a in range(len(shape))])


def _reads(operand: UOp, axis: int) -> bool:
    """Whether the operand varies along the product's `axis` (it is no broadcast along it)."""
    return chain_view(_uncast(operand)).views[-1].strides[axis] != 0


channels_last = PatternMatcher([
    (UPat(Ops.REDUCE_AXIS, name="reduce"), channels_last_operands),
])  # fmt: skip
