"""prod is one MUL reduction: values with zeros, negatives and large magnitudes give NumPy's and PyTorch's products (0
or -0, not NaN), and the gradient is the product of the other elements, also at zeros, as torch.prod's."""

import numpy as np
import pytest
import torch

from glassgrad import Tensor, dtypes

DTYPES = {"float16": (dtypes.float16, torch.float16), "float32": (dtypes.float32, torch.float32),
          "int32": (dtypes.int32, torch.int32)}  # fmt: skip


def _fuzzed(shape: tuple[int, ...], seed: int) -> np.ndarray:
    """Whole numbers in [-9, 9): many zeros and negatives; rows of 40 overflow a float16 product long before the end."""
    values = np.random.default_rng(seed).integers(-9, 9, size=shape).astype(np.float64)
    values.flat[3 % max(values.size, 1) :: 7] = 0  # at least one zero a row, often two
    return values


@pytest.mark.parametrize("name", list(DTYPES))
@pytest.mark.parametrize("axis, keepdim", [(1, False), (0, True), (None, False), ((0, 1), True)], ids=str)
def test_prod_of_zeros_and_negatives_is_torchs(device, name, axis, keepdim):
    ours_dtype, torch_dtype = DTYPES[name]
    values = _fuzzed((7, 40), seed=1)
    got = Tensor(values, dtype=ours_dtype).prod(axis, keepdim=keepdim)
    reference = torch.tensor(values).to(torch_dtype)
    dims = (0, 1) if axis is None else (axis,) if isinstance(axis, int) else axis
    for d in sorted(dims, reverse=True):
        reference = reference.prod(d, keepdim=keepdim)
    expected = reference.to(torch.float64 if name != "int32" else torch.int32).numpy()  # torch: int64, we: int32
    assert got.dtype == ours_dtype
    np.testing.assert_array_equal(got.numpy().astype(expected.dtype), expected)
    assert (np.signbit(got.numpy()) == np.signbit(expected)).all()  # 0 and -0 as torch's


@pytest.mark.parametrize("values", [[1.0, 0.0, -2.0], [0.0, 0.0, -1.0], [-1.0, -2.0, -3.0], [0.0], [-0.0, 3.0],
                                    [3.0] * 30 + [0.0] + [-7.0] * 30, [2.0] * 120 + [0.0]],
                         ids=["one_zero", "two_zeros", "negatives", "only_zero", "minus_zero", "zero_among_large",
                              "overflowing_then_zero"])  # fmt: skip
@pytest.mark.parametrize("name", ["float16", "float32"])
def test_prod_forward_and_backward_match_torch(device, name, values):
    """Against torch's float64 product and gradient rounded to the dtype: a float16 product accumulates in float32,
    so 3**30 * 0 is 0 (torch's float16 prod rounds every step, overflows to inf and gives inf * 0 = NaN)."""
    ours_dtype, torch_dtype = DTYPES[name]
    x = Tensor(values, dtype=ours_dtype, requires_grad=True)
    t = torch.tensor(values, dtype=torch.float64, requires_grad=True)
    out, expected = x.prod(), t.prod()
    out.backward()
    expected.backward()
    assert out.dtype == ours_dtype and x.grad.dtype == ours_dtype
    rounded = expected.detach().to(torch_dtype).double().numpy()
    np.testing.assert_array_equal(out.cast(dtypes.float64).numpy(), rounded)
    assert np.signbit(out.cast(dtypes.float64).numpy()) == np.signbit(rounded)
    np.testing.assert_allclose(x.grad.cast(dtypes.float64).numpy(), t.grad.to(torch_dtype).double().numpy(), rtol=2e-3)


@pytest.mark.parametrize("shape, axis, keepdim", [((0,), 0, False), ((3, 0), 1, True), ((0, 4), 0, False),
                                                  ((2, 3, 5), (0, 2), True), ((1, 6), 1, False)], ids=str)  # fmt: skip
def test_prod_of_awkward_shapes_with_zeros_matches_torch(device, shape, axis, keepdim):
    values = np.random.default_rng(2).uniform(-2, 2, shape).astype(np.float32)
    values.flat[::4] = 0
    x, t = Tensor(values, requires_grad=True), torch.tensor(values, requires_grad=True)
    dims = (axis,) if isinstance(axis, int) else axis
    expected = t
    for d in sorted(dims, reverse=True):
        expected = expected.prod(d, keepdim=keepdim)
    weights = np.random.default_rng(3).uniform(0.5, 1.5, expected.shape).astype(np.float32)
    out = x.prod(axis, keepdim=keepdim)
    np.testing.assert_allclose(out.numpy(), expected.detach().numpy(), rtol=1e-6)
    (out * Tensor(weights)).sum().backward()
    (expected * torch.tensor(weights)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-5, atol=1e-7)


def test_cumprod_gradient_at_zeros_matches_torch(device):
    values = np.array([[2.0, 0.0, 3.0, -1.0, 0.0, 5.0], [1.5, -2.0, 0.5, 4.0, 1.0, 0.0]], np.float32)
    x, t = Tensor(values, requires_grad=True), torch.tensor(values, requires_grad=True)
    x.cumprod(1).sum().backward()
    t.cumprod(1).sum().backward()
    np.testing.assert_allclose(x.cumprod(1).numpy(), t.cumprod(1).detach().numpy())
    np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-6)
