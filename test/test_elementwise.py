"""Elementwise math, comparisons, casts and type promotion against NumPy, on every device."""

import math
import operator

import numpy as np
import pytest

from glassgrad import GlobalCounters, Tensor, dtypes
from glassgrad.dtype import DType
from helpers import LAYOUTS, assert_matches, check, make_input

# Pairs of shapes that broadcast, including empty, single-element and odd sizes.
BROADCAST_SHAPES = [
    ((3,), (3,)), ((1,), (1,)), ((0,), (0,)), ((0,), (1,)), ((2, 3), (3,)), ((2, 1), (1, 3)), ((3, 1, 5), (4, 1)),
    ((), (2, 3)), ((2, 0), (2, 1)), ((2, 0, 3), (2, 1, 3)), ((0, 5, 4), (4,)),
]  # fmt: skip

ARITHMETIC = {"add": operator.add, "sub": operator.sub, "mul": operator.mul, "truediv": operator.truediv}


@pytest.mark.parametrize("shapes", BROADCAST_SHAPES, ids=str)
@pytest.mark.parametrize("op", ARITHMETIC)
def test_arithmetic_of_two_tensors_broadcasts_like_numpy(device, op, shapes):
    fn = ARITHMETIC[op]
    low = 0.5 if op == "truediv" else -3  # keep divisors away from zero
    check(shapes, fn, fn, device, low=low)


def test_empty_results_run_no_kernel(device):
    for shape in [(0,), (0, 3), (2, 0, 3), (0, 5, 4)]:
        _, x = make_input(shape, device)
        GlobalCounters.reset()
        assert (x + 1).numpy().shape == shape and GlobalCounters.kernel_count == 0


@pytest.mark.parametrize("layout", LAYOUTS)
def test_arithmetic_reads_non_contiguous_inputs(device, layout):
    check([(3, 4), (3, 4)], lambda x, y: x * y + x - y, lambda x, y: x * y + x - y, device, layout=layout)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_odd_shaped_three_dim_chain_reads_non_contiguous_inputs(device, layout):
    check([(2, 3, 5)], lambda x: (x + 1) * x - 2, lambda x: (x + 1) * x - 2, device, layout=layout)


@pytest.mark.parametrize(
    "fn",
    [lambda x: x + 2, lambda x: 2 + x, lambda x: x - 1.5, lambda x: 1.5 - x, lambda x: x * 3, lambda x: 3 * x,
     lambda x: x / 4, lambda x: 4 / x, lambda x: -x],
    ids=["x+2", "2+x", "x-1.5", "1.5-x", "x*3", "3*x", "x/4", "4/x", "-x"],
)  # fmt: skip
def test_arithmetic_with_python_scalars_on_either_side(device, fn):
    check([(2, 3)], fn, fn, device, low=0.5)


@pytest.mark.parametrize(
    "fn", [lambda x: x + 2, lambda x: 7 - x, lambda x: x * -3, lambda x: -x], ids=["x+2", "7-x", "x*-3", "-x"]
)
def test_int_arithmetic_with_int_scalars_stays_int32_and_exact(device, fn):
    check([(5,)], fn, fn, device, dtype=dtypes.int32, low=-100, high=100)


def test_int_true_division_gives_float32(device):
    check([(4,), (4,)], operator.truediv, operator.truediv, device, dtype=dtypes.int32, low=1, high=9,
          expected_dtype=dtypes.float32)  # fmt: skip


# ---- type promotion: PyTorch's rules, with Python ints as int32 and floats as float32 ----

