"""Transformer operators: Attention (with past key/value, masks, causal and grouped-query), RotaryEmbedding, SwiGLU."""

from __future__ import annotations

import math

from glassgrad.dtype import dtypes
from glassgrad.onnx.loader import onnx_dtype
from glassgrad.onnx.registry import OpContext, onnx_op
from glassgrad.tensor import Tensor


def _heads(t: Tensor, num_heads: int | None) -> Tensor:
    """(batch, seq, heads * size) -> (batch, heads, seq, size); 4-D inputs are already split."""
    if t.ndim == 4:
        return t
    b, s, hidden = t.shape
    return t.reshape(b, s, num_heads, hidden // num_heads).permute(0, 2, 1, 3)


def _bias_from_mask(mask: Tensor, dtype) -> Tensor:
    """A boolean mask (true = attend) as an additive bias of 0 and -inf; a float mask is a bias already."""
    return mask.where(0.0, -math.inf).cast(dtype) if mask.dtype == dtypes.bool else mask


@onnx_op("Attention")
def attention(ctx: OpContext, q: Tensor, k: Tensor, v: Tensor, attn_mask: Tensor | None = None,
              past_key: Tensor | None = None, past_value: Tensor | None = None,
              nonpad_kv_seqlen: Tensor | None = None, *, is_causal: int = 0, kv_num_heads: int | None = None,
              q_num_heads: int | None = None, qk_matmul_output_mode: int = 0, scale: float | None = None,
              softcap: float = 0.0, softmax_precision: int | None = None,
              left_window_size: int = -1, right_window_size: int = -1) -> tuple[Tensor, ...]:  # fmt: skip
    """softmax(Q K^T * scale + bias) V over heads, as ONNX's reference: Y, present key and value, and the QK
    product at the stage qk_matmul_output_mode names (as the reference: 0 and 1 the product, softcapped when softcap
    is set; 2 with the bias added; 3 after the softmax)."""
    three_d = q.ndim == 3
    q, k, v = _heads(q, q_num_heads), _heads(k, kv_num_heads), _heads(v, kv_num_heads)
    scale = 1 / math.sqrt(q.shape[3]) if scale is None else scale
    if past_key is not None:
        k, v = past_key.cat(k, dim=2), past_value.cat(v, dim=2)
    present_key, present_value = k, v
    q_len, kv_len = q.shape[2], k.shape[2]
    bias = Tensor.zeros(q_len, kv_len, dtype=q.dtype, device=q.device)
    if attn_mask is not None:
        if (missing := kv_len - attn_mask.shape[-1]) > 0:  # a mask for the new keys only: the past is masked out
            fill = False if attn_mask.dtype == dtypes.bool else -math.inf
            attn_mask = attn_mask.pad(((0, 0),) * (attn_mask.ndim - 1) + ((0, missing),), value=fill)
        bias = bias + _bias_from_mask(attn_mask, q.dtype)
    # bottom-right aligned positions: the past (or the padding-free length) shifts where each query sits
    if nonpad_kv_seqlen is not None and past_key is None:
        offset: Tensor | int = nonpad_kv_seqlen.reshape(-1, 1, 1, 1) - q_len
    else:
        offset = past_key.shape[2] if past_key is not None else 0
    ahead = Tensor.arange(q_len, device=q.device).reshape(q_len, 1) + offset - Tensor.arange(kv_len, device=q.device)
    rules = [ahead >= 0] if is_causal else []  # `ahead`: how far the query is past the key
    rules += [ahead <= left_window_size] if left_window_size >= 0 else []
    rules += [-ahead <= right_window_size] if right_window_size >= 0 else []
    for allowed in rules:
        bias = bias + allowed.where(0.0, -math.inf).cast(q.dtype)
    if nonpad_kv_seqlen is not None:
        keep = Tensor.arange(kv_len, device=q.device) < nonpad_kv_seqlen.reshape(-1, 1, 1, 1)
        bias = bias + keep.where(0.0, -math.inf).cast(q.dtype)
    if q.shape[1] != k.shape[1]:  # grouped-query attention: each key head serves several query heads
        reps = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(reps, 1), v.repeat_interleave(reps, 1)
    root = math.sqrt(scale)
    qk = (q * root).matmul((k * root).transpose(2, 3))
    if softcap > 0:
        qk = (qk / softcap).tanh() * softcap
    with_bias = qk + bias
    qk_out = with_bias if qk_matmul_output_mode == 2 else qk  # modes 0 and 1 (as the reference): Q K^T, capped
    if softmax_precision is not None:
        with_bias = with_bias.cast(onnx_dtype(softmax_precision, f"{ctx.op} (node {ctx.node!r})"))
    probs = _masked_softmax(with_bias)
    all_masked = bias.max(-1, keepdim=True) == -math.inf
    probs = all_masked.where(0.0, probs).cast(q.dtype)
    if qk_matmul_output_mode == 3:
        qk_out = probs
    y = probs.matmul(v)
    if three_d:
        y = y.permute(0, 2, 1, 3).reshape(y.shape[0], y.shape[2], -1)
    return y, present_key, present_value, qk_out.cast(q.dtype)


def _masked_softmax(x: Tensor) -> Tensor:
    """Softmax over the last axis where a row of -inf gives zeros instead of NaN."""
    top = x.max(-1, keepdim=True)
    top = (top == -math.inf).where(0.0, top).cast(x.dtype)
    e = (x - top).exp()
    total = e.sum(-1, keepdim=True)
    return e / (total == 0).where(1.0, total).cast(x.dtype)


@onnx_op("RotaryEmbedding")
def rotary_embedding(ctx: OpContext, x: Tensor, cos_cache: Tensor, sin_cache: Tensor,
                     position_ids: Tensor | None = None, *, interleaved: int = 0, num_heads: int = 0,
                     rotary_embedding_dim: int = 0) -> Tensor:  # fmt: skip
    """Rotate pairs of features by position-dependent angles: halves (or, interleaved, even/odd features)."""
    shape = x.shape
    t = x.permute(0, 2, 1, 3) if x.ndim == 4 else x.reshape(shape[0], shape[1], num_heads, shape[2] // num_heads)
    dim = rotary_embedding_dim or t.shape[3]
    rotate, keep = t[..., :dim], t[..., dim:]
    if position_ids is not None:
        cos_cache, sin_cache = cos_cache[position_ids], sin_cache[position_ids]
    cos, sin = cos_cache.unsqueeze(2), sin_cache.unsqueeze(2)
    x1, x2 = (
        (rotate[..., 0::2], rotate[..., 1::2]) if interleaved else (rotate[..., : dim // 2], rotate[..., dim // 2 :])
    )
    real, imag = cos * x1 - sin * x2, sin * x1 + cos * x2
    rotated = real.unsqueeze(-1).cat(imag.unsqueeze(-1), dim=-1).reshape(rotate.shape) if interleaved else \
        real.cat(imag, dim=-1)  # fmt: skip
    out = rotated.cat(keep, dim=-1)
    return out.reshape(shape) if x.ndim == 3 else out.permute(0, 2, 1, 3)


@onnx_op("SwiGLU")
def swiglu(ctx: OpContext, a: Tensor, b: Tensor, *, alpha: float = 1.0) -> Tensor:
    return (a * (a * alpha).sigmoid() * b).cast(a.dtype)


@onnx_op("TensorScatter")
def tensor_scatter(ctx: OpContext, past_cache: Tensor, update: Tensor, write_indices: Tensor | None = None, *,
                   axis: int = -2, mode: str = "linear") -> Tensor:  # fmt: skip
    """A key/value cache with each batch entry's update written along `axis` from its write index (wrapping
    around with mode="circular")."""
    if mode not in ("linear", "circular"):
        raise ctx.error(f"mode {mode!r} is not one of linear, circular")
    axis = axis % past_cache.ndim
    size, length = past_cache.shape[axis], update.shape[axis]
    shape = [1] * past_cache.ndim
    shape[axis] = size
    batch = [1] * past_cache.ndim
    batch[0] = past_cache.shape[0]
    start = write_indices if write_indices is not None else Tensor.zeros(batch[0], dtype=dtypes.int64)
    source = Tensor.arange(size, device=past_cache.device).reshape(shape) - start.to(past_cache.device).reshape(batch)
    if mode == "circular":
        source = source % size
    valid = (source >= 0) & (source < length)
    index = valid.where(source, 0).cast(dtypes.int32).expand(past_cache.shape)
    return valid.where(update.gather(axis, index), past_cache)
