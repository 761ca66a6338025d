"""exec_alu, exec_cast and exec_bitcast against NumPy, on the values that break naive code."""

import math
import struct
import warnings

import numpy as np
import pytest

from glassgrad.dtype import dtypes
from glassgrad.uop.alu import exec_alu, exec_bitcast, exec_cast, python_alu
from glassgrad.uop.ops import GroupOp, Ops

NP = {dtypes.float32: np.float32, dtypes.float16: np.float16, dtypes.int32: np.int32, dtypes.int8: np.int8,
      dtypes.uint8: np.uint8, dtypes.bool: np.bool_, dtypes.int16: np.int16, dtypes.uint16: np.uint16,
      dtypes.uint32: np.uint32}  # fmt: skip

AWKWARD_FLOATS = [0.0, -0.0, 1.0, -1.0, 0.5, -1.5, 2.5, 3.0, -7.25, 0.1, 100.0, 1e-8, 1e-45, 6e-8, 65504.0, 70000.0,
                  1e30, 3.4e38, -3.4e38, math.inf, -math.inf, math.nan]  # fmt: skip
AWKWARD_INTS = {
    dtypes.int32: [0, 1, -1, 2, -2, 3, 7, -7, 100, -100, 123456789, -987654321, 2**31 - 1, -(2**31)],
    dtypes.int8: [0, 1, -1, 2, 3, 7, -7, 100, -100, 127, -128],
    dtypes.uint8: [0, 1, 2, 3, 7, 100, 200, 255],
}