PROMOTIONS = [
    (dtypes.int32, 1.5, dtypes.float32),
    (dtypes.bool, 1, dtypes.int32),
    (dtypes.bool, 1.5, dtypes.float32),
    (dtypes.bool, True, dtypes.bool),
    (dtypes.int8, 100, dtypes.int8),  # a scalar never widens a tensor of its own kind
    (dtypes.uint8, 1.0, dtypes.float32),
    (dtypes.float16, 2.5, dtypes.float16),
    (dtypes.int64, 3, dtypes.int64),
    (dtypes.uint8, dtypes.int8, dtypes.int16),
    (dtypes.float16, dtypes.bfloat16, dtypes.float32),
    (dtypes.int8, dtypes.int64, dtypes.int64),
    (dtypes.int32, dtypes.float16, dtypes.float16),
    (dtypes.bool, dtypes.uint8, dtypes.uint8),
    (dtypes.float32, dtypes.float64, dtypes.float64),
    (dtypes.uint16, dtypes.int16, dtypes.int32),  # PyTorch refuses these two; NumPy's rule: the next wider signed
    (dtypes.uint32, dtypes.int32, dtypes.int64),
]


@pytest.mark.parametrize("left, right, expected", PROMOTIONS, ids=str)
def test_addition_promotes_dtypes_like_pytorch(device, left, right, expected):
    left_values = [1, 0, 1]
    right_values = [1, 1, 0] if isinstance(right, DType) else [right] * 3
    x = Tensor(left_values, device=device, dtype=left)
    other = Tensor(right_values, device=device, dtype=right) if isinstance(right, DType) else right
    want = [a + b for a, b in zip(left_values, right_values, strict=True)]
    if expected == dtypes.bool:
        want = [bool(v) for v in want]
    for result in (x + other, other + x):
        assert result.dtype == expected
        assert result.tolist() == pytest.approx(want)


def test_int32_plus_float_scalar_keeps_the_fraction(device):
    assert (Tensor([1, -2], device=device) + 1.5).tolist() == [2.5, -0.5]


# ---- comparisons and selection ----

COMPARISONS = {"lt": operator.lt, "le": operator.le, "gt": operator.gt, "ge": operator.ge, "eq": operator.eq,
               "ne": operator.ne}  # fmt: skip


@pytest.mark.parametrize("op", COMPARISONS)
def test_comparison_of_tensors_gives_bool(device, op):
    fn = COMPARISONS[op]
    # values in [-2, 2), so that equal values occur; the second pair compares float32 with int8
    check([(2, 3), (3,)], fn, fn, device, dtype=dtypes.int32, low=-2, high=2)
    check([(2, 3), (2, 1)], lambda x, y: fn(x.float(), y), lambda x, y: fn(x, y), device, dtype=dtypes.int8,
          low=-2, high=2, expected_dtype=dtypes.bool)  # fmt: skip


def test_comparisons_and_maximum_with_nan(device):
    values = np.array([np.nan, 1.0, np.nan, -np.inf], dtype=np.float32)
    others = np.array([1.0, np.nan, np.nan, np.inf], dtype=np.float32)
    x, y = Tensor(values, device=device), Tensor(others, device=device)
    for name, fn in COMPARISONS.items():
        assert fn(x, y).tolist() == fn(values, others).tolist(), name
    assert_matches(x.maximum(y), np.maximum(values, others))
    assert_matches(x.minimum(y), np.minimum(values, others))


@pytest.mark.parametrize("op", COMPARISONS)
def test_comparison_with_scalar_on_either_side(device, op):
    fn = COMPARISONS[op]
    check([(6,)], lambda x: fn(x, 1), lambda x: fn(x, 1), device, dtype=dtypes.int32, low=-2, high=3)
    check([(6,)], lambda x: fn(0.5, x), lambda x: fn(0.5, x), device, low=-1, high=2)


def test_comparisons_read_transposed_input(device):
    check([(2, 3)], lambda x: x.T < x.T.flip(0), lambda x: x.T < x.T[::-1], device)


def test_where_selects_with_broadcasting(device):
    check([(2, 3), (3,), (2, 1)], lambda c, x, y: (c > 0).where(x, y), lambda c, x, y: np.where(c > 0, x, y), device)


def test_where_with_scalars_and_int_condition(device):
    check([(5,)], lambda c: c.where(1.5, -2.0), lambda c: np.where(c != 0, 1.5, -2.0).astype(np.float32), device,
          dtype=dtypes.int32, low=-1, high=2)  # fmt: skip
    check([(5,)], lambda x: (x > 0).where(x, 0), lambda x: np.where(x > 0, x, 0), device, dtype=dtypes.int32, low=-5,
          high=5)  # fmt: skip


