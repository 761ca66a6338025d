"""The 8-bit floats in C and CUDA C: converted to and from float in software, the same on the CPU and the GPU.

A kernel stores an fp8 value as its 8 bits (unsigned char) and computes with it in float32 (the `small_float_math`
dialect), so all it needs is the two conversions, written here from the format's parameters (glassgrad/fp8.py says
what they compute: PyTorch's casts). Hardware conversions exist only on some GPUs (sm_89+) and saturate where
PyTorch's e5m2 cast gives infinity, so both devices use these.
"""

from __future__ import annotations

import struct

from glassgrad.fp8 import Fp8Format


def _float_bits(value: float) -> int:
    return struct.unpack("<I", struct.pack("<f", value))[0]


def decode_name(name: str) -> str:
    """The C function from the bits of format `name` to float."""
    return f"gg_{name}_to_f"


def encode_name(name: str) -> str:
    """The C function from float to the bits of format `name`."""
    return f"gg_f_to_{name}"


def fp8_helpers(name: str, fmt: Fp8Format) -> list[str]:
    """C functions gg_f2NAME(float) -> unsigned char and gg_NAME2f(unsigned char) -> float for one format."""
    m, bias = fmt.mantissa_bits, fmt.bias
    shift = 23 - m  # float32 mantissa bits dropped
    min_normal = _float_bits(2.0 ** (1 - bias))
    # a subnormal's code is how many steps it is: added to a power of two whose last bit is one step, the float adder
    # rounds it to a whole step (to nearest even) and the sum's low bits count the steps
    magic = _float_bits(2.0 ** (23 + 1 - bias - m))
    # the float32 bits of infinity or NaN where the code is one, else 0
    special = (
        f"e == {(1 << fmt.exponent_bits) - 1}u ? (m ? 0x7fc00000u : 0x7f800000u) : 0u"
        if fmt.has_infinity
        else "(x & 0x7fu) == 0x7fu ? 0x7fc00000u : 0u"
    )
    step = repr(fmt.subnormal_step) + "f"
    return [
        f"static inline unsigned char {encode_name(name)}(float f) {{"
        " union { float f; unsigned int u; } v, s, k; v.f = f;"
        " unsigned int sign = (v.u >> 24) & 0x80u, a = v.u & 0x7fffffffu, code;"
        " if (a > 0x7f800000u) return (unsigned char)(sign | 0x7fu);"
        f" if (a < {min_normal}u) {{ s.u = a; k.u = {magic}u; s.f = s.f + k.f; code = s.u - {magic}u; }}"
        f" else code = ((a + {(1 << (shift - 1)) - 1}u + ((a >> {shift}) & 1u)) >> {shift}) - {(127 - bias) << m}u;"
        f" return (unsigned char)(sign | (code > {fmt.max_code}u ? {fmt.overflow_code}u : code)); }}",
        f"static inline float {decode_name(name)}(unsigned char x) {{"
        " union { unsigned int u; float f; } v;"
        f" unsigned int e = (x & 0x7fu) >> {m}, m = x & {(1 << m) - 1}u;"
        f" unsigned int special = {special};"
        " if (special) v.u = special;"
        f" else if (e == 0) v.f = (float)m * {step};"
        f" else v.u = ((e + {127 - bias}u) << 23) | (m << {shift});"
        " v.u |= (unsigned int)(x & 0x80u) << 24; return v.f; }",
    ]