def as_dtype(values, dtype):
    """The values rounded to `dtype`, as Python scalars (NumPy rounds, as a kernel's input would be)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return [x.item() for x in np.array(values, dtype=np.float64).astype(NP[dtype])]


def same(ours, reference, signed_zero: bool = True) -> bool:
    """Bit-for-bit equality of two numbers: NaN equals NaN, and -0.0 differs from 0.0 (when `signed_zero`)."""
    reference = reference.item() if isinstance(reference, np.generic) else reference
    if isinstance(reference, float):
        if math.isnan(reference):
            return isinstance(ours, float) and math.isnan(ours)
        sign_matches = math.copysign(1, ours) == math.copysign(1, reference) or not signed_zero
        return ours == reference and sign_matches
    return ours == reference and type(ours) is type(reference)


def numpy_op(fn, dtype, *columns):
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*(np.array(c, dtype=NP[dtype]) for c in columns))


def check_against_numpy(op, dtype, columns, fn, result_dtype=None):
    expected = numpy_op(fn, dtype, *columns)
    for i, operands in enumerate(zip(*columns, strict=True)):
        ours, want = exec_alu(op, result_dtype or dtype, list(operands)), expected[i]
        # C leaves the sign of max(0.0, -0.0) open, and NumPy's float16 and float32 answer differently
        assert same(ours, want, signed_zero=op is not Ops.MAX), f"{op} {dtype} {operands}: {ours!r} vs numpy {want!r}"


def pairs(values):
    return [a for a in values for _ in values], [b for _ in values for b in values]


# ---- floats ----

FLOAT_BINARY = [(Ops.ADD, np.add, None), (Ops.MUL, np.multiply, None), (Ops.MAX, np.maximum, None),
                (Ops.CMPLT, np.less, dtypes.bool), (Ops.CMPNE, np.not_equal, dtypes.bool)]  # fmt: skip
FLOAT_UNARY_EXACT = [(Ops.NEG, np.negative), (Ops.SQRT, np.sqrt), (Ops.RECIP, np.reciprocal), (Ops.TRUNC, np.trunc)]


@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.float16])
@pytest.mark.parametrize("op,fn,result_dtype", FLOAT_BINARY)
def test_float_binary_matches_numpy(op, fn, result_dtype, dtype):
    check_against_numpy(op, dtype, pairs(as_dtype(AWKWARD_FLOATS, dtype)), fn, result_dtype)


@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.float16])
@pytest.mark.parametrize("op,fn", FLOAT_UNARY_EXACT)
def test_float_unary_matches_numpy(op, fn, dtype):
    check_against_numpy(op, dtype, [as_dtype(AWKWARD_FLOATS, dtype)], fn)


def ulps_apart(a: float, b: float, dtype) -> float:
    spacing = float(np.spacing(NP[dtype](abs(b))))
    return abs(a - b) / spacing if spacing else abs(a - b)


@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.float16])
@pytest.mark.parametrize("op,fn", [(Ops.EXP2, np.exp2), (Ops.LOG2, np.log2), (Ops.SIN, np.sin)])
def test_float_transcendental_within_an_ulp_of_numpy(op, fn, dtype):
    values = as_dtype(AWKWARD_FLOATS + [-200.0, 127.5, 128.0, -126.0, 3.14159, 1e4], dtype)
    expected = numpy_op(fn, dtype, values)
    for x, want in zip(values, expected.tolist(), strict=True):
        ours = exec_alu(op, dtype, [x])
        if math.isnan(want) or math.isinf(want) or want == 0:
            assert same(ours, want), f"{op}({x!r}) = {ours!r}, numpy {want!r}"
        else:
            assert ulps_apart(ours, want, dtype) <= 1, f"{op}({x!r}) = {ours!r}, numpy {want!r}"


def test_mulacc_rounds_the_product_then_the_sum():
    a, b, c = as_dtype([1 + 2**-12, 1 + 2**-12, -1.0], dtypes.float32)
    expected = np.float32(a) * np.float32(b) + np.float32(c)
    assert same(exec_alu(Ops.MULACC, dtypes.float32, [a, b, c]), expected)


@pytest.mark.parametrize(
    "op,operands,expected",
    [
        (Ops.LOG2, [0.0], -math.inf),
        (Ops.LOG2, [-0.0], -math.inf),
        (Ops.LOG2, [-1.0], math.nan),
        (Ops.LOG2, [math.inf], math.inf),
        (Ops.SQRT, [-1.0], math.nan),
        (Ops.SQRT, [-0.0], -0.0),
        (Ops.RECIP, [0.0], math.inf),
        (Ops.RECIP, [-0.0], -math.inf),
        (Ops.RECIP, [-math.inf], -0.0),
        (Ops.EXP2, [200.0], math.inf),
        (Ops.EXP2, [-math.inf], 0.0),
        (Ops.SIN, [math.inf], math.nan),
        (Ops.TRUNC, [-0.5], -0.0),
        (Ops.TRUNC, [-math.inf], -math.inf),
        (Ops.MAX, [math.nan, 1.0], math.nan),
        (Ops.MAX, [1.0, math.nan], math.nan),
        (Ops.ADD, [3e38, 3e38], math.inf),
        (Ops.MUL, [math.inf, 0.0], math.nan),
    ],
)
def test_float_ieee_special_cases(op, operands, expected):
    assert same(exec_alu(op, dtypes.float32, operands), expected)


def test_exp2_overflow_of_a_double_is_inf_not_an_exception():
    assert exec_alu(Ops.EXP2, dtypes.float64, [1e6]) == math.inf


def test_float32_result_is_rounded_to_float32():
    assert exec_alu(Ops.ADD, dtypes.float32, [0.1, 0.2]) == float(np.float32(0.1) + np.float32(0.2))
    assert exec_alu(Ops.MUL, dtypes.float16, [300.0, 300.0]) == math.inf


# ---- ints ----

INT_BINARY = [(Ops.ADD, np.add, None), (Ops.MUL, np.multiply, None), (Ops.MAX, np.maximum, None),
              (Ops.CMPLT, np.less, dtypes.bool), (Ops.CMPNE, np.not_equal, dtypes.bool),
              (Ops.AND, np.bitwise_and, None), (Ops.OR, np.bitwise_or, None),
              (Ops.XOR, np.bitwise_xor, None)]  # fmt: skip


def c_division(a, b):
    """C's a / b in NumPy: the quotient of magnitudes, with the sign of a*b; dividing by zero gives 0."""
    a, b = a.astype(np.int64), b.astype(np.int64)
    safe = np.where(b == 0, 1, b)
    quotient = np.abs(a) // np.abs(safe) * np.sign(a) * np.sign(safe)
    return np.where(b == 0, 0, quotient)


