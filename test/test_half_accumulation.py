"""Sums of half and bfloat16 accumulate in float32 and are rounded once at the end, as PyTorch's: sums, means,
cumsum, var/std, softmax, log_softmax, logsumexp and matmul over long reductions, on every device. A 16-bit running
sum stops growing once its terms fall under half its last place (a sum of 4096 values in [0, 1) was 2034, not 2033)."""

import numpy as np
import pytest
import torch

from glassgrad import Tensor, dtypes

SMALL_FLOATS = {"float16": (dtypes.float16, torch.float16, 10), "bfloat16": (dtypes.bfloat16, torch.bfloat16, 7)}


def _inputs(shape: tuple[int, ...], name: str, seed: int = 0, low: float = 0.0) -> torch.Tensor:
    """Random values of `shape` in [low, 1), exactly representable in the 16-bit dtype, as a float64 torch tensor."""
    values = np.random.default_rng(seed).uniform(low, 1, shape)
    return torch.tensor(values).to(SMALL_FLOATS[name][1]).double()


def _assert_rounded_once(got: Tensor, exact: torch.Tensor, name: str, float32_terms: int = 1) -> None:
    """`got` is the float64 `exact` rounded once to the 16-bit dtype: within half its last place, plus the float32
    rounding of `float32_terms` steps (that of the float32 accumulator, under 2**-24 each)."""
    dtype, torch_dtype, mantissa = SMALL_FLOATS[name]
    assert got.dtype == dtype
    ours = torch.tensor(got.cast(dtypes.float32).numpy()).double()
    magnitude = exact.abs().clamp(min=torch.finfo(torch_dtype).tiny)
    half_place = 2.0 ** (torch.floor(torch.log2(magnitude)) - mantissa - 1)
    allowed = half_place + magnitude * float32_terms * 2.0**-24
    assert torch.all((ours - exact).abs() <= allowed), float(((ours - exact).abs() / half_place).max())


@pytest.fixture(params=list(SMALL_FLOATS))
def name(request):
    return request.param


def _ours(x: torch.Tensor, name: str) -> Tensor:
    return Tensor(x.float().numpy()).cast(SMALL_FLOATS[name][0])


def test_a_long_sum_is_rounded_once(device, name):
    x = _inputs((4096,), name)
    _assert_rounded_once(_ours(x, name).sum(), x.sum(), name, float32_terms=4096)


def test_row_sums_and_means_are_rounded_once(device, name):
    x = _inputs((3, 1500), name, seed=1)
    _assert_rounded_once(_ours(x, name).sum(1), x.sum(1), name, float32_terms=1500)
    _assert_rounded_once(_ours(x, name).mean(1), x.mean(1), name, float32_terms=1500)
    _assert_rounded_once(_ours(x, name).sum(0), x.sum(0), name)
    _assert_rounded_once(_ours(x, name).sum(dtype=SMALL_FLOATS[name][0]), x.sum(), name, float32_terms=4500)


def test_cumsum_rounds_each_running_sum_once(device, name):
    x = _inputs((2, 700), name, seed=2)
    _assert_rounded_once(_ours(x, name).cumsum(1), x.cumsum(1), name, float32_terms=700)


def test_var_and_std_are_rounded_once(device, name):
    x = _inputs((2, 1000), name, seed=3)
    _assert_rounded_once(_ours(x, name).var(1), x.var(1), name, float32_terms=3000)
    _assert_rounded_once(_ours(x, name).std(1), x.std(1), name, float32_terms=3000)


def test_softmax_family_sums_in_float32(device, name):
    x = _inputs((2, 1000), name, seed=4, low=-4)
    _assert_rounded_once(_ours(x, name).softmax(1), x.softmax(1), name, float32_terms=1000)
    _assert_rounded_once(_ours(x, name).log_softmax(1), x.log_softmax(1), name, float32_terms=1000)
    _assert_rounded_once(_ours(x, name).logsumexp(1), x.logsumexp(1), name, float32_terms=1000)


def test_matmul_multiplies_exactly_and_sums_in_float32(device, name):
    a, b = _inputs((6, 1024), name, seed=5, low=-1), _inputs((1024, 5), name, seed=6, low=-1)
    got = _ours(a, name) @ _ours(b, name)
    exact = a @ b
    magnitude = (a.abs() @ b.abs()).clamp(min=1)  # cancellation: the float32 error scales with the terms' size
    dtype, torch_dtype, mantissa = SMALL_FLOATS[name]
    ours = torch.tensor(got.cast(dtypes.float32).numpy()).double()
    allowed = 2.0 ** (torch.floor(torch.log2(exact.abs().clamp(min=1e-3))) - mantissa - 1) + magnitude * 1024 * 2.0**-24
    assert got.dtype == dtype and torch.all((ours - exact).abs() <= allowed)
    einsum = Tensor.einsum("ik,kj->ij", _ours(a, name), _ours(b, name))
    np.testing.assert_array_equal(einsum.cast(dtypes.float32).numpy(), got.cast(dtypes.float32).numpy())


def test_sums_agree_with_torch(device, name):
    """Beside torch's own 16-bit results: at most one place apart (torch rounds its softmax's steps in 16 bits)."""
    _, torch_dtype, mantissa = SMALL_FLOATS[name]
    x = _inputs((4, 2048), name, seed=7)
    small = x.to(torch_dtype)
    ours = _ours(x, name)
    for got, theirs in [(ours.sum(1), small.sum(1)), (ours.mean(1), small.mean(1)), (ours.var(1), small.var(1)),
                        (ours.cumsum(1), small.cumsum(1)), (ours.logsumexp(1), small.logsumexp(1)),
                        (ours @ ours.T, small @ small.T)]:  # fmt: skip
        theirs = theirs.double()
        place = 2.0 ** (torch.floor(torch.log2(theirs.abs().clamp(min=1e-3))) - mantissa)
        assert torch.all((torch.tensor(got.cast(dtypes.float32).numpy()).double() - theirs).abs() <= place)


def test_gradients_of_16_bit_sums_keep_the_dtype(device, name):
    dtype = SMALL_FLOATS[name][0]
    x = Tensor.ones(3, 300, dtype=dtype, requires_grad=True)
    (x.sum(1) * 2).sum().backward()
    x.mean(0).sum().backward()  # adds 1/3 to each element's gradient
    assert x.grad.dtype == dtype
    np.testing.assert_allclose(x.grad.cast(dtypes.float32).numpy(), np.full((3, 300), 2 + 1 / 3), rtol=4e-3)
