"""CUDA C: the C-style renderer's dialect for NVIDIA GPUs, compiled by NVRTC.

The outer output loop becomes the grid: each thread computes one of its iterations (`ridx0` is the thread's global
index, guarded against the loop's size) and runs the inner loops itself. half and bfloat16 are stored as their 16
bits and converted to and from float with PTX's own conversions, so a kernel needs no toolkit header; their math
runs in float32, as on the CPU (the `small_float_math` dialect).
"""

from __future__ import annotations

import math
import struct

from glassgrad.dtype import DType, dtypes
from glassgrad.renderer.cstyle import CStyleRenderer
from glassgrad.uop.ops import Ops, UOp

# NVRTC has no <math.h>: the two constants it would give, as the bits C's INFINITY and NAN have
CONSTANTS = ["#define INFINITY (__int_as_float(0x7f800000))", "#define NAN (__int_as_float(0x7fc00000))"]

HALF_HELPERS = [
    "static inline float gg_h2f(unsigned short x) { float f;"
    ' asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(x)); return f; }',
    "static inline unsigned short gg_f2h(float f) { unsigned short x;"
    ' asm("cvt.rn.f16.f32 %0, %1;" : "=h"(x) : "f"(f)); return x; }',
    "static inline unsigned short gg_d2h(double d) { unsigned short x;"
    ' asm("cvt.rn.f16.f64 %0, %1;" : "=h"(x) : "d"(d)); return x; }',
]  # fmt: skip

BITCAST_HELPER = (
    "template <class T, class F> static inline T gg_bitcast(F x) { union { F f; T t; } u; u.f = x; return u.t; }"
)


def float_to_half_bits(value: float) -> int:
    """The 16 bits of a float16, rounded to nearest even; too large a value is infinity."""
    if math.isnan(value):
        return 0x7E00
    try:
        return struct.unpack("<H", struct.pack("<e", value))[0]
    except OverflowError:
        return 0xFC00 if value < 0 else 0x7C00


def _uses(program: list[UOp], dtype: DType) -> bool:
    return any(u.dtype == dtype or any(s.dtype == dtype for s in u.src) for u in program)


class CUDARenderer(CStyleRenderer):
    """CUDA C for NVIDIA GPUs: a __global__ function whose outer output loop is the grid of threads."""

    device = "CUDA"
    kernel_prefix = 'extern "C" __global__ void'
    restrict = "__restrict__"
    split_outer_loop = True
    outer_loop_params = ()  # the bounds come from the launch: blockIdx, blockDim, threadIdx
    type_names = {**CStyleRenderer.type_names, dtypes.bool: "bool", dtypes.float16: "unsigned short"}

    def outer_loop_header(self, name: str, size: str) -> str:
        return f"int {name} = blockIdx.x*blockDim.x+threadIdx.x; if ({name} < {size}) {{"

    def render_const(self, value, dtype: DType) -> str:
        if dtype == dtypes.float16:
            return f"((unsigned short){float_to_half_bits(float(value))})"
        return super().render_const(value, dtype)

    def render_cast(self, x: str, src: DType, dst: DType) -> str:
        if src == dtypes.float16:  # through float32, which holds every half exactly
            x, src = f"gg_h2f({x})", dtypes.float32
            if dst == dtypes.float32:
                return x
        if dst == dtypes.float16:
            if src == dtypes.float64:
                return f"gg_d2h({x})"  # one rounding, not two through float32
            return f"gg_f2h({'gg_bf2f' if src == dtypes.bfloat16 else '(float)'}({x}))"
        return super().render_cast(x, src, dst)

    def render_bitcast(self, x: str, src: DType, dst: DType) -> str:
        return f"gg_bitcast<{self.type_name(dst)}>({x})"

    def prelude(self, program: list[UOp]) -> list[str]:
        lines = CONSTANTS + (HALF_HELPERS if _uses(program, dtypes.float16) else [])
        lines += [line for line in super().prelude(program) if not line.startswith("#include")]
        return lines + ([BITCAST_HELPER] if any(u.op is Ops.BITCAST for u in program) else [])
