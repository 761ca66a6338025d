"""PyTorch's gradients of the one-input functions glassgrad composes from primitives (sigmoid, tanh, gelu, ...).

Derived by the chain rule, such a function's gradient multiplies the incoming g by each step's derivative, and where
g is infinite (it comes from log at 0, or 1 / x at 0) a step whose derivative is 0 there makes inf * 0 = NaN, or
two steps inf - inf; where x is near the dtype's limit a step overflows though f' does not (mish at 3e38). PyTorch
gives g * f'(x), one product with its own formula for f'; so does glassgrad, with the formula PyTorch's CPU backward
uses (derivatives.yaml and its kernels), so the values at the edges are PyTorch's too. Each function here takes the
incoming gradient g and the input x and returns the gradient; `with_gradient` attaches one to an output. (The
inverse functions' formulas also keep their gradients finite or +-inf at the edges of their domains, where the
composition meets 0 * inf for any g.)
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

from glassgrad.gradient import custom_gradient

if TYPE_CHECKING:
    from glassgrad.tensor import Tensor

Formula = Callable[["Tensor", "Tensor"], "Tensor"]


def with_gradient(out: Tensor, x: Tensor, formula: Formula) -> Tensor:
    """`out`, a function of x alone, whose gradient in x is formula(g, x)."""
    return custom_gradient(out, (x,), lambda g, x: (formula(g, x),))


def asin(g: Tensor, x: Tensor) -> Tensor:
    return g * (1 - x * x).rsqrt()


def acos(g: Tensor, x: Tensor) -> Tensor:
    return g * -(1 - x * x).rsqrt()


def acosh(g: Tensor, x: Tensor) -> Tensor:
    return g * (x * x - 1).rsqrt()


def atanh(g: Tensor, x: Tensor) -> Tensor:
    return g * (1 - x * x).reciprocal()


def sigmoid(g: Tensor, x: Tensor) -> Tensor:
    y = x.sigmoid()
    return g * (1 - y) * y


def tanh(g: Tensor, x: Tensor) -> Tensor:
    y = x.tanh()
    return g * (1 - y * y)


def tan(g: Tensor, x: Tensor) -> Tensor:
    y = x.tan()
    return g * (1 + y * y)


def sinh(g: Tensor, x: Tensor) -> Tensor:
    return g * x.cosh()


def cosh(g: Tensor, x: Tensor) -> Tensor:
    return g * x.sinh()


def atan(g: Tensor, x: Tensor) -> Tensor:
    return g / (x * x + 1)


def asinh(g: Tensor, x: Tensor) -> Tensor:
    return g * (x * x + 1).rsqrt()


def erf(g: Tensor, x: Tensor) -> Tensor:
    return 2 / math.sqrt(math.pi) * (-(x * x)).exp() * g


def gelu(g: Tensor, x: Tensor) -> Tensor:
    cdf = 0.5 * (1 + (x * math.sqrt(0.5)).erf())
    pdf = (-0.5 * x * x).exp() * (1 / math.sqrt(2 * math.pi))
    return g * (cdf + x * pdf)


def gelu_tanh(g: Tensor, x: Tensor) -> Tensor:
    beta, kappa = math.sqrt(2 / math.pi), 0.044715
    inner = (beta * (x + kappa * x * x * x)).tanh()
    left_derivative = 0.5 * (1 + inner)
    right_derivative = 0.5 * x * (1 - inner * inner) * (beta * (1 + 3 * kappa * x * x))
    return g * (left_derivative + right_derivative)


def silu(g: Tensor, x: Tensor) -> Tensor:
    s = x.sigmoid()
    return g * (s * (1 + x * (1 - s)))


def mish(g: Tensor, x: Tensor) -> Tensor:
    s, t = x.sigmoid(), x.softplus().tanh()
    return g * (t + x * s * (1 - t * t))


def logsigmoid(g: Tensor, x: Tensor) -> Tensor:
    negative = x < 0
    z = negative.where(x, -x).exp()  # exp(-|x|)
    return g * (negative.where(1, 0) - negative.where(1, -1) * (z / (1 + z)))


def softplus(beta: float, threshold: float) -> Formula:
    """g where beta * x passes the threshold (softplus is x there), else g * e^(beta x) / (e^(beta x) + 1)."""

    def formula(g: Tensor, x: Tensor) -> Tensor:
        z = (x * beta).exp()
        return (x * beta > threshold).where(g, g * z / (z + 1))

    return formula


def hardswish(g: Tensor, x: Tensor) -> Tensor:
    """0 up to -3, g (x / 3 + 1/2) below 3, g from 3 on and at NaN: chosen, so an infinite g stays off the flat side."""
    return (x <= -3).where(0, (x < 3).where(g * (x / 3 + 0.5), g))
