"""Kernels whose vector lanes all read one value compile and compute NumPy's values. After simplifying, every lane of
a gather can read the same element (rows picked by repeated indices, then flipped): a vector op of two such
broadcasts was written as the scalar op, assigned to a vector (`gg_intx2 alu3 = (val0+1);`), which gcc refused."""

import numpy as np
import pytest

from glassgrad import Tensor

# (ours, NumPy's) on the same rows picked by index
CASES = {
    "flip_of_repeated_row": (lambda y: y + y.flip(1), lambda y: y + np.flip(y, 1), (1, 2), [0, 0]),
    "product_with_flip": (lambda y: y * y.flip(1), lambda y: y * np.flip(y, 1), (1, 4), [0, 0, 0]),
    "flip_summed": (lambda y: (y + y.flip(1)).sum(1), lambda y: (y + np.flip(y, 1)).sum(1), (1, 8), [0] * 5),
    "reduction_over_lanes": (
        lambda y: (y * y.flip(2)).sum(2),
        lambda y: (y * np.flip(y, 2)).sum(2),
        (1, 2, 4),
        [0] * 5,
    ),
    "odd_rows": (lambda y: y - y.flip(1) * 2, lambda y: y - np.flip(y, 1) * 2, (2, 5), [1, 1, 0]),
    "compared": (lambda y: (y + y.flip(1)) < 3, lambda y: (y + np.flip(y, 1)) < 3, (1, 16), [0, 0]),
}


@pytest.mark.parametrize("source", ["computed", "loaded"])
@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.uint8, np.float16])
def test_lanes_reading_one_value_compile(device, name, dtype, source):
    """Rows of a computed tensor (an arange, as Tensor.ones(1, 2)[[0, 0]] was) or of a buffer."""
    ours, numpy_fn, shape, rows = CASES[name]
    values = np.arange(int(np.prod(shape))).reshape(shape).astype(dtype)
    made = (
        Tensor(values) if source == "loaded" else Tensor.arange(values.size).reshape(shape).cast(Tensor(values).dtype)
    )
    got = ours(made[rows]).numpy()
    expected = numpy_fn(values[rows])
    np.testing.assert_allclose(got.astype(np.float64), expected.astype(np.float64), rtol=1e-3)


def test_the_reported_shape(device):
    y = Tensor.ones(1, 2)[[0, 0]]
    assert (y + y.flip(1)).tolist() == [[2.0, 2.0], [2.0, 2.0]]


def test_bool_sums_stay_bools(device):
    """True + True is True (a logical or, as NumPy's and PyTorch's), also unstored: summed, it counts 1."""
    values = np.array([[True], [False], [True]])
    y = Tensor(values)
    np.testing.assert_array_equal((y + y.flip(0)).numpy(), values + np.flip(values, 0))
    np.testing.assert_array_equal((y + y.flip(0)).sum(1).numpy(), (values + np.flip(values, 0)).sum(1))


@pytest.mark.parametrize("dtype", [np.uint32, np.uint64, np.int32, np.int64, np.uint8, np.int16])
@pytest.mark.parametrize("size", [256, 67])
def test_shifts_of_vector_lanes_match_numpy(device, dtype, size):
    """Shifts of whole vectors (the C vector form where it computes the scalar one in each lane, as a random draw's
    hash runs them), by constants and by a tensor of amounts: 256 elements (whole vectors on the CPU) and 67 (a
    size the CPU's vectors do not divide)."""
    rng = np.random.default_rng(5)
    info = np.iinfo(dtype)
    x = rng.integers(info.min, info.max, size, dtype=dtype, endpoint=True)
    amounts = rng.integers(0, info.bits, size).astype(dtype)
    t, s = Tensor(x, device=device), Tensor(amounts, device=device)
    for k in (0, 1, 13, info.bits - 1):
        np.testing.assert_array_equal((t >> k).numpy(), x >> dtype(k))
        if not np.issubdtype(dtype, np.signedinteger):  # a signed left shift that overflows is NumPy's wrap too,
            np.testing.assert_array_equal((t << k).numpy(), x << dtype(k))  # tested in test_small_int_wraparound
    np.testing.assert_array_equal((t >> s).numpy(), x >> amounts)
