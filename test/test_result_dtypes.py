"""Types of what tinygrad and PyTorch scripts read back: Tensor.data() is a typed memoryview (tinygrad's), and the
dtypes of arange and one_hot, checked against PyTorch (arange's integer default is dtypes.default_int: int32 as
tinygrad's, int64 as PyTorch's once dtypes.default_int is int64; one_hot's too)."""

import numpy as np
import pytest
import torch

from glassgrad import Tensor, dtypes

TYPED = [(dtypes.int8, np.int8, "b"), (dtypes.uint8, np.uint8, "B"), (dtypes.int16, np.int16, "h"),
         (dtypes.uint16, np.uint16, "H"), (dtypes.int32, np.int32, "i"), (dtypes.uint32, np.uint32, "I"),
         (dtypes.int64, np.int64, "q"), (dtypes.uint64, np.uint64, "Q"), (dtypes.float32, np.float32, "f"),
         (dtypes.float64, np.float64, "d"), (dtypes.bool, np.bool_, "?")]  # fmt: skip


@pytest.mark.parametrize("shape", [(), (1,), (5,), (2, 3), (3, 1, 2)], ids=str)
@pytest.mark.parametrize("dtype,np_dtype,fmt", TYPED, ids=lambda x: str(x))
def test_data_is_a_typed_memoryview_of_the_tensors_shape(device, shape, dtype, np_dtype, fmt):
    values = (np.arange(int(np.prod(shape))) % 7 - 2).reshape(shape).astype(np_dtype)
    t = Tensor(values, device=device)
    data = t.data()
    assert isinstance(data, memoryview) and data.format == fmt and data.shape == shape
    assert data.tolist() == values.tolist() and bytes(data) == values.tobytes()
    np.testing.assert_array_equal(np.frombuffer(data, dtype=np_dtype), values.reshape(-1))  # tinygrad's docs example


def test_data_of_a_view_and_of_an_empty_tensor():
    t = Tensor(np.arange(12, dtype=np.int32).reshape(3, 4))
    assert t.T.data().tolist() == np.arange(12).reshape(3, 4).T.tolist()
    empty = Tensor.zeros(0, 3).data()
    assert empty.format == "f" and empty.shape == (0,) and bytes(empty) == b""


@pytest.mark.parametrize("dtype,torch_dtype,fmt", [(dtypes.float16, torch.float16, "H"),
                                                   (dtypes.bfloat16, torch.bfloat16, "H"),
                                                   (dtypes.fp8e4m3, torch.float8_e4m3fn, "B")], ids=str)  # fmt: skip
def test_data_of_a_float_a_memoryview_cannot_hold_is_its_bits(dtype, torch_dtype, fmt):
    values = [1.5, -2.0, 0.1, 300.0]
    data = Tensor(values, dtype=dtype).data()
    bits = torch.tensor(values).to(torch_dtype).view(torch.uint16 if fmt == "H" else torch.uint8)
    assert data.format == fmt and data.tolist() == bits.tolist()


@pytest.mark.parametrize("args", [(5,), (0, 5), (2, 11, 3), (-4, 4, 2), (7, -2, -3), (0,)], ids=str)
def test_arange_of_ints_is_default_int_which_can_be_pytorchs_int64(args):
    assert Tensor.arange(*args).dtype == dtypes.default_int == dtypes.int32  # tinygrad's default
    old = dtypes.default_int
    dtypes.default_int = dtypes.int64
    try:
        ours, theirs = Tensor.arange(*args), torch.arange(*args)
        assert ours.dtype == dtypes.int64 and theirs.dtype == torch.int64 and ours.tolist() == theirs.tolist()
    finally:
        dtypes.default_int = old


@pytest.mark.parametrize("args", [(5.0,), (0, 2, 0.5), (-1.5, 1.0, 0.25)], ids=str)
def test_arange_with_a_float_argument_is_float32_as_pytorch(args):
    ours, theirs = Tensor.arange(*args), torch.arange(*args)
    assert ours.dtype == dtypes.float32 and theirs.dtype == torch.float32
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    assert (
        Tensor.arange(3, dtype=dtypes.int64).dtype == dtypes.int64
        and Tensor.arange(3, dtype="half").dtype == dtypes.half
    )


@pytest.mark.parametrize("labels,classes", [([0, 2, 1], 3), ([[1], [0]], 2), ([], 4), ([3], -1)], ids=str)
def test_one_hot_is_default_int_as_tinygrads_and_int64_as_pytorchs(labels, classes):
    theirs = torch.nn.functional.one_hot(torch.tensor(labels, dtype=torch.int64), classes)
    ours = Tensor(labels, dtype=dtypes.int64).one_hot(classes)
    assert ours.dtype == dtypes.int32 and ours.shape == tuple(theirs.shape) and ours.tolist() == theirs.tolist()
    saved = dtypes.default_int
    try:
        dtypes.default_int = dtypes.int64
        ours = Tensor(labels, dtype=dtypes.int64).one_hot(classes)
        assert ours.dtype == dtypes.int64 and theirs.dtype == torch.int64 and ours.tolist() == theirs.tolist()
    finally:
        dtypes.default_int = saved
