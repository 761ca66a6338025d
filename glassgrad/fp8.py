"""The 8-bit floats (OCP FP8) as numbers: their bits to a Python float and back, as PyTorch converts them.

float8_e4m3fn (dtypes.fp8e4m3): a sign, 4 exponent bits (bias 7), 3 mantissa bits; no infinity, and S.1111.111 is
NaN, so the largest value is 448. float8_e5m2 (dtypes.fp8e5m2): a sign, 5 exponent bits (bias 15), 2 mantissa bits,
infinities and NaNs as IEEE half has them; the largest value is 57344. Converting a float rounds to nearest, ties to
even, from float32 (a float64 is rounded to float32 first, as PyTorch's cast does). What is too large for e4m3fn
saturates to +-448 (infinity too), as PyTorch's cast does; for e5m2 it becomes +-inf. NaN keeps its sign bit.
The C and CUDA renderers compute the same in software (renderer/fp8.py); both follow these parameters.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass


@dataclass(frozen=True)
class Fp8Format:
    """One 8-bit float layout: its field widths and what a float too large for it becomes."""

    exponent_bits: int
    mantissa_bits: int
    has_infinity: bool  # IEEE-like (e5m2): the top exponent is infinity and NaN; else (e4m3fn) only 0x7F is NaN

    @property
    def bias(self) -> int:
        return (1 << (self.exponent_bits - 1)) - 1

    @property
    def max_code(self) -> int:
        """The largest finite magnitude's 7 bits: 0x7E for e4m3fn (0x7F is NaN), 0x7B for e5m2 (0x7C is inf)."""
        return 0x7B if self.has_infinity else 0x7E

    @property
    def overflow_code(self) -> int:
        """What a magnitude beyond the largest finite one becomes: infinity (e5m2), or the largest (e4m3fn)."""
        return 0x7C if self.has_infinity else 0x7E

    @property
    def subnormal_step(self) -> float:
        """The value of the last mantissa bit below the smallest normal number."""
        return 2.0 ** (1 - self.bias - self.mantissa_bits)

    def encode(self, value: float) -> int:
        """The 8 bits nearest `value` (rounded through float32, ties to even)."""
        value = _as_float32(float(value))
        sign = 0x80 if math.copysign(1.0, value) < 0 else 0
        if math.isnan(value):
            return sign | 0x7F
        magnitude = abs(value)
        if math.isinf(magnitude):
            return sign | self.overflow_code
        if magnitude < 2.0 ** (1 - self.bias):  # subnormal: a multiple of the step (round() is ties-to-even)
            code = round(magnitude / self.subnormal_step)
        else:
            mantissa, exponent = math.frexp(magnitude)  # magnitude = mantissa * 2**exponent, 0.5 <= mantissa < 1
            scaled = round(mantissa * 2 ** (self.mantissa_bits + 1))  # 1.m scaled to an integer; may carry to 2.0
            code = ((exponent - 1 + self.bias) << self.mantissa_bits) + scaled - (1 << self.mantissa_bits)
        return sign | (code if code <= self.max_code else self.overflow_code)

    def decode(self, bits: int) -> float:
        """The value of 8 bits."""
        sign = -1.0 if bits & 0x80 else 1.0
        exponent, mantissa = (bits & 0x7F) >> self.mantissa_bits, bits & ((1 << self.mantissa_bits) - 1)
        if self.has_infinity and exponent == (1 << self.exponent_bits) - 1:
            return math.copysign(math.inf if mantissa == 0 else math.nan, sign)  # NaN keeps its sign bit, as in C
        if not self.has_infinity and bits & 0x7F == 0x7F:
            return math.copysign(math.nan, sign)
        if exponent == 0:
            return sign * mantissa * self.subnormal_step
        return sign * (1 + mantissa / (1 << self.mantissa_bits)) * 2.0 ** (exponent - self.bias)


E4M3 = Fp8Format(exponent_bits=4, mantissa_bits=3, has_infinity=False)
E5M2 = Fp8Format(exponent_bits=5, mantissa_bits=2, has_infinity=True)


def _as_float32(value: float) -> float:
    """`value` rounded to float32 (too large: infinity), as C's (float) cast."""
    try:
        return struct.unpack("<f", struct.pack("<f", value))[0]
    except OverflowError:
        return math.copysign(math.inf, value)
