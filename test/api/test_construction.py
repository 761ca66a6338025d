"""linspace, diag and randperm (mixin/construction.py) against PyTorch."""

import numpy as np
import pytest
import torch

from glassgrad import Tensor, dtypes
from torch_check import check_op, weighted

LINSPACES = [(0, 1, 5), (0, 10, 0), (3, 3, 1), (-1, 1, 2), (2.5, -1, 6), (0, 1, 1000), (1e-3, 7.77, 37), (5, 2, 4)]


# uint8 only where the values are not negative: torch wraps a negative float into uint8 in a platform's own way
CASES = [(*space, dtype) for space in LINSPACES
         for dtype in (None, dtypes.float16, dtypes.float64, dtypes.int32, dtypes.int64, dtypes.uint8)
         if dtype != dtypes.uint8 or min(space[:2]) >= 0]  # fmt: skip


@pytest.mark.parametrize("start, end, steps, dtype", CASES)
def test_linspace_matches_torch(start, end, steps, dtype):
    theirs_dtype = {None: None, dtypes.float16: torch.float16, dtypes.float64: torch.float64, dtypes.int32: torch.int32,
                    dtypes.int64: torch.int64, dtypes.uint8: torch.uint8}[dtype]  # fmt: skip
    got = Tensor.linspace(start, end, steps, dtype=dtype)
    expected = torch.linspace(start, end, steps, dtype=theirs_dtype)
    assert got.shape == tuple(expected.shape) and got.dtype == (dtype or dtypes.float32)
    # exact for ints; a float may differ in the last place: torch's CPU kernel restarts from start + i * step at each
    # vector of lanes, so its rounding depends on the CPU's vector width
    # (torch's float16 rounds each step of the arithmetic to float16; ours rounds once)
    rtol = 0 if dtype is not None and not dtypes.is_float(dtype) else 2.5e-7 if dtype != dtypes.float16 else 2e-3
    np.testing.assert_allclose(got.numpy().astype(np.float64), expected.numpy().astype(np.float64), rtol=rtol, atol=0)


def test_linspace_refuses_negative_steps_and_bool_as_torch():
    for call in (lambda m: m.linspace(0, 1, -1), lambda m: m.linspace(0, 1, 3, dtype=getattr(m, "bool", dtypes.bool))):
        with pytest.raises(RuntimeError):
            call(torch)
    with pytest.raises(RuntimeError, match="linspace: the number of steps must be a non-negative int, got -1"):
        Tensor.linspace(0, 1, -1)
    with pytest.raises(RuntimeError, match="linspace: bool is not a supported dtype"):
        Tensor.linspace(0, 1, 3, dtype=dtypes.bool)


@pytest.mark.parametrize("shape", [(0,), (1,), (4,), (3, 3), (2, 5), (5, 2), (0, 3), (1, 1)])
@pytest.mark.parametrize("diagonal", [0, 1, -2, 3])
@pytest.mark.parametrize("layout", ["contiguous", "strided"])
def test_diag_matches_torch(shape, diagonal, layout):
    check_op([shape], weighted(lambda x: x.diag(diagonal)), layout=layout)


def test_diag_of_ints_and_other_ranks_as_torch():
    np.testing.assert_array_equal(Tensor([1, 2]).diag(-1).numpy(), torch.tensor([1, 2]).diag(-1).numpy())
    for shape in ((), (2, 2, 2)):
        with pytest.raises(RuntimeError):
            torch.ones(shape).diag()
        with pytest.raises(RuntimeError, match="diag: expects a 1-d or 2-d tensor"):
            Tensor.ones(*shape).diag()


@pytest.mark.parametrize("n", [0, 1, 2, 7, 1000])
def test_randperm_is_a_permutation(n):
    p = Tensor.randperm(n)
    assert p.dtype == dtypes.int32 and p.shape == (n,)
    assert sorted(p.tolist()) == list(range(n))
    assert Tensor.randperm(n, dtype=dtypes.int64).dtype == dtypes.int64


def test_randperm_follows_the_seed():
    Tensor.manual_seed(7)
    first = Tensor.randperm(50).tolist()
    Tensor.manual_seed(7)
    assert Tensor.randperm(50).tolist() == first and first != list(range(50))
    assert Tensor.randperm(50).tolist() != first


def test_randperm_refuses_a_negative_n_as_torch():
    with pytest.raises(RuntimeError):
        torch.randperm(-1)
    with pytest.raises(RuntimeError, match="randperm: n must be a non-negative int, got -1"):
        Tensor.randperm(-1)
