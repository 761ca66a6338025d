"""Making tensors (lists, scalars, NumPy, zeros/ones/full/arange/eye/empty/random) and reading them back."""

import math

import numpy as np
import pytest

from glassgrad import Tensor, dtypes
from helpers import DEVICES, NUMPY_DTYPES, assert_matches

# ---- from Python data ----


@pytest.mark.parametrize(
    "data, dtype",
    [([[1, 2], [3, 4]], dtypes.int32), ([[1.0, 2], [3, 4]], dtypes.float32), ([True, False], dtypes.bool),
     ([1, 2.5, True], dtypes.float32), ([[[1], [2]], [[3], [4]], [[5], [6]]], dtypes.int32), ([7], dtypes.int32),
     ([-2147483648, 2147483647], dtypes.int32)],
    ids=["ints", "floats", "bools", "mixed", "3d", "one", "int32 limits"],
)  # fmt: skip
def test_tensor_from_nested_list(device, data, dtype):
    t = Tensor(data, device=device)
    assert t.dtype == dtype and t.device == device
    assert_matches(t, np.array(data, dtype=NUMPY_DTYPES[dtype]))


def test_empty_list_is_float32_of_shape_0(device):
    t = Tensor([], device=device)
    assert t.shape == (0,) and t.dtype == dtypes.float32 and t.tolist() == []


def test_tensor_from_list_with_dtype(device):
    t = Tensor([[1, 2], [3, 4]], device=device, dtype=dtypes.float16)
    assert_matches(t, np.array([[1, 2], [3, 4]], dtype=np.float16))
    assert Tensor([1.7, -1.7], device=device, dtype="int32").tolist() == [1, -1]


def test_tensor_from_tuple_and_list_of_tensors_shape(device):
    assert Tensor((1, 2, 3), device=device).shape == (3,)
    assert Tensor([[1, 2, 3]], device=device).shape == (1, 3)


@pytest.mark.parametrize("value, dtype", [(3, dtypes.int32), (2.5, dtypes.float32), (True, dtypes.bool),
                                          (-7, dtypes.int32)], ids=str)  # fmt: skip
def test_tensor_from_scalar_is_0d(device, value, dtype):
    t = Tensor(value, device=device)
    assert t.shape == () and t.ndim == 0 and t.numel() == 1 and t.dtype == dtype
    assert t.item() == value and t.tolist() == value
    assert t.numpy().shape == ()


def test_scalar_with_dtype(device):
    assert Tensor(3, device=device, dtype=dtypes.float32).item() == 3.0
    assert Tensor(300, device=device, dtype=dtypes.uint8).item() == 44  # wraps, as a C cast does


# ---- from NumPy ----


@pytest.mark.parametrize("dtype", list(NUMPY_DTYPES), ids=str)
def test_tensor_from_numpy_of_each_dtype(device, dtype):
    np_dtype = NUMPY_DTYPES[dtype]
    if dtype == dtypes.bool:
        array = np.array([[True, False, True], [False, False, True]])
    elif dtypes.is_int(dtype):
        info = np.iinfo(np_dtype)
        array = np.array([[info.min, 0, info.max], [1, 2, 3]], dtype=np_dtype)
    else:
        array = np.array([[-1.5, 0.0, np.inf], [3.25, -np.inf, 1e-3]], dtype=np_dtype)
    t = Tensor(array, device=device)
    assert t.dtype == dtype and t.shape == (2, 3)
    assert_matches(t, array, rtol=0, atol=0)


@pytest.mark.parametrize(
    "array",
    [np.arange(12, dtype=np.float32).reshape(3, 4).T, np.arange(10, dtype=np.int32)[::-3], np.array(2.5),
     np.float32(1.25), np.zeros((0, 3), dtype=np.float32), np.ones((1, 1, 1), dtype=np.int16)],
    ids=["transposed", "negative stride", "0-d", "numpy scalar", "empty", "ones"],
)  # fmt: skip
def test_tensor_from_numpy_layouts(device, array):
    assert_matches(Tensor(array, device=device), np.asarray(array), rtol=0, atol=0)


def test_tensor_from_numpy_with_dtype_casts(device):
    t = Tensor(np.array([1.9, -1.9], dtype=np.float64), device=device, dtype=dtypes.int32)
    assert t.dtype == dtypes.int32 and t.tolist() == [1, -1]


# ---- filled tensors ----

FILL_SHAPES = [(0,), (1,), (2, 3), (), (3, 1, 2), (2, 0)]


