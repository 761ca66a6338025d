"""Calls tinygrad 0.14 or PyTorch accept that glassgrad used to refuse: interpolate's N-d linear and trilinear modes,
None for a kept size in reshape and expand, multinomial of bool or int weights, Tensor(bytes, dtype=) and
Tensor(pathlib.Path), a list mixing tensors and ints as an index, and a 1-d weight in linear."""

import contextlib
import struct

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from glassgrad import Tensor, dtypes
from torch_check import check_op, weighted

# ---- interpolate ----


@pytest.mark.parametrize("shape, size", [((1, 2, 3, 4, 5), (5, 2, 7)), ((2, 1, 1, 1, 1), (2, 3, 1)),
                                         ((1, 1, 4, 3, 2), (4, 3, 2))])  # fmt: skip
@pytest.mark.parametrize("align_corners", [False, True])
def test_interpolate_trilinear_matches_torch(shape, size, align_corners):
    check_op([shape], weighted(lambda x: F.interpolate(x, size, mode="trilinear", align_corners=align_corners)),
             weighted(lambda x: x.interpolate(size, mode="trilinear", align_corners=align_corners)))  # fmt: skip


def test_interpolate_trilinear_by_a_scale_factor_matches_torch():
    check_op([(1, 2, 2, 3, 4)], weighted(lambda x: F.interpolate(x, scale_factor=1.5, mode="trilinear")),
             weighted(lambda x: x.interpolate(scale_factor=1.5, mode="trilinear")))  # fmt: skip


@pytest.mark.parametrize("shape, size, theirs", [((1, 2, 4, 5), (3, 7), "bilinear"), ((1, 1, 2, 3, 4), (3, 3, 3),
                                                 "trilinear"), ((2, 3, 4), (6,), "linear")])  # fmt: skip
def test_interpolate_linear_resizes_as_many_dims_as_size_names_as_tinygrad(shape, size, theirs):
    check_op([shape], weighted(lambda x: F.interpolate(x, size, mode=theirs)),
             weighted(lambda x: x.interpolate(size, mode="linear")))  # fmt: skip


def test_interpolate_linear_of_tinygrads_docs_example():
    t = Tensor([[1, 2, 3, 4], [21, 22, 23, 24], [41, 42, 43, 44]])  # no batch or channel dims: tinygrad allows it
    expected = F.interpolate(torch.tensor(t.numpy(), dtype=torch.float32)[None, None], (2, 3), mode="bilinear")[0, 0]
    np.testing.assert_allclose(t.interpolate(size=(2, 3), mode="linear").numpy(), expected.numpy(), rtol=1e-6)


def test_interpolate_trilinear_needs_three_dims():
    with pytest.raises(ValueError, match=r"interpolate: mode 'trilinear' resizes 3 dims, got 2"):
        Tensor.ones(1, 1, 4, 4).interpolate((2, 2), mode="trilinear")


# ---- None for a kept size ----


RESHAPES_WITH_NONE = [
    ((2, 3, 4), (None, 12), (2, 12)),
    ((2, 3, 4), ((2, None, 4),), (2, 3, 4)),
    ((0, 3), (None, 1, 3), (0, 1, 3)),
    ((1,), (None,), (1,)),
    ((2, 6), (None, -1, 2), (2, 3, 2)),
]


@pytest.mark.parametrize("shape, target, expected", RESHAPES_WITH_NONE)
def test_reshape_with_none_keeps_that_size_as_tinygrad(shape, target, expected):
    check_op([shape], weighted(lambda x: x.reshape(expected)), weighted(lambda x: x.reshape(*target)))


def test_expand_with_none_keeps_that_size_as_tinygrad():
    check_op([(3, 1)], weighted(lambda x: x.expand(2, 3, 4)), weighted(lambda x: x.expand(2, None, 4)))


def test_none_beyond_the_shape_raises():
    with pytest.raises(ValueError, match=r"reshape: None keeps a size of the tensor's shape \(2, 3\)"):
        Tensor.ones(2, 3).reshape(6, 1, None)
    with pytest.raises(ValueError, match="zeros: sizes must be non-negative integers"):
        Tensor.zeros(None, 2)


# ---- multinomial of bool and int weights ----


