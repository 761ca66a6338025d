"""Tensor methods for elementwise math, activation functions and logic.

Everything here is composed from the primitive ops (EXP2, LOG2, SIN, SQRT, RECIP, TRUNC, MAX, WHERE, comparisons,
+ and *), so gradients follow from gradient.py. Two habits keep those gradients as PyTorch's:

- A branch that WHERE does not select still receives a gradient of 0, and 0 * inf is NaN; so a branch that could
  overflow or divide by zero where it is not used reads an input made safe there (`cond.where(x, 1)`).
- |x| is written `(x < 0).where(-x, x)` where its gradient at 0 must be the positive side's (odd functions, pow);
  `abs()` itself has gradient 0 at 0, as in PyTorch.

Multi-op functions of float16 and bfloat16 compute in float32 and round once at the end, as PyTorch's CPU does.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from glassgrad import gradient_formulas as formula
from glassgrad.dtype import dtypes
from glassgrad.errors import ArgumentError, DtypeError
from glassgrad.gradient_formulas import with_gradient
from glassgrad.tensor_math import polynomial, power, zero_with_gradient
from glassgrad.uop.ops import Ops

if TYPE_CHECKING:
    from glassgrad.tensor import Tensor

LN2 = math.log(2)

# erf(x) / x as a polynomial in x*x on [0, 1]: a least-squares fit on Chebyshev nodes (near minimax) to math.erf,
# degree 7; error 2e-10 before float32 rounding, and its derivative is within 3e-8 of 2/sqrt(pi)*exp(-x*x).
ERF_NEAR_ZERO = (
    1.1283791670812238,
    -0.376126385853189,
    0.11283784051918644,
    -0.026865514490096363,
    0.005221254155135542,
    -0.0008487170893968917,
    0.00011287527056166303,
    -9.726679687478004e-06,
)
# log2(erfc(x)) as a polynomial in t = (x - 2.5) / 1.5 on [1, 4], fitted the same way to math.erfc (degree 8).
# Past 4, erfc(x) < 2e-8 and erf(x) is 1 in float32.
LOG2_ERFC_TAIL = (
    -11.26285368542218,
    -11.583428812136003,
    -3.06393901272255,
    -0.05287115022157488,
    0.015813537890461256,
    -0.00460289765649275,
    0.0012718755977568275,
    -0.0003280631391751043,
    5.965942362243474e-05,
)
# atan(t) / t as a polynomial in t*t on [0, 1] (degree 11), fitted the same way to math.atan.
ATAN_UNIT = (
    0.9999999999758357,
    -0.333333320619433,
    0.19999927752196445,
    -0.14284193572328766,
    0.11094780492192349,
    -0.08986887899610878,
    0.07263901750512348,
    -0.05460197431094006,
    0.03458086307783675,
    -0.016378400695622394,
    0.004959748841304571,
    -0.0007040381530635103,
)

SELU_ALPHA = 1.6732632423543772848170429916717
SELU_SCALE = 1.0507009873554804934193349852946


def _float_math(method: Callable[..., Tensor]) -> Callable[..., Tensor]:
    """Run a float function on int input as float32, and on float16/bfloat16 in float32, rounding once at the end."""

    @functools.wraps(method)
    def wrapper(self: Tensor, *args: Any, **kwargs: Any) -> Tensor:
        x = self._float_input()
        if x.dtype in (dtypes.float16, dtypes.bfloat16):
            return method(x.cast(dtypes.float32), *args, **kwargs).cast(x.dtype)
        return method(x, *args, **kwargs)

    return wrapper


def _odd(x: Tensor, f: Callable[[Tensor], Tensor]) -> Tensor:
    """f(x) for x >= 0 extended by f(-x) = -f(x); f is computed once, and the gradient at 0 is f'(0)."""
    negative = x < 0
    y = f(negative.where(-x, x))
    return negative.where(-y, y)


def _tanh_of_nonnegative(x: Tensor) -> Tensor:
    """tanh(x) for x >= 0 as 2 * sigmoid(2x) - 1; x itself below 2**-12, where that formula cancels."""
    return (x < 2.0**-12).where(x, 2 * (2 * x).sigmoid() - 1)


def _log1p(y: Tensor) -> Tensor:
    """log(1 + y), accurate for small y: log(u) * y / (u - 1) with u = 1 + y cancels u's rounding error."""
    u = 1 + y
    d = u - 1
    rounded_away = d.eq(0)  # |y| below half an ulp of 1: log(1 + y) = y to float precision
    return rounded_away.where(y, u.log() * (y / rounded_away.where(1, d)))