@pytest.mark.parametrize("shape", FILL_SHAPES, ids=str)
def test_zeros_ones_full(device, shape):
    assert_matches(Tensor.zeros(shape, device=device), np.zeros(shape, dtype=np.float32))
    assert_matches(Tensor.ones(shape, device=device), np.ones(shape, dtype=np.float32))
    assert_matches(Tensor.full(shape, 2.5, device=device), np.full(shape, 2.5, dtype=np.float32))


def test_filled_tensors_take_sizes_as_arguments_and_dtype(device):
    assert_matches(Tensor.zeros(2, 3, device=device), np.zeros((2, 3), dtype=np.float32))
    assert_matches(Tensor.ones([2], device=device, dtype=dtypes.int8), np.ones(2, dtype=np.int8))
    assert_matches(Tensor.full((2,), 7, device=device), np.full(2, 7, dtype=np.int32))
    assert_matches(Tensor.full(3, True, device=device), np.full(3, True))
    assert_matches(Tensor.full((2, 2), -1, dtype=dtypes.int64, device=device), np.full((2, 2), -1, dtype=np.int64))


@pytest.mark.parametrize(
    "args, kwargs",
    [((5,), {}), ((2, 10, 3), {}), ((10, 0, -3), {}), ((0, 1, 0.25), {}), ((1.0, -1.0, -0.5), {}), ((0,), {}),
     ((5, 2), {}), ((-3, 3), {}), ((3,), {"dtype": dtypes.float32}), ((0.5, 4), {}), ((0, 10, 4), {"dtype": "int8"})],
    ids=str,
)  # fmt: skip
def test_arange_matches_numpy(device, args, kwargs):
    ints = all(isinstance(a, int) for a in args)
    dtype = kwargs.get("dtype", dtypes.int32 if ints else dtypes.float32)
    np_dtype = {dtypes.int32: np.int32, dtypes.float32: np.float32, "int8": np.int8}[dtype]
    expected = np.arange(*args).astype(np_dtype)
    assert_matches(Tensor.arange(*args, device=device, **kwargs), expected, dtype=Tensor([], dtype=dtype).dtype)


@pytest.mark.parametrize("shape, dtype", [((2, 3), None), ((0,), dtypes.int32), ((4,), dtypes.float16)], ids=str)
def test_empty_has_shape_and_dtype(device, shape, dtype):
    t = Tensor.empty(*shape, device=device, dtype=dtype)
    assert t.shape == shape and t.dtype == (dtype or dtypes.float32) and t.device == device
    assert t.numpy().shape == shape  # the values are unset, but readable


@pytest.mark.parametrize("n, m", [(3, None), (2, 4), (4, 2), (1, None), (0, None)], ids=str)
def test_eye(device, n, m):
    assert_matches(Tensor.eye(n, m, device=device), np.eye(n, m, dtype=np.float32))


def test_eye_with_dtype(device):
    assert_matches(Tensor.eye(3, dtype=dtypes.int32, device=device), np.eye(3, dtype=np.int32))


def test_like_constructors_keep_shape_dtype_and_device(device):
    x = Tensor([[1, 2, 3]], device=device, dtype=dtypes.int16)
    assert_matches(x.zeros_like(), np.zeros((1, 3), dtype=np.int16))
    assert_matches(x.ones_like(), np.ones((1, 3), dtype=np.int16))
    assert_matches(x.full_like(9), np.full((1, 3), 9, dtype=np.int16))
    assert_matches(x.full_like(0.5, dtype=dtypes.float32), np.full((1, 3), 0.5, dtype=np.float32))
    for made in (x.zeros_like(), x.rand_like(), x.randn_like()):
        assert made.device == device and made.shape == (1, 3)
    assert x.rand_like().dtype == dtypes.float32  # random floats for an int tensor
    assert Tensor.zeros(2, dtype=dtypes.float16, device=device).rand_like().dtype == dtypes.float16


# ---- random numbers ----


def _draw(fn, seed, *shape, **kwargs):
    Tensor.manual_seed(seed)
    return fn(*shape, **kwargs).numpy()


RANDOM = {"rand": Tensor.rand, "randn": Tensor.randn, "randint": Tensor.randint}


@pytest.mark.parametrize("name", RANDOM)
def test_same_seed_gives_same_values(device, name):
    first, again = _draw(RANDOM[name], 5, 2, 3, device=device), _draw(RANDOM[name], 5, 2, 3, device=device)
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, _draw(RANDOM[name], 6, 2, 3, device=device)), "another seed, other values"


@pytest.mark.parametrize("name", RANDOM)
def test_consecutive_draws_differ(device, name):
    Tensor.manual_seed(1)
    first, second = RANDOM[name](8, device=device).numpy(), RANDOM[name](8, device=device).numpy()
    assert not np.array_equal(first, second)