def c_remainder(a, b):
    return np.fmod(a.astype(np.int64), np.where(b == 0, 1, b).astype(np.int64)) * (b != 0)


@pytest.mark.parametrize("dtype", list(AWKWARD_INTS))
@pytest.mark.parametrize("op,fn,result_dtype", INT_BINARY)
def test_int_binary_matches_numpy(op, fn, result_dtype, dtype):
    check_against_numpy(op, dtype, pairs(AWKWARD_INTS[dtype]), fn, result_dtype)


@pytest.mark.parametrize("dtype", list(AWKWARD_INTS))
@pytest.mark.parametrize("op,fn", [(Ops.IDIV, c_division), (Ops.MOD, c_remainder)])
def test_int_division_matches_c(op, fn, dtype):
    check_against_numpy(op, dtype, pairs(AWKWARD_INTS[dtype]), lambda a, b: fn(a, b).astype(NP[dtype]))


@pytest.mark.parametrize("dtype", list(AWKWARD_INTS))
def test_int_neg_wraps_like_numpy(dtype):
    check_against_numpy(Ops.NEG, dtype, [AWKWARD_INTS[dtype]], np.negative)


@pytest.mark.parametrize("dtype", list(AWKWARD_INTS))
@pytest.mark.parametrize("op,fn", [(Ops.SHL, np.left_shift), (Ops.SHR, np.right_shift)])
def test_int_shifts_match_numpy(op, fn, dtype):
    values, counts = AWKWARD_INTS[dtype], list(range(8 * dtype.itemsize))
    columns = [[v for v in values for _ in counts], [n for _ in values for n in counts]]
    check_against_numpy(op, dtype, columns, fn)


@pytest.mark.parametrize(
    "op,operands,expected",
    [
        (Ops.IDIV, [-7, 2], -3),
        (Ops.MOD, [-7, 2], -1),
        (Ops.MOD, [7, -2], 1),
        (Ops.IDIV, [5, 0], 0),
        (Ops.MOD, [5, 0], 0),
        (Ops.IDIV, [-(2**31), -1], -(2**31)),
        (Ops.ADD, [2**31 - 1, 1], -(2**31)),
        (Ops.MUL, [65536, 65536], 0),
        (Ops.SHL, [1, 31], -(2**31)),
        (Ops.SHL, [1, 40], 0),
        (Ops.SHR, [-8, 1], -4),
        (Ops.WHERE, [True, 1, 2], 1),
        (Ops.WHERE, [False, 1, 2], 2),
        (Ops.MULACC, [3, 4, 5], 17),
    ],
)
def test_int32_c_semantics(op, operands, expected):
    assert exec_alu(op, dtypes.int32, operands) == expected


def test_bool_logic():
    assert exec_alu(Ops.AND, dtypes.bool, [True, False]) is False
    assert exec_alu(Ops.OR, dtypes.bool, [True, False]) is True
    assert exec_alu(Ops.XOR, dtypes.bool, [True, True]) is False
    assert exec_alu(Ops.CMPNE, dtypes.bool, [math.nan, math.nan]) is True
    assert exec_alu(Ops.CMPLT, dtypes.bool, [math.nan, 1.0]) is False


def test_every_alu_op_has_a_row():
    assert set(python_alu) == set(GroupOp.ALU)


# ---- casts and bitcasts ----


