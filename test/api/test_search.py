"""argsort, nonzero, masked_select and unique (mixin/search.py) against PyTorch, and tinygrad's fixed-size forms."""

import math

import numpy as np
import pytest
import torch

from glassgrad import Tensor, dtypes
from torch_check import check_op, weighted


@pytest.mark.parametrize("shape, dim", [((0,), 0), ((1,), 0), ((9, 13), 1), ((4, 7, 3), 0), ((), 0), ((5, 0), 0)])
@pytest.mark.parametrize("descending", [False, True])
def test_argsort_matches_torch_stable_sort(shape, dim, descending):
    values = np.random.default_rng(0).integers(-3, 4, shape).astype(np.float32)  # many ties: a stable order
    got = Tensor(values).argsort(dim, descending=descending)
    expected = torch.tensor(values).argsort(dim=dim, descending=descending, stable=True)
    assert got.dtype == dtypes.int32
    np.testing.assert_array_equal(got.numpy(), expected.numpy())
    np.testing.assert_array_equal(Tensor(values).argsort(axis=dim, descending=descending).numpy(), expected.numpy())


def test_argsort_of_a_view_and_nan_as_torch():
    x = np.array([[3.0, math.nan, -1.0], [0.5, 2.0, -math.inf]], np.float32)
    np.testing.assert_array_equal(Tensor(x.T.copy()).T.argsort(1).numpy(), torch.tensor(x).argsort(dim=1, stable=True))


MASKS = [((0,), (0,)), ((1,), (1,)), ((3, 5), (3, 5)), ((2, 1, 4), (3, 1)), ((4,), ()), ((2, 3), (2, 3))]


@pytest.mark.parametrize("shape, mask_shape", MASKS)
@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_masked_select_matches_torch(shape, mask_shape, layout):
    mask = np.random.default_rng(1).random(mask_shape) < 0.5

    def select(x):
        m = torch.tensor(mask) if isinstance(x, torch.Tensor) else Tensor(mask)
        return x.masked_select(m)

    check_op([shape], weighted(select), layout=layout)


def test_masked_select_with_size_pads_or_cuts_as_tinygrad():
    x, mask = Tensor([[0, 1, 2], [3, 4, 5]]), Tensor([[True, False, True], [False, True, False]])
    assert x.masked_select(mask, size=5, fill_value=-1).tolist() == [0, 2, 4, -1, -1]
    assert x.masked_select(mask, size=2).tolist() == [0, 2]
    assert x.masked_select(mask).dtype == dtypes.int32


def test_masked_select_refuses_a_non_bool_mask_as_torch():
    with pytest.raises(RuntimeError):
        torch.ones(3).masked_select(torch.tensor([1, 0, 1]))
    with pytest.raises(RuntimeError, match="masked_select: expected a bool tensor as the mask, got dtypes.int"):
        Tensor.ones(3).masked_select(Tensor([1, 0, 1]))


@pytest.mark.parametrize("shape", [(), (0,), (1,), (3, 5), (2, 1, 4), (2, 0, 3)])
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.bool_])
def test_nonzero_matches_torch(shape, dtype):
    values = (np.random.default_rng(2).random(shape) < 0.4).astype(dtype) * np.asarray(3, dtype)
    got, expected = Tensor(values).nonzero(), torch.nonzero(torch.tensor(values))
    assert got.dtype == dtypes.int32 and got.shape == tuple(expected.shape)
    np.testing.assert_array_equal(got.numpy(), expected.numpy())
    for ours, theirs in zip(Tensor(values).nonzero(as_tuple=True), torch.nonzero(torch.tensor(values), as_tuple=True)):
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


def test_nonzero_of_a_view_with_size_as_tinygrad():
    t = Tensor([[1, 0], [0, 2]])
    assert t.T.nonzero().tolist() == [[0, 0], [1, 1]]
    assert t.nonzero(size=3, fill_value=-1).tolist() == [[0, 0], [1, 1], [-1, -1]]
    assert t.nonzero(size=1).tolist() == [[0, 0]]


UNIQUE_VALUES = [[], [5], [3, 1, 2, 1, 3, 3], [[2, 2], [0, 2]], [-0.5, 1.5, -0.5, 1e30]]


@pytest.mark.parametrize("values", UNIQUE_VALUES)
@pytest.mark.parametrize("flags", [(False, False), (True, False), (False, True), (True, True)])
def test_unique_matches_torch(values, flags):
    x = np.array(values, np.float32 if any(isinstance(v, float) for v in np.ravel(values)) else np.int32)
    got = Tensor(x).unique(return_inverse=flags[0], return_counts=flags[1])
    expected = torch.unique(torch.tensor(x), return_inverse=flags[0], return_counts=flags[1])
    for ours, theirs in zip(*((t,) if not isinstance(t, tuple) else t for t in (got, expected))):
        assert ours.shape == tuple(theirs.shape)
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    first = got[0] if isinstance(got, tuple) else got
    assert first.dtype == Tensor(x).dtype


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_unique_along_a_dim_matches_torch(dim):
    x = np.array([[1, 2, 1, 1], [0, 3, 0, 0], [1, 2, 1, 1]], np.int32)
    got = Tensor(x).unique(dim=dim, return_inverse=True, return_counts=True)
    expected = torch.unique(torch.tensor(x), dim=dim, return_inverse=True, return_counts=True)
    for ours, theirs in zip(got, expected):
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


def test_unique_keeps_each_nan_last_as_torch():
    x = torch.tensor([1.0, math.nan, 0.0, math.nan, 1.0])
    values, counts = Tensor(x.numpy()).unique(return_counts=True)
    theirs, their_counts = torch.unique(x, return_counts=True)
    np.testing.assert_array_equal(values.numpy(), theirs.numpy())
    np.testing.assert_array_equal(counts.numpy(), their_counts.numpy())