@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.int32], ids=str)
def test_maximum_and_minimum(device, dtype):
    check([(2, 3), (3,)], Tensor.maximum, np.maximum, device, dtype=dtype)
    check([(2, 3), (3,)], Tensor.minimum, np.minimum, device, dtype=dtype)
    check([(4,)], lambda x: x.maximum(1), lambda x: np.maximum(x, 1).astype(x.dtype), device, dtype=dtype)
    check([(4,)], lambda x: x.minimum(-1), lambda x: np.minimum(x, -1).astype(x.dtype), device, dtype=dtype)


def test_maximum_of_bools_is_logical_or(device):
    x, y = Tensor([True, True, False, False], device=device), Tensor([True, False, True, False], device=device)
    assert x.maximum(y).tolist() == [True, True, True, False]
    assert x.minimum(y).tolist() == [True, False, False, False]


# ---- unary math ----


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


# (name, ours, numpy's, low, high, rtol): exp, log and the trig functions go through exp2/log2/sin and lose a few ulps
UNARY = [
    ("exp", Tensor.exp, np.exp, -5, 5, 1e-5),
    ("log", Tensor.log, np.log, 0.01, 100, 1e-5),
    ("sqrt", Tensor.sqrt, np.sqrt, 0, 100, 1e-6),
    ("sin", Tensor.sin, np.sin, -6, 6, 1e-4),
    ("cos", Tensor.cos, np.cos, -6, 6, 1e-4),
    ("relu", Tensor.relu, lambda x: np.maximum(x, 0), -3, 3, 0),
    ("sigmoid", Tensor.sigmoid, _sigmoid, -8, 8, 1e-5),
    ("abs", Tensor.abs, np.abs, -3, 3, 0),
    ("neg", Tensor.neg, np.negative, -3, 3, 0),
    ("square", Tensor.square, np.square, -3, 3, 1e-6),
    ("reciprocal", Tensor.reciprocal, np.reciprocal, 0.5, 3, 1e-6),
]


@pytest.mark.parametrize("name, ours, theirs, low, high, rtol", UNARY, ids=[u[0] for u in UNARY])
@pytest.mark.parametrize("shape", [(0,), (1,), (3, 5)], ids=str)
def test_unary_math_matches_numpy(device, name, ours, theirs, low, high, rtol, shape):
    check([shape], ours, theirs, device, low=low, high=high, rtol=rtol, atol=1e-6)


@pytest.mark.parametrize("name, ours, theirs, low, high, rtol", UNARY[:5], ids=[u[0] for u in UNARY[:5]])
def test_float_math_on_int_input_gives_float32(device, name, ours, theirs, low, high, rtol):
    check([(5,)], ours, lambda x: theirs(x.astype(np.float32)), device, dtype=dtypes.int32, low=max(low, 1),
          high=min(high, 6), rtol=rtol)  # fmt: skip


@pytest.mark.parametrize("layout", ["transposed", "flipped", "expanded"])
def test_unary_math_reads_non_contiguous_inputs(device, layout):
    check([(3, 2)], lambda x: x.exp().sin() + x.abs().sqrt(), lambda x: np.sin(np.exp(x)) + np.sqrt(np.abs(x)),
          device, layout=layout, rtol=1e-4, atol=1e-5)  # fmt: skip


def test_abs_and_relu_of_ints_stay_exact(device):
    check([(6,)], Tensor.abs, np.abs, device, dtype=dtypes.int32, low=-50, high=50)
    check([(6,)], Tensor.relu, lambda x: np.maximum(x, 0), device, dtype=dtypes.int32, low=-50, high=50)


def test_exp_and_log_special_values(device):
    x = Tensor([0.0, -math.inf, math.inf, 1.0], device=device)
    assert x.exp().tolist() == pytest.approx([1.0, 0.0, math.inf, math.e])
    logs = Tensor([1.0, 0.0, -1.0, math.inf], device=device).log().tolist()
    assert logs[0] == 0.0 and logs[1] == -math.inf and math.isnan(logs[2]) and logs[3] == math.inf