@pytest.mark.parametrize("to", [dtypes.int32, dtypes.int8, dtypes.uint8, dtypes.bool])
def test_cast_float_to_int_truncates_toward_zero(to):
    values = [v for v in as_dtype(AWKWARD_FLOATS + [-2.7, 2.7, 255.9, -128.5], dtypes.float32)
              if math.isfinite(v) and dtypes.min(to) <= math.trunc(v) <= dtypes.max(to)]  # fmt: skip
    expected = numpy_op(lambda a: a.astype(NP[to]), dtypes.float32, values)
    for v, want in zip(values, expected, strict=True):
        assert same(exec_cast(v, dtypes.float32, to), want), f"({to}){v!r}"


def test_cast_float_to_bool_nan_is_true():
    assert exec_cast(math.nan, dtypes.float32, dtypes.bool) is True
    assert exec_cast(-0.0, dtypes.float32, dtypes.bool) is False


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_cast_nonfinite_float_to_int_is_zero(value):
    assert exec_cast(value, dtypes.float32, dtypes.int32) == 0


@pytest.mark.parametrize("frm,to", [(dtypes.float32, dtypes.float16), (dtypes.float16, dtypes.float32),
                                    (dtypes.int32, dtypes.float32), (dtypes.int32, dtypes.float16),
                                    (dtypes.int32, dtypes.int8), (dtypes.int32, dtypes.uint8),
                                    (dtypes.uint8, dtypes.int8), (dtypes.int8, dtypes.int32),
                                    (dtypes.bool, dtypes.float32), (dtypes.int32, dtypes.bool)])  # fmt: skip
def test_cast_matches_numpy(frm, to):
    if dtypes.is_float(frm):
        values = as_dtype(AWKWARD_FLOATS + [65520.0, 65519.0, 2.0**-25, 1 + 2**-11], frm)
    elif frm == dtypes.bool:
        values = [False, True]
    else:
        values = AWKWARD_INTS.get(frm, AWKWARD_INTS[dtypes.int32])
        values = [v for v in values if dtypes.min(frm) <= v <= dtypes.max(frm)]
    expected = numpy_op(lambda a: a.astype(NP[to]), frm, values)
    for v, want in zip(values, expected, strict=True):
        assert same(exec_cast(v, frm, to), want), f"({to}){v!r}: ours {exec_cast(v, frm, to)!r}, numpy {want!r}"


@pytest.mark.parametrize("frm,to", [(dtypes.float32, dtypes.int32), (dtypes.float32, dtypes.uint32),
                                    (dtypes.float16, dtypes.int16), (dtypes.float16, dtypes.uint16),
                                    (dtypes.int8, dtypes.uint8), (dtypes.uint8, dtypes.int8),
                                    (dtypes.int32, dtypes.float32)])  # fmt: skip
def test_bitcast_matches_numpy_view(frm, to):
    values = as_dtype(AWKWARD_FLOATS, frm) if dtypes.is_float(frm) else AWKWARD_INTS.get(frm, [0, 1, -1, 127, -128])
    expected = np.array(values, dtype=NP[frm]).view(NP[to])
    for v, want in zip(values, expected, strict=True):
        assert same(exec_bitcast(v, frm, to), want), f"bitcast<{to}>({v!r})"


def test_bitcast_bfloat16_through_its_bits():
    assert exec_bitcast(1.0, dtypes.bfloat16, dtypes.uint16) == 0x3F80
    assert exec_bitcast(-2.0, dtypes.bfloat16, dtypes.int16) == struct.unpack("<h", b"\x00\xc0")[0]
    assert exec_bitcast(0x3FC0, dtypes.uint16, dtypes.bfloat16) == 1.5
    assert math.isnan(exec_bitcast(0x7FC0, dtypes.uint16, dtypes.bfloat16))


def test_bitcast_between_sizes_names_both_dtypes():
    with pytest.raises(ValueError, match="float.*char"):
        exec_bitcast(1.0, dtypes.float32, dtypes.int8)
