"""Elementwise math composed from the primitive ops, where it takes more than a line: integer and float division with
rounding, and pow with PyTorch's semantics (and the small helpers the math and random mixins share).

Values follow C's pow (0 ** 0 = 1, negative bases with whole exponents, the special cases of inf, NaN and -0), and
gradients are PyTorch's formulas (custom_gradient; of float16 and bfloat16 tensors computed in the dtype, as
PyTorch's), including at the edges: d/dx x**y at a base of 0 is 0 for
y > 1, 1 for y = 1, +inf for 0 < y < 1 and -inf for y < 0; d/dy is NaN for a negative base, as in PyTorch.
Whole scalar exponents are products, whose derived gradients are the same formulas.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from glassgrad.dtype import dtypes, result_type_with_scalar
from glassgrad.errors import ArgumentError, DtypeError
from glassgrad.gradient import custom_gradient
from glassgrad.tensor_checks import nonzero_divisor
from glassgrad.uop.ops import Ops

if TYPE_CHECKING:
    from glassgrad.tensor import Tensor

# Whole scalar exponents up to this size become multiplications: exact gradients at 0, and more accurate than exp2.
LARGEST_MULTIPLIED_EXPONENT = 32


def int_quotient(x: Tensor, y: Tensor, rounding_mode: str, op: str) -> Tensor:
    """x / y of integers, rounded toward zero ("trunc") or down ("floor"). A divisor of 0 raises, naming `op`: at once
    where it is a constant, else when the kernel has run (MIN / -1 wraps to MIN, as in PyTorch)."""
    q = x._alu(Ops.IDIV, nonzero_divisor(y, op))
    if rounding_mode == "trunc":
        return q
    inexact = (q * y).ne(x) & ((x < 0) ^ (y < 0))  # C truncates: one less where signs differ, y does not divide x
    return inexact.where(q - 1, q)


def float_floor_quotient(x: Tensor, y: Tensor, op: str = "floordiv") -> Tensor:
    """x // y of floats as PyTorch computes it: from the exact remainder fmod(x, y), so a quotient within a rounding
    of a whole number still floors right; x / y where y is 0, NaN for an infinite x, -1 or 0 for a finite x over
    +-inf. float16 and bfloat16 round each step to their dtype, as PyTorch's. Its gradient is 0, as PyTorch's div
    with a rounding mode."""
    _refuse_bool(x, op)
    remainder = x._alu(Ops.MOD, y)
    quotient = _divided(x - remainder, y)  # a whole number but for rounding
    quotient = _wrong_sign(remainder, y).where(quotient - 1, quotient)
    nearest = quotient.floor()
    nearest = (quotient - nearest > 0.5).where(nearest + 1, nearest)
    result = quotient.ne(0).where(nearest, (x / y) * 0)  # a zero with the quotient's sign
    return custom_gradient(y.eq(0).where(x / y, result), (x, y), lambda g, x, y: (x.zeros_like(), y.zeros_like()))


def float_remainder(x: Tensor, y: Tensor) -> Tensor:
    """x % y of floats with the sign of y, as Python and torch.remainder: fmod(x, y), plus y where their signs
    differ (2.0 % -inf is -inf); NaN for an infinite x or a zero y. Gradients as PyTorch's: g, -g * (x // y)."""
    _refuse_bool(x, "mod")
    fmod = x._alu(Ops.MOD, y)  # exact in every dtype: one rounding at most, of fmod + y
    result = _wrong_sign(fmod, y).where(fmod + y, fmod)
    return custom_gradient(result, (x, y), lambda g, x, y: (g, -g * float_floor_quotient(x, y)))


def _divided(x: Tensor, y: Tensor) -> Tensor:
    """x / y rounded once to the dtype (float16 and bfloat16 through float32, not through their own 1 / y)."""
    if x.dtype not in (dtypes.float16, dtypes.bfloat16):
        return x / y
    return (x.cast(dtypes.float32) / y.cast(dtypes.float32)).cast(x.dtype)


def _refuse_bool(x: Tensor, op: str) -> None:
    if x.dtype == dtypes.bool:
        raise TypeError(f"{op}: bool tensors cannot be divided (as in PyTorch); cast to an int or float dtype first")


def _wrong_sign(remainder: Tensor, y: Tensor) -> Tensor:
    """Where C's remainder (the sign of x) is not the floored one (the sign of y)."""
    return remainder.ne(0) & ((y < 0) ^ (remainder < 0))


def power(x: Tensor, exponent: Any, reverse: bool = False) -> Tensor:
    """x ** exponent, or exponent ** x when reverse."""
    if not reverse and not isinstance(exponent, type(x)):
        return _power_of_scalar(x, exponent)
    base, exp = x._binary_operands(exponent, "pow", reverse)
    if base.dtype == dtypes.bool:
        raise DtypeError("pow: bool tensors have no power; cast to an int or float dtype first")
    if dtypes.is_int(base.dtype):
        return _integer_power(base, exp)
    if base.dtype in (dtypes.float16, dtypes.bfloat16):
        # the value in float32, rounded once, as PyTorch; the gradient PyTorch's formulas in the dtype, each step
        # rounded as its are: (-2.66) ** 60000 in float16 has the gradient of ** 60000 (59999 rounds to it), +inf
        value = _float_power(base.cast(dtypes.float32), exp.cast(dtypes.float32)).cast(base.dtype)
        return custom_gradient(value, (base, exp), _power_gradients)
    return _float_power(base, exp)