@pytest.mark.parametrize("name", RANDOM)
def test_random_values_agree_between_devices(name):
    first, *others = (_draw(RANDOM[name], 1234, 3, 4, device=d) for d in DEVICES)
    for other in others:
        np.testing.assert_array_equal(first, other)


def test_random_dtypes_and_shapes(device):
    assert Tensor.rand(2, 3, device=device).dtype == dtypes.float32
    assert Tensor.rand((2, 3), device=device).shape == (2, 3)
    assert Tensor.randn(4, device=device, dtype=dtypes.float16).dtype == dtypes.float16
    assert Tensor.randint(5, device=device).dtype == dtypes.int32
    assert Tensor.rand(0, device=device).numpy().shape == (0,)
    assert Tensor.rand(device=device).shape == ()


def _sample_count(device):
    return 10_000 if device == "CPU" else 1_000  # the PYTHON device interprets every op: fewer samples


def test_rand_is_uniform_in_0_1(device):
    Tensor.manual_seed(0)
    n = _sample_count(device)
    x = Tensor.rand(n, device=device).numpy()
    assert x.min() >= 0 and x.max() < 1
    tolerance = 4 / math.sqrt(n)  # about 4 standard errors
    assert abs(x.mean() - 0.5) < tolerance * math.sqrt(1 / 12)
    assert abs(x.std() - math.sqrt(1 / 12)) < tolerance * 0.2
    assert abs(np.histogram(x, bins=4, range=(0, 1))[0] / n - 0.25).max() < tolerance * 0.5


def test_randn_is_standard_normal(device):
    Tensor.manual_seed(0)
    n = _sample_count(device)
    x = Tensor.randn(n, device=device).numpy()
    assert np.isfinite(x).all()
    tolerance = 4 / math.sqrt(n)
    assert abs(x.mean()) < tolerance
    assert abs(x.std() - 1) < tolerance
    assert abs((np.abs(x) < 1).mean() - 0.6827) < tolerance * 0.5  # the one-sigma mass


@pytest.mark.parametrize("low, high", [(0, 10), (-5, 5), (3, 4)], ids=str)
def test_randint_is_uniform_over_the_range(device, low, high):
    Tensor.manual_seed(0)
    n = _sample_count(device)
    x = Tensor.randint(n, low=low, high=high, device=device).numpy()
    assert x.dtype == np.int32 and x.min() >= low and x.max() < high
    counts = np.bincount(x - low, minlength=high - low)
    assert len(counts) == high - low and counts.min() > 0
    assert abs(counts / n - 1 / (high - low)).max() < 4 / math.sqrt(n)


def test_randint_rejects_an_empty_range(device):
    with pytest.raises(ValueError, match=r"randint: high \(3\) must be greater than low \(3\)"):
        Tensor.randint(2, low=3, high=3, device=device)


# ---- facts and reading back ----


def test_shape_dtype_device_ndim_numel(device):
    t = Tensor.zeros(2, 3, 4, device=device, dtype=dtypes.int8)
    assert (t.shape, t.dtype, t.device, t.ndim, t.numel(), len(t)) == ((2, 3, 4), dtypes.int8, device, 3, 24, 2)
    assert Tensor(np.zeros((0, 5)), device=device).numel() == 0


def test_numpy_tolist_item(device):
    t = Tensor([[1.5, 2.0], [-3.0, 4.25]], device=device)
    assert t.tolist() == [[1.5, 2.0], [-3.0, 4.25]]
    np.testing.assert_array_equal(t.numpy(), np.array([[1.5, 2.0], [-3.0, 4.25]], dtype=np.float32))
    assert t[1, 1].item() == 4.25 and isinstance(t[1, 1].item(), float)
    assert Tensor([[7]], device=device).item() == 7 and isinstance(Tensor([[7]], device=device).item(), int)
    assert Tensor([True], device=device).item() is True


def test_numpy_and_tolist_of_non_contiguous_views(device):
    t = Tensor(np.arange(6, dtype=np.int32).reshape(2, 3), device=device).realize()
    assert t.T.tolist() == [[0, 3], [1, 4], [2, 5]]
    np.testing.assert_array_equal(t[:, ::-2].numpy(), np.array([[2, 0], [5, 3]], dtype=np.int32))
    assert t.reshape(1, 2, 3).expand(2, 2, 3).numpy().shape == (2, 2, 3)


