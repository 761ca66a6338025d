"""log10, fmod, copysign, logaddexp, isclose, allclose, softmin, normalize and logcumsumexp (mixin/more_math.py)
against PyTorch: forward values over awkward shapes and special values, and gradients."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from glassgrad import Tensor, dtypes
from torch_check import check_op, weighted

SHAPES = [((0,), "contiguous"), ((1,), "contiguous"), ((9, 13), "strided"), ((4, 7), "transposed")]
# two operands, broadcast: empty, one element, odd shapes read through strided and transposed views
BINARY = [([(0,), (0,)], "contiguous"), ([(1,), (1,)], "contiguous"), ([(9, 13), (13,)], "strided"),
          ([(4, 7), (4, 1)], "transposed")]  # fmt: skip
SPECIAL = [-math.inf, -1e30, -2.5, -1.0, -0.0, 0.0, 1e-30, 0.5, 3.0, 1e30, math.inf, math.nan]


@pytest.mark.parametrize("shape, layout", SHAPES)
def test_log10_matches_torch(shape, layout):
    check_op([shape], torch.log10, Tensor.log10, low=0.01, high=100, layout=layout)


def test_log10_of_ints_and_halves_as_torch():
    values = [1, 10, 1000, 3]
    np.testing.assert_allclose(Tensor(values).log10().numpy(), torch.tensor(values).log10().numpy(), rtol=1e-6)
    half = Tensor(values, dtype=dtypes.float16).log10()
    assert half.dtype == dtypes.float16
    np.testing.assert_array_equal(half.numpy(), torch.tensor(values, dtype=torch.float16).log10().numpy())


@pytest.mark.parametrize("shapes, layout", BINARY)
def test_fmod_matches_torch(shapes, layout):
    # divisors kept away from 0: near it the quotient's truncation flips with one ulp of rounding
    rng = np.random.default_rng(5)
    x = rng.uniform(-6, 6, shapes[0]).astype(np.float32)
    y = (rng.choice([-1, 1], shapes[1]) * rng.uniform(0.5, 2, shapes[1])).astype(np.float32)
    check_op(shapes, torch.fmod, Tensor.fmod, inputs=[x, y], layout=layout)


def test_fmod_of_ints_and_scalars_as_torch():
    a, b = [7, -7, 7, -7, 0], [3, 3, -3, -3, 5]
    for x, y in (([7.5, -7.5, 0.0], 2.0), (a, b)):
        ours = Tensor(x).fmod(Tensor(y) if isinstance(y, list) else y)
        theirs = torch.fmod(torch.tensor(x), torch.tensor(y) if isinstance(y, list) else y)
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    assert Tensor(a).fmod(Tensor(b)).dtype == dtypes.int32


def test_fmod_of_special_values_as_torch():
    x = np.array([v for v in SPECIAL for _ in SPECIAL], np.float32)
    y = np.array([v for _ in SPECIAL for v in SPECIAL], np.float32)
    # C's fmod is exact; x - trunc(x / y) * y is only where the quotient is exact in float32 (below 2**24)
    huge_quotient = np.isfinite(x) & np.isfinite(y) & (y != 0) & (np.abs(x) > 2.0**24 * np.abs(y))
    x, y = x[~huge_quotient], y[~huge_quotient]
    expected = torch.fmod(torch.tensor(x), torch.tensor(y)).numpy()
    np.testing.assert_array_equal(Tensor(x).fmod(Tensor(y)).numpy(), expected)


def test_fmod_of_an_int_by_zero_raises():
    with pytest.raises(ZeroDivisionError, match="fmod"):
        Tensor([1, 2]).fmod(0).tolist()


@pytest.mark.parametrize("shapes, layout", BINARY)
def test_copysign_matches_torch(shapes, layout):
    check_op(shapes, torch.copysign, Tensor.copysign, layout=layout)


def test_copysign_of_special_values_and_ints_as_torch():
    x = torch.tensor([v for v in SPECIAL for _ in SPECIAL])
    y = torch.tensor([v for _ in SPECIAL for v in SPECIAL])
    ours = Tensor(x.numpy()).copysign(Tensor(y.numpy())).numpy()
    np.testing.assert_array_equal(np.signbit(ours), np.signbit(torch.copysign(x, y).numpy()))
    np.testing.assert_array_equal(ours, torch.copysign(x, y).numpy())
    ints = Tensor([3, -2, 0]).copysign(Tensor([-1, 1, -5]))
    assert (
        ints.dtype == dtypes.float32
        and ints.tolist() == torch.copysign(torch.tensor([3, -2, 0]), torch.tensor([-1, 1, -5])).tolist()
    )


@pytest.mark.parametrize("shapes, layout", BINARY)
def test_logaddexp_matches_torch(shapes, layout):
    check_op(shapes, torch.logaddexp, Tensor.logaddexp, low=-30, high=30, layout=layout)


def test_logaddexp_of_special_values_as_torch():
    values = [v for v in SPECIAL if not math.isnan(v)] + [-200.0, 200.0]
    x = torch.tensor([v for v in values for _ in values])
    y = torch.tensor([v for _ in values for v in values])
    np.testing.assert_allclose(Tensor(x.numpy()).logaddexp(Tensor(y.numpy())).numpy(), torch.logaddexp(x, y).numpy(),
                               rtol=1e-6)  # fmt: skip


def test_logaddexp_of_halves_rounds_once():
    x = torch.tensor([0.1, 5.0, -3.0], dtype=torch.float16)
    ours = Tensor(x.numpy()).logaddexp(Tensor([0.2, 5.0, 4.0], dtype=dtypes.float16))
    assert ours.dtype == dtypes.float16
    np.testing.assert_array_equal(ours.numpy(), torch.logaddexp(x, torch.tensor([0.2, 5.0, 4.0], dtype=torch.float16)))


@pytest.mark.parametrize(
    "rtol, atol, equal_nan", [(1e-5, 1e-8, False), (0.1, 0.0, True), (0.0, 0.5, False), (0.0, 0.0, True)]
)
def test_isclose_matches_torch(rtol, atol, equal_nan):
    x = torch.tensor([v for v in SPECIAL for _ in SPECIAL] + [1.0, 1.0, 100.0])
    y = torch.tensor([v for _ in SPECIAL for v in SPECIAL] + [1.0 + 1e-6, 1.3, 104.0])
    got = Tensor(x.numpy()).isclose(Tensor(y.numpy()), rtol=rtol, atol=atol, equal_nan=equal_nan)
    assert got.dtype == dtypes.bool
    np.testing.assert_array_equal(got.numpy(), torch.isclose(x, y, rtol=rtol, atol=atol, equal_nan=equal_nan).numpy())


@pytest.mark.parametrize("shape", [(0,), (1,), (3, 5), (2, 1, 4)])
def test_isclose_and_allclose_of_shapes_and_ints_as_torch(shape):
    rng = np.random.default_rng(2)
    a = rng.integers(-3, 4, shape).astype(np.int32)
    b = a + rng.integers(0, 2, shape).astype(np.int32)
    for rtol, atol in ((1e-5, 1e-8), (0.0, 1.0)):
        expected = torch.isclose(torch.tensor(a), torch.tensor(b), rtol=rtol, atol=atol)
        np.testing.assert_array_equal(Tensor(a).isclose(Tensor(b), rtol, atol).numpy(), expected.numpy())
        ours = Tensor(a).allclose(Tensor(b), rtol, atol)
        assert ours is torch.allclose(torch.tensor(a), torch.tensor(b), rtol, atol)
    x = rng.standard_normal(shape).astype(np.float32)
    assert Tensor(x).allclose(Tensor(x.T.copy().T) + 1e-9) is True
    assert Tensor(x).allclose(Tensor(x) + 1.0) is (x.size == 0)


def test_isclose_refuses_negative_tolerances_as_torch():
    with pytest.raises(RuntimeError):
        torch.isclose(torch.ones(1), torch.ones(1), rtol=-1.0)
    with pytest.raises(RuntimeError, match="isclose: rtol and atol must be non-negative"):
        Tensor.ones(1).isclose(Tensor.ones(1), rtol=-1.0)


@pytest.mark.parametrize(
    "shape, dim, layout",
    [((0,), 0, "contiguous"), ((1,), 0, "contiguous"), ((9, 13), 1, "strided"), ((4, 7, 3), 0, "transposed")],
)
def test_softmin_matches_torch(shape, dim, layout):
    check_op([shape], weighted(lambda x: F.softmin(x, dim)), weighted(lambda x: x.softmin(dim)), layout=layout)
    check_op([shape], weighted(lambda x: F.softmin(x, -1)), weighted(lambda x: x.softmin()), layout=layout)


@pytest.mark.parametrize("p", [2.0, 1.0, 3.0, 0.5, math.inf, -math.inf, 0])
@pytest.mark.parametrize(
    "shape, dim, layout",
    [((0, 3), 1, "contiguous"), ((1, 1), 1, "contiguous"), ((9, 13), 0, "strided"), ((4, 7, 3), -1, "transposed")],
)
def test_normalize_matches_torch(p, shape, dim, layout):
    grad = p not in (0,)  # torch's 0-norm has no gradient
    check_op([shape], weighted(lambda x: F.normalize(x, p, dim)), weighted(lambda x: x.normalize(p, dim)),
             layout=layout, grad=grad, low=0.1, high=2.0, atol=1e-5)  # fmt: skip


def test_normalize_of_zero_rows_is_zero_with_a_finite_gradient_as_torch():
    rows = np.array([[0.0, 0.0, 0.0], [3.0, 0.0, -4.0]], np.float32)
    check_op([rows.shape], weighted(lambda x: F.normalize(x, dim=1)), weighted(lambda x: x.normalize(dim=1)),
             inputs=[rows])  # fmt: skip


@pytest.mark.parametrize(
    "shape, dim, layout",
    [
        ((0,), 0, "contiguous"),
        ((1,), 0, "contiguous"),
        ((), 0, "contiguous"),
        ((9, 13), 1, "strided"),
        ((4, 7, 3), 0, "transposed"),
        ((3, 0, 2), 1, "contiguous"),
        ((70, 2), 0, "contiguous"),
    ],
)
def test_logcumsumexp_matches_torch(shape, dim, layout):
    check_op([shape], weighted(lambda x: torch.logcumsumexp(x, dim)), weighted(lambda x: x.logcumsumexp(dim)),
             layout=layout, low=-20, high=20)  # fmt: skip


def test_logcumsumexp_of_far_apart_and_infinite_values_as_torch():
    x = torch.tensor([-1000.0, 0.0, -math.inf, 1000.0, -1000.0, math.inf, 2.0])
    np.testing.assert_allclose(Tensor(x.numpy()).logcumsumexp(0).numpy(), torch.logcumsumexp(x, 0).numpy(), rtol=1e-6)
    assert Tensor([[1.0, 2.0]]).logcumsumexp(axis=1).shape == (1, 2)  # tinygrad's axis=, and its default axis 0
    np.testing.assert_allclose(Tensor([[1.0], [2.0]]).logcumsumexp().numpy(),
                               torch.logcumsumexp(torch.tensor([[1.0], [2.0]]), 0).numpy(), rtol=1e-6)  # fmt: skip
