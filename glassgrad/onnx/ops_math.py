"""Elementwise operators: arithmetic, comparisons, logic, bit operations, activations, casts."""

from __future__ import annotations

import functools
import math

from glassgrad.dtype import dtypes
from glassgrad.onnx.loader import onnx_dtype
from glassgrad.onnx.registry import OpContext, onnx_op
from glassgrad.tensor import Tensor


def _register_unary(name: str, fn) -> None:
    onnx_op(name)(lambda ctx, x: fn(x))


for _name, _fn in {
    "Abs": Tensor.abs, "Neg": Tensor.neg, "Exp": Tensor.exp, "Log": Tensor.log, "Sqrt": Tensor.sqrt,
    "Reciprocal": Tensor.reciprocal, "Floor": Tensor.floor, "Ceil": Tensor.ceil, "Round": Tensor.round,
    "Sign": Tensor.sign, "Sin": Tensor.sin, "Cos": Tensor.cos, "Tan": Tensor.tan, "Asin": Tensor.asin,
    "Acos": Tensor.acos, "Atan": Tensor.atan, "Sinh": Tensor.sinh, "Cosh": Tensor.cosh, "Tanh": Tensor.tanh,
    "Asinh": Tensor.asinh, "Acosh": Tensor.acosh, "Atanh": Tensor.atanh, "Erf": Tensor.erf, "Relu": Tensor.relu,
    "Sigmoid": Tensor.sigmoid, "Softsign": Tensor.softsign, "Mish": Tensor.mish, "HardSwish": Tensor.hardswish,
    "IsNaN": Tensor.isnan, "Not": Tensor.logical_not, "BitwiseNot": Tensor.bitwise_not,
    "Identity": lambda x: x,
}.items():  # fmt: skip
    _register_unary(_name, _fn)


def _same_type(fn):
    """A binary operator whose result keeps the inputs' dtype (ONNX types both inputs alike)."""
    return lambda ctx, a, b: fn(a, b).cast(a.dtype)


for _name, _fn in {
    "Add": Tensor.add, "Sub": Tensor.sub, "Mul": Tensor.mul, "BitwiseAnd": Tensor.bitwise_and,
    "BitwiseOr": Tensor.bitwise_or, "BitwiseXor": Tensor.bitwise_xor,
}.items():  # fmt: skip
    onnx_op(_name)(_same_type(_fn))

for _name, _fn in {
    "Equal": Tensor.eq, "Less": Tensor.__lt__, "Greater": Tensor.__gt__, "LessOrEqual": Tensor.__le__,
    "GreaterOrEqual": Tensor.__ge__, "And": Tensor.logical_and, "Or": Tensor.logical_or, "Xor": Tensor.logical_xor,
}.items():  # fmt: skip
    onnx_op(_name)(functools.partial(lambda fn, ctx, a, b: fn(a, b), _fn))


@onnx_op("Div")
def div(ctx: OpContext, a: Tensor, b: Tensor) -> Tensor:
    """Integers divide truncating toward zero (C), as ONNX's reference does."""
    return a.idiv(b) if dtypes.is_int(a.dtype) else a.div(b).cast(a.dtype)


def _fmod(a: Tensor, b: Tensor) -> Tensor:
    """C's fmod for floats: the remainder with the dividend's sign; a finite a modulo an infinite b is a."""
    rest = (a - (a / b).trunc() * b).cast(a.dtype)
    return (b.isinf() & a.isfinite()).where(a, rest)


@onnx_op("Mod")
def mod(ctx: OpContext, a: Tensor, b: Tensor, *, fmod: int = 0) -> Tensor:
    """fmod=0: the remainder has the divisor's sign (NumPy's mod); fmod=1: C's fmod, the dividend's sign."""
    if dtypes.is_int(a.dtype):
        return a - a.idiv(b) * b if fmod else a.mod(b)
    rest = _fmod(a, b)
    if fmod:
        return rest
    return ((rest != 0) & ((rest < 0) != (b < 0))).where(rest + b, rest).cast(a.dtype)


@onnx_op("Pow")
def pow_(ctx: OpContext, x: Tensor, y: Tensor) -> Tensor:
    return x.pow(y).cast(x.dtype)


@onnx_op("BitShift")
def bit_shift(ctx: OpContext, x: Tensor, y: Tensor, *, direction: str) -> Tensor:
    """Shifts of the type's width or more, or negative ones, give 0 (-1 for a negative number shifted right)."""
    if direction not in ("LEFT", "RIGHT"):
        raise ctx.error(f"direction must be LEFT or RIGHT, got {direction!r}")
    bits = 8 * x.dtype.itemsize
    out_of_range = (y < 0) | (y >= bits)
    safe = out_of_range.where(0, y).cast(y.dtype)
    shifted = (x.lshift(safe) if direction == "LEFT" else x.rshift(safe)).cast(x.dtype)
    overflow = (x < 0).where(-1, 0) if direction == "RIGHT" and not dtypes.is_unsigned(x.dtype) else 0
    return out_of_range.where(overflow, shifted).cast(x.dtype)


