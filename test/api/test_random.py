"""Random tensors, initializers, multinomial sampling and dropout: reproducibility, devices, ranges and statistics."""

import math

import numpy as np
import pytest

from glassgrad import Tensor, dtypes
from helpers import DEVICES

N = 100_000  # samples for the statistical checks: a mean is then good to about 1/sqrt(N) = 0.003 standard deviations

CREATORS = {
    "rand": lambda **kw: Tensor.rand(3, 5, **kw),
    "randn": lambda **kw: Tensor.randn(3, 5, **kw),
    "randint": lambda **kw: Tensor.randint(3, 5, low=-4, high=9, **kw),
    "normal": lambda **kw: Tensor.normal(3, 5, mean=2.0, std=0.5, **kw),
    "uniform": lambda **kw: Tensor.uniform(3, 5, low=-2.0, high=3.0, **kw),
    "scaled_uniform": lambda **kw: Tensor.scaled_uniform(3, 5, **kw),
    "glorot_uniform": lambda **kw: Tensor.glorot_uniform(3, 5, **kw),
    "kaiming_uniform": lambda **kw: Tensor.kaiming_uniform(3, 5, **kw),
    "kaiming_normal": lambda **kw: Tensor.kaiming_normal(3, 5, **kw),
}
FLOAT_CREATORS = [name for name in CREATORS if name != "randint"]


@pytest.fixture(autouse=True)
def _restore_training_mode():
    previous = Tensor.training
    yield
    Tensor.training = previous


@pytest.mark.parametrize("name", CREATORS)
def test_manual_seed_makes_each_creator_reproducible(name):
    Tensor.manual_seed(1234)
    first, second = CREATORS[name]().numpy(), CREATORS[name]().numpy()
    Tensor.manual_seed(1234)
    np.testing.assert_array_equal(CREATORS[name]().numpy(), first)
    np.testing.assert_array_equal(CREATORS[name]().numpy(), second)
    assert not np.array_equal(first, second), "two calls in a row gave the same values"
    Tensor.manual_seed(1235)
    assert not np.array_equal(CREATORS[name]().numpy(), first), "another seed gave the same values"


def test_seed_zero_and_large_seeds_give_well_mixed_values():
    for seed in (0, 1, 2**32, 2**40 + 5):
        Tensor.manual_seed(seed)
        values = Tensor.rand(1000).numpy()
        assert 0.45 < values.mean() < 0.55 and values.min() > 0 and len(np.unique(values)) > 990, f"seed {seed}"
    Tensor.manual_seed(2**32)
    high = Tensor.rand(100).numpy()
    Tensor.manual_seed(0)
    assert not np.array_equal(Tensor.rand(100).numpy(), high)


SAME_ON_EVERY_DEVICE = {
    "rand": lambda d: Tensor.rand(4, 3, device=d),
    "rand float16": lambda d: Tensor.rand(5, dtype=dtypes.float16, device=d),
    "randint": lambda d: Tensor.randint(7, low=-3, high=100, device=d),
    "uniform": lambda d: Tensor.uniform(6, low=-1.0, high=2.0, device=d),
    # normal values come from log and cos computed without libm, so they match to the bit too
    "randn": lambda d: Tensor.randn(3, 4, device=d),
    "normal": lambda d: Tensor.normal(5, mean=1.0, std=3.0, device=d),
    "kaiming_normal": lambda d: Tensor.kaiming_normal(2, 3, device=d),
    "multinomial": lambda d: Tensor([0.1, 0.6, 0.3], device=d).multinomial(4, replacement=True),
    "multinomial without replacement": lambda d: Tensor([[0.1, 0.6, 0.3], [0.5, 0.2, 0.3]], device=d).multinomial(2),
}


@pytest.mark.parametrize("name", SAME_ON_EVERY_DEVICE)
def test_the_same_seed_gives_the_same_bits_on_every_device(name):
    Tensor.manual_seed(7)
    cpu = SAME_ON_EVERY_DEVICE[name]("CPU").numpy()
    for device in DEVICES[1:]:
        Tensor.manual_seed(7)
        np.testing.assert_array_equal(SAME_ON_EVERY_DEVICE[name](device).numpy(), cpu)


@pytest.mark.parametrize("dtype, bits", [(dtypes.float32, 24), (dtypes.float16, 11), (dtypes.bfloat16, 8),
                                         (dtypes.float64, 32)])  # fmt: skip
def test_rand_fills_zero_to_one_with_every_value_exact(dtype, bits):
    Tensor.manual_seed(5)
    t = Tensor.rand(N, dtype=dtype)
    assert t.dtype == dtype
    values = t.cast(dtypes.float64).numpy()
    assert values.min() >= 0 and values.max() < 1
    assert np.all(values * 2**bits == np.floor(values * 2**bits)), "values are not multiples of 2**-bits"
    assert abs(values.mean() - 0.5) < 0.005 and abs(values.std() - math.sqrt(1 / 12)) < 0.005