class MathMixin:
    """Tensor methods for elementwise math, activation functions and logic."""

    # ---- exponentials and logarithms ----

    @_float_math
    def exp(self: Tensor) -> Tensor:
        """e ** x."""
        return self.mul(1 / LN2)._alu(Ops.EXP2)

    def exp2(self: Tensor) -> Tensor:
        """2 ** x."""
        return self._float_input()._alu(Ops.EXP2)

    @_float_math
    def log(self: Tensor) -> Tensor:
        """Natural logarithm (-inf at 0, NaN below)."""
        return self._alu(Ops.LOG2).mul(LN2)

    def log2(self: Tensor) -> Tensor:
        """Base-2 logarithm."""
        return self._float_input()._alu(Ops.LOG2)

    def sqrt(self: Tensor) -> Tensor:
        """Square root (NaN for negative values)."""
        return self._float_input()._alu(Ops.SQRT)

    @_float_math
    def rsqrt(self: Tensor) -> Tensor:
        """1 / sqrt(x)."""
        return self.sqrt().reciprocal()

    def reciprocal(self: Tensor) -> Tensor:
        """1 / x (ints give floats)."""
        return self._float_input()._alu(Ops.RECIP)

    def square(self: Tensor) -> Tensor:
        """x * x (keeps the dtype)."""
        return self * self

    def pow(self: Tensor, exponent: Tensor | float, reverse: bool = False) -> Tensor:
        """x ** exponent (exponent ** x when reverse), with PyTorch's dtypes, special values and gradients."""
        return power(self, exponent, reverse)

    # ---- trigonometry and hyperbolic functions ----

    def sin(self: Tensor) -> Tensor:
        """Sine (radians)."""
        return self._float_input()._alu(Ops.SIN)

    @_float_math
    def cos(self: Tensor) -> Tensor:
        """Cosine (radians)."""
        # 1 - 2 sin^2(x/2): x/2 is exact, so this stays accurate for large x, unlike sin(pi/2 - x)
        half = (self * 0.5).sin()
        return 1 - 2 * half * half

    @_float_math
    def tan(self: Tensor) -> Tensor:
        """Tangent (radians)."""
        return with_gradient(self.sin() / self.cos(), self, formula.tan)

    @_float_math
    def atan(self: Tensor) -> Tensor:
        """Inverse tangent, in (-pi/2, pi/2)."""
        return with_gradient(_odd(self, _atan_of_nonnegative), self, formula.atan)

    @_float_math
    def asin(self: Tensor) -> Tensor:
        """Inverse sine, in [-pi/2, pi/2] (NaN outside [-1, 1])."""
        return with_gradient((self / ((1 - self) * (1 + self)).sqrt()).atan(), self, formula.asin)

    @_float_math
    def acos(self: Tensor) -> Tensor:
        """Inverse cosine, in [0, pi] (NaN outside [-1, 1])."""
        return with_gradient(2 * ((1 - self) / (1 + self)).sqrt().atan(), self, formula.acos)

    @_float_math
    def sinh(self: Tensor) -> Tensor:
        """Hyperbolic sine."""
        # e^(x - ln 2) = e^x / 2 stays finite up to where sinh itself overflows; below 2**-12, sinh(x) = x in float32
        return with_gradient(
            (self.abs() < 2.0**-12).where(self, (self - LN2).exp() - (-self - LN2).exp()), self, formula.sinh
        )

    @_float_math
    def cosh(self: Tensor) -> Tensor:
        """Hyperbolic cosine."""
        return with_gradient((self - LN2).exp() + (-self - LN2).exp(), self, formula.cosh)

    @_float_math
    def tanh(self: Tensor) -> Tensor:
        """Hyperbolic tangent, 2 * sigmoid(2x) - 1 (finite for every input; x itself below 2**-12)."""
        # computed on |x| and given x's sign: tanh(-x) is exactly -tanh(x), so tanh(x) + tanh(-x) is 0 (not -1e-8)
        return with_gradient(_odd(self, _tanh_of_nonnegative), self, formula.tanh)

    @_float_math
    def asinh(self: Tensor) -> Tensor:
        """Inverse hyperbolic sine."""
        return with_gradient(_odd(self, _asinh_of_nonnegative), self, formula.asinh)

    @_float_math
    def acosh(self: Tensor) -> Tensor:
        """Inverse hyperbolic cosine (NaN below 1)."""
        huge = self > 2.0**60
        x = huge.where(1, self)
        moderate = _log1p((x - 1) + ((x - 1) * (x + 1)).sqrt())  # x - 1 is exact: accurate near 1
        value = huge.where(huge.where(self, 1).log() + LN2, moderate)
        # below -1 the formula's terms cancel to a number where |x| is large (float64's -1e30 gave 0)
        return with_gradient((self < 1).where(math.nan, value), self, formula.acosh)

    @_float_math
    def atanh(self: Tensor) -> Tensor:
        """Inverse hyperbolic tangent (+-inf at +-1, NaN outside)."""
        return with_gradient(0.5 * (_log1p(self) - _log1p(-self)), self, formula.atanh)

    # ---- rounding, sign and magnitude ----

    def trunc(self: Tensor) -> Tensor:
        """Round toward zero (ints are unchanged)."""
        return self if not dtypes.is_float(self.dtype) else self._alu(Ops.TRUNC)

    def floor(self: Tensor) -> Tensor:
        """Round down (ints are unchanged)."""
        t = self.trunc()
        return (t > self).where(t - 1, t) if dtypes.is_float(self.dtype) else t

    def ceil(self: Tensor) -> Tensor:
        """Round up (ints are unchanged)."""
        t = self.trunc()
        return (t < self).where(t + 1, t) if dtypes.is_float(self.dtype) else t

    def round(self: Tensor, decimals: int = 0) -> Tensor:
        """Round to nearest, ties to even (as PyTorch); `decimals` rounds to that many decimal places."""
        if not dtypes.is_float(self.dtype):
            return self
        if not isinstance(decimals, int) or isinstance(decimals, bool):
            raise TypeError(f"round: decimals must be an int, got {type(decimals).__name__} {decimals!r}")
        if decimals > 0:
            return _round_half_even(self * 10.0**decimals) / 10.0**decimals
        if decimals < 0:
            return _round_half_even(self / 10.0**-decimals) * 10.0**-decimals
        return _round_half_even(self)

    def abs(self: Tensor) -> Tensor:
        """|x| (gradient 0 at 0, as PyTorch)."""
        return self if self.dtype == dtypes.bool or dtypes.is_unsigned(self.dtype) else self.maximum(-self)

    def sign(self: Tensor) -> Tensor:
        """-1, 0 or 1 by the sign of x (0 for NaN, as PyTorch); keeps the dtype."""
        if self.dtype == dtypes.bool:
            return self
        zero = zero_with_gradient(self) if dtypes.is_float(self.dtype) else 0
        return (self > 0).where(1, (self < 0).where(-1, zero)).cast(self.dtype)

    # ---- two-input math ----

    def clamp(self: Tensor, min: Tensor | float | None = None, max: Tensor | float | None = None, *,
              min_: Tensor | float | None = None, max_: Tensor | float | None = None) -> Tensor:  # fmt: skip
        """Limit values to [min, max]; either may be None or a tensor that broadcasts (min_/max_: tinygrad's names)."""
        low, high = min if min is not None else min_, max if max is not None else max_
        if low is None and high is None:
            raise ArgumentError("clamp: at least one of min and max must be given, got neither")
        x = self
        if low is not None:  # min(max(x, low), high), in that order: where min > max every value is max
            x, low = x._binary_operands(low, "clamp")
            x = _limit(x, low, x < low, x >= low)
        if high is not None:
            x, high = x._binary_operands(high, "clamp")
            x = _limit(x, high, x > high, x <= high)
        return x

    def clip(self: Tensor, min: Tensor | float | None = None, max: Tensor | float | None = None, *,
             min_: Tensor | float | None = None, max_: Tensor | float | None = None) -> Tensor:  # fmt: skip
        """Alias of clamp."""
        return self.clamp(min, max, min_=min_, max_=max_)

    def lerp(self: Tensor, end: Tensor, weight: Tensor | float) -> Tensor:
        """self + weight * (end - self), computed from the nearer end so that weight 1 gives end exactly."""
        if not isinstance(end, type(self)):
            raise TypeError(f"lerp: end must be a Tensor, got {type(end).__name__}")
        start, end = self._binary_operands(end, "lerp")
        if not dtypes.is_float(start.dtype):
            raise DtypeError(f"lerp: needs float tensors, got {start.dtype}")
        difference = end - start
        if not isinstance(weight, type(self)):
            if isinstance(weight, bool) or not isinstance(weight, (int, float)):
                raise TypeError(f"lerp: weight must be a Tensor or a number, got {type(weight).__name__}")
            return start + weight * difference if weight < 0.5 else end - difference * (1 - weight)
        return (weight < 0.5).where(start + weight * difference, end - difference * (1 - weight))

    # ---- special values ----

    def isnan(self: Tensor) -> Tensor:
        """True where x is NaN."""
        return self.ne(self) if dtypes.is_float(self.dtype) else self.full_like(False, dtype=dtypes.bool)

    def isinf(self: Tensor, detect_positive: bool = True, detect_negative: bool = True) -> Tensor:
        """True where x is +inf or -inf (tinygrad's detect_positive / detect_negative pick one sign)."""
        if not dtypes.is_float(self.dtype):
            return self.full_like(False, dtype=dtypes.bool)
        return (self == math.inf) * detect_positive | (self == -math.inf) * detect_negative

    def isfinite(self: Tensor) -> Tensor:
        """True where x is neither inf nor NaN."""
        return self.abs() < math.inf if dtypes.is_float(self.dtype) else self.full_like(True, dtype=dtypes.bool)

    # ---- the error function ----

    @_float_math
    def erf(self: Tensor) -> Tensor:
        """The error function, to within 2e-7 of float32's erf."""
        return with_gradient(_odd(self, _erf_of_nonnegative), self, formula.erf)

    # ---- activations ----

    def relu(self: Tensor) -> Tensor:
        """max(x, 0), with gradient 0 at 0 and NaN kept, as PyTorch."""
        return (self <= 0).where(0, self)

    def relu6(self: Tensor) -> Tensor:
        """min(max(x, 0), 6)."""
        return self.hardtanh(0, 6)

    def hardtanh(self: Tensor, min_val: float = -1.0, max_val: float = 1.0) -> Tensor:
        """x limited to [min_val, max_val]; the gradient is 0 at the limits, as PyTorch."""
        if min_val > max_val:
            raise ArgumentError(f"hardtanh: min_val ({min_val}) must not exceed max_val ({max_val})")
        # negated conditions keep the tensor first in each where (a float scalar first turns float16 into float32)
        below_max = (self >= max_val).logical_not().where(self, max_val)
        return (self <= min_val).logical_not().where(below_max, min_val)

    def leaky_relu(self: Tensor, negative_slope: float = 0.01, *, neg_slope: float | None = None) -> Tensor:
        """x for x > 0, else negative_slope * x (neg_slope is tinygrad's name)."""
        slope = negative_slope if neg_slope is None else neg_slope
        return (self > 0).where(self, self * slope)

    @_float_math
    def elu(self: Tensor, alpha: float = 1.0) -> Tensor:
        """x for x > 0, else alpha * (exp(x) - 1)."""
        negative = self <= 0  # NaN takes the x branch, with gradient 1, as PyTorch
        return negative.where(alpha * (negative.where(self, 0).exp() - 1), self)

    @_float_math
    def celu(self: Tensor, alpha: float = 1.0) -> Tensor:
        """x for x > 0, else alpha * (exp(x / alpha) - 1)."""
        if alpha == 0:
            raise ArgumentError("celu: alpha must not be 0")
        negative = self <= 0
        return negative.where(alpha * ((negative.where(self, 0) / alpha).exp() - 1), self)

    @_float_math
    def selu(self: Tensor) -> Tensor:
        """scale * elu(x, alpha) with the self-normalizing constants."""
        return SELU_SCALE * self.elu(SELU_ALPHA)

    @_float_math
    def gelu(self: Tensor, approximate: str = "none") -> Tensor:
        """x * Phi(x): exact through erf ('none', PyTorch's default) or the 'tanh' approximation."""
        if approximate == "none":
            return with_gradient(0.5 * self * (1 + (self * (1 / math.sqrt(2))).erf()), self, formula.gelu)
        if approximate == "tanh":
            inner = (math.sqrt(2 / math.pi) * (self + 0.044715 * self * self * self)).tanh()
            return with_gradient(0.5 * self * (1 + inner), self, formula.gelu_tanh)
        raise ArgumentError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")

    @_float_math
    def quick_gelu(self: Tensor) -> Tensor:
        """x * sigmoid(1.702 * x), a cheaper GELU."""
        return self * (1.702 * self).sigmoid()

    @_float_math
    def sigmoid(self: Tensor) -> Tensor:
        """1 / (1 + exp(-x)), stable for large |x|."""
        negative = self < 0
        e = negative.where(self, -self).exp()  # exp(-|x|) <= 1 never overflows
        return with_gradient(negative.where(e, 1) / (1 + e), self, formula.sigmoid)

    @_float_math
    def silu(self: Tensor) -> Tensor:
        """x * sigmoid(x)."""
        return with_gradient(self * self.sigmoid(), self, formula.silu)

    def swish(self: Tensor) -> Tensor:
        """x * sigmoid(x), the same as silu."""
        return self.silu()

    @_float_math
    def hardsigmoid(self: Tensor) -> Tensor:
        """relu6(x + 3) / 6; the gradient is 0 at -3 and 3 (and at NaN), as PyTorch."""
        inside = (self > -3) & (self < 3)
        return inside.where((self + 3) / 6, (self >= 3).where(1, (self <= -3).where(0, math.nan)))

    @_float_math
    def hardswish(self: Tensor) -> Tensor:
        """x * relu6(x + 3) / 6."""
        return with_gradient(self * (self <= -3).where(0, (self < 3).where((self + 3) / 6, 1)), self, formula.hardswish)

    @_float_math
    def softplus(self: Tensor, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
        """log(1 + exp(beta * x)) / beta, and x itself where beta * x > threshold (as PyTorch)."""
        if beta == 0:
            raise ArgumentError("softplus: beta must not be 0")
        z = self * beta
        # log(1 + e^z) = max(z, 0) + log(1 + e^-|z|), so exp never overflows
        negative = z < 0
        smooth = negative.where(0, z) + _log1p(negative.where(z, -z).exp())
        return with_gradient((z > threshold).where(self, smooth / beta), self, formula.softplus(beta, threshold))

    @_float_math
    def softsign(self: Tensor) -> Tensor:
        """x / (1 + |x|)."""
        return self / (1 + self.abs())

    @_float_math
    def mish(self: Tensor) -> Tensor:
        """x * tanh(softplus(x))."""
        return with_gradient(self * self.softplus().tanh(), self, formula.mish)

    @_float_math
    def logsigmoid(self: Tensor) -> Tensor:
        """log(sigmoid(x)) = -softplus(-x), stable for large |x|."""
        return with_gradient(-(-self).softplus(), self, formula.logsigmoid)


# ---- helpers for the functions above ----


def _atan_of_nonnegative(x: Tensor) -> Tensor:
    """atan on [0, inf]: a polynomial on [0, 1], and pi/2 - atan(1/x) above."""
    above_one = x > 1
    t = above_one.where(above_one.where(x, 1).reciprocal(), x)  # in [0, 1]; 1/x only where it is used
    near = t * polynomial(t * t, ATAN_UNIT)
    return above_one.where(math.pi / 2 - near, near)


def _asinh_of_nonnegative(x: Tensor) -> Tensor:
    """asinh on [0, inf]: log1p(x + x^2 / (1 + sqrt(1 + x^2))), and log(2x) once x^2 would overflow."""
    huge = x > 2.0**60
    small = huge.where(1, x)
    moderate = _log1p(small + small * small / (1 + (1 + small * small).sqrt()))
    return huge.where(huge.where(x, 1).log() + LN2, moderate)


def _erf_of_nonnegative(x: Tensor) -> Tensor:
    """erf on [0, inf]: x * P(x^2) below 1, and 1 - 2^Q(x) (Q a fit of log2 erfc) from 1 to 4, then 1."""
    below_one, beyond = x < 1, x > 4
    x = beyond.where(4, x)  # inf and huge values stay finite inside the polynomials
    near = x * polynomial(x * x, ERF_NEAR_ZERO)
    tail = 1 - polynomial((below_one.where(1, x) - 2.5) * (1 / 1.5), LOG2_ERFC_TAIL).exp2()
    return below_one.where(near, beyond.where(1, tail))  # exactly 1 past 4 in float64 too (gelu(1e300) is 1e300)


def _limit(x: Tensor, bound: Tensor, beyond: Tensor, within: Tensor) -> Tensor:
    """bound where x is beyond it, else x; a float NaN stays NaN with gradient 0 (neither beyond nor within)."""
    if not dtypes.is_float(x.dtype):
        return beyond.where(bound, x)
    return within.where(x, beyond.where(bound, math.nan))


def _round_half_even(x: Tensor) -> Tensor:
    """Round to the nearest whole number; halves go to the even neighbour."""
    t = x.trunc()
    fraction = x - t  # exact, in (-1, 1), with the sign of x
    distance = (fraction < 0).where(-fraction, fraction)
    away = (x < 0).where(t - 1, t + 1)
    t_is_odd = (t * 0.5).trunc().ne(t * 0.5)
    return ((distance > 0.5) | (distance.eq(0.5) & t_is_odd)).where(away, t)
