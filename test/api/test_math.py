"""Elementwise math, activations, logic and dtype conversions against PyTorch: forward values and gradients."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from glassgrad import GlobalCounters, Tensor, dtypes
from torch_check import check_op

# Each unary op runs on an empty tensor, a one-element tensor, and an odd shape read through a strided view.
SHAPES = [((0,), "contiguous"), ((1,), "contiguous"), ((9, 13), "strided")]

# Values where functions overflow, underflow, or meet a special case; ops with a smaller domain take a slice.
SPECIAL = np.array([-math.inf, -100, -20, -3, -1, -0.0, 0.0, 1e-30, 1, 3, 20, 100, math.inf, math.nan], np.float32)

# name, PyTorch, ours, input range, (atol, rtol) of the forward values (the gradients get 10 times as much)
UNARY = [
    ("exp", torch.exp, Tensor.exp, -10, 10, (1e-6, 1e-6)),
    ("exp2", torch.exp2, Tensor.exp2, -10, 10, (1e-6, 1e-6)),
    ("log", torch.log, Tensor.log, 0.01, 10, (1e-6, 1e-6)),
    ("log2", torch.log2, Tensor.log2, 0.01, 10, (1e-6, 1e-6)),
    ("sqrt", torch.sqrt, Tensor.sqrt, 0.01, 10, (1e-6, 1e-6)),
    ("rsqrt", torch.rsqrt, Tensor.rsqrt, 0.01, 10, (1e-6, 1e-6)),
    ("reciprocal", torch.reciprocal, Tensor.reciprocal, 0.2, 10, (1e-6, 1e-6)),
    ("sin", torch.sin, Tensor.sin, -10, 10, (1e-6, 1e-6)),
    ("cos", torch.cos, Tensor.cos, -10, 10, (1e-6, 1e-6)),
    # tan, asin, acos, acosh and atanh are ill-conditioned near their poles: one ulp of input moves the result more
    ("tan", torch.tan, Tensor.tan, -1.5, 1.5, (1e-6, 1e-5)),
    ("asin", torch.asin, Tensor.asin, -0.99, 0.99, (1e-6, 1e-5)),
    ("acos", torch.acos, Tensor.acos, -0.99, 0.99, (1e-6, 1e-5)),
    ("atan", torch.atan, Tensor.atan, -10, 10, (1e-6, 1e-6)),
    ("sinh", torch.sinh, Tensor.sinh, -5, 5, (1e-6, 1e-6)),
    ("cosh", torch.cosh, Tensor.cosh, -5, 5, (1e-6, 1e-6)),
    ("tanh", torch.tanh, Tensor.tanh, -5, 5, (1e-6, 1e-6)),
    ("asinh", torch.asinh, Tensor.asinh, -10, 10, (1e-6, 1e-6)),
    ("acosh", torch.acosh, Tensor.acosh, 1.01, 10, (1e-6, 1e-5)),
    ("atanh", torch.atanh, Tensor.atanh, -0.99, 0.99, (1e-6, 1e-5)),
    ("erf", torch.erf, Tensor.erf, -5, 5, (1e-6, 1e-6)),
    ("abs", torch.abs, Tensor.abs, -5, 5, (0, 0)),
    ("sign", torch.sign, Tensor.sign, -5, 5, (0, 0)),
    ("floor", torch.floor, Tensor.floor, -5, 5, (0, 0)),
    ("ceil", torch.ceil, Tensor.ceil, -5, 5, (0, 0)),
    ("round", torch.round, Tensor.round, -5, 5, (0, 0)),
    ("trunc", torch.trunc, Tensor.trunc, -5, 5, (0, 0)),
    ("square", torch.square, Tensor.square, -5, 5, (1e-6, 1e-6)),
    ("relu", F.relu, Tensor.relu, -5, 5, (0, 0)),
    ("relu6", F.relu6, Tensor.relu6, -8, 8, (0, 0)),
    ("leaky_relu", lambda x: F.leaky_relu(x, 0.2), lambda x: x.leaky_relu(0.2), -5, 5, (1e-6, 1e-6)),
    ("elu", lambda x: F.elu(x, 0.7), lambda x: x.elu(0.7), -5, 5, (1e-6, 1e-6)),
    ("celu", lambda x: F.celu(x, 0.5), lambda x: x.celu(0.5), -5, 5, (1e-6, 1e-6)),
    ("selu", F.selu, Tensor.selu, -5, 5, (1e-6, 1e-6)),
    ("gelu", F.gelu, Tensor.gelu, -5, 5, (1e-6, 1e-6)),
    ("gelu_tanh", lambda x: F.gelu(x, approximate="tanh"), lambda x: x.gelu(approximate="tanh"), -5, 5, (1e-6, 1e-6)),
    ("quick_gelu", lambda x: x * torch.sigmoid(1.702 * x), Tensor.quick_gelu, -5, 5, (1e-6, 1e-6)),
    ("silu", F.silu, Tensor.silu, -10, 10, (1e-6, 1e-6)),
    ("swish", F.silu, Tensor.swish, -10, 10, (1e-6, 1e-6)),
    ("sigmoid", torch.sigmoid, Tensor.sigmoid, -10, 10, (1e-6, 1e-6)),
    ("hardsigmoid", F.hardsigmoid, Tensor.hardsigmoid, -5, 5, (1e-6, 1e-6)),
    ("hardswish", F.hardswish, Tensor.hardswish, -5, 5, (1e-6, 1e-6)),
    ("hardtanh", lambda x: F.hardtanh(x, -0.5, 1.5), lambda x: x.hardtanh(-0.5, 1.5), -3, 3, (0, 0)),
    ("softplus", F.softplus, Tensor.softplus, -30, 30, (1e-6, 1e-6)),
    ("softplus_beta", lambda x: F.softplus(x, 2, 5), lambda x: x.softplus(beta=2, threshold=5), -5, 5, (1e-6, 1e-6)),
    ("softsign", F.softsign, Tensor.softsign, -5, 5, (1e-6, 1e-6)),
    ("mish", F.mish, Tensor.mish, -10, 10, (1e-6, 1e-6)),
    ("logsigmoid", F.logsigmoid, Tensor.logsigmoid, -30, 30, (1e-6, 1e-6)),
]
UNARY_BY_NAME = {name: (torch_fn, ours) for name, torch_fn, ours, *_ in UNARY}


@pytest.mark.parametrize("shape, layout", SHAPES, ids=str)
@pytest.mark.parametrize("name, torch_fn, ours, low, high, tol", UNARY, ids=[u[0] for u in UNARY])
def test_unary_op_matches_torch(name, torch_fn, ours, low, high, tol, shape, layout):
    atol, rtol = tol
    check_op([shape], torch_fn, ours, low=low, high=high, layout=layout, atol=atol, rtol=rtol,
             grad_atol=max(atol * 10, 1e-6), grad_rtol=max(rtol * 10, 1e-6))  # fmt: skip


# The functions that must stay finite (and match PyTorch) at +-100, +-inf and NaN, with their gradients.
STABLE = ["sigmoid", "tanh", "softplus", "logsigmoid", "silu", "mish", "gelu", "gelu_tanh", "elu", "selu", "celu",
          "erf", "atan", "softsign", "hardswish", "exp", "sinh", "cosh", "asinh"]  # fmt: skip


@pytest.mark.parametrize("name", STABLE)
def test_unary_op_at_special_values_matches_torch(name):
    torch_fn, ours = UNARY_BY_NAME[name]
    # PyTorch's gelu(+-inf) is NaN; ours is the limit, -0 and inf
    values = SPECIAL[np.isfinite(SPECIAL) | np.isnan(SPECIAL)] if name == "gelu" else SPECIAL
    # exp(x) is exp2(x * log2(e)), and rounding that product costs up to |x| * 6e-8 relative: 1.2e-6 at x = 20
    check_op([], torch_fn, ours, inputs=[values], atol=1e-6, rtol=5e-6)


@pytest.mark.parametrize("name", ["sigmoid", "softplus", "logsigmoid", "tanh", "silu", "mish"])
def test_activation_gradient_is_finite_far_from_zero(name):
    x = Tensor([-100.0, -30.0, 30.0, 100.0], requires_grad=True)
    getattr(x, name)().sum().backward()
    assert np.isfinite(x.grad.numpy()).all()


@pytest.mark.parametrize(
    "name, low, high",
    [("log", 0, 4), ("sqrt", 0, 4), ("acosh", 1, 4), ("atanh", -1, 1), ("asin", -1, 1), ("acos", -1, 1),
     ("tan", -3, 3), ("log2", -1, 1)],
)  # fmt: skip
def test_unary_op_forward_at_domain_edges_matches_torch(name, low, high):
    values = np.array([low, high, (low + high) / 2, -math.inf, math.inf, math.nan, -1e30, 1e30], np.float32)
    torch_fn, ours = getattr(torch, name), getattr(Tensor, name)
    check_op([], torch_fn, ours, inputs=[values], grad=False, atol=1e-6, rtol=1e-6)


def test_erf_is_within_1e_minus_6_of_torch_everywhere():
    x = np.concatenate([np.linspace(-7, 7, 40001), np.linspace(-1e-3, 1e-3, 1001)]).astype(np.float32)
    error = np.abs(Tensor(x).erf().numpy() - torch.erf(torch.tensor(x)).numpy())
    assert error.max() < 1e-6, f"erf differs by {error.max()} at x = {x[error.argmax()]}"


def test_atan_and_erf_stay_accurate_near_zero():
    x = np.array([1e-30, -1e-20, 3e-8, 1e-4, -2e-3], np.float32)
    for name in ("atan", "erf", "asinh", "atanh", "tanh", "sinh"):
        got, want = getattr(Tensor(x), name)().numpy(), getattr(torch, name)(torch.tensor(x)).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-6 if name not in ("tanh", "sinh") else 2e-3, err_msg=name)


def test_round_halves_go_to_even_like_torch():
    x = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5, 0.49999997, -0.49999997, 8388607.5, 1e20, -0.0], np.float32)
    check_op([], torch.round, Tensor.round, inputs=[x], atol=0, rtol=0)


@pytest.mark.parametrize("decimals", [2, -1])
def test_round_to_decimals_matches_torch(decimals):
    check_op([(4, 5)], lambda x: torch.round(x, decimals=decimals), lambda x: x.round(decimals), low=-500, high=500,
             atol=1e-6, rtol=1e-6)  # fmt: skip


def test_abs_and_relu_and_sign_gradients_at_zero_match_torch():
    x = np.array([0.0, -0.0, 1.0, -1.0], np.float32)
    for name in ("abs", "relu", "sign", "relu6", "leaky_relu", "elu", "softsign", "hardtanh", "hardsigmoid"):
        torch_fn, ours = UNARY_BY_NAME[name]
        check_op([], torch_fn, ours, inputs=[x], atol=0, rtol=0)


def test_hard_functions_at_their_corners_match_torch():
    x = np.array([-3, 3, -1, 1, 0, 6, -0.5, 1.5], np.float32)
    for name in ("hardsigmoid", "hardswish", "hardtanh", "relu6"):
        torch_fn, ours = UNARY_BY_NAME[name]
        check_op([], torch_fn, ours, inputs=[x], atol=1e-7, rtol=1e-7)


@pytest.mark.parametrize("shape, layout", [((0,), "contiguous"), ((1,), "contiguous"), ((5, 7), "strided")])
@pytest.mark.parametrize("dtype", [np.int32, np.int8])
def test_integer_input_to_float_math_gives_float32(shape, layout, dtype):
    x = np.random.default_rng(0).integers(1, 9, shape).astype(dtype)
    check_op([], lambda t: t.exp().sqrt() + t.sigmoid(), lambda t: t.exp().sqrt() + t.sigmoid(), inputs=[x],
             layout=layout)  # fmt: skip


@pytest.mark.parametrize("name", ["abs", "sign", "floor", "ceil", "round", "trunc", "square", "relu"])
def test_integer_ops_keep_integer_dtype(name):
    x = np.array([-3, -1, 0, 2, 5], np.int8)
    result = getattr(Tensor(x), name)()
    assert result.dtype == dtypes.int8
    np.testing.assert_array_equal(result.numpy(), getattr(torch, name)(torch.tensor(x)).numpy())


# float16 and bfloat16: composite functions compute in float32 and round once, as PyTorch's CPU kernels do.
# The C renderer writes a bfloat16 constant as ((unsigned short)0.5f), the integer 0 rather than the bits of 0.5, so
# bfloat16 math with a constant in it is wrong on CPU (PYTHON is right). Repro, renderer/cstyle.py render_const:
#   (Tensor([3.0], dtype=dtypes.bfloat16) * 0.5).tolist() == [0.0] on CPU, [1.5] on PYTHON
HALF_OPS = ["exp", "log", "sigmoid", "tanh", "gelu", "erf", "softplus", "silu", "atan", "cos", "relu", "square",
            "leaky_relu", "hardtanh", "relu6", "round", "floor"]  # fmt: skip


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("name", HALF_OPS)
def test_16_bit_float_math_rounds_like_torch(name, dtype):
    torch_fn, ours = UNARY_BY_NAME[name]
    x = np.linspace(0.1 if name == "log" else -4, 4, 301).astype(np.float32)
    got = ours(Tensor(x).cast(dtype))
    assert got.dtype == getattr(dtypes, dtype)
    want = torch_fn(torch.tensor(x).to(getattr(torch, dtype))).float().numpy()
    # one unit in the last place of the 16-bit result: transcendental functions may round the other way
    ulp = 2.0**-10 if dtype == "float16" else 2.0**-7
    np.testing.assert_allclose(got.cast(dtypes.float32).numpy(), want, rtol=ulp, atol=ulp)


# ---- the same ops on the PYTHON device (slow: tiny shapes) ----

PYTHON_OPS = ["exp", "log", "sin", "cos", "atan", "erf", "sigmoid", "softplus", "gelu", "round", "asinh", "hardswish"]


@pytest.mark.parametrize("name", PYTHON_OPS)
def test_unary_op_on_python_device_matches_torch(name):
    _, torch_fn, ours, low, high, (atol, rtol) = next(u for u in UNARY if u[0] == name)
    check_op([(2, 3)], torch_fn, ours, low=low, high=high, layout="strided", device="PYTHON", atol=max(atol, 1e-6),
             rtol=max(rtol, 1e-6))  # fmt: skip


PYTHON_BINARY = [
    ("pow", torch.pow, Tensor.pow),
    ("maximum", torch.maximum, Tensor.maximum),
    ("minimum", torch.minimum, Tensor.minimum),
    ("clamp", lambda x, a, b: x.clamp(a - 1, b + 1), lambda x, a, b: x.clamp(a - 1, b + 1)),
    ("lerp", torch.lerp, Tensor.lerp),
]


@pytest.mark.parametrize("name, torch_fn, ours", PYTHON_BINARY, ids=[b[0] for b in PYTHON_BINARY])
def test_binary_op_on_python_device_matches_torch(name, torch_fn, ours):
    shapes = [(2, 3), (1, 3), (2, 1)][: 3 if name in ("clamp", "lerp") else 2]
    check_op(shapes, torch_fn, ours, low=0.1, high=2, layout="transposed", device="PYTHON", atol=1e-6, rtol=1e-6)


# ---- two inputs: maximum, minimum, clamp, lerp ----

BINARY_SHAPES = [
    ([(0, 3), (1, 3)], "contiguous"),
    ([(1,), (1,)], "contiguous"),
    ([(3, 1), (1, 4)], "contiguous"),  # broadcast both ways
    ([(5, 7), (5, 7)], "transposed"),
]


@pytest.mark.parametrize("shapes, layout", BINARY_SHAPES, ids=str)
@pytest.mark.parametrize("name", ["maximum", "minimum"])
def test_maximum_minimum_match_torch(name, shapes, layout):
    check_op(shapes, getattr(torch, name), getattr(Tensor, name), layout=layout, atol=0, rtol=0)


@pytest.mark.parametrize("name", ["maximum", "minimum"])
def test_maximum_minimum_split_the_gradient_at_ties_like_torch(name):
    x = np.array([1.0, 2.0, -3.0, 0.0, 5.0, -math.inf], np.float32)
    y = np.array([1.0, 1.0, -3.0, -0.0, 7.0, -math.inf], np.float32)
    check_op([], getattr(torch, name), getattr(Tensor, name), inputs=[x, y], atol=0, rtol=0)


# gradient.py's MAX rule gives a NaN's gradient to the other input (x > y is False for NaN); PyTorch gives the full
# gradient to both inputs where either is NaN. Suggested rule: dx = g * where(x < y, 0, where(x == y, 0.5, 1)), and
# dy = g * where(y < x, 0, where(x == y, 0.5, 1)). Repro: x = Tensor([nan], requires_grad=True);
# x.maximum(Tensor([1.0])).sum().backward(); x.grad is [0.0], PyTorch's is [1.0].
@pytest.mark.parametrize("name", ["maximum", "minimum"])
def test_maximum_minimum_gradient_with_nan_matches_torch(name):
    x = np.array([math.nan, 1.0, math.nan], np.float32)
    y = np.array([1.0, math.nan, math.nan], np.float32)
    check_op([], getattr(torch, name), getattr(Tensor, name), inputs=[x, y], atol=0, rtol=0)


CLAMPS = [
    ("scalars", lambda x: torch.clamp(x, -0.5, 1.0), lambda x: x.clamp(-0.5, 1.0)),
    ("min only", lambda x: torch.clamp(x, min=0.3), lambda x: x.clamp(min=0.3)),
    ("max only", lambda x: torch.clamp(x, max=0.3), lambda x: x.clamp(max=0.3)),
    ("clip alias", lambda x: torch.clip(x, -1, 1), lambda x: x.clip(-1, 1)),
    ("tinygrad names", lambda x: torch.clamp(x, -1, 1), lambda x: x.clip(min_=-1, max_=1)),
    ("min above max", lambda x: torch.clamp(x, 1.0, -1.0), lambda x: x.clamp(1.0, -1.0)),
]


@pytest.mark.parametrize("shape, layout", SHAPES, ids=str)
@pytest.mark.parametrize("name, torch_fn, ours", CLAMPS, ids=[c[0] for c in CLAMPS])
def test_clamp_with_scalar_bounds_matches_torch(name, torch_fn, ours, shape, layout):
    check_op([shape], torch_fn, ours, layout=layout, atol=0, rtol=0)


@pytest.mark.parametrize("shapes, layout", [([(3, 4), (1, 4), (3, 1)], "contiguous"), ([(5, 6)] * 3, "transposed"),
                                            ([(0, 2), (0, 2), (1, 2)], "contiguous")], ids=str)  # fmt: skip
def test_clamp_with_tensor_bounds_matches_torch(shapes, layout):
    lo, hi = (lambda t: t - 1.0), (lambda t: t + 1.0)  # keeps every min below its max
    check_op(shapes, lambda x, a, b: torch.clamp(x, lo(a), hi(b)), lambda x, a, b: x.clamp(lo(a), hi(b)),
             layout=layout, atol=0, rtol=0)  # fmt: skip


def test_clamp_at_the_bounds_passes_the_gradient_like_torch():
    x = np.array([-1.0, 0.0, 1.0, 2.0, math.nan], np.float32)
    check_op([], lambda t: t.clamp(0.0, 1.0), lambda t: t.clamp(0.0, 1.0), inputs=[x], atol=0, rtol=0)


def test_clamp_of_ints_with_float_bound_promotes_to_float():
    x = Tensor([1, 5, 9]).clamp(min=2.5)
    assert x.dtype == dtypes.float32 and x.tolist() == [2.5, 5.0, 9.0]
    assert Tensor([1, 5, 9], dtype=dtypes.int8).clamp(2, 6).dtype == dtypes.int8


@pytest.mark.parametrize("weight", [0.25, 1.0, 1.7])
def test_lerp_with_scalar_weight_matches_torch(weight):
    check_op([(3, 5), (3, 5)], lambda a, b: torch.lerp(a, b, weight), lambda a, b: a.lerp(b, weight),
             layout="transposed", atol=1e-6, rtol=1e-6)  # fmt: skip


@pytest.mark.parametrize("shapes", [[(3, 4), (1, 4), (3, 1)], [(0, 4), (1, 4), (0, 1)], [(1,), (1,), (1,)]], ids=str)
def test_lerp_with_tensor_weight_matches_torch(shapes):
    check_op(shapes, torch.lerp, Tensor.lerp, low=-1, high=2, atol=1e-6, rtol=1e-6)


def test_lerp_at_weight_one_gives_end_exactly():
    a, b = Tensor([1e8, -3.0]), Tensor([1.0, 7.0])
    assert a.lerp(b, 1.0).tolist() == [1.0, 7.0] and a.lerp(b, Tensor([1.0, 1.0])).tolist() == [1.0, 7.0]


# ---- pow ----

SCALAR_EXPONENTS = [0, 1, 2, 3, 17, -1, -2, 0.5, -0.5, 2.0, 2.5, 0.3, -1.3, 40]


@pytest.mark.parametrize("exponent", SCALAR_EXPONENTS)
def test_pow_with_scalar_exponent_matches_torch(exponent):
    low = 0.1 if isinstance(exponent, float) and not exponent.is_integer() else -2
    check_op([(7, 5)], lambda x: x**exponent, lambda x: x**exponent, low=low, high=2, layout="transposed",
             atol=1e-6, rtol=1e-5)  # fmt: skip  # x**17 and x**40 multiply many rounded factors


@pytest.mark.parametrize("exponent", [0, 1, 2, 3, 0.5, 2.5, 1.5, 0.3, -0.5, -1.3, -1, -2])
def test_pow_of_zero_and_negative_bases_matches_torch_with_gradients(exponent):
    x = np.array([0.0, 0.0, -1.5, -2.0, 1.5, 3.0], np.float32)
    check_op([], lambda t: t**exponent, lambda t: t**exponent, inputs=[x], atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("base", [2, 2.0, 0.5, 10.0, 1.0, 0.0, -2.0])
def test_pow_with_scalar_base_matches_torch(base):
    x = np.array([-2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0, 3.0], np.float32)
    if base == 0.0:
        x = x[x >= 0]  # torch's gradient of 0 ** x for x < 0 is -inf*0; ours stops at the constant
    grad = base > 0
    check_op([], lambda t: base**t, lambda t: base**t, inputs=[x], grad=grad, atol=1e-6, rtol=1e-6)


POW_SHAPES = [([(3, 4), (1, 4)], "contiguous"), ([(0, 3), (1, 3)], "contiguous"), ([(1,), (1,)], "contiguous"),
              ([(4, 5), (4, 5)], "transposed")]  # fmt: skip


@pytest.mark.parametrize("shapes, layout", POW_SHAPES, ids=str)
def test_pow_of_two_tensors_matches_torch(shapes, layout):
    check_op(shapes, torch.pow, Tensor.pow, low=0.1, high=2.5, layout=layout, atol=1e-6, rtol=1e-5)


def test_pow_of_two_tensors_at_zero_matches_torch_with_both_gradients():
    x = np.array([0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 2.0, 0.5], np.float32)
    y = np.array([2.5, 1.0, 0.5, 0.0, -1.0, -1.5, 0.0, -2.0], np.float32)
    check_op([], torch.pow, Tensor.pow, inputs=[x, y], atol=1e-6, rtol=1e-6)


def test_pow_of_negative_tensor_base_with_tensor_exponent_matches_torch():
    # the exponent's gradient is NaN in PyTorch for a negative base; ours is the real-valued one (see tensor_math)
    x = np.array([-2.0, -2.0, -1.5, -3.0, -0.5], np.float32)
    y = np.array([2.0, 3.0, 0.5, -1.0, -2.0], np.float32)
    check_op([], lambda t: t ** torch.tensor(y), lambda t: t ** Tensor(y), inputs=[x], atol=1e-6, rtol=1e-6)


def test_pow_special_values_follow_c_like_torch():
    values = [-math.inf, -2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0, math.inf, math.nan]
    x, y = (np.array(v, np.float32) for v in zip(*[(a, b) for a in values for b in values], strict=True))
    got = (Tensor(x) ** Tensor(y)).numpy()
    want = (torch.tensor(x) ** torch.tensor(y)).numpy()
    bad = ~np.isclose(got, want, rtol=1e-6, atol=0, equal_nan=True)
    assert not bad.any(), f"pow differs at {list(zip(x[bad], y[bad], got[bad], want[bad], strict=True))}"


@pytest.mark.parametrize("dtype", [np.int32, np.int8, np.uint8, np.int64])
def test_integer_pow_wraps_and_truncates_like_torch(dtype):
    signed = np.issubdtype(dtype, np.signedinteger)
    x = np.array([2, 3, -3, -1, 1, 0, 7, 5] if signed else [2, 3, 200, 1, 1, 0, 7, 5], dtype)
    y = np.array([3, 0, 5, -3, -7, 0, 20, -1] if signed else [3, 0, 5, 9, 7, 0, 20, 1], dtype)
    got = Tensor(x) ** Tensor(y)
    assert got.dtype == Tensor(x).dtype
    np.testing.assert_array_equal(got.numpy(), (torch.tensor(x) ** torch.tensor(y)).numpy())
    np.testing.assert_array_equal((Tensor(x) ** 3).numpy(), (torch.tensor(x) ** 3).numpy())
    np.testing.assert_array_equal((Tensor(x) ** 45).numpy(), (torch.tensor(x) ** 45).numpy())


def test_pow_dtypes_follow_torch():
    ints = Tensor([1, 2, 3])
    assert (
        (ints**2).dtype == dtypes.int32 and (ints**0.5).dtype == dtypes.float32 and (ints**2.0).dtype == dtypes.float32
    )
    assert (2**ints).dtype == dtypes.int32 and (2.5**ints).dtype == dtypes.float32
    assert (2**ints).tolist() == [2, 4, 8] and (Tensor([2.0]) ** ints).dtype == dtypes.float32
    half = Tensor([1.5, 2.0], dtype=dtypes.float16)
    assert (half**2).dtype == dtypes.float16 and (half**half).dtype == dtypes.float16


def test_pow_gradient_at_zero_is_inf_below_one_like_torch():
    x = Tensor([0.0, 0.0, 0.0], requires_grad=True)
    (x ** Tensor([0.3, -1.0, 2.0])).sum().backward()
    assert x.grad.tolist() == [math.inf, -math.inf, 0.0]


# ---- special values ----

CLASSIFY = [-math.inf, -1.0, -0.0, 0.0, 1e-38, 3.4e38, math.inf, math.nan]


@pytest.mark.parametrize("name", ["isnan", "isinf", "isfinite"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64, np.int32])
def test_isnan_isinf_isfinite_match_torch(name, dtype):
    with np.errstate(over="ignore"):  # 3.4e38 becomes inf in float16, on purpose
        x = np.array(CLASSIFY if dtype != np.int32 else [-5, 0, 7], np.float64).astype(dtype)
    got = getattr(Tensor(x), name)()
    assert got.dtype == dtypes.bool
    np.testing.assert_array_equal(got.numpy(), getattr(torch, name)(torch.tensor(x)).numpy())


# ---- logic, comparisons and shifts ----

LOGIC_DTYPES = [np.float32, np.int32, np.int8, np.uint8, np.bool_, np.int64]


def _logic_values(dtype, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if dtype == np.bool_:
        return rng.random(24) < 0.5
    values = rng.integers(-3 if np.issubdtype(dtype, np.signedinteger) or dtype == np.float32 else 0, 4, 24)
    return values.astype(dtype)


@pytest.mark.parametrize("op", ["<", "<=", ">", ">=", "==", "!="])
@pytest.mark.parametrize("dtype", LOGIC_DTYPES)
def test_comparisons_match_torch(op, dtype):
    fn = {"<": lambda a, b: a < b, "<=": lambda a, b: a <= b, ">": lambda a, b: a > b, ">=": lambda a, b: a >= b,
          "==": lambda a, b: a == b, "!=": lambda a, b: a != b}[op]  # fmt: skip
    a, b = _logic_values(dtype, 1), _logic_values(dtype, 2)
    got = fn(Tensor(a), Tensor(b))
    assert got.dtype == dtypes.bool
    np.testing.assert_array_equal(got.numpy(), fn(torch.tensor(a), torch.tensor(b)).numpy())
    if dtype in (np.float32, np.int8):  # a Python scalar on either side
        np.testing.assert_array_equal(fn(Tensor(a), 1).numpy(), fn(torch.tensor(a), 1).numpy())
        np.testing.assert_array_equal(fn(2, Tensor(a)).numpy(), fn(2, torch.tensor(a)).numpy())


@pytest.mark.parametrize("op", ["<", "<=", ">", ">=", "==", "!="])
def test_comparisons_with_nan_and_mixed_dtypes_match_torch(op):
    fn = {"<": lambda a, b: a < b, "<=": lambda a, b: a <= b, ">": lambda a, b: a > b, ">=": lambda a, b: a >= b,
          "==": lambda a, b: a == b, "!=": lambda a, b: a != b}[op]  # fmt: skip
    a = np.array([math.nan, 1.0, math.nan, -math.inf, 2.5, 0.0], np.float32)
    b = np.array([math.nan, math.nan, 1.0, -math.inf, 2.0, -0.0], np.float32)
    np.testing.assert_array_equal(fn(Tensor(a), Tensor(b)).numpy(), fn(torch.tensor(a), torch.tensor(b)).numpy())
    ints = np.array([1, 2, 3, -1, 2, 0], np.int32)
    np.testing.assert_array_equal(fn(Tensor(a), Tensor(ints)).numpy(), fn(torch.tensor(a), torch.tensor(ints)).numpy())
    np.testing.assert_array_equal(fn(Tensor(ints), 2.5).numpy(), fn(torch.tensor(ints), 2.5).numpy())


@pytest.mark.parametrize("name", ["logical_and", "logical_or", "logical_xor"])
@pytest.mark.parametrize("dtypes_", [(np.bool_, np.bool_), (np.float32, np.int32), (np.int8, np.bool_)], ids=str)
def test_logical_ops_match_torch(name, dtypes_):
    a, b = _logic_values(dtypes_[0], 3), _logic_values(dtypes_[1], 4)
    got = getattr(Tensor(a), name)(Tensor(b))
    assert got.dtype == dtypes.bool
    np.testing.assert_array_equal(got.numpy(), getattr(torch, name)(torch.tensor(a), torch.tensor(b)).numpy())


def test_logical_ops_broadcast_and_take_scalars():
    a = Tensor([[0.0], [2.0]])
    assert a.logical_and(Tensor([1, 0, 3])).tolist() == [[False, False, False], [True, False, True]]
    assert a.logical_or(False).tolist() == [[False], [True]] and a.logical_xor(True).tolist() == [[True], [False]]


@pytest.mark.parametrize("dtype", LOGIC_DTYPES)
def test_logical_not_matches_torch(dtype):
    a = np.append(_logic_values(dtype, 5), np.array(math.nan if dtype == np.float32 else 0).astype(dtype))
    got = Tensor(a).logical_not()
    assert got.dtype == dtypes.bool
    np.testing.assert_array_equal(got.numpy(), torch.logical_not(torch.tensor(a)).numpy())


@pytest.mark.parametrize("dtype, bits", [(np.int8, 8), (np.uint8, 8), (np.int32, 32), (np.int64, 64), (np.int16, 16)])
def test_shifts_match_torch(dtype, bits):
    rng = np.random.default_rng(6)
    low = -100 if np.issubdtype(dtype, np.signedinteger) else 0
    x = rng.integers(low, 100, 32).astype(dtype)
    s = rng.integers(0, bits - 7, 32).astype(dtype)  # left shifts that keep the values in range (no signed overflow)
    for fn in (lambda a, b: a << b, lambda a, b: a >> b, lambda a, b: a >> 2, lambda a, b: a << 3):
        np.testing.assert_array_equal(fn(Tensor(x), Tensor(s)).numpy(), fn(torch.tensor(x), torch.tensor(s)).numpy())


# ---- dtype conversions ----

CAST_VALUES = np.array([-300.7, -2.5, -1.5, -0.5, -0.0, 0.0, 0.4, 0.5, 1.5, 2.5, 100.99, 65504.0, 70000.0, 1e-6,
                        3.0e-8, 1.0e20, math.inf, -math.inf, math.nan], np.float32)  # fmt: skip


@pytest.mark.parametrize("method, torch_dtype", [("half", torch.float16), ("bfloat16", torch.bfloat16),
                                                 ("float", torch.float32), ("double", torch.float64)])  # fmt: skip
def test_float_casts_round_to_nearest_even_like_torch(method, torch_dtype):
    rng = np.random.default_rng(7)
    x = np.concatenate([CAST_VALUES, rng.standard_normal(200).astype(np.float32) * 1000])
    # exact ties for each format: 1 + half an ulp of float16 (2**-11) and of bfloat16 (2**-8), and three ulps more
    x = np.concatenate(
        [x, np.array([1 + 2**-11, 1 + 3 * 2**-11, 1 + 2**-8, 1 + 3 * 2**-8, 2**-24, 2**-25], np.float32)]
    )
    got = getattr(Tensor(x), method)().cast(dtypes.float64).numpy()
    want = torch.tensor(x).to(torch_dtype).to(torch.float64).numpy()
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("method, torch_dtype, keep", [("int", torch.int32, 2e9), ("long", torch.int64, 9e18),
                                                       ("bool", torch.bool, math.inf)])  # fmt: skip
def test_float_to_int_and_bool_casts_match_torch(method, torch_dtype, keep):
    x = CAST_VALUES[np.isfinite(CAST_VALUES) & (np.abs(CAST_VALUES) < keep)] if method != "bool" else CAST_VALUES
    got = getattr(Tensor(x), method)()
    np.testing.assert_array_equal(got.numpy(), torch.tensor(x).to(torch_dtype).numpy())


@pytest.mark.parametrize("source", [np.int8, np.uint8, np.int64, np.bool_])
@pytest.mark.parametrize("target", ["float32", "float16", "int8", "uint8", "int32", "bool"])
def test_integer_and_bool_casts_match_torch(source, target):
    x = np.array([0, 1, 5, 127, 100] + ([] if source in (np.uint8, np.bool_) else [-1, -128, -7]))
    x = (x != 0) if source == np.bool_ else x.astype(source)
    got = Tensor(x).cast(target).numpy()
    np.testing.assert_array_equal(got, torch.tensor(x).to(getattr(torch, target)).numpy())


def test_cast_of_non_contiguous_input_keeps_gradient_flowing():
    check_op([(4, 6)], lambda x: x.half().float() * 3, lambda x: x.half().float() * 3, layout="strided", atol=1e-3,
             rtol=1e-3)  # fmt: skip  # float16 rounding of the forward values


BITCASTS = [("float32", "int32"), ("int32", "float32"), ("float16", "int16"), ("int16", "float16"),
            ("float32", "uint32"), ("uint8", "int8")]  # fmt: skip


@pytest.mark.parametrize("source, target", BITCASTS)
def test_bitcast_matches_torch_view(source, target):
    if source.startswith("float"):
        with np.errstate(over="ignore"):  # large values become inf in float16, on purpose
            x = np.concatenate([CAST_VALUES, np.array([1e-40, -1e-45, 3.4e38], np.float32)]).astype(source)
    else:
        x = np.array([0, 1, -1, 0x3F80, 0x7C00, -32768, 12345, 0x7FC0], np.int64).astype(source)
    got = Tensor(x).bitcast(target).numpy()
    want = torch.tensor(x).view(getattr(torch, target)).numpy()
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))  # the same bits, NaNs included


# ---- fused kernels ----


@pytest.mark.parametrize("name", ["sigmoid", "gelu", "gelu_tanh", "softplus", "mish", "erf", "silu", "logsigmoid"])
def test_activation_forward_is_one_kernel(name):
    x = Tensor(np.linspace(-3, 3, 60, dtype=np.float32)).realize()
    before = GlobalCounters.kernel_count
    UNARY_BY_NAME[name][1](x).realize()
    assert GlobalCounters.kernel_count - before == 1


# ---- errors ----

ERRORS = [
    (lambda: Tensor([1, 2]) ** -1, ValueError, "pow: an integer tensor"),
    (lambda: Tensor([True]) ** 2, TypeError, "pow: bool"),
    (lambda: Tensor([1.0]) ** "2", TypeError, "pow: the exponent must be"),
    (lambda: Tensor([1.0]).clamp(), ValueError, "clamp: at least one of min and max"),
    (lambda: Tensor([1.0, 2.0]).clamp(Tensor([0.0, 1.0, 2.0])), ValueError, "clamp: shapes"),
    (lambda: Tensor([1.0]).gelu(approximate="fast"), ValueError, "gelu: approximate must be 'none' or 'tanh'"),
    (lambda: Tensor([1.0]).hardtanh(2.0, 1.0), ValueError, "hardtanh: min_val"),
    (lambda: Tensor([1.0]).softplus(beta=0), ValueError, "softplus: beta"),
    (lambda: Tensor([1.0]).celu(alpha=0), ValueError, "celu: alpha"),
    (lambda: Tensor([1]).lerp(Tensor([2]), 0.5), TypeError, "lerp: needs float tensors"),
    (lambda: Tensor([1.0]).lerp(2.0, 0.5), TypeError, "lerp: end must be a Tensor"),
    (
        lambda: Tensor([1.0]).lerp(Tensor([2.0]), "half"),
        TypeError,
        "lerp: weight must be a Tensor or a number, got str",
    ),
    (lambda: Tensor([1.0]).lerp(Tensor([1.0, 2.0, 3.0]), Tensor([0.5, 0.5])), ValueError, "shapes"),
    (lambda: Tensor([1.0]).round(decimals=1.5), TypeError, "round: decimals must be an int"),
    (lambda: Tensor([1.0]).logical_and("yes"), TypeError, "logical_and: other must be"),
    (lambda: Tensor([1.0]) << 2, TypeError, "<<: bitwise ops need bool or integer tensors"),
    (lambda: Tensor([1.0]).maximum("a"), TypeError, "maximum: unsupported operand type"),
    (lambda: Tensor([1.0]).bitcast(dtypes.float16), ValueError, "bitcast: dtypes.float and dtypes.half differ in size"),
    (lambda: Tensor([1.0]).cast("float8"), TypeError, "unknown dtype 'float8'"),
]


@pytest.mark.parametrize("make, error, message", ERRORS, ids=[e[2] for e in ERRORS])
def test_bad_input_raises_a_clear_error(make, error, message):
    with pytest.raises(error, match=message.replace("(", r"\(").replace(")", r"\)")):
        make()


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_matches_torch_over_a_wide_range_with_infinities_and_nan(approximate):
    """Exact GELU (through erf's two polynomials and their selects) and the tanh form, vectorized on the CPU, forward
    and backward, from far below to far above the polynomials' range, at -inf and NaN; at +inf the limit, inf, as
    PyTorch's scalar and float64 paths give (its float32 vector path gives NaN for the exact form)."""
    wide = np.concatenate([np.linspace(-12, 12, 4801), [-1e30, -100, 100, 1e30, 0.0, -0.0, -np.inf, np.nan]])
    x = np.resize(wide, 4816).astype(np.float32)  # a multiple of 16 lanes
    torch_fn = lambda t: F.gelu(t, approximate=approximate)  # noqa: E731
    check_op([], torch_fn, lambda t: t.gelu(approximate), inputs=[x], atol=2e-6, rtol=2e-6, grad_atol=1e-5)
    infinite = np.full(16, np.inf, np.float32)
    assert (
        Tensor(infinite).gelu(approximate).numpy() == F.gelu(torch.tensor(np.inf, dtype=torch.float64)).item()
    ).all()