# ---- powers ----


@pytest.mark.parametrize("exponent", [0, 1, 2, 3, 5, -1, -2], ids=str)
def test_pow_with_int_exponent(device, exponent):
    low = 0.5 if exponent < 0 else -3
    check([(2, 3)], lambda x: x**exponent, lambda x: x**exponent, device, low=low, rtol=1e-5)


@pytest.mark.parametrize("exponent", [0.5, 2.5, -1.5, 0.0, 2.0, 17.0], ids=str)
def test_pow_with_float_exponent_of_positive_base(device, exponent):
    check([(2, 3)], lambda x: x**exponent, lambda x: x ** np.float32(exponent), device, low=0.1, high=2, rtol=1e-5)


def test_pow_of_negative_base(device):
    x = np.array([-2.0, -0.5, -3.0, 2.0], dtype=np.float32)
    for exponent in (2.0, 3.0, 0.5):
        with np.errstate(invalid="ignore"):
            want = x ** np.float32(exponent)
        assert_matches(Tensor(x, device=device) ** exponent, want)


def test_pow_with_tensor_exponent_and_reversed(device):
    check([(4,), (4,)], lambda x, y: x**y, lambda x, y: x**y, device, low=0.2, high=2)
    check([(4,)], lambda x: 2**x, lambda x: np.float32(2) ** x, device, low=-3, high=3)


def test_int_pow_with_int_exponent_is_exact_int32(device):
    check([(6,)], lambda x: x**3, lambda x: x**3, device, dtype=dtypes.int32, low=-20, high=20)


# ---- integer division and remainder: floor division and Python's %, as in Python and NumPy ----


