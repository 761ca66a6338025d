"""Fused scaled-dot-product attention: the ATTENTION primitive, one kernel whose batch x heads x L x S scores never go
to memory, asked for where the device's renderer writes that kernel (`Renderer.fused_attention`).

`fused_attention` builds ATTENTION(q, k, v[, mask]) (arg (scale, causal)) over the inputs broadcast to one batch
shape: a float32 buffer of every row's output, then every row's logsumexp (renderer/attention.py says how the kernel
computes them), and returns the outputs in q's dtype. Its gradient (`attention_gradient`, gradient.py's rule) is
ordinary ops that recompute the weights from the saved logsumexp: P = exp(scores - lse), no softmax's sums again.
Cases it does not cover (dropout, a head over MAX_HEAD, other dtypes, symbolic or empty sizes, several devices) take
mixin/attention.py's path of ordinary ops, the reference; so do the cases the device's renderer does not fuse
(`Renderer.fuses_attention`: CUDA's tensor-core kernel takes 16-bit inputs, head sizes multiples of 16) and every case
under FUSED_ATTENTION=0.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from glassgrad import device_info
from glassgrad.autocast import contraction_operands
from glassgrad.dtype import dtypes
from glassgrad.errors import ArgumentError
from glassgrad.helpers import FUSED_ATTENTION, prod
from glassgrad.mixin.small_tensors import _arange
from glassgrad.shape import broadcast_shape
from glassgrad.uop.ops import Ops, UOp

if TYPE_CHECKING:
    from glassgrad.tensor import Tensor

FUSED_DTYPES = (dtypes.float16, dtypes.bfloat16, dtypes.float32)  # of q, k and v (one dtype)
MAX_HEAD = 128  # the largest head size (of queries and keys, and of values) the kernels hold


def renderer_fuses_attention(q: Tensor, v: Tensor) -> bool:
    """Whether the device's renderer writes a fused attention kernel for these inputs (one device, not shards on
    several), and FUSED_ATTENTION (helpers.py) lets it."""
    if not FUSED_ATTENTION or not isinstance(q.device, str):
        return False
    return device_info.fuses_attention(q.device, q.dtype, q.shape[-1], v.shape[-1])


def masked(scores: Tensor, mask: Tensor | None, causal: bool) -> Tensor:
    """Scores (..., L, S) with -inf where a bool mask is False or, causal, the key comes after the row (key j > row
    i), and a float mask added."""
    if causal:
        length, source = scores.shape[-2:]
        mask = _arange(source, scores).reshape(1, source) <= _arange(length, scores).reshape(length, 1)
    if mask is None:
        return scores
    return mask.where(scores, -math.inf) if mask.dtype == dtypes.bool else scores + mask


def _full_shape(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> tuple[int, ...] | None:
    """The scores' shape (*batch, L, S) every input broadcasts to, or None where the fused kernel does not cover it."""
    shapes = [q.shape, k.shape, v.shape, *([mask.shape] if mask is not None else [])]
    if not all(isinstance(d, int) for s in shapes for d in s):
        return None  # a symbolic size (a decode step's keys): no fixed kernel
    if len({q.dtype, k.dtype, v.dtype}) != 1 or q.dtype not in FUSED_DTYPES:
        return None
    if not (1 <= q.shape[-1] <= MAX_HEAD and 1 <= v.shape[-1] <= MAX_HEAD):
        return None
    try:
        batch = broadcast_shape(broadcast_shape(q.shape[:-2], k.shape[:-2], "attention"), v.shape[:-2], "attention")
        full = (*batch, q.shape[-2], k.shape[-2])
        full = broadcast_shape(mask.shape, full, "attention") if mask is not None else full
    except ArgumentError:  # the ordinary path's matmuls raise, naming the op
        return None
    if full[-2:] != (q.shape[-2], k.shape[-2]) or prod(full) == 0:
        return None  # a mask that broadcasts the scores' rows or keys, or nothing to compute: the ordinary path
    return full


def _broadcast(t: Tensor, shape: tuple[int, ...]) -> Tensor:
    return t.reshape((1,) * (len(shape) - t.ndim) + t.shape).expand(*shape)


def fused_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, scale: float, causal: bool
                    ) -> Tensor | None:  # fmt: skip
    """softmax(q @ k.T * scale + mask) @ v as one ATTENTION kernel, or None where the device's renderer writes none
    or the case is not covered (the caller then takes the ordinary path). q, k, v and mask are checked already."""
    q, k, v = contraction_operands(q, k, v)  # autocast's 16-bit operands, as the matmuls would take them
    if (full := _full_shape(q, k, v, mask)) is None or not renderer_fuses_attention(q, v):
        return None
    *batch, length, source = full
    head, value = q.shape[-1], v.shape[-1]
    shapes = [(*batch, length, head), (*batch, source, head), (*batch, source, value), full]
    inputs = [_broadcast(t, shape) for t, shape in zip((q, k, v, mask), shapes) if t is not None]
    node = UOp(Ops.ATTENTION, dtypes.float32, tuple(t.uop for t in inputs), (float(scale), bool(causal)))
    packed = q._derived(node, *inputs)
    return packed.shrink(((0, prod(batch) * length * value),)).reshape(*batch, length, value).cast(q.dtype)


def attention_gradient(g: Tensor, node: UOp, q: Tensor, k: Tensor, v: Tensor, *mask_and_out: Tensor
                       ) -> tuple[Tensor | None, ...]:  # fmt: skip
    """ATTENTION's gradient from its saved outputs O and logsumexps: with P = exp(scores - lse), dV = P.T @ dO,
    dP = dO @ V.T, D = rowsum(dO * O), dS = P * (dP - D + dlse), dQ = dS @ K * scale, dK = dS.T @ Q * scale (and a
    float mask's gradient dS). The products take the inputs' dtype, the softmax's part float32."""
    *mask_given, packed = mask_and_out
    mask = mask_given[0] if mask_given else None
    scale, causal = node.arg
    *batch, length, _ = q.shape
    rows, value = prod(batch) * length, v.shape[-1]

    def split(t: Tensor) -> tuple[Tensor, Tensor]:  # the packed outputs and logsumexps
        return (t.shrink(((0, rows * value),)).reshape(*batch, length, value),
                t.shrink(((rows * value, rows * (value + 1)),)).reshape(*batch, length, 1))  # fmt: skip

    (out, lse), (d_out, d_lse) = split(packed), split(g)
    low = q.dtype
    scores = masked(q.matmul(k.transpose(-2, -1)).float() * scale, mask, causal)
    p = (scores - (lse == -math.inf).where(0.0, lse)).exp()  # a row with every key masked: weights 0
    d_out_low = d_out.cast(low)
    d_v = p.cast(low).transpose(-2, -1).matmul(d_out_low)
    d_p = d_out_low.matmul(v.transpose(-2, -1)).float()
    d_s = p * (d_p - (d_out * out).sum(-1, keepdim=True) + d_lse)
    d_scores = (d_s * scale).cast(low)
    d_q, d_k = d_scores.matmul(k), d_scores.transpose(-2, -1).matmul(q)
    d_mask = [None if mask.dtype == dtypes.bool else d_s.cast(mask.dtype)] if mask is not None else []
    return (d_q.cast(q.dtype), d_k.cast(k.dtype), d_v.cast(v.dtype), *d_mask)
