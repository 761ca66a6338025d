"""Tensor methods for the elementwise and along-a-dimension math PyTorch and tinygrad name beyond mixin/math.py
and mixin/reduce.py: log10, fmod, copysign, logaddexp, isclose, allclose, softmin, normalize, logcumsumexp.

All are composed from existing ops, so their gradients come from the derivative table; each name says where it
keeps an unused branch finite (0 * inf would make a NaN gradient).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from glassgrad.dtype import dtypes
from glassgrad.gradient import custom_gradient
from glassgrad.mixin.math import _float_math
from glassgrad.tensor_math import int_quotient

if TYPE_CHECKING:
    from glassgrad.tensor import Tensor

LOG10_OF_2 = math.log10(2)


class MoreMathMixin:
    """log10, fmod, copysign, logaddexp, isclose, allclose, softmin, normalize, logcumsumexp."""

    @_float_math
    def log10(self: Tensor) -> Tensor:
        """Base-10 logarithm, elementwise."""
        return self.log2() * LOG10_OF_2

    def fmod(self: Tensor, other: Tensor | float) -> Tensor:
        """Remainder of division with the sign of the dividend, as C's fmod and torch.fmod (`%` is Python's)."""
        x, y = self._binary_operands(other, "fmod")
        if dtypes.is_int(x.dtype):
            return x - int_quotient(x, y, "trunc", "fmod") * y
        remainder = x - x.div(y, rounding_mode="trunc") * y
        return (y.isinf() & x.isfinite()).where(x, remainder)  # x / inf truncates to 0, and 0 * inf is NaN

    def copysign(self: Tensor, other: Tensor | float) -> Tensor:
        """The magnitude of self with the sign (bit) of other, elementwise; always a float result."""
        x, y = self._binary_operands(other, "copysign")
        x = x._float_input()
        negative = ((y < 0) | (y.reciprocal() < 0) if dtypes.is_float(y.dtype) else y < 0).detach()  # 1/-0.0 = -inf
        magnitude = x.abs()
        # a zero gets other's sign too: abs is not relied on for the sign of a zero
        out = x.eq(0).where(negative.where(-0.0, 0.0), negative.where(-magnitude, magnitude))

        def rule(g: Tensor, x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
            # PyTorch's: g * (out / x), 0 where x is 0; other gets zeros (its sign is piecewise constant)
            flipped = negative != (x < 0)
            return x.eq(0).where(0, flipped.where(-g, g)), g.zeros_like()

        return custom_gradient(out, (x, y), rule)

    @_float_math
    def logaddexp(self: Tensor, other: Tensor | float) -> Tensor:
        """log(exp(self) + exp(other)) without overflow, elementwise."""
        x, y = self._binary_operands(other, "logaddexp")
        x, y = x._float_input(), y._float_input()
        top = x.maximum(y).detach()
        # an infinite max is the answer itself: shift by 0 there, so that inf - inf makes no NaN
        shift = top.isinf().where(0, top)
        return ((x - shift).exp() + (y - shift).exp()).log() + shift

    def isclose(self: Tensor, other: Tensor | float, rtol: float = 1e-05, atol: float = 1e-08,
                equal_nan: bool = False) -> Tensor:  # fmt: skip
        """Elementwise |self - other| <= atol + rtol * |other| as torch.isclose (NaNs are close with equal_nan)."""
        if rtol < 0 or atol < 0:
            raise RuntimeError(f"isclose: rtol and atol must be non-negative, got rtol={rtol}, atol={atol}")
        x, y = self._binary_operands(other, "isclose")
        if x.dtype == dtypes.bool:
            return x.eq(y)
        close = x.eq(y)
        if dtypes.is_float(x.dtype) or rtol or atol:
            xf, yf = x._float_input(), y._float_input()
            difference = (xf - yf).abs()
            close = close | (difference.isfinite() & (difference <= atol + rtol * yf.abs()))
        if equal_nan and dtypes.is_float(x.dtype):
            close = close | (x.isnan() & y.isnan())
        return close

    def allclose(self: Tensor, other: Tensor | float, rtol: float = 1e-05, atol: float = 1e-08,
                 equal_nan: bool = False) -> bool:  # fmt: skip
        """Whether every element is close (isclose) to other's: a Python bool, as torch.allclose (realizes)."""
        return bool(self.isclose(other, rtol, atol, equal_nan).all().item())

    def softmin(self: Tensor, axis: int | None = None, dtype: Any = None, *, dim: int | None = None) -> Tensor:
        """softmax of -self along the last dim unless `dim` says otherwise: small values get large weights."""
        return self._softmax_input(dtype).neg().softmax(axis, dim=dim)

    def normalize(self: Tensor, p: float = 2.0, dim: int = 1, eps: float = 1e-12) -> Tensor:
        """self divided by its p-norm along `dim` (at least eps), as torch.nn.functional.normalize."""
        x = self._float_input()
        dim = x._axis(dim, "normalize")
        return x / _p_norm(x, p, dim).maximum(eps)

    def logcumsumexp(self: Tensor, axis: int | None = None, *, dim: int | None = None) -> Tensor:
        """log of the running sum of exp along `dim` (0 when not given) without overflow; O(n^2) work."""
        if axis is not None and dim is not None:
            raise TypeError(f"logcumsumexp: got both axis={axis} and dim={dim}; pass only one")
        x = self._float_input()
        if x.ndim == 0:
            return x
        axis = x._axis(dim if dim is not None else axis or 0, "logcumsumexp")
        last = x.transpose(axis, -1)
        n = last.shape[-1]
        positions = type(self).arange(n, device=x.device)
        # rows[..., i, j] is x[..., j] for j <= i: the terms of the i-th running sum; the rest is -inf (exp 0)
        later = positions.reshape(1, n) > positions.reshape(n, 1)
        rows = later.where(-math.inf, last.unsqueeze(-2).expand(*last.shape[:-1], n, n))
        return rows.logsumexp(-1).transpose(axis, -1)


def _p_norm(x: Tensor, p: float, dim: int) -> Tensor:
    """The p-norm along `dim`, kept; its gradient is 0 (not NaN) where the norm is 0."""
    magnitude = x.abs()
    if p == math.inf:
        return magnitude.max(dim, keepdim=True)
    if p == -math.inf:
        return magnitude.min(dim, keepdim=True)
    if p == 0:
        return x.ne(0).sum(dim, keepdim=True).cast(x.dtype)
    total = magnitude.pow(p).sum(dim, keepdim=True)
    zero = total.eq(0).detach()
    return zero.where(0, zero.where(1, total).pow(1 / p))
