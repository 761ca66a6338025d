"""A max and a reciprocal of vectors are whole-vector ops in the CPU's C (a max through its comparison's mask, NaN
first as the scalar form; a reciprocal one vector division), and keep NumPy's and PyTorch's values: NaN, infinities,
signed zeros, odd and 1-size shapes, forward and backward."""

import numpy as np
import pytest
import torch

from glassgrad import Context, Device, Tensor
from glassgrad.codegen import get_program

SPECIALS = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-40, -3.5]


def floats(shape, dtype, seed=0):
    values = np.random.default_rng(seed).standard_normal(shape).astype(dtype)
    flat = values.reshape(-1)
    flat[: min(len(SPECIALS), flat.size)] = SPECIALS[: flat.size]
    return values


def sources(out: Tensor) -> list[str]:
    return [get_program(i.ast, Device["CPU"].renderer).src for i in out.schedule() if i.ast.op.name == "SINK"]


@pytest.mark.parametrize("shape", [(64, 512), (5, 48), (3, 17), (1, 1), (0, 16)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_max_and_maximum_of_floats(device, shape, dtype):
    a, b = floats(shape, dtype), floats(shape, dtype, seed=1)[::-1].copy()
    np.testing.assert_array_equal(Tensor(a).maximum(Tensor(b)).numpy(), np.maximum(a, b))
    if shape[1] and shape[0]:
        np.testing.assert_array_equal(Tensor(a).max(axis=1).numpy(), a.max(axis=1))


@pytest.mark.parametrize("dtype", [np.int32, np.int8, np.uint8, np.int64])
def test_max_of_ints(device, dtype):
    info = np.iinfo(dtype)
    a = np.random.default_rng(2).integers(info.min, info.max, (9, 64), endpoint=True).astype(dtype)
    b = np.random.default_rng(3).integers(info.min, info.max, (9, 64), endpoint=True).astype(dtype)
    np.testing.assert_array_equal(Tensor(a).maximum(Tensor(b)).numpy(), np.maximum(a, b))
    np.testing.assert_array_equal(Tensor(a).max(axis=1).numpy(), a.max(axis=1))


@pytest.mark.parametrize("shape", [(64, 512), (3, 17), (1, 1)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_reciprocal(device, shape, dtype):
    a = floats(shape, dtype)
    with np.errstate(divide="ignore", over="ignore"):
        expected = (1 / a).astype(dtype)
    np.testing.assert_array_equal(Tensor(a).reciprocal().numpy(), expected)


def test_max_and_reciprocal_gradients_match_torch(device):
    a = np.random.default_rng(4).standard_normal((6, 48)).astype(np.float32) + 3
    x = Tensor(a, requires_grad=True)
    (x.max(axis=1).sum() + x.reciprocal().sum() + x.maximum(Tensor(np.flip(a, 1).copy())).sum()).backward()
    t = torch.from_numpy(a).requires_grad_()
    (t.amax(1).sum() + t.reciprocal().sum() + torch.maximum(t, torch.from_numpy(np.flip(a, 1).copy())).sum()).backward()
    np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_the_c_takes_whole_vectors(on_the_cpu):
    """An elementwise max of float vectors calls no scalar max; a reciprocal indexes no lane."""
    a, b = Tensor.empty(64, 512), Tensor.empty(64, 512)
    with Context(NOOPT=0):
        (maximum,) = sources(a.maximum(b))
        (reciprocal,) = sources(a.reciprocal())
    loop = maximum[maximum.index("for (") : maximum.index("_range(")]
    assert "gg_floatx" in loop and "gg_max_float(" not in loop
    loop = reciprocal[reciprocal.index("for (") : reciprocal.index("_range(")]
    assert "gg_floatx" in loop and "[1]" not in loop