def test_rand_and_randn_statistics():
    Tensor.manual_seed(11)
    u, z = Tensor.rand(N).numpy(), Tensor.randn(N).numpy()
    assert abs(u.mean() - 0.5) < 0.005 and abs(u.std() - math.sqrt(1 / 12)) < 0.003
    counts, _ = np.histogram(u, bins=20, range=(0, 1))
    assert _chi_square(counts, np.full(20, N / 20)) < 45  # 19 degrees of freedom: p < 0.001 above 43.8
    assert abs(z.mean()) < 0.01 and abs(z.std() - 1) < 0.01
    assert abs(np.mean(np.abs(z) < 1) - 0.6827) < 0.005 and abs(np.mean(np.abs(z) < 2) - 0.9545) < 0.003
    assert np.isfinite(z).all() and np.abs(z).max() < 6.5


def test_successive_random_tensors_are_uncorrelated():
    Tensor.manual_seed(12)
    a, b = Tensor.rand(N).numpy(), Tensor.rand(N).numpy()
    assert abs(np.corrcoef(a, b)[0, 1]) < 0.01 and abs(np.corrcoef(a[:-1], a[1:])[0, 1]) < 0.01


def test_normal_and_uniform_statistics():
    Tensor.manual_seed(13)
    x = Tensor.normal(N, mean=-3.0, std=2.0).numpy()
    assert abs(x.mean() + 3) < 0.02 and abs(x.std() - 2) < 0.02
    y = Tensor.uniform(N, low=-2.0, high=6.0).numpy()
    assert y.min() >= -2 and y.max() < 6 and abs(y.mean() - 2) < 0.03 and abs(y.std() - 8 / math.sqrt(12)) < 0.02


@pytest.mark.parametrize("low, high", [(0, 2), (-5, 5), (0, 10), (-(2**31), 2**31 - 1), (100, 107)])
def test_randint_covers_its_range_evenly(low, high):
    Tensor.manual_seed(14)
    x = Tensor.randint(N, low=low, high=high)
    assert x.dtype == dtypes.int32
    values = x.numpy().astype(np.int64)
    assert values.min() >= low and values.max() < high
    if high - low <= 16:
        counts = np.bincount(values - low, minlength=high - low)
        assert _chi_square(counts, np.full(high - low, N / (high - low))) < 40  # at most 15 degrees of freedom
    else:
        assert abs(values.mean() / 2**31) < 0.01  # spread over the whole int32 range


def test_randint_takes_pytorch_arguments_and_dtypes():
    Tensor.manual_seed(15)
    assert Tensor.randint(10, (2, 3)).shape == (2, 3) and Tensor.randint(3, 8, size=(4,)).shape == (4,)
    values = Tensor.randint(-3, 4, (1000,)).numpy()
    assert values.min() == -3 and values.max() == 3
    assert Tensor.randint(5, high=3, dtype=dtypes.int64).dtype == dtypes.int64
    as_float = Tensor.randint(6, low=0, high=4, dtype=dtypes.float32)
    assert as_float.dtype == dtypes.float32 and set(as_float.tolist()) <= {0.0, 1.0, 2.0, 3.0}


@pytest.mark.parametrize("name, bound", [
    ("scaled_uniform", lambda fan_in, fan_out: 1 / math.sqrt(fan_in * fan_out)),
    ("glorot_uniform", lambda fan_in, fan_out: math.sqrt(6 / (fan_in + fan_out))),
    ("kaiming_uniform", lambda fan_in, fan_out: math.sqrt(6 / ((1 + 0.01**2) * fan_in))),
])  # fmt: skip
def test_uniform_initializers_fill_their_bound(name, bound):
    Tensor.manual_seed(16)
    fan_out, fan_in = 200, 500  # shape (200, 500): shape[0] is fan_out, prod(shape[1:]) is fan_in
    values = getattr(Tensor, name)(fan_out, fan_in).numpy()
    b = bound(fan_in, fan_out)
    assert values.min() >= -b and values.max() < b and values.max() > 0.99 * b
    assert abs(values.std() - b / math.sqrt(3)) < 0.01 * b


def test_kaiming_normal_has_the_he_standard_deviation():
    Tensor.manual_seed(17)
    values = Tensor.kaiming_normal(100, 10, 10, a=0.5).numpy()
    assert abs(values.std() - math.sqrt(2 / 1.25) / 10) < 0.002 and abs(values.mean()) < 0.002


