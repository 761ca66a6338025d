"""Elementwise math composed from the primitive ops, where it takes more than a line."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from glassgrad.dtype import dtypes

if TYPE_CHECKING:
    from glassgrad.tensor import Tensor


def power(x: Tensor, exponent: Any, reverse: bool = False) -> Tensor:
    """x ** exponent (or exponent ** x when reverse): whole exponents multiply, others go through exp2 and log2."""
    from glassgrad.tensor import Tensor

    base, exp = (exponent, x) if reverse else (x, exponent)
    if not isinstance(exp, Tensor) and isinstance(exp, int) and not isinstance(exp, bool) and abs(exp) <= 16:
        return _integer_power(base, exp)
    base, exp = x._binary_operands(exponent, "pow", reverse)
    if dtypes.is_int(base.dtype):
        raise TypeError("pow: integer base with a tensor exponent is not supported; cast to float first")
    magnitude = (exp * base.abs().log2()).exp2()
    exp_is_whole = exp.trunc().eq(exp)
    odd = exp_is_whole & (exp * 0.5).trunc().ne(exp * 0.5)
    signed = (base < 0).where(exp_is_whole.where(odd.where(-magnitude, magnitude), float("nan")), magnitude)
    return exp.eq(0).where(1.0, signed)


def _integer_power(base: Tensor, exp: int) -> Tensor:
    """Square-and-multiply for a small whole exponent; negative ones take the reciprocal."""
    if exp < 0:
        return _integer_power(base._float_input(), -exp).reciprocal()
    result, square = None, base
    while exp:
        if exp & 1:
            result = square if result is None else result * square
        exp >>= 1
        if exp:
            square = square * square
    return result if result is not None else base.ones_like()