def test_numpy_returns_an_independent_copy(device):
    t = Tensor([1.0, 2.0], device=device)
    values = t.numpy()
    values[0] = 100
    assert t.tolist() == [1.0, 2.0]


def test_item_of_many_elements_is_an_error(device):
    with pytest.raises(ValueError, match=r"item: the tensor has 3 elements \(shape \(3,\)\)"):
        Tensor([1, 2, 3], device=device).item()


def test_bfloat16_reads_back_as_float32(device):
    t = Tensor([1.0, 3.140625], device=device, dtype=dtypes.bfloat16)
    assert t.dtype == dtypes.bfloat16 and t.numpy().dtype == np.float32 and t.tolist() == [1.0, 3.140625]


def test_repr_names_the_uop_device_and_grad(device):
    t = Tensor([1, 2, 3, 4], device=device)
    for text in (repr(t), repr(t.realize()), repr(t + 1)):
        assert text.startswith("<Tensor <UOp") and f"on {device} with grad None" in text
    assert f"{device} (4,) int" in repr(t)


def test_repr_of_fresh_tensor_shows_the_copy_from_python():
    expected = "<Tensor <UOp CPU (4,) int (Ops.COPY, None)> on CPU with grad None>"
    assert repr(Tensor([1, 2, 3, 4], device="CPU")) == expected


def test_numpy_scalars_in_a_list_are_the_numbers_they_hold():
    """np.uint8(35) in a nested list (bytes of a NumPy array indexed one by one) was a TypeError; PyTorch takes it.
    The dtype follows the Python numbers' rule (default_int, default_float), where PyTorch keeps NumPy's."""
    import torch

    for values in ([[np.uint8(35)]], [np.float32(1.5), 2], [np.bool_(True), np.bool_(False)], [np.int64(-7)]):
        t = Tensor(values)
        np.testing.assert_array_equal(t.numpy(), torch.tensor(values).numpy())
    assert Tensor([np.uint8(3)]).dtype == dtypes.default_int and Tensor([np.float64(0.5)]).dtype == dtypes.default_float


AWKWARD_VALUES = [0, 1, -1, 127, 128, 255, 256, 2**31, -(2**31) - 1, 2**64 + 3, 1.5, -2.5, 1e39, -1e39, 70000.0,
                  math.nan, math.inf, True, False]  # fmt: skip


@pytest.mark.parametrize("dtype", [dtypes.bool, dtypes.uint8, dtypes.int8, dtypes.int16, dtypes.int32, dtypes.uint32,
                                   dtypes.int64, dtypes.float16, dtypes.float32, dtypes.float64],
                         ids=str)  # fmt: skip
def test_list_values_are_rounded_or_wrapped_as_truncate_says(dtype):
    """Values packed from a list, whether the format holds them as they are (packed at once) or not (each truncated:
    ints that wrap, floats for ints, floats past the largest): each is what dtypes' truncate makes of it."""
    from glassgrad.dtype import truncate

    for values in (AWKWARD_VALUES, [v for v in AWKWARD_VALUES if isinstance(v, int) and -128 <= v <= 127]):
        if dtypes.is_int(dtype) and any(isinstance(v, float) and not math.isfinite(v) for v in values):
            values = [v for v in values if not (isinstance(v, float) and not math.isfinite(v))]  # no int of inf or nan
        got = Tensor(values, dtype=dtype, device="CPU").tolist()
        want = [truncate(dtype, v) for v in values]
        assert [str(v) for v in got] == [str(v) for v in want]


def test_a_list_that_fits_its_format_is_packed_without_a_call_a_value(monkeypatch):
    """Token ids and masks (sentence encoders build them as lists): no Python call per value (constants elsewhere in
    the graph are still truncated one by one)."""
    import glassgrad.dtype as dtype_module

    calls = []
    real = dtype_module._truncate
    monkeypatch.setattr(dtype_module, "_truncate", lambda d, v: calls.append((d, v)) or real(d, v))
    ids = [[i % 30522 for i in range(j, j + 128)] for j in range(32)]
    assert Tensor(ids, dtype=dtypes.int32, device="CPU").tolist() == ids
    assert Tensor([[0.5, 1.0], [2.0, -3.5]], device="CPU").tolist() == [[0.5, 1.0], [2.0, -3.5]]
    int_calls = [v for d, v in calls if d == dtypes.int32]  # a kernel's own constants (sizes: 4096, 256) may be some
    assert len(int_calls) < 32 * 128 // 64 and not [v for d, v in calls if v in (0.5, -3.5)]  # not one a value
    assert Tensor([300], dtype=dtypes.uint8, device="CPU").tolist() == [44] and (dtypes.uint8, 300) in calls
