"""One elementwise op on Python scalars, with the C semantics of its result dtype.

Constant folding and the PYTHON device both compute through here, so a value folded at compile time is the value a
kernel would compute at run time. Python floats are doubles: a float32, float16 or bfloat16 result is rounded to its
dtype after every op, which for + - * / and sqrt gives exactly the correctly rounded result of the narrow type.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from glassgrad.dtype import DType, dtypes, pack_values, truncate, unpack_values
from glassgrad.uop.ops import Ops


def _c_idiv(x: int, y: int) -> int:
    """x / y for C ints: truncated toward zero; dividing by zero gives 0 instead of a crash."""
    if y == 0:
        return 0
    quotient = abs(x) // abs(y)
    return quotient if (x < 0) == (y < 0) else -quotient


def _c_mod(x: Any, y: Any) -> Any:
    """x % y for C ints: the sign of the dividend, so x == (x / y) * y + x % y; modulo zero gives 0. For floats C's
    fmod, exact: NaN for an infinite x, a zero y or a NaN; x itself for an infinite y."""
    if isinstance(x, float) or isinstance(y, float):
        if y == 0 or math.isinf(x) or x != x or y != y:
            return math.nan
        return x if math.isinf(y) else math.fmod(x, y)
    return 0 if y == 0 else x - _c_idiv(x, y) * y


def _max(x: Any, y: Any) -> Any:
    if x != x:  # NaN in either operand gives NaN, as tensor code expects
        return x
    if y != y:
        return y
    return x if x > y else y


def _exp2(x: float) -> float:
    try:
        return 2.0**x
    except OverflowError:
        return math.inf


def _log2(x: float) -> float:
    if x == 0:
        return -math.inf
    if x < 0 or x != x:
        return math.nan
    return math.log2(x)


def _sin(x: float) -> float:
    return math.sin(x) if math.isfinite(x) else math.nan


def _sqrt(x: float) -> float:
    return math.nan if x < 0 else math.sqrt(x)  # sqrt(-0.0) = -0.0, which is not < 0


def _recip(x: float) -> float:
    return math.copysign(math.inf, x) if x == 0 else 1.0 / x


def _trunc(x: Any) -> Any:
    if isinstance(x, int) or not math.isfinite(x):
        return x
    return math.copysign(float(math.trunc(x)), x)  # trunc(-0.5) = -0.0


def _shl(x: int, y: int) -> int:
    # a shift by a negative count or by the width or more is undefined in C; we give 0 (what wrapping gives too)
    return x << y if 0 <= y < 64 else 0


def _shr(x: int, y: int) -> int:
    return x >> y if y >= 0 else 0  # >> of a negative int is arithmetic, as every C compiler we target does


# The value of each op on scalars, before rounding to the result dtype.
python_alu: dict[Ops, Callable[..., Any]] = {
    Ops.NEG: lambda x: -x,
    Ops.EXP2: _exp2,
    Ops.LOG2: _log2,
    Ops.SIN: _sin,
    Ops.SQRT: _sqrt,
    Ops.RECIP: _recip,
    Ops.TRUNC: _trunc,
    Ops.ADD: lambda x, y: x + y,
    Ops.MUL: lambda x, y: x * y,
    Ops.IDIV: _c_idiv,
    Ops.MOD: _c_mod,
    Ops.MAX: _max,
    Ops.CMPLT: lambda x, y: x < y,
    Ops.CMPNE: lambda x, y: x != y,
    Ops.AND: lambda x, y: x & y,
    Ops.OR: lambda x, y: x | y,
    Ops.XOR: lambda x, y: x ^ y,
    Ops.SHL: _shl,
    Ops.SHR: _shr,
    Ops.WHERE: lambda cond, x, y: x if cond else y,
    Ops.MULACC: lambda x, y, z: x * y + z,
}


def exec_alu(op: Ops, dtype: DType, operands: list) -> Any:
    """The value of `op` on scalar `operands`, wrapped or rounded to the result dtype `dtype` as C would."""
    if op is Ops.MULACC:  # a*b+c is two C operations, each rounded: the renderers write it unfused
        x, y, z = operands
        return exec_alu(Ops.ADD, dtype, [exec_alu(Ops.MUL, dtype, [x, y]), z])
    return truncate(dtype.scalar, python_alu[op](*operands))


def exec_cast(value: Any, from_dtype: DType, to_dtype: DType) -> Any:
    """`value` of `from_dtype` converted to `to_dtype` as a C cast: float to int truncates toward zero."""
    to_dtype = to_dtype.scalar
    if to_dtype == dtypes.bool:
        return value != 0  # NaN != 0, so (bool)NaN is true, as in C
    if dtypes.is_int(to_dtype) and dtypes.is_float(from_dtype):
        value = math.trunc(value) if math.isfinite(value) else 0  # NaN and inf are undefined in C; 0 here
    return truncate(to_dtype, value)


def exec_bitcast(value: Any, from_dtype: DType, to_dtype: DType) -> Any:
    """The value of `to_dtype` with the same bits as `value` of `from_dtype`."""
    if from_dtype.itemsize != to_dtype.itemsize:
        raise ValueError(
            f"bitcast from {from_dtype} to {to_dtype}: sizes differ ({from_dtype.itemsize} bytes vs "
            f"{to_dtype.itemsize}); cast instead, or bitcast to a type of the same size"
        )
    return unpack_values(pack_values([value], from_dtype.scalar), to_dtype.scalar)[0]