@pytest.mark.parametrize("weights", [[True, False, True, False], [0, 3, 0, 1]])
def test_multinomial_of_bool_and_int_weights_as_tinygrad(weights):
    Tensor.manual_seed(3)
    samples = Tensor(weights).multinomial(2000, replacement=True).numpy()
    counts = np.bincount(samples, minlength=4) / 2000
    expected = np.array(weights, np.float64) / sum(weights)
    assert set(samples.tolist()) <= {i for i, w in enumerate(weights) if w}
    np.testing.assert_allclose(counts, expected, atol=0.05)
    assert sorted(Tensor(weights).multinomial(2).tolist()) == [i for i, w in enumerate(weights) if w]


# ---- raw bytes and files ----


def test_tensor_of_bytes_reads_them_as_the_dtype_as_tinygrad():
    raw = struct.pack("<3f", 1.5, -2.0, 3.25)
    assert Tensor(raw, dtype=dtypes.float32).tolist() == [1.5, -2.0, 3.25]
    assert Tensor(raw).dtype == dtypes.uint8 and Tensor(raw).tolist() == list(raw)
    assert Tensor(bytearray(b"\x01\x00\x02\x00"), dtype=dtypes.int16).tolist() == [1, 2]
    assert Tensor(b"").shape == (0,)
    with pytest.raises(ValueError, match="Tensor: the bytes given hold 3 bytes, not a whole number of dtypes.short"):
        Tensor(b"abc", dtype=dtypes.int16)


def test_tensor_of_a_path_reads_the_files_bytes(tmp_path):
    path = tmp_path / "weights.bin"
    path.write_bytes(struct.pack("<4i", 7, -1, 0, 2**30))
    assert Tensor(path).dtype == dtypes.uint8 and Tensor(path).tolist() == list(path.read_bytes())
    assert Tensor(path, dtype=dtypes.int32).tolist() == [7, -1, 0, 2**30]
    with pytest.raises(FileNotFoundError):
        Tensor(tmp_path / "missing.bin")


# ---- a list mixing tensors and ints as an index ----

MIXED = [
    lambda i: [i(1), 2],
    lambda i: [i([0, 1]), slice(None), 2],
    lambda i: [0, i([1, 2])],
    lambda i: [i(1), 2, 3],
    lambda i: (slice(None), [i(1), 2]),
    lambda i: (Ellipsis, [i(0), i(3), 1]),
]


@pytest.mark.parametrize("index", MIXED)
def test_a_list_mixing_tensors_and_ints_indexes_as_torch(index):
    def ours(v):
        return Tensor(v, dtype=dtypes.int32)

    def theirs(v):
        return torch.tensor(v)

    with pytest.warns(UserWarning) if isinstance(index(theirs), list) else contextlib.nullcontext():
        check_op([(2, 3, 4)], weighted(lambda x: x[index(theirs)]), weighted(lambda x: x[index(ours)]))


def test_setitem_through_a_mixed_list_as_torch():
    x, tx = Tensor.zeros(2, 3).contiguous(), torch.zeros(2, 3)
    x[[Tensor(1), 2]] = 5.0
    tx[1, 2] = 5.0
    np.testing.assert_array_equal(x.numpy(), tx.numpy())


# ---- a 1-d weight in linear ----


@pytest.mark.parametrize("shape", [(0,), (1,), (3, 5), (2, 1, 4)])
@pytest.mark.parametrize("bias", [False, True])
def test_linear_of_a_1d_weight_scales_each_feature_as_tinygrad(shape, bias):
    n = shape[-1]
    shapes = [shape, (n,)] + ([(n,)] if bias else [])
    check_op(shapes, weighted(lambda x, w, *b: x * w + (b[0] if b else 0)), weighted(lambda x, w, *b: x.linear(w, *b)))


def test_linear_of_a_1d_weight_in_another_dtype():
    out = Tensor([1.0, 2.0]).linear(Tensor([3.0, 4.0]), dtype=dtypes.float16)
    assert out.dtype == dtypes.float16 and out.tolist() == [3.0, 8.0]
    with pytest.raises(ValueError, match=r"linear: input has 2 features .* but weight \(3,\) expects 3"):
        Tensor([1.0, 2.0]).linear(Tensor([1.0, 2.0, 3.0]))
