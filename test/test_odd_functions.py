"""The odd functions are exactly odd, as PyTorch's: f(-x) is -f(x) to the bit, so f(x) + f(-x) sums to 0 and the
sqrt of a running sum of them is 0, not NaN (the fuzzer's sqrt(cumsum(tanh(...))) met tanh(-x) = -tanh(x) - 6e-8).
Values and gradients beside PyTorch's."""

import numpy as np
import pytest
import torch

from glassgrad import Tensor, dtypes

ODD = ["tanh", "sinh", "asinh", "atanh", "sin", "tan", "atan", "erf", "asin"]
DTYPES = {"float32": (dtypes.float32, torch.float32), "float64": (dtypes.float64, torch.float64)}


def _values(dtype: str) -> np.ndarray:
    """Normal values, whole numbers, tiny ones and the edges of tanh's formula (2**-12), in both signs."""
    rng = np.random.default_rng(3)
    values = np.concatenate([rng.standard_normal(300) * 4, np.arange(13), [2.0**-12, 2.0**-11, 1e-30, 20.0, 1e30]])
    return np.concatenate([values, -values]).astype(dtype)


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("name", ODD)
def test_odd_functions_are_exactly_odd_with_pytorchs_values_and_gradients(device, name, dtype):
    values = _values(dtype)
    x = Tensor(values, dtype=DTYPES[dtype][0], device=device, requires_grad=True)
    ours = getattr(x, name)()
    ours.sum().backward()
    t = torch.tensor(values, requires_grad=True)
    theirs = getattr(t, name)()
    theirs.sum().backward()
    half = len(values) // 2
    got = ours.numpy()
    defined = ~np.isnan(got[:half])
    np.testing.assert_array_equal(got[:half][defined], -got[half:][defined])  # exactly odd
    tol = 1e-4 if dtype == "float32" else 1e-7  # tan near its poles in float32, erf in float64: 1.5e-5 and 1.4e-8
    np.testing.assert_allclose(got, theirs.detach().numpy(), rtol=tol, atol=tol)
    np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=tol, atol=tol)


@pytest.mark.parametrize("shape", [(0, 3), (1, 1), (3, 5), (4, 7)], ids=str)
def test_sqrt_of_running_sums_of_tanh_of_opposite_values_is_0_as_pytorch(device, shape):
    """The fuzzer's program (seed 16332), over a transposed (non-contiguous) input: rows x, -x, x, -x, ..., the even
    running sums exactly 0."""
    rows = np.random.default_rng(5).integers(-12, 13, size=(shape[1], 1)).astype(np.float32)
    signs = np.where(np.arange(shape[0]) % 2 == 0, 1.0, -1.0).astype(np.float32)
    values = rows * signs  # (columns, rows): transposed below
    x = Tensor(values, device=device, requires_grad=True)
    ours = x.T.tanh().cumsum(0).sqrt()
    ours.sum().backward()
    t = torch.tensor(values, requires_grad=True)
    theirs = t.T.tanh().cumsum(0).sqrt()
    theirs.sum().backward()
    np.testing.assert_allclose(ours.numpy(), theirs.detach().numpy(), rtol=1e-5, atol=1e-6, equal_nan=True)
    np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-5, atol=1e-6, equal_nan=True)
