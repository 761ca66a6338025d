"""The C-style renderer: a linear program becomes a C function; other C dialects (CUDA) subclass it."""

from __future__ import annotations

import math
from collections.abc import Callable

from glassgrad.dtype import FP8_FORMATS, STORED_AS_BITS, DType, PtrDType, dtypes
from glassgrad.helpers import host_cache_bytes
from glassgrad.renderer import Renderer
from glassgrad.renderer.attention import AttentionSpec, c_tasks, render_c_attention
from glassgrad.renderer.fp8 import decode_name, encode_name, fp8_helpers
from glassgrad.uop.ops import GroupOp, Ops, UOp
from glassgrad.uop.rewrite import PatternMatcher, UPat
from glassgrad.uop.variable import kernel_vars

SMALL_FLOATS = (dtypes.float16, dtypes.bfloat16, *dtypes.fp8s)
# C computes these in int: a result must be cast back to its type, or it keeps bits the dtype has not (uint8 255 + 1
# is 256, not 0; bool True + True is 2, not True) wherever it is used unstored (compared, cast wider, summed)
SMALL_INTS = (dtypes.bool, dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16)
# ops whose int result can leave a small int's range; computed in unsigned int, where they wrap as defined (signed
# int overflows in 65535 * 65535 and shifts a negative value left, both undefined), the cast back keeps the low bits
WRAPPING_OPS = (Ops.ADD, Ops.MUL, Ops.NEG, Ops.SHL, Ops.MULACC)
# shifts a C vector computes as render_alu's scalar form does in each lane (no promotion to int, no wrap-around cast):
# a random draw's hash is all shifts and xors (Tensor.rand of 8192x384 spent 3.8 ms shifting lane by lane)
VECTOR_SHIFTS = {dtypes.uint32: (Ops.SHR, Ops.SHL), dtypes.uint64: (Ops.SHR, Ops.SHL), dtypes.int32: (Ops.SHR,),
                 dtypes.int64: (Ops.SHR,)}  # fmt: skip
# int and long long overflow is undefined in C and CUDA, and compilers use that (NVRTC computed (a + a) % b of an
# overflowing int32 a in 64 bits): data values of these types are computed in their unsigned type, where wrapping is
# defined. Index math is not: its bounds are known, and its freedom to not wrap keeps loops and addresses fast.
WIDE_SIGNED_INTS = {dtypes.int32: "unsigned int", dtypes.int64: "unsigned long long"}


def _compute_in_float(x: UOp) -> UOp | None:
    """half, bfloat16 and fp8 math runs in float32, rounded back after every op (as PyTorch's CPU does)."""
    if x.dtype not in SMALL_FLOATS or x.op in (Ops.CAST, Ops.BITCAST):
        return None
    src = tuple(s.cast(dtypes.float32) if s.dtype in SMALL_FLOATS else s for s in x.src)
    dtype = dtypes.bool if x.op in GroupOp.Comparison else dtypes.float32
    return UOp(x.op, dtype, src, x.arg).cast(x.dtype)


def _compare_in_float(x: UOp) -> UOp | None:
    if not any(s.dtype in SMALL_FLOATS for s in x.src):
        return None
    return x.replace(src=tuple(s.cast(dtypes.float32) if s.dtype in SMALL_FLOATS else s for s in x.src))


def _reduce_in_float(x: UOp) -> UOp:
    """A half, bfloat16 or fp8 reduction accumulates in float32 and rounds once at the end (as PyTorch does)."""
    return UOp(Ops.REDUCE, dtypes.float32, (x.src[0].cast(dtypes.float32), *x.src[1:]), x.arg).cast(x.dtype)


small_float_math = PatternMatcher([
    (UPat(GroupOp.ALU - GroupOp.Comparison, dtype=SMALL_FLOATS, name="x"), _compute_in_float),
    (UPat(GroupOp.Comparison, name="x"), _compare_in_float),
    (UPat(Ops.REDUCE, dtype=SMALL_FLOATS, name="x"), _reduce_in_float),
])  # fmt: skip


UNSIGNED = {dtypes.int8: dtypes.uint8, dtypes.int16: dtypes.uint16, dtypes.int32: dtypes.uint32,
            dtypes.int64: dtypes.uint64}  # fmt: skip


def _uses(program: list[UOp], dtype: DType) -> bool:
    """Whether a node of the program has values of `dtype` (or vectors of it), or reads some."""
    return any(u.dtype.scalar == dtype or any(s.dtype.scalar == dtype for s in u.src) for u in program)