@pytest.mark.parametrize("name", CREATORS)
def test_creators_take_requires_grad_dtype_and_device(name):
    dtype = dtypes.int64 if name == "randint" else dtypes.float16
    t = CREATORS[name](dtype=dtype, device="PYTHON")
    assert t.shape == (3, 5) and t.dtype == dtype and t.device == "PYTHON"
    if name != "randint":
        leaf = CREATORS[name](requires_grad=True)
        assert leaf.requires_grad and leaf.dtype == dtypes.float32
        (leaf * 2).sum().backward()
        np.testing.assert_array_equal(leaf.grad.numpy(), np.full((3, 5), 2, np.float32))


@pytest.mark.parametrize("shape", [(), (0,), (1,), (2, 0, 3), (7,)])
def test_random_creators_take_any_shape(shape):
    for name in ("rand", "randn", "randint", "normal", "uniform"):
        assert getattr(Tensor, name)(*shape).shape == shape
    assert Tensor.rand(shape).shape == shape and Tensor.randn(list(shape)).shape == shape


# ---- multinomial ----

WEIGHTS = np.array([0.1, 0.0, 0.35, 0.05, 0.5], np.float32)


def test_multinomial_with_replacement_matches_the_weights():
    Tensor.manual_seed(18)
    samples = Tensor(WEIGHTS * 3).multinomial(20_000, replacement=True)  # weights need not sum to 1
    assert samples.shape == (20_000,) and samples.dtype == dtypes.int32
    counts = np.bincount(samples.numpy(), minlength=5)
    assert counts[1] == 0, "a category of weight 0 was drawn"
    nonzero = WEIGHTS > 0
    assert _chi_square(counts[nonzero], 20_000 * WEIGHTS[nonzero]) < 16.3  # 3 degrees of freedom, p = 0.001


def test_multinomial_of_rows_samples_each_row_by_its_own_weights():
    Tensor.manual_seed(19)
    weights = np.array([[1, 0, 0, 0], [0, 0, 1, 1], [1, 2, 3, 4]], np.float32)
    samples = Tensor(weights).multinomial(4000, replacement=True).numpy()
    assert samples.shape == (3, 4000)
    assert (samples[0] == 0).all() and set(np.unique(samples[1])) == {2, 3}
    counts = np.bincount(samples[2], minlength=4)
    assert _chi_square(counts, 4000 * weights[2] / weights[2].sum()) < 16.3


def test_multinomial_without_replacement_never_repeats_and_picks_first_by_weight():
    Tensor.manual_seed(20)
    rows = np.tile(WEIGHTS, (3000, 1))
    samples = Tensor(rows).multinomial(3).numpy()
    assert samples.shape == (3000, 3)
    assert all(len(set(row)) == 3 for row in samples), "a row repeats a category"
    assert not (samples == 1).any(), "the category of weight 0 was drawn while others were left"
    counts = np.bincount(samples[:, 0], minlength=5)
    nonzero = WEIGHTS > 0
    assert _chi_square(counts[nonzero], 3000 * WEIGHTS[nonzero]) < 16.3
    # the second pick, given the first: P(second = j | first = i) = w_j / (1 - w_i)
    second_after_4 = samples[samples[:, 0] == 4, 1]
    expected = np.delete(WEIGHTS, 4) / (1 - WEIGHTS[4])
    counts = np.bincount(second_after_4, minlength=4)[:4]
    assert _chi_square(counts[expected > 0], len(second_after_4) * expected[expected > 0]) < 16.3


def test_multinomial_without_replacement_of_all_categories_is_a_permutation():
    Tensor.manual_seed(21)
    samples = Tensor([1.0, 2.0, 3.0, 4.0, 5.0, 6.0]).multinomial(6).numpy()
    assert sorted(samples.tolist()) == list(range(6))


# ---- dropout ----


def test_dropout_is_the_identity_when_not_training():
    Tensor.training = False
    x = Tensor([1.0, 2.0, 3.0])
    assert x.dropout(0.5) is x and x.dropout() is x


def test_dropout_keeps_one_minus_p_and_scales_by_its_inverse():
    Tensor.training = True
    Tensor.manual_seed(23)
    x = Tensor.full((N,), 2.0)
    out = x.dropout(0.3).numpy()
    kept = out != 0
    assert abs(kept.mean() - 0.7) < 0.005
    np.testing.assert_allclose(out[kept], 2.0 / 0.7, rtol=1e-6)
    assert abs(out.mean() - 2.0) < 0.02  # the expectation is unchanged


def test_dropout_gradient_is_the_mask_times_the_scale():
    Tensor.training = True
    Tensor.manual_seed(24)
    x = Tensor(np.random.default_rng(0).uniform(1, 2, (40, 30)).astype(np.float32), requires_grad=True)
    out = x.dropout(0.25)
    out.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), (out.numpy() != 0) / 0.75, rtol=1e-6)