def test_int_floor_division_and_remainder_follow_python(device):
    # every sign combination, with and without a remainder
    a = np.array([7, -7, 7, -7, 6, -6, 0, 1], dtype=np.int32)
    b = np.array([2, 2, -2, -2, 3, -3, 5, -4], dtype=np.int32)
    x, y = Tensor(a, device=device), Tensor(b, device=device)
    assert_matches(x // y, a // b)
    assert_matches(x % y, a % b)


@pytest.mark.parametrize("fn", [lambda x: x // 3, lambda x: x % 3, lambda x: x // -3, lambda x: x % -3,
                                lambda x: 100 // x, lambda x: -100 % x],
                         ids=["x//3", "x%3", "x//-3", "x%-3", "100//x", "-100%x"])  # fmt: skip
def test_int_floor_division_with_scalars(device, fn):
    check([(8,)], fn, fn, device, dtype=dtypes.int32, low=1, high=30)


def test_int_floor_division_of_negative_values_with_scalars(device):
    check([(8,)], lambda x: x // 3, lambda x: x // 3, device, dtype=dtypes.int32, low=-30, high=-1)
    check([(8,)], lambda x: x % 3, lambda x: x % 3, device, dtype=dtypes.int32, low=-30, high=-1)


def test_float_floor_division_and_remainder(device):
    check([(6,), (6,)], operator.floordiv, operator.floordiv, device, low=0.5)
    check([(2, 3), (3,)], operator.mod, np.mod, device, low=-4, high=4, atol=1e-5)
    check([(6,)], lambda x: x % 1.5, lambda x: np.mod(x, np.float32(1.5)), device, atol=1e-5)


def test_truncating_division(device):
    a = np.array([7, -7, 7, -7], dtype=np.int32)
    b = np.array([2, 2, -2, -2], dtype=np.int32)
    got = Tensor(a, device=device).div(Tensor(b, device=device), rounding_mode="trunc")
    assert_matches(got, np.trunc(a / b).astype(np.int32))


# ---- bitwise ----

BITWISE = {"and": operator.and_, "or": operator.or_, "xor": operator.xor}


@pytest.mark.parametrize("op", BITWISE)
@pytest.mark.parametrize("dtype", [dtypes.int32, dtypes.uint8, dtypes.int64, dtypes.bool], ids=str)
def test_bitwise_ops(device, op, dtype):
    fn = BITWISE[op]
    check([(2, 3), (3,)], fn, fn, device, dtype=dtype, low=0 if dtypes.is_unsigned(dtype) else -100, high=100)


@pytest.mark.parametrize("dtype", [dtypes.int32, dtypes.uint8, dtypes.bool], ids=str)
def test_bitwise_not(device, dtype):
    check([(5,)], operator.invert, operator.invert, device, dtype=dtype, low=0 if dtype == dtypes.uint8 else -50,
          high=50)  # fmt: skip


def test_shifts_and_bitwise_with_scalars(device):
    check([(6,)], lambda x: x << 3, lambda x: x << 3, device, dtype=dtypes.int32, low=0, high=1000)
    check([(6,)], lambda x: x >> 2, lambda x: x >> 2, device, dtype=dtypes.int32, low=0, high=1000)
    check([(6,)], lambda x: (x & 0xF0) | 3, lambda x: (x & 0xF0) | 3, device, dtype=dtypes.int32, low=0, high=1000)
    check([(6,)], lambda x: 5 ^ x, lambda x: 5 ^ x, device, dtype=dtypes.int32, low=-10, high=10)


def test_bitwise_on_floats_is_an_error(device):
    with pytest.raises(TypeError, match="bitwise.*float"):
        Tensor([1.0], device=device) & Tensor([2.0], device=device)


# ---- casts ----


def test_float_to_int_truncates_toward_zero(device):
    values = [2.7, -2.7, 0.5, -0.5, 3.0, -3.0, 0.0]
    got = Tensor(values, device=device).cast(dtypes.int32)
    assert got.dtype == dtypes.int32
    assert got.tolist() == [2, -2, 0, 0, 3, -3, 0]


def test_cast_to_bool_is_nonzero(device):
    assert Tensor([0.0, -0.5, 2.0, -0.0], device=device).cast(dtypes.bool).tolist() == [False, True, True, False]
    assert Tensor([0, -3, 7], device=device).bool().tolist() == [False, True, True]


def test_cast_from_bool(device):
    x = Tensor([True, False], device=device)
    assert x.float().tolist() == [1.0, 0.0] and x.int().tolist() == [1, 0]


def test_narrowing_int_cast_wraps(device):
    check([(6,)], lambda x: x.cast(dtypes.int8), lambda x: x.astype(np.int8), device, dtype=dtypes.int32, low=-1000,
          high=1000)  # fmt: skip
    check([(6,)], lambda x: x.cast(dtypes.uint8), lambda x: x.astype(np.uint8), device, dtype=dtypes.int32, low=-1000,
          high=1000)  # fmt: skip


@pytest.mark.parametrize("dtype", [dtypes.float16, dtypes.float64, dtypes.int64, dtypes.int16, dtypes.uint32], ids=str)
def test_cast_float32_to_other_dtypes(device, dtype):
    np_dtype = {dtypes.float16: np.float16, dtypes.float64: np.float64, dtypes.int64: np.int64,
                dtypes.int16: np.int16, dtypes.uint32: np.uint32}[dtype]  # fmt: skip
    low = 0 if dtypes.is_unsigned(dtype) else -100
    check([(2, 3)], lambda x: x.cast(dtype), lambda x: x.astype(np_dtype), device, low=low, high=100, rtol=1e-3)


def _round_to_bfloat16(x: np.ndarray) -> np.ndarray:
    """float32 values rounded to the nearest bfloat16 (ties to even), back as float32."""
    bits = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
    return rounded.astype(np.uint32).view(np.float32)


def test_bfloat16_round_trip_rounds_to_nearest_even(device):
    check([(7,)], lambda x: x.cast(dtypes.bfloat16).cast(dtypes.float32), _round_to_bfloat16, device, low=-100,
          high=100, rtol=0)  # fmt: skip


def test_float16_math_rounds_each_result(device):
    check([(5,), (5,)], lambda x, y: x * y + x, lambda x, y: x * y + x, device, dtype=dtypes.float16, rtol=1e-3)


def test_cast_of_non_contiguous_input(device):
    x, tensor = make_input((3, 4), device, layout="transposed")
    assert_matches(tensor.cast(dtypes.int32), x.astype(np.int32))