def _may_trap(dtype: DType, divisor: UOp) -> bool:
    """Whether C's integer / or % could trap with this divisor: one that is not a constant other than 0 and -1 (the
    index math codegen makes divides by positive constants, and stays C's / and %)."""
    if divisor.op is Ops.VECTORIZE and all(s is divisor.src[0] for s in divisor.src):
        divisor = divisor.src[0]  # a constant broadcast to every lane
    return dtypes.is_int(dtype) and not (divisor.op is Ops.CONST and divisor.arg not in (0, -1))


class CStyleRenderer(Renderer):
    """Renders loops, loads, stores and math as C; subclasses change the names and a few forms."""

    kernel_prefix = "void"
    buffer_prefix = ""
    split_outer_loop = False  # CPU: the outer output loop runs from start to end, given by the caller per thread
    # the kernel's arguments that bound it: 64-bit, since a loop over more than 2**31 elements counts in int64
    outer_loop_params: tuple[str, ...] = ("long long start", "long long end")
    range_entry = False  # also render NAME_range(void** args, long long start, long long end), which calls the kernel
    restrict = "restrict"
    type_names: dict[DType, str] = {
        dtypes.bool: "_Bool", dtypes.int8: "signed char", dtypes.uint8: "unsigned char", dtypes.int16: "short",
        dtypes.uint16: "unsigned short", dtypes.int32: "int", dtypes.uint32: "unsigned int",
        dtypes.int64: "long long", dtypes.uint64: "unsigned long long", dtypes.float16: "_Float16",
        dtypes.bfloat16: "unsigned short", dtypes.float32: "float", dtypes.float64: "double",
        dtypes.fp8e4m3: "unsigned char", dtypes.fp8e5m2: "unsigned char",
    }  # fmt: skip
    dialect = small_float_math
    # floats kept as their raw bits: the C functions from their bits to float and from float to their bits
    bit_floats: dict[DType, tuple[str, str]] = {
        dtypes.bfloat16: ("gg_bf2f", "gg_f2bf"),
        **{d: (decode_name(d.name), encode_name(d.name)) for d in dtypes.fp8s},
    }

    # math functions by dtype: (float name, double name)
    float_functions = {Ops.EXP2: ("exp2f", "exp2"), Ops.LOG2: ("log2f", "log2"), Ops.SIN: ("sinf", "sin"),
                       Ops.SQRT: ("sqrtf", "sqrt"), Ops.TRUNC: ("truncf", "trunc")}  # fmt: skip

    infix: dict[Ops, str] = {
        Ops.ADD: "+", Ops.MUL: "*", Ops.IDIV: "/", Ops.MOD: "%", Ops.CMPLT: "<", Ops.CMPNE: "!=",
        Ops.AND: "&", Ops.OR: "|", Ops.XOR: "^", Ops.SHL: "<<", Ops.SHR: ">>",
    }  # fmt: skip

    fuse_mulacc = False  # MULACC as one fused multiply-add (fmaf) instead of a*b+c rounded twice
    vector_math = False  # glibc's libmvec is linked: float32 exp2, log2 and sin of a whole vector in one call
    # vector ops whose C vector form computes what the scalar form computes in each lane; the rest run lane by lane
    native_vector_ops = frozenset({Ops.ADD, Ops.MUL, Ops.AND, Ops.OR, Ops.XOR})

    def type_name(self, dtype: DType) -> str:
        if isinstance(dtype, PtrDType):
            return f"{self.type_name(dtype.base)}*"
        if dtype.count > 1:
            return f"gg_{self._fn_suffix(dtype.scalar)}x{dtype.count}"
        return self.type_names[dtype]

    def vector_typedefs(self, dtype: DType) -> list[str]:
        """A vector type (aligned like its vector) and its unaligned twin for loads and stores at any element."""
        element = "unsigned char" if dtype.scalar == dtypes.bool else self.type_names[dtype.scalar]
        name, size = self.type_name(dtype), dtype.scalar.itemsize * dtype.count
        return [
            f"typedef {element} {name} __attribute__((vector_size({size})));",
            f"typedef {element} {name}_u __attribute__((vector_size({size}), aligned({dtype.scalar.itemsize})));",
        ]

    def render_const(self, value, dtype: DType) -> str:
        if dtype.count > 1:
            return f"(({self.type_name(dtype)}){{{', '.join([self.render_const(value, dtype.scalar)] * dtype.count)}}})"
        if dtype == dtypes.bool:
            return "1" if value else "0"
        if dtype in self.bit_floats:  # stored as its bits; math on it runs in float after conversion
            return f"(({self.type_name(dtype)}){STORED_AS_BITS[dtype].encode(float(value))})"
        if dtypes.is_float(dtype):
            if math.isnan(value):
                text = "NAN"
            elif math.isinf(value):
                text = "INFINITY" if value > 0 else "(-INFINITY)"
            else:
                text = repr(float(value)) + ("" if dtype == dtypes.float64 else "f")
            return text if dtype in (dtypes.float32, dtypes.float64) else f"(({self.type_name(dtype)}){text})"
        suffix = {dtypes.int64: "ll", dtypes.uint64: "ull", dtypes.uint32: "u"}.get(dtype, "")
        if dtype == dtypes.int32 and value == -(2**31):
            return "(-2147483647-1)"
        if dtype == dtypes.int64 and value == -(2**63):
            return "(-9223372036854775807ll-1)"
        return f"{value}{suffix}"

    def render_cast(self, x: str, src: DType, dst: DType) -> str:
        if src in self.bit_floats:  # through float32, which holds each of their values
            x, src = f"{self.bit_floats[src][0]}({x})", dtypes.float32
            if dst == dtypes.float32:
                return x
        if dst in self.bit_floats:
            return f"{self.bit_floats[dst][1]}((float)({x}))"
        return f"(({self.type_name(dst)})({x}))"

    def render_bitcast(self, x: str, src: DType, dst: DType) -> str:
        return f"({{ union {{ {self.type_name(src)} a; {self.type_name(dst)} b; }} u_ = {{ .a = {x} }}; u_.b; }})"

    def render_alu(self, op: Ops, dtype: DType, args: list[str], src: tuple[UOp, ...]) -> str:
        """The C expression of one elementwise op, of `dtype`'s width (as NumPy's, wrapping around)."""
        if dtype not in SMALL_INTS or op not in (*WRAPPING_OPS, Ops.IDIV):
            return self.alu_expression(op, dtype, args, src)
        if op in WRAPPING_OPS:
            args = [f"((unsigned int){args[0]})", *args[1:]]  # the other operands follow the first into unsigned
        return f"(({self.type_name(dtype)}){self.alu_expression(op, dtype, args, src)})"  # -128 / -1 too

    def render_wrapping_alu(self, op: Ops, dtype: DType, args: list[str], src: tuple[UOp, ...]) -> str:
        """A data value's int32/int64 op, wrapping around on overflow as NumPy's and PyTorch's do."""
        if dtype not in WIDE_SIGNED_INTS or op not in WRAPPING_OPS:
            return self.render_alu(op, dtype, args, src)
        args = [f"(({WIDE_SIGNED_INTS[dtype]}){args[0]})", *args[1:]]  # the other operands follow into unsigned
        return f"(({self.type_name(dtype)}){self.alu_expression(op, dtype, args, src)})"

    def alu_expression(self, op: Ops, dtype: DType, args: list[str], src: tuple[UOp, ...]) -> str:
        """The C expression of one elementwise op, as C computes it (small ints in int)."""
        if op in self.float_functions:
            return f"{self.float_functions[op][dtype == dtypes.float64]}({args[0]})"
        if op is Ops.NEG:
            return f"(!{args[0]})" if dtype == dtypes.bool else f"(-{args[0]})"
        if op is Ops.RECIP:
            return f"({self.render_const(1.0, dtype)}/{args[0]})"
        if op is Ops.MAX:
            return f"gg_max_{self._fn_suffix(dtype)}({args[0]}, {args[1]})"
        if op is Ops.WHERE:
            return f"({args[0]}?{args[1]}:{args[2]})"
        if op is Ops.MULACC and self.fuse_mulacc and dtype in (dtypes.float32, dtypes.float64):
            return f"__builtin_fma{'f' if dtype == dtypes.float32 else ''}({args[0]}, {args[1]}, {args[2]})"
        if op is Ops.MULACC:
            return f"(({args[0]}*{args[1]})+{args[2]})"
        if op is Ops.MOD and dtypes.is_float(dtype):  # the remainder of the truncated quotient, as C's % of ints
            return f"{'fmod' if dtype == dtypes.float64 else 'fmodf'}({args[0]}, {args[1]})"
        if op in (Ops.IDIV, Ops.MOD) and _may_trap(dtype, src[1]):
            return f"gg_{op.name.lower()}_{self._fn_suffix(dtype)}({args[0]}, {args[1]})"
        if op is Ops.CMPNE and dtype == dtypes.bool and src[0].dtype == dtypes.bool:
            return f"({args[0]}!={args[1]})"
        return f"({args[0]}{self.infix[op]}{args[1]})"

    def _fn_suffix(self, dtype: DType) -> str:
        return self.type_name(dtype).replace(" ", "_")

    def render_vector_alu(self, op: Ops, dtype: DType, args: list[str], src: tuple[UOp, ...],
                          scalars: list[str | None]) -> str:  # fmt: skip
        """The C expression of one op on vectors: a vector op where C's matches the scalar one, else lane by lane.

        `scalars` holds, for each source that repeats one scalar in every lane, that scalar: C vector ops and lane-wise
        forms take it as it is."""
        if op in self.native_vector_ops and dtype.scalar != dtypes.bool:
            a, b = (s or arg for s, arg in zip(scalars, args))
            if scalars[0] is not None and scalars[1] is not None:
                a = args[0]  # lanes that all read one value are still a vector: one operand stays the vector
            return f"({a}{self.infix[op]}{b})"
        if op is Ops.NEG and dtype.scalar != dtypes.bool:
            return f"(-{args[0]})"
        if op in VECTOR_SHIFTS.get(dtype.scalar, ()):  # C shifts a vector lane by lane as the scalar form does
            return f"({args[0]}{self.infix[op]}{scalars[1] or args[1]})"
        if op is Ops.MULACC and self.fuse_mulacc and dtype.scalar in (dtypes.float32, dtypes.float64):
            return f"{self.type_name(dtype)}_fma({', '.join(args)})"
        if self._libmvec(op, dtype) is not None:
            return f"{self.type_name(dtype)}_{op.name.lower()}({args[0]})"
        lanes = []
        for i in range(dtype.count):
            lane_args = [f"{a}[{i}]" if scalar is None else scalar for a, scalar in zip(args, scalars)]
            if op is Ops.CAST:
                lanes.append(self.render_cast(lane_args[0], src[0].dtype.scalar, dtype.scalar))
            elif op is Ops.BITCAST:
                lanes.append(self.render_bitcast(lane_args[0], src[0].dtype.scalar, dtype.scalar))
            else:
                lanes.append(self.render_alu(op, dtype.scalar, lane_args, src))
        return f"(({self.type_name(dtype)}){{{', '.join(lanes)}}})"

    def render_vector_cast(self, x: str, src: DType, dst: DType) -> str | None:
        """A whole-vector conversion where C's equals the scalar cast (plain numbers, no bool or 16-bit floats)."""
        special = (dtypes.bool, dtypes.float16, *self.bit_floats)
        if src.scalar in special or dst.scalar in special:
            return None
        return f"__builtin_convertvector({x}, {self.type_name(dst)})"

    # libmvec's vector variants by lane count: (name prefix, the macro that says the CPU has them, the vector type)
    LIBMVEC = {16: ("_ZGVeN16v_", "__AVX512F__", "__m512"), 8: ("_ZGVdN8v_", "__AVX2__", "__m256"),
               4: ("_ZGVbN4v_", "__SSE2__", "__m128")}  # fmt: skip

    def _libmvec(self, op: Ops, dtype: DType) -> tuple[str, str, str] | None:
        if not self.vector_math or dtype.scalar != dtypes.float32 or op not in (Ops.EXP2, Ops.LOG2, Ops.SIN):
            return None
        return self.LIBMVEC.get(dtype.count)

    def math_helper(self, op: Ops, dtype: DType) -> list[str]:
        """T_exp2(x) and the like: libmvec's vector function where the CPU has its instructions, else lane by lane."""
        prefix, macro, vtype = self._libmvec(op, dtype)
        t, fn = self.type_name(dtype), self.float_functions[op][0]
        lanes = ", ".join(f"{fn}(x[{i}])" for i in range(dtype.count))
        return [f"#if defined(__x86_64__) && defined({macro})", f"{vtype} {prefix}{fn}({vtype});",
                f"static inline {t} {t}_{op.name.lower()}({t} x) {{ return ({t}){prefix}{fn}(({vtype})x); }}",
                "#else", f"static inline {t} {t}_{op.name.lower()}({t} x) {{ return ({t}){{{lanes}}}; }}",
                "#endif"]  # fmt: skip

    def helper_vectors(self, program: list[UOp]) -> set[DType]:
        """Vector types the rendered ops need beyond the program's own (none here)."""
        return set()

    def division_helper(self, op: Ops, dtype: DType) -> str:
        """gg_idiv_T(a, b) or gg_mod_T(a, b): C's / and % where they trap, by 0 and (signed) MIN / -1, give what PyTorch
        does instead: MIN / -1 wraps to MIN and MIN % -1 is 0; by 0 the result is 0 (a CHECK has reported it)."""
        t, fn = self.type_name(dtype), f"gg_{op.name.lower()}_{self._fn_suffix(dtype)}"
        if op is Ops.MOD:
            body = "b == 0 || b == -1 ? 0 : a % b" if not dtypes.is_unsigned(dtype) else "b == 0 ? 0 : a % b"
        elif dtypes.is_unsigned(dtype):
            body = "b == 0 ? 0 : a / b"
        else:  # -a in unsigned arithmetic, which wraps (C's signed -MIN is undefined)
            body = f"b == 0 ? 0 : b == -1 ? ({t})(0 - ({self.type_name(UNSIGNED[dtype])})a) : a / b"
        return f"static inline {t} {fn}({t} a, {t} b) {{ return {body}; }}"

    def any_helper(self, lanes: int) -> str:
        """gg_anyN(v): whether any lane of a bool vector of N lanes is set, its bytes read as whole integers."""
        t, words = self.type_name(dtypes.bool.vec(lanes)), -(-lanes // 8)
        return (
            f"static inline _Bool gg_any{lanes}({t} v) {{ unsigned long long w[{words}] = {{0}}; "
            f"__builtin_memcpy(w, &v, {lanes}); return ({' | '.join(f'w[{i}]' for i in range(words))}) != 0; }}"
        )

    def fma_helper(self, dtype: DType) -> list[str]:
        """T_fma(a, b, c): a lane-wise fused multiply-add on a vector (an instruction where the CPU has one)."""
        t, n, size = self.type_name(dtype), dtype.count, dtype.itemsize
        scalar_fma = "__builtin_fmaf" if dtype.scalar == dtypes.float32 else "__builtin_fma"
        intrinsic = {64: ("__AVX512F__", "_mm512_fmadd", "__m512"), 32: ("__FMA__", "_mm256_fmadd", "__m256"),
                     16: ("__FMA__", "_mm_fmadd", "__m128")}.get(size)  # fmt: skip
        lines = [f"static inline {t} {t}_fma({t} a, {t} b, {t} c) {{"]
        if intrinsic is not None:
            macro, fn, vtype = intrinsic
            suffix, vsuffix = ("ps", "") if dtype.scalar == dtypes.float32 else ("pd", "d")
            lines += [f"#if defined(__x86_64__) && defined({macro})",
                      f"  return ({t}){fn}_{suffix}(({vtype}{vsuffix})a, ({vtype}{vsuffix})b, ({vtype}{vsuffix})c);",
                      "#else"]  # fmt: skip
        lines += [f"  {t} r; for (int i = 0; i < {n}; i++) r[i] = {scalar_fma}(a[i], b[i], c[i]); return r;"]
        if intrinsic is not None:
            lines.append("#endif")
        return lines + ["}"]

    def prelude(self, program: list[UOp]) -> list[str]:
        """Helper functions the kernel uses (max with NaN propagation, bfloat16 and fp8 conversions)."""
        lines = ["#include <math.h>"]
        used = {u.dtype for u in program if u.dtype.count > 1 and not isinstance(u.dtype, PtrDType)}
        vectors = sorted(used | self.helper_vectors(program), key=lambda d: (d.priority, d.count))
        fused = [d for d in vectors if self.fuse_mulacc and any(u.op is Ops.MULACC and u.dtype == d for u in program)]
        maths = sorted(
            {(u.op, u.dtype) for u in program if self._libmvec(u.op, u.dtype)}, key=lambda m: (m[0].value, m[1].count)
        )
        if fused or maths:
            lines.append("#if defined(__x86_64__)\n#include <immintrin.h>\n#endif")
        for dtype in vectors:
            lines += self.vector_typedefs(dtype)
        for dtype in fused:
            lines += self.fma_helper(dtype)
        for op, dtype in maths:
            lines += self.math_helper(op, dtype)
        divisions = {
            (u.op, u.dtype.scalar) for u in program if u.op in (Ops.IDIV, Ops.MOD) and _may_trap(u.dtype, u.src[1])
        }
        for op, dtype in sorted(divisions, key=lambda d: (d[0].value, d[1].priority)):
            lines.append(self.division_helper(op, dtype))
        for lanes in sorted({u.src[0].src[2].dtype.count for u in program if u.op is Ops.STORE and len(u.src[0].src) > 2
                             and u.src[0].src[2].dtype.count > 1}):  # fmt: skip
            lines.append(self.any_helper(lanes))
        scalar_max = {u.dtype.scalar for u in program if u.op is Ops.MAX}
        for dtype in sorted(scalar_max, key=lambda d: d.priority):
            t, f = self.type_name(dtype), self._fn_suffix(dtype)
            nan_check = "a != a || " if dtypes.is_float(dtype) else ""
            lines.append(f"static inline {t} gg_max_{f}({t} a, {t} b) {{ return ({nan_check}a > b) ? a : b; }}")
        if _uses(program, dtypes.bfloat16):
            lines += [
                "static inline float gg_bf2f(unsigned short x) { union { unsigned int u; float f; } v;"
                " v.u = (unsigned int)x << 16; return v.f; }",
                "static inline unsigned short gg_f2bf(float f) { union { float f; unsigned int u; } v; v.f = f;"
                " if (f != f) return 0x7fc0; return (unsigned short)((v.u + 0x7fff + ((v.u >> 16) & 1)) >> 16); }",
            ]
        for dtype, fmt in FP8_FORMATS.items():
            if _uses(program, dtype):
                lines += fp8_helpers(dtype.name, fmt)
        return lines

    def render(self, name: str, program: list[UOp], outer_loop: UOp | None = None) -> str:
        """The whole C source of one kernel."""
        writer = CKernelWriter(self, program, outer_loop if self.split_outer_loop else None)
        return "\n".join(self.prelude(program) + [writer.write(name)]) + "\n"


def var_name(var: UOp) -> str:
    """A Variable's parameter in C: its name, apart from every name the writer makes."""
    return f"var_{var.arg[0]}"


WRITTEN_AS_MATH = GroupOp.ALU | {Ops.CAST, Ops.BITCAST}  # the ops CKernelWriter.alu writes; any other needs a handler


class CKernelWriter:
    """Walks a linear program once, naming values and writing statements."""

    def __init__(self, renderer: CStyleRenderer, program: list[UOp], outer_loop: UOp | None = None):
        self.r, self.program, self.outer_loop = renderer, program, outer_loop
        self.names: dict[UOp, str] = {}
        self.lines: list[str] = []
        self.depth = 1
        self.counts: dict[str, int] = {}
        self.uses: dict[UOp, int] = {}
        self.broadcasts: dict[UOp, str] = {}  # VECTORIZE nodes of one scalar repeated: that scalar's C expression
        self.data: set[UOp] = set()  # values computed from loads or accumulators (not from loop indices alone)
        for u in program:
            for s in u.src:
                self.uses[s] = self.uses.get(s, 0) + 1
            if u.op in (Ops.LOAD, Ops.DEFINE_ACC) or any(s in self.data for s in u.src):
                self.data.add(u)

    def fresh(self, prefix: str) -> str:
        n = self.counts.get(prefix, 0)
        self.counts[prefix] = n + 1
        return f"{prefix}{n}"

    def line(self, text: str) -> None:
        self.lines.append("  " * self.depth + text)

    def index(self, u: UOp, dtype: DType) -> tuple[str, str | None]:
        """The address expression of an INDEX read or written as `dtype` (a vector: from there on), and its guard."""
        buf, idx = self.names[u.src[0]], self.names[u.src[1]]
        gate = self.names[u.src[2]] if len(u.src) > 2 else None
        if dtype.count > 1:
            return f"*({self.r.type_name(dtype)}_u*)({buf}+{idx})", gate
        return f"*({buf}+{idx})", gate

    def write(self, name: str) -> str:
        handlers: dict[Ops, Callable[[UOp], None]] = {
            Ops.DEFINE_GLOBAL: self.define_global, Ops.DEFINE_VAR: self.define_var, Ops.CONST: self.const,
            Ops.RANGE: self.range, Ops.ENDRANGE: self.endrange, Ops.INDEX: lambda u: None, Ops.LOAD: self.load,
            Ops.STORE: self.store, Ops.DEFINE_ACC: self.define_acc, Ops.ASSIGN: self.assign,
            Ops.VECTORIZE: self.vectorize, Ops.GEP: self.gep,
        } | self.dialect_handlers()  # fmt: skip
        self.params: list[str] = []
        for u in self.program:
            if (handler := handlers.get(u.op, self.alu if u.op in WRITTEN_AS_MATH else None)) is None:
                raise NotImplementedError(f"{type(self.r).__name__} has no handler for {u.op} (kernel {name})")
            handler(u)
        buffers, variables = len(self.params), kernel_vars(self.program)
        self.params += [f"{self.r.type_name(v.dtype)} {var_name(v)}" for v in variables]
        if self.outer_loop is not None:
            self.params += self.r.outer_loop_params
        kernel = f"{self.r.kernel_prefix} {name}({', '.join(self.params)}) {{\n" + "\n".join(self.lines) + "\n}"
        if self.outer_loop is None or not self.r.range_entry:
            return kernel
        # one signature for every kernel, so that the CPU's thread pool (runtime/cpu_threads.py) can call any of them:
        # the buffers' addresses, then the Variables' values as pointer-sized ints
        values = [f"(int)(long long)args[{buffers + i}]" for i in range(len(variables))]
        args = ", ".join([f"args[{i}]" for i in range(buffers)] + values + ["start", "end"])
        return kernel + f"\nvoid {name}_range(void** args, long long start, long long end) {{ {name}({args}); }}"

    def dialect_handlers(self) -> dict[Ops, Callable[[UOp], None]]:
        """Writers for ops only a dialect has (CUDA's thread indices and shared-memory combines)."""
        return {}

    def define_global(self, u: UOp) -> None:
        self.names[u] = f"data{u.arg}"
        self.params.append(f"{self.r.buffer_prefix}{self.r.type_name(u.dtype)} {self.r.restrict} data{u.arg}")

    def define_var(self, u: UOp) -> None:
        self.names[u] = var_name(u)  # an int parameter, after the buffers (kernel_vars)

    def const(self, u: UOp) -> None:
        self.names[u] = self.r.render_const(u.arg, u.dtype)

    def range(self, u: UOp) -> None:
        name = self.names[u] = f"ridx{u.arg}"
        start, end = ("start", "end") if u is self.outer_loop else ("0", self.names[u.src[0]])
        self.line(f"for ({self.r.type_name(u.dtype)} {name} = {start}; {name} < {end}; {name}++) {{")
        self.depth += 1

    def endrange(self, u: UOp) -> None:
        self.depth -= 1
        self.line("}")

    def load(self, u: UOp) -> None:
        address, gate = self.index(u.src[0], u.dtype)
        value = address if gate is None else f"({gate}?{address}:{self.r.render_const(0, u.dtype)})"
        name = self.names[u] = self.fresh("val")
        self.line(f"{self.r.type_name(u.dtype)} {name} = {value};")

    def store(self, u: UOp) -> None:
        if len(u.src[0].src) > 2 and (lanes := u.src[0].src[2].dtype.count) > 1:
            return self.lane_store(u, lanes)
        address, gate = self.index(u.src[0], u.src[1].dtype)
        statement = self.add_store(u, address) if u.arg is Ops.ADD else f"{address} = {self.names[u.src[1]]};"
        self.line(statement if gate is None else f"if ({gate}) {statement}")

    def add_store(self, u: UOp, address: str) -> str:
        """A scatter's store, which adds its value into memory (ints wrapping around); the CPU's kernels never run two
        threads over one place (codegen/lowerer.py keeps a scatter's axis out of the loops threads split)."""
        value, dtype, src = self.names[u.src[1]], u.src[1].dtype, (u.src[1], u.src[1])
        if dtype.count > 1:
            return f"{address} = {self.r.render_vector_alu(Ops.ADD, dtype, [address, value], src, [None, None])};"
        return f"{address} = {self.r.render_wrapping_alu(Ops.ADD, dtype, [address, value], src)};"

    def lane_store(self, u: UOp, lanes: int) -> None:
        """A store to one address gated by a vector (a check's record of a failure): where any lane's gate holds, the
        value of such a lane. The lanes are tested together, so a check that passes costs one test a vector."""
        buf, idx, gate = (self.names[s] for s in u.src[0].src)
        value = f"{self.names[u.src[1]]}[l]" if u.src[1].dtype.count > 1 else self.names[u.src[1]]
        self.line(
            f"if (gg_any{lanes}({gate})) for (int l = 0; l < {lanes}; l++) if ({gate}[l]) *({buf}+{idx}) = {value};"
        )

    def define_acc(self, u: UOp) -> None:
        name = self.names[u] = self.fresh("acc")
        self.line(f"{self.r.type_name(u.dtype)} {name} = {self.names[u.src[0]]};")

    def assign(self, u: UOp) -> None:
        self.line(f"{self.names[u.src[0]]} = {self.names[u.src[1]]};")

    def vectorize(self, u: UOp) -> None:
        if all(s is u.src[0] for s in u.src):  # a broadcast: ops that take a scalar beside a vector read the scalar
            self.broadcasts[u] = self.names[u.src[0]]
        name, t = self.fresh("vec"), self.r.type_name(u.dtype)
        self.names[u] = name
        self.line(f"{t} {name} = ({t}){{{', '.join(self.names[s] for s in u.src)}}};")

    def gep(self, u: UOp) -> None:
        self.names[u] = f"{self.names[u.src[0]]}[{u.arg}]"

    def alu(self, u: UOp) -> None:
        args = [self.names[s] for s in u.src]
        if u.dtype.count > 1:  # a vector: always its own statement, since lane-wise forms read it lane by lane
            scalars = [self.broadcasts.get(s) for s in u.src]
            expr = None
            if u.op is Ops.CAST:
                expr = self.r.render_vector_cast(args[0], u.src[0].dtype, u.dtype)
            expr = expr or self.r.render_vector_alu(u.op, u.dtype, args, u.src, scalars)
            name = self.names[u] = self.fresh("alu")
            self.line(f"{self.r.type_name(u.dtype)} {name} = {expr};")
            return
        if u.op is Ops.CAST:
            expr = self.r.render_cast(args[0], u.src[0].dtype, u.dtype)
        elif u.op is Ops.BITCAST:
            expr = self.r.render_bitcast(args[0], u.src[0].dtype, u.dtype)
        elif u in self.data:
            expr = self.r.render_wrapping_alu(u.op, u.dtype, args, u.src)
        else:
            expr = self.r.render_alu(u.op, u.dtype, args, u.src)
        if self.uses.get(u, 0) <= 1:
            self.names[u] = expr
            return
        name = self.names[u] = self.fresh("alu")
        self.line(f"{self.r.type_name(u.dtype)} {name} = {expr};")


SIGNED_BOOLS = dtypes.int8  # a bool vector's bytes read as signed, to negate 1 into a mask of -1
MASK_INTS = {1: dtypes.int8, 2: dtypes.int16, 4: dtypes.int32, 8: dtypes.int64}  # a lane mask's element, by size


def _maskable(dtype: DType) -> bool:
    """Whether vectors of `dtype` compare and select through masks (16-bit floats go lane by lane, as their math)."""
    return dtype not in (dtypes.float16, dtypes.bfloat16)


class CRenderer(CStyleRenderer):
    """Plain C for the CPU device, compiled by gcc or clang."""

    device = "CPU"
    split_outer_loop = True
    range_entry = True
    fuse_mulacc = True  # sums of products accumulate with fused multiply-adds, as BLAS libraries do
    vector_lanes = (2, 4, 8, 16)
    packs_panels = True
    buffers_windows = True
    cache_bytes = host_cache_bytes(2) // 2  # half of a core's L2: the rest holds the outputs and the other loads
    fused_attention = True

    def render_attention(self, name: str, spec: AttentionSpec) -> tuple[str, tuple[int, ...], None]:
        """The CPU's fused attention kernel: threads split its tasks, a batch entry and block of query rows each."""
        return render_c_attention(self, name, spec), (c_tasks(spec),), None

    def render_vector_alu(self, op: Ops, dtype: DType, args: list[str], src: tuple[UOp, ...],
                          scalars: list[str | None]) -> str:  # fmt: skip
        """Comparisons, bool logic and selects as whole-vector ops. A C vector comparison gives a mask (-1 or 0 in
        each lane, integers of the operands' size), negated to the 0 or 1 of a bool vector; a select blends the bits
        of its two values through the mask widened to their size, and a max through its own comparison's mask; a
        reciprocal is one vector division. Lane by lane, a ReLU was 5 scalar ops a lane."""
        if op in (Ops.CMPLT, Ops.CMPNE) and _maskable(src[0].dtype.scalar):
            return f"__builtin_convertvector(-({args[0]}{self.infix[op]}{args[1]}), {self.type_name(dtype)})"
        if op in (Ops.AND, Ops.OR, Ops.XOR) and dtype.scalar == dtypes.bool:
            return f"({args[0]}{self.infix[op]}{args[1]})"  # 0 or 1 in, 0 or 1 out
        if op is Ops.WHERE and _maskable(dtype.scalar):
            # negated as signed bytes (0 or -1), then sign-extended: GCC 12 scalarizes the zero-extension of a bool
            # vector that a comparison just narrowed, lane by lane (exact GELU's selects: 5.5 -> 0.8 ms)
            mask = self.type_name(self._mask(dtype))
            widened = f"__builtin_convertvector(-({self.type_name(SIGNED_BOOLS.vec(dtype.count))}){args[0]}, {mask})"
            return self._blend(dtype, widened, args[1], args[2])
        if op is Ops.MAX and _maskable(dtype.scalar) and dtype.scalar != dtypes.bool:
            # a > b, or a NaN (the scalar gg_max's choice), as a mask of the operands' size: the row max of a
            # softmax over 8192 logits was 16 scalar maxes a vector
            nan = f"({args[0]}!={args[0]})|" if dtypes.is_float(dtype.scalar) else ""
            return self._blend(dtype, f"({nan}({args[0]}>{args[1]}))", args[0], args[1])
        if op is Ops.RECIP and dtype.scalar in (
            dtypes.float32,
            dtypes.float64,
        ):  # a vector division, exact in each lane
            return f"({self.render_const(1.0, dtype.scalar)}/{args[0]})"
        return super().render_vector_alu(op, dtype, args, src, scalars)

    def _blend(self, dtype: DType, mask: str, a: str, b: str) -> str:
        """The lanes of a where the mask (-1 or 0 in each lane, integers of the values' size) is set, else b's."""
        t, m = self.type_name(dtype), self.type_name(self._mask(dtype))
        return f"(({t})((({m}){a} & ({m})({mask})) | (({m}){b} & ~({m})({mask}))))"

    @staticmethod
    def _mask(dtype: DType) -> DType:
        return MASK_INTS[dtype.scalar.itemsize].vec(dtype.count)

    def helper_vectors(self, program: list[UOp]) -> set[DType]:
        """The integer vectors a select's mask is widened to, and the signed bytes it is widened from."""
        selects = [u.dtype for u in program if u.op is Ops.WHERE and u.dtype.count > 1 and _maskable(u.dtype.scalar)]
        maxes = [u.dtype for u in program if u.op is Ops.MAX and u.dtype.count > 1 and _maskable(u.dtype.scalar)]
        return {self._mask(d) for d in selects + maxes} | {SIGNED_BOOLS.vec(d.count) for d in selects}
