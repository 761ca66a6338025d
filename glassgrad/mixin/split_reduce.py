"""Two-stage reductions: a long reduction becomes two kernels, the first summing parts of it into a buffer of partial
results, the second summing those. The Tensor graph says so itself (reshape, reduce, contiguous, reduce), so
autograd and the scheduler need nothing new. Two cases:

- On a GPU, a long reduction into few outputs (`split_reduce`): one kernel per output leaves most of a GPU idle when
  there are few outputs (a whole-tensor sum of 256M floats would be one block of threads on one multiprocessor).
  The reduced axis is split into about SPLIT_PARTS parts, each a block with its GROUP of threads.
- On the CPU, a sum over a batch whose operands do not fit in cache (`cache_sized_part`): a kernel computes a block
  of outputs at a time, reading all of its operands for each block, so operands larger than the L2 come from
  memory again and again. A convolution's weight gradient (beautiful_mnist's second: 32x32x5x5 outputs over 512
  images, 64 MB of operands read 80 times) is then bound by memory. Summed a part of the batch at a time, the part's
  operands stay in L2 while every block reads them (that kernel 52 -> 30 ms; the step 265-271 -> 234-237 ms).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from glassgrad.device_info import runs_blocks
from glassgrad.dtype import DType, dtypes
from glassgrad.helpers import L2_BUDGET, prod
from glassgrad.uop.ops import GroupOp, Ops, UOp

if TYPE_CHECKING:
    from glassgrad.tensor import Tensor

SPLIT_FROM = 1 << 16  # reductions of at least this many terms an output...
SPLIT_BELOW = 2048  # ...into fewer outputs than this (a weight gradient of a small convolution, a batchnorm's mean)
SPLIT_PARTS = 1024  # the first stage's outputs, where the outputs are few: as many blocks
MIN_PARTS = 16  # parts each output's reduction is cut in at least
MIN_PART = 256  # terms in each part at least: a block's threads then have work
# A long sum into a moderate number of outputs: a contraction whose output tiles (128x128 a block) are fewer than the
# GPU's multiprocessors, each block running the whole long sum alone. ResNet-18's weight gradients (64x64x3x3
# outputs over 256x32x32 terms) ran as one kernel at 0.64 TFLOP/s on an H200, 30 ms each; cut along the batch, each
# part is a tiled product of its own (batch axis: the part), the parts' results summed by a small second kernel.
# A sum whose length no part count divides (GPT-2's head, 50257 = 29 x 1733 tokens of vocabulary) is cut unevenly:
# parts of its first len - len % parts terms, and the few left summed on their own.
LONG_FROM = 1 << 12  # terms an output at least (ResNet-50's 1x1 weight gradients at 14x14: 64x14x14 terms into
# 1024x256 outputs, 16 tiles, ran at 1.5 TFLOP/s on an H200 unsplit)...
LONG_BELOW = 1 << 22  # ...into fewer outputs than this (256 tiles of 128x128: two waves of a 132-multiprocessor GPU)
LONG_PARTIALS = 1 << 22  # the first stage's outputs: about this many (a 16 MB float32 buffer)
LONG_PART = 1024  # terms in each part at least: a tile's sum stays long


def split_parts(shape: tuple[int, ...], axes: tuple[int, ...], contraction: bool = False) -> tuple[int, int] | None:
    """(axis, parts): the outermost reduced axis to cut into `parts` pieces, or None where one stage is better; a
    contraction (a sum of products) runs as tiles of outputs, which a long sum into a moderate count leaves few of.
    For a contraction no part count divides, `parts` does not divide the axis: split_reduce sums the rest apart."""
    if any(isinstance(s, UOp) for s in shape):  # a symbolic size: one stage (a symbolic dim stays whole)
        return None
    outputs = prod(s for i, s in enumerate(shape) if i not in axes)
    terms = prod(shape[a] for a in axes)
    if terms >= SPLIT_FROM and outputs < SPLIT_BELOW:  # few outputs: a block per part
        want = min(max(SPLIT_PARTS // outputs, MIN_PARTS), terms // MIN_PART)
    elif contraction and terms >= LONG_FROM and SPLIT_BELOW <= outputs < LONG_BELOW:  # more tiles
        want = min(LONG_PARTIALS // outputs, terms // LONG_PART)
    else:
        return None
    if want < 2:
        return None
    divided = [(axis, max((d for d in range(2, min(want, shape[axis]) + 1) if shape[axis] % d == 0), default=1))
               for axis in axes]  # fmt: skip
    for axis, parts in divided:
        if 2 * parts > want:  # an axis that cannot give enough parts is left for the next
            return axis, parts
    axis, parts = max(divided, key=lambda d: d[1])  # none gives enough: the most any gives, where that is many
    if parts >= MIN_PARTS:
        return axis, parts
    longest = max(axes, key=lambda a: shape[a])
    if outputs >= SPLIT_BELOW and want >= 2 and shape[longest] // want >= LONG_PART:  # unevenly, its remainder apart
        return longest, want
    return None


def _has_blocks(device: str | tuple[str, ...]) -> bool:
    """Whether the device runs blocks of threads (a GPU): its renderer says so (a sharded tensor's parts: no)."""
    return isinstance(device, str) and runs_blocks(device)


def split_reduce(x: Tensor, op: Ops, axes: tuple[int, ...]) -> Tensor | None:
    """x reduced over `axes` in two kernels (keeping the reduced axes as 1), or None where one kernel is better: off a
    GPU, for a max that autograd will differentiate (ties would share the gradient part by part). 16-bit floats are
    summed in float32 parts and rounded once at the end, as the one kernel would."""
    if op is Ops.MAX and x.requires_grad:
        return None
    if (split := split_parts(x.shape, axes, op is Ops.ADD and _is_product(x.uop))) is None or not _has_blocks(x.device):
        return None
    axis, parts = split
    wide = x.float() if x.dtype in (dtypes.float16, dtypes.bfloat16) else x
    size, kept = x.shape[axis], tuple(1 if i in axes else s for i, s in enumerate(x.shape))
    if (even := size - size % parts) != size:  # parts of the first `even` terms; the rest (fewer than parts) apart
        first = wide.shrink(tuple((0, even) if i == axis else None for i in range(x.ndim)))
        rest = wide.shrink(tuple((even, size) if i == axis else None for i in range(x.ndim)))
        out = _in_parts(first, op, axes, axis, parts).reshape(kept) + rest._reduce_axis(op, axes).reshape(kept)
    else:
        out = _in_parts(wide, op, axes, axis, parts).reshape(kept)
    return out.cast(x.dtype)


def _is_product(node: UOp) -> bool:
    """A product, maybe under casts and views (a 16-bit gradient's product comes as half(float(g) * float(w)), a
    convolution's weight gradient as a permuted one)."""
    while node.op is Ops.CAST or node.op in GroupOp.Movement:
        node = node.src[0]
    return node.op is Ops.MUL


def _in_parts(x: Tensor, op: Ops, axes: tuple[int, ...], axis: int, parts: int) -> Tensor:
    """x reduced over `axes` as `parts` partial results along `axis` (which they divide), then those reduced."""
    shape = x.shape[:axis] + (parts, x.shape[axis] // parts) + x.shape[axis + 1 :]
    inner = tuple(a + (a >= axis) for a in axes)  # the split axis's inner part, and the other reduced axes
    return x.reshape(shape)._reduce_axis(op, inner).contiguous()._reduce_axis(op, (axis,))


MIN_PART_REUSE = 4  # operand elements per partial result at least: the partial buffer must be small beside them


def cache_sized_part(n: int, item_bytes: int, outputs: int, dtype: DType, device: str) -> int | None:
    """Items per part for summing over a batch of `n` items (each `item_bytes` of operands) into `outputs` results on
    the CPU: the largest divisor of n whose part's operands fit in L2_BUDGET, or None where one kernel is better (a
    GPU; the whole batch fits; 16-bit floats, whose partial sums would round; a partial buffer too big beside the
    operands)."""
    if not isinstance(device, str) or _has_blocks(device) or dtype not in (dtypes.float32, dtypes.float64):
        return None
    if n * item_bytes <= L2_BUDGET:
        return None
    part = max(d for d in range(1, n + 1) if n % d == 0 and (d * item_bytes <= L2_BUDGET or d == 1))
    if (n // part) * outputs * MIN_PART_REUSE > n * item_bytes // dtype.itemsize:
        return None
    return part
