"""Tensors of more than 2**31 elements index in int64 (a zeros of 2**31 + 5 failed with an IndexError in the lowerer),
and a tensor too big for its device raises an OutOfMemoryError (a MemoryError, and a RuntimeError as PyTorch's) that
says what was asked for, how big, of which dtype and where, instead of an IndexError, a bare OSError or the kernel
killing the process."""

import numpy as np
import pytest

from glassgrad import Device, Tensor, dtypes
from glassgrad.codegen import get_program
from glassgrad.codegen.lowerer import index_dtype
from glassgrad.renderer.cuda import CUDARenderer
from glassgrad.runtime.out_of_memory import OutOfMemoryError, host_memory

BIG = 2**31 + 5


def _ast(t: Tensor):
    return t.schedule()[-1].ast


# ---- the index dtype, on ASTs: nothing allocated ----


@pytest.mark.parametrize("n, expected", [(2**31 - 1, dtypes.int32), (2**31, dtypes.int64), (BIG, dtypes.int64)])
def test_an_output_of_2_31_elements_indexes_in_int64(n, expected):
    assert index_dtype(_ast(Tensor.zeros(n, dtype=dtypes.int8))) == expected
    assert index_dtype(_ast(Tensor.empty(n, dtype=dtypes.uint8) + 1)) == expected


def test_a_big_input_read_in_a_slice_indexes_in_int64():
    assert index_dtype(_ast(Tensor.empty(BIG, dtype=dtypes.bool)[-3:].contiguous())) == dtypes.int64
    assert index_dtype(_ast(Tensor.empty(BIG, dtype=dtypes.bool)[:3].contiguous())) == dtypes.int32


def test_big_loops_render_64_bit_counters():
    ast = _ast(Tensor.empty(BIG, dtype=dtypes.int8) + 1)
    cpu = get_program(ast, Device["CPU"].renderer).src
    assert "for (long long ridx0 = start; ridx0 < end; ridx0++)" in cpu and "long long start, long long end" in cpu
    cuda = get_program(ast, CUDARenderer()).src
    assert "long long gidx = (long long)blockIdx.x*blockDim.x+threadIdx.x;" in cuda
    small = get_program(_ast(Tensor.empty(1000, dtype=dtypes.int8) + 1), CUDARenderer()).src
    assert "int gidx = blockIdx.x*blockDim.x+threadIdx.x;" in small  # int32 where it fits


# ---- kernels over 2**31 elements that allocate little ----


def test_arange_past_int32_is_int64_and_exact():
    x = Tensor.arange(BIG)
    assert x.dtype == dtypes.int64
    assert x[-3:].tolist() == [BIG - 3, BIG - 2, BIG - 1]
    assert Tensor.arange(2**31 - 2, 2**31 + 1).tolist() == [2**31 - 2, 2**31 - 1, 2**31]


def test_a_sum_over_2_31_terms():
    assert Tensor.ones(BIG, dtype=dtypes.int8).sum(dtype=dtypes.int64).item() == BIG
    assert (Tensor.arange(BIG) % 7 == 3).sum(dtype=dtypes.int64).item() == len(range(3, BIG, 7))


# ---- 2 GB tensors ----


@pytest.fixture(scope="module")
def two_gigabytes():
    if host_memory()[1] < 6 * BIG:
        pytest.skip(f"needs {6 * BIG / 2**30:.0f} GiB of free memory for tensors of {BIG} bytes")
    return (Tensor.zeros(BIG, dtype=dtypes.uint8) + 3).realize()


@pytest.mark.slow
def test_zeros_plus_one_of_2_31_plus_5_bytes(two_gigabytes):
    x = two_gigabytes
    assert x.shape == (BIG,) and x.dtype == dtypes.uint8
    assert x[-4:].tolist() == [3] * 4 and x[:2].tolist() == [3, 3] and x[2**31 - 1 : 2**31 + 1].tolist() == [3, 3]
    assert x.sum(dtype=dtypes.int64).item() == 3 * BIG


@pytest.mark.slow
def test_elementwise_and_bool_of_2_31_plus_5_bytes(two_gigabytes):
    y = ((two_gigabytes * 100) > 250).realize()  # uint8: 300 wraps to 44
    assert y.dtype == dtypes.bool and y[-2:].tolist() == [False, False]
    assert y.logical_not().sum(dtype=dtypes.int64).item() == BIG


# ---- too big for the device ----

TOO_BIG = {
    "zeros": lambda device: Tensor.zeros(10**12, device=device).realize(),
    "empty": lambda device: Tensor.empty(10**12, device=device).realize(),
    "expand_realized": lambda device: Tensor.ones(1, 10**5, device=device).expand(10**6, 10**5).contiguous().realize(),
    "full_read_back": lambda device: Tensor.full((10**6, 10**6), 2, dtype=dtypes.int8, device=device).numpy(),
}


@pytest.mark.parametrize("name", list(TOO_BIG))
def test_too_big_is_an_out_of_memory_error_that_says_what(device, name):
    with pytest.raises(MemoryError) as raised:
        TOO_BIG[name](device)
    error = raised.value
    assert isinstance(error, OutOfMemoryError) and isinstance(error, RuntimeError)
    assert error.nbytes > host_memory()[0]
    message = str(error)
    assert "out of memory on" in message and f"{error.nbytes:,} bytes" in message and repr(error.dtype) in message
    assert device in message and f"{error.size:,} elements" in message
    assert Tensor([1, 2], device=device).add(1).tolist() == [2, 3]  # the process carries on


def test_the_host_check_refuses_what_it_cannot_hold():
    total, available = host_memory()
    assert 0 < available <= total
    with pytest.raises(OutOfMemoryError, match="the host has"):
        Tensor.empty(total + 2**30, dtype=dtypes.uint8, device="CPU").realize()


def test_a_fitting_tensor_is_not_refused(device):
    np.testing.assert_array_equal(Tensor.zeros(3 * 2**20, dtype=dtypes.uint8, device=device).numpy()[-2:], [0, 0])