def polynomial(x: Tensor, coefficients: Sequence[float]) -> Tensor:
    """c0 + c1*x + c2*x**2 + ..., by Horner's rule."""
    result = x * coefficients[-1] + coefficients[-2]
    for c in reversed(coefficients[:-2]):
        result = result * x + c
    return result


def zero_with_gradient(x: Tensor) -> Tensor:
    """Zeros (+0.0, also where x is -0.0) shaped like x that x reaches with gradient 0 (as PyTorch gives
    piecewise-constant functions): trunc(x) - trunc(x) where x is 0, so sign(-0.0) is 0.0 as PyTorch's."""
    t = x.trunc()
    return x.eq(0).where(t - t, 0)


def _power_of_scalar(x: Tensor, n: Any) -> Tensor:
    if not isinstance(n, (int, float)):
        raise TypeError(f"pow: the exponent must be a Tensor or a Python number, got {type(n).__name__}")
    if x.dtype == dtypes.bool:
        raise DtypeError("pow: bool tensors have no power; cast to an int or float dtype first")
    n = int(n) if isinstance(n, bool) else n
    x = x.cast(result_type_with_scalar(x.dtype, n))
    if float(n).is_integer() and n < 0 and dtypes.is_int(x.dtype):
        raise ArgumentError(f"pow: an integer tensor ({x.dtype}) to a negative integer power ({n}) is not allowed, "
                            "as in PyTorch; cast to float first")  # fmt: skip
    if x.dtype in (dtypes.float16, dtypes.bfloat16):
        return _power_of_scalar(x.cast(dtypes.float32), n).cast(x.dtype)
    if float(n).is_integer() and abs(n) <= LARGEST_MULTIPLIED_EXPONENT:
        n = int(n)
        return _repeated_product(x.reciprocal(), -n) if n < 0 else _repeated_product(x, n)
    if n == 0.5:
        return x.sqrt()
    if n == -0.5:
        return x.rsqrt()
    exponent = type(x)(n, device=x.device, dtype=x.dtype)
    return _integer_power(x, exponent) if dtypes.is_int(x.dtype) else _float_power(x, exponent)


def _repeated_product(base: Tensor, n: int) -> Tensor:
    """base ** n for a whole n >= 0 by square-and-multiply."""
    if n == 0:
        return zero_with_gradient(base) + 1 if dtypes.is_float(base.dtype) else base.ones_like()
    result, square = None, base
    while n:
        if n & 1:
            result = square if result is None else result * square
        n >>= 1
        if n:
            square = square * square
    return result


def _integer_power(base: Tensor, exp: Tensor) -> Tensor:
    """Integer base ** integer exponent, wrapping as C (and PyTorch) do; negative exponents truncate 1/base**-e."""
    bits = 8 * exp.dtype.itemsize - (0 if dtypes.is_unsigned(exp.dtype) else 1)
    result, square = base.ones_like(), base
    for bit in range(bits):  # one step of square-and-multiply per bit of the exponent; unused steps fold away
        if bit:
            square = square * square
        result = ((exp >> bit) & 1).ne(0).where(result * square, result)
    if dtypes.is_unsigned(exp.dtype):
        return result
    # 1 / base**k truncates to 0 unless base is 1 or -1
    reciprocal = base.eq(1).where(1, base.eq(-1).where((exp & 1).ne(0).where(-1, 1), 0))
    return (exp < 0).where(reciprocal.cast(base.dtype), result)


def _float_power(x: Tensor, y: Tensor) -> Tensor:
    """x ** y for float tensors of one shape and dtype, with C's special values and PyTorch's gradients."""
    zero, negative = x.eq(0), x < 0
    magnitude = (y * zero.where(1, negative.where(-x, x)).log2()).exp2()  # |x| ** y, with 1 standing in for 0
    whole = y.trunc().eq(y)
    odd = whole & (y * 0.5).trunc().ne(y * 0.5)
    signed = (negative & odd).where(-magnitude, magnitude)
    not_real = negative & whole.logical_not() & (x > -math.inf)  # (-inf) ** y is +-inf or +-0 for every y
    result = zero.where(_power_of_zero(x, y, odd), not_real.where(math.nan, signed))
    # C's pow is 1 for x ** 0 with any x, 1 ** y with any y, and (-1) ** +-inf, where the formula above gives NaN
    always_one = y.eq(0) | (x.abs().eq(1) & y.isinf()) | (x.eq(1) & y.isnan())
    return custom_gradient(always_one.where(1, result), (x, y), _power_gradients)


def _power_of_zero(x: Tensor, y: Tensor, odd: Tensor) -> Tensor:
    """(+-0) ** y for y != 0, as C's pow: 0 for y > 0, inf for y < 0, NaN for NaN, negative for -0 and odd y."""
    magnitude = (y > 0).where(0.0, (y < 0).where(math.inf, y.full_like(math.nan)))
    negative_zero = x.eq(0) & (x.reciprocal() < 0)  # 1 / -0.0 is -inf
    return (negative_zero & odd).where(-magnitude, magnitude)


def _power_gradients(g: Tensor, x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
    """PyTorch's gradients of x ** y: y * x ** (y - 1) in x (0 where y = 0), x ** y * log(x) in y (0 where x = 0 and
    y >= 0). The formulas themselves, not the chain rule through exp2 and log2, whose 0 * inf at the edges (a base
    of 0 or +-inf, an exponent of +-inf) would be NaN."""
    dx = y.eq(0).where(0.0, g * (y * power(x, y - 1)))
    dy = (x.eq(0) & (y >= 0)).where(0.0, g * (power(x, y) * x.log()))
    return dx, dy
