"""sum, max, min and mean over any axes, with keepdim, against NumPy on every device."""

import numpy as np
import pytest

from glassgrad import Device, Tensor, dtypes
from glassgrad.codegen import get_program
from glassgrad.uop import Ops
from helpers import LAYOUTS, assert_matches, check

REDUCTIONS = {"sum": np.sum, "max": np.max, "min": np.min, "mean": np.mean}
AXES = [None, 0, 1, -1, (0, 2), (-1, -3), (2, 0, 1)]


def _reduce(name, axis, keepdim):
    return lambda x: getattr(x, name)(axis=axis, keepdim=keepdim)


def _numpy_reduce(name, axis, keepdim):
    return lambda x: REDUCTIONS[name](x, axis=axis, keepdims=keepdim)


@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("axis", AXES, ids=str)
@pytest.mark.parametrize("name", REDUCTIONS)
def test_reduce_over_axes_of_odd_shape(device, name, axis, keepdim):
    check([(3, 4, 5)], _reduce(name, axis, keepdim), _numpy_reduce(name, axis, keepdim), device, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape", [(1,), (7,), (1, 1), (5, 1, 3), (2, 9)], ids=str)
@pytest.mark.parametrize("name", REDUCTIONS)
def test_reduce_small_and_odd_shapes(device, name, shape):
    for axis in (None, -1):
        check([shape], _reduce(name, axis, False), _numpy_reduce(name, axis, False), device, atol=1e-5)


@pytest.mark.parametrize("name", REDUCTIONS)
def test_reduce_of_0d_tensor_is_itself(device, name):
    x = Tensor(2.5, device=device)
    assert getattr(x, name)().item() == 2.5 and getattr(x, name)().shape == ()


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("name", REDUCTIONS)
def test_reduce_reads_non_contiguous_input(device, name, layout):
    for axis in (0, 1):
        check([(3, 4)], _reduce(name, axis, False), _numpy_reduce(name, axis, False), device, layout=layout, atol=1e-5)


# ---- empty tensors, where NumPy defines the answer ----


def test_kernel_of_an_empty_reduction_takes_every_buffer_it_is_passed():
    # the reduction becomes a constant, but the kernel still takes its (unread) input: the runtime passes every buffer
    x = Tensor(np.zeros(0, dtype=np.float32), device="CPU").realize().reshape(2, 0)
    (item,) = (x.sum(axis=1) * np.nan).schedule()
    spec = get_program(item.ast, Device["CPU"].renderer)
    assert sum(u.op is Ops.DEFINE_GLOBAL for u in spec.program) == len(item.bufs)


@pytest.mark.parametrize("shape, axis", [((0,), None), ((0,), 0), ((2, 0), 1), ((2, 0), 0), ((0, 3), 0),
                                         ((0, 3), None), ((3, 0, 2), (1, 2))], ids=str)  # fmt: skip
def test_sum_of_empty_is_zero(device, shape, axis):
    for keepdim in (False, True):
        check([shape], _reduce("sum", axis, keepdim), _numpy_reduce("sum", axis, keepdim), device)


def test_max_and_min_over_a_non_empty_axis_of_an_empty_tensor(device):
    for name in ("max", "min"):
        check([(0, 3)], _reduce(name, 1, False), _numpy_reduce(name, 1, False), device)
        check([(2, 0, 3)], _reduce(name, (0, 2), True), _numpy_reduce(name, (0, 2), True), device)


def test_mean_of_empty_is_nan(device):
    check([(0,)], Tensor.mean, lambda x: np.float32(np.nan), device)
    check([(2, 0)], _reduce("mean", 1, False), lambda x: np.full(2, np.nan, dtype=np.float32), device)


CONSTANT_TENSORS = {
    "ones": (lambda d: Tensor.ones(2, 3, device=d), np.ones((2, 3), dtype=np.float32)),
    "empty": (lambda d: Tensor.zeros(0, device=d), np.zeros(0, dtype=np.float32)),
    "full": (lambda d: Tensor.full((2, 2), 3, device=d), np.full((2, 2), 3, dtype=np.int32)),
}


@pytest.mark.parametrize("make, expected", CONSTANT_TENSORS.values(), ids=CONSTANT_TENSORS.keys())
def test_reduce_of_constant_tensor(device, make, expected):
    assert_matches(make(device).sum(axis=-1), expected.sum(axis=-1).astype(expected.dtype))
    if expected.size:  # NumPy has no max of nothing
        assert_matches(make(device).max(axis=-1), expected.max(axis=-1))
        assert_matches(make(device).min(axis=0), expected.min(axis=0))


# ---- dtypes ----


def test_sum_of_ints_is_exact(device):
    check([(3, 5)], lambda x: x.sum(axis=1), lambda x: x.sum(axis=1).astype(np.int32), device, dtype=dtypes.int32,
          low=-1000, high=1000)  # fmt: skip


@pytest.mark.parametrize("dtype", [dtypes.bool, dtypes.int8, dtypes.int16], ids=str)
def test_sum_of_bools_and_small_ints_is_int32(device, dtype):
    check([(4, 40)], lambda x: x.sum(axis=1), lambda x: x.sum(axis=1).astype(np.int32), device, dtype=dtype, low=-100,
          high=100, expected_dtype=dtypes.int32)  # fmt: skip


def test_sum_with_dtype_argument(device):
    check([(6,)], lambda x: x.sum(dtype=dtypes.float32), lambda x: x.sum(dtype=np.float32), device, dtype=dtypes.int32)


@pytest.mark.parametrize("dtype", [dtypes.int32, dtypes.uint8, dtypes.int8], ids=str)
def test_max_and_min_of_ints_keep_dtype(device, dtype):
    low = 0 if dtypes.is_unsigned(dtype) else -100
    for name in ("max", "min"):
        check([(3, 4)], _reduce(name, 1, False), _numpy_reduce(name, 1, False), device, dtype=dtype, low=low, high=100)


def test_max_and_min_of_bools_are_any_and_all(device):
    x = Tensor([[True, False], [False, False], [True, True]], device=device)
    assert x.max(axis=1).tolist() == [True, False, True]
    assert x.min(axis=1).tolist() == [False, False, True]


def test_mean_of_ints_is_float32(device):
    check([(3, 4)], lambda x: x.mean(axis=0), lambda x: x.mean(axis=0), device, dtype=dtypes.int32,
          expected_dtype=dtypes.float32)  # fmt: skip


def test_max_with_negative_infinity_and_infinity(device):
    x = Tensor([[-np.inf, -np.inf], [1.0, np.inf]], device=device)
    assert x.max(axis=1).tolist() == [-np.inf, np.inf]
    assert x.min(axis=1).tolist() == [-np.inf, 1.0]


# ---- reductions inside larger expressions ----


def test_elementwise_before_and_after_reduce(device):
    check([(3, 5)], lambda x: ((x + 1) * 2).sum(axis=1).exp() - 1, lambda x: np.exp(((x + 1) * 2).sum(axis=1)) - 1,
          device, low=-0.5, high=0.5, rtol=1e-4)  # fmt: skip


def test_reduce_broadcast_back_against_input(device):
    check([(3, 5)], lambda x: x - x.max(axis=1, keepdim=True), lambda x: x - x.max(axis=1, keepdims=True), device)
    check([(3, 5)], lambda x: x / x.sum(axis=0), lambda x: x / x.sum(axis=0), device, low=0.5, high=2)


def test_reduce_of_expanded_input(device):
    x = Tensor([1.0, 2.0, 3.0], device=device)
    assert_matches(x.reshape(1, 3).expand(4, 3).sum(axis=0), np.array([4.0, 8.0, 12.0], dtype=np.float32))
    assert_matches(x.reshape(3, 1).expand(3, 4).sum(), np.float32(24.0))


def test_sum_of_many_elements_in_float32(device):
    n = 10_000 if device == "CPU" else 300
    check([(n,)], Tensor.sum, np.sum, device, low=0, high=1, rtol=1e-4)


@pytest.mark.parametrize("dtype", [dtypes.float16, dtypes.bfloat16])
@pytest.mark.parametrize("name", ["sum", "max", "min", "mean", "prod"])
def test_16_bit_float_reductions_match_torch(device, dtype, name):
    import torch

    values = np.random.default_rng(3).uniform(0.5, 1.5, (6, 29)).astype(np.float32)  # no cancellation
    ours = getattr(Tensor(values, device=device).cast(dtype), name)(axis=1)
    theirs = getattr(torch.from_numpy(values).to(getattr(torch, dtype.name)), name)(1)
    theirs = theirs.values if name in ("max", "min") else theirs
    assert ours.dtype == dtype
    np.testing.assert_allclose(ours.cast(dtypes.float32).numpy(), theirs.float().numpy(), rtol=2e-2)