def _variadic(fn):
    return lambda ctx, *xs: functools.reduce(fn, xs)


onnx_op("Max")(_variadic(Tensor.maximum))
onnx_op("Min")(_variadic(Tensor.minimum))
onnx_op("Sum")(_variadic(Tensor.add))


@onnx_op("Mean")
def mean(ctx: OpContext, *xs: Tensor) -> Tensor:
    return (functools.reduce(Tensor.add, xs) / len(xs)).cast(xs[0].dtype)


@onnx_op("Where")
def where(ctx: OpContext, condition: Tensor, x: Tensor, y: Tensor) -> Tensor:
    return condition.where(x, y)


@onnx_op("Clip")
def clip(ctx: OpContext, x: Tensor, low: Tensor | None = None, high: Tensor | None = None, *,
         min: float | None = None, max: float | None = None) -> Tensor:  # fmt: skip
    """Bounds are inputs since opset 11 and attributes before it."""
    low = low if low is not None else min
    high = high if high is not None else max
    if low is not None:
        x = x.maximum(low).cast(x.dtype)
    if high is not None:
        x = x.minimum(high).cast(x.dtype)
    return x


@onnx_op("Cast")
def cast(ctx: OpContext, x: Tensor, *, to: int, saturate: int = 1, round_mode: str = "up") -> Tensor:
    """saturate and round_mode only concern float8 and float4 types, which glassgrad does not have."""
    return x.cast(onnx_dtype(to, f"{ctx.op} (node {ctx.node!r})"))


@onnx_op("CastLike")
def cast_like(ctx: OpContext, x: Tensor, target: Tensor, *, saturate: int = 1, round_mode: str = "up") -> Tensor:
    return x.cast(target.dtype)


@onnx_op("BitCast")
def bit_cast(ctx: OpContext, x: Tensor, *, to: int) -> Tensor:
    dtype = onnx_dtype(to, f"{ctx.op} (node {ctx.node!r})")
    if dtype.itemsize != x.dtype.itemsize:
        raise ctx.error(f"bitcast between sizes ({x.dtype} to {dtype}) is not supported", unsupported=True)
    return x.bitcast(dtype)


@onnx_op("IsInf")
def is_inf(ctx: OpContext, x: Tensor, *, detect_negative: int = 1, detect_positive: int = 1) -> Tensor:
    return ((x == math.inf) & bool(detect_positive)) | ((x == -math.inf) & bool(detect_negative))


# ---- activations with parameters ----


@onnx_op("LeakyRelu")
def leaky_relu(ctx: OpContext, x: Tensor, *, alpha: float = 0.01) -> Tensor:
    return x.leaky_relu(alpha)


@onnx_op("Elu")
def elu(ctx: OpContext, x: Tensor, *, alpha: float = 1.0) -> Tensor:
    return x.elu(alpha)


@onnx_op("Celu")
def celu(ctx: OpContext, x: Tensor, *, alpha: float = 1.0) -> Tensor:
    return x.celu(alpha)


@onnx_op("Selu")
def selu(ctx: OpContext, x: Tensor, *, alpha: float = 1.67326319217681884765625,
         gamma: float = 1.05070102214813232421875) -> Tensor:  # fmt: skip
    return gamma * (x > 0).where(x, alpha * (x.exp() - 1))


@onnx_op("ThresholdedRelu")
def thresholded_relu(ctx: OpContext, x: Tensor, *, alpha: float = 1.0) -> Tensor:
    return (x > alpha).where(x, 0)


@onnx_op("HardSigmoid")
def hard_sigmoid(ctx: OpContext, x: Tensor, *, alpha: float = 0.2, beta: float = 0.5) -> Tensor:
    return (x * alpha + beta).clip(0, 1)


@onnx_op("Softplus")
def softplus(ctx: OpContext, x: Tensor) -> Tensor:
    return x.softplus()


@onnx_op("PRelu")
def prelu(ctx: OpContext, x: Tensor, slope: Tensor) -> Tensor:
    return (x < 0).where(x * slope, x)


@onnx_op("Shrink")
def shrink(ctx: OpContext, x: Tensor, *, bias: float = 0.0, lambd: float = 0.5) -> Tensor:
    return (x < -lambd).where(x + bias, (x > lambd).where(x - bias, 0)).cast(x.dtype)


@onnx_op("Gelu")
def gelu(ctx: OpContext, x: Tensor, *, approximate: str = "none") -> Tensor:
    return x.gelu(approximate)


@onnx_op("Swish")
def swish(ctx: OpContext, x: Tensor, *, alpha: float = 1.0) -> Tensor:
    return x * (x * alpha).sigmoid()