def test_dropout_with_p_zero_and_one():
    Tensor.training = True
    x = Tensor([1.0, -2.0, math.inf], requires_grad=True)
    assert x.dropout(0.0) is x
    dropped = x.dropout(1.0)
    assert dropped.tolist() == [0.0, 0.0, 0.0]
    dropped.sum().backward()
    assert x.grad.tolist() == [0.0, 0.0, 0.0]


def test_dropout_is_reproducible_and_keeps_dtype():
    Tensor.training = True
    x = Tensor.ones(64, dtype=dtypes.float16)
    Tensor.manual_seed(25)
    first = x.dropout(0.5).numpy()
    Tensor.manual_seed(25)
    assert x.dropout(0.5).dtype == dtypes.float16
    Tensor.manual_seed(25)
    np.testing.assert_array_equal(x.dropout(0.5).numpy(), first)


# ---- errors ----

ERRORS = [
    (lambda: Tensor.rand(2, dtype=dtypes.int32), TypeError, "rand: makes floats; dtype dtypes.int is not a float"),
    (lambda: Tensor.randn(-1, 2), ValueError, "randn: sizes must be non-negative integers"),
    (lambda: Tensor.uniform(2.5), ValueError, "uniform: sizes must be non-negative integers"),
    (lambda: Tensor.randint(3, low=5, high=5), ValueError, "randint: high (5) must be greater than low (5)"),
    (lambda: Tensor.randint(3, low=0.5, high=5), TypeError, "randint: low and high must be ints"),
    (lambda: Tensor.randint(3, high=2**33), ValueError, "randint: the range"),
    (lambda: Tensor.randint(1, 2, 3, (4,)), TypeError, "randint: expected randint(high, size)"),
    (lambda: Tensor.randint(3, requires_grad=True), ValueError, "randint: only float tensors can require gradients"),
    (lambda: Tensor.normal(3, std=-1.0), ValueError, "normal: std must be >= 0"),
    (lambda: Tensor.glorot_uniform(), ValueError, "glorot_uniform: needs a shape with at least one dimension"),
    (lambda: Tensor.kaiming_normal(), ValueError, "kaiming_normal: needs a shape with at least one dimension"),
    (lambda: Tensor.manual_seed(1.5), TypeError, "manual_seed: the seed must be an int"),
    (lambda: Tensor([[[0.5]]]).multinomial(), ValueError, "multinomial: weights must be 1-D or 2-D"),
    (lambda: Tensor([0.5, 0.5]).multinomial(3), ValueError, "multinomial: cannot take 3 samples from 2 categories"),
    (lambda: Tensor([0.5, 0.5]).multinomial(0), ValueError, "multinomial: num_samples must be a positive int"),
    (lambda: Tensor.zeros(2, 0).multinomial(), ValueError, "multinomial: weights of shape (2, 0) have no categories"),
    (lambda: Tensor([1.0]).dropout(1.5), ValueError, "dropout: p must be a probability in [0, 1], got 1.5"),
]


@pytest.mark.parametrize("make, error, message", ERRORS, ids=[e[2] for e in ERRORS])
def test_bad_input_raises_a_clear_error(make, error, message):
    with pytest.raises(error, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        make()


def _chi_square(observed: np.ndarray, expected: np.ndarray) -> float:
    return float(((observed - expected) ** 2 / expected).sum())


def test_one_kernel_may_read_two_draws():
    """rand() @ rand() reads the generator's state before and after the first draw advances it, in one graph."""
    Tensor.manual_seed(7)
    product = (Tensor.rand(8, 8) @ Tensor.rand(8, 8)).numpy()
    Tensor.manual_seed(7)
    a = Tensor.rand(8, 8).numpy()
    b = Tensor.rand(8, 8).numpy()
    np.testing.assert_allclose(product, a @ b, rtol=1e-5)
    assert not np.array_equal(a, b)
    Tensor.manual_seed(7)
    np.testing.assert_allclose((Tensor.rand(8, 8).sum(1) + Tensor.rand(8)).numpy(), a.sum(1) + b[0], rtol=1e-5)


def test_clones_of_one_buffer_are_separate_copies():
    x = Tensor([1.0, 2.0]).realize()
    first, second = x.clone(), x.clone()
    first.assign(first * 10).realize()
    np.testing.assert_array_equal(second.numpy(), [1.0, 2.0])
    np.testing.assert_array_equal(first.numpy(), [10.0, 20.0])
    np.testing.assert_array_equal(x.numpy(), [1.0, 2.0])
