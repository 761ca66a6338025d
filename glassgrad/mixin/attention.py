"""Tensor methods for attention: scaled dot-product attention."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from glassgrad.dtype import dtypes
from glassgrad.errors import ArgumentError, DtypeError
from glassgrad.mixin.arguments import _nn_tensor
from glassgrad.mixin.fused_attention import fused_attention, masked
from glassgrad.shape import broadcast_shape

if TYPE_CHECKING:
    from glassgrad.tensor import Tensor


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


class AttentionMixin:
    """Tensor methods for attention."""

    def scaled_dot_product_attention(self: Tensor, key: Tensor, value: Tensor, attn_mask: Tensor | None = None,
                                     dropout_p: float = 0.0, is_causal: bool = False, scale: float | None = None,
                                     enable_gqa: bool = False) -> Tensor:  # fmt: skip
        """softmax(query @ key.T * scale + mask) @ value for query (..., L, E), key (..., S, E), value (..., S, Ev)."""
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
        scale = 1 / math.sqrt(query.shape[-1]) if scale is None else scale
        if is_causal and attn_mask is not None:
            raise ArgumentError(f"{op}: pass attn_mask or is_causal=True, not both")
        if attn_mask is not None:
            attn_mask = _nn_tensor(attn_mask, self, op, "attn_mask")
            scores_shape = broadcast_shape(query.shape[:-2], key.shape[:-2], op) + (query.shape[-2], key.shape[-2])
            broadcast_shape(attn_mask.shape, scores_shape, f"{op}: attn_mask")
            if attn_mask.dtype != dtypes.bool and not dtypes.is_float(attn_mask.dtype):
                raise DtypeError(f"{op}: attn_mask must be bool (True = attend) or float (added to the scores), "
                                 f"got {attn_mask.dtype}")  # fmt: skip
        dropped = dropout_p and self.training  # (dropout drops nothing outside training)
        if not dropped and (fused := fused_attention(query, key, value, attn_mask, scale, is_causal)) is not None:
            return fused
        scores = masked(query.matmul(key.transpose(-2, -1)) * scale, attn_mask, is_causal)
        masks = attn_mask is not None or is_causal
        weights = _softmax_of_masked(scores) if masks else scores.softmax(-1)
        if dropout_p:
            weights = weights.dropout(dropout_p)
        return weights.matmul(value)
