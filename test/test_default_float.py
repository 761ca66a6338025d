"""With dtypes.default_float set to half, bfloat16 or float64, every creation function, random function and layer
init makes tensors of that dtype, as torch.set_default_dtype does, with the values it makes in float32."""

import numpy as np
import pytest
import torch

from glassgrad import Tensor, dtypes, nn

DEFAULTS = {dtypes.float16: torch.float16, dtypes.bfloat16: torch.bfloat16, dtypes.float64: torch.float64}


@pytest.fixture(params=list(DEFAULTS), ids=lambda d: d.name)
def default_float(request):
    """dtypes.default_float and torch's default dtype set to one float dtype, both restored after the test."""
    old, old_torch = dtypes.default_float, torch.get_default_dtype()
    dtypes.default_float = request.param
    torch.set_default_dtype(DEFAULTS[request.param])
    yield request.param
    dtypes.default_float = old
    torch.set_default_dtype(old_torch)


def _float32(t: Tensor) -> np.ndarray:
    return t.cast(dtypes.float32).numpy()


# each creator as (ours, torch's): the dtype must agree with torch's under its default dtype
CREATORS = {
    "zeros": (lambda: Tensor.zeros(2, 3), lambda: torch.zeros(2, 3)),
    "ones": (lambda: Tensor.ones(2, 3), lambda: torch.ones(2, 3)),
    "full_float": (lambda: Tensor.full((2, 3), 1.5), lambda: torch.full((2, 3), 1.5)),
    "empty": (lambda: Tensor.empty(2, 3), lambda: torch.empty(2, 3)),
    "eye": (lambda: Tensor.eye(3), lambda: torch.eye(3)),
    "tensor_of_floats": (lambda: Tensor([1.5, 2.0]), lambda: torch.tensor([1.5, 2.0])),
    "arange_float": (lambda: Tensor.arange(0.5, 9.5, 1.5), lambda: torch.arange(0.5, 9.5, 1.5)),
    "rand": (lambda: Tensor.rand(2, 3), lambda: torch.rand(2, 3)),
    "randn": (lambda: Tensor.randn(2, 3), lambda: torch.randn(2, 3)),
    "uniform": (lambda: Tensor.uniform(2, 3, low=-1, high=2), lambda: torch.empty(2, 3).uniform_(-1, 2)),
    "normal": (lambda: Tensor.normal(2, 3, mean=1, std=2), lambda: torch.empty(2, 3).normal_(1, 2)),
    "kaiming_uniform": (lambda: Tensor.kaiming_uniform(4, 3), lambda: torch.empty(4, 3).uniform_(-1, 1)),
    "kaiming_normal": (lambda: Tensor.kaiming_normal(4, 3), lambda: torch.nn.init.kaiming_normal_(torch.empty(4, 3))),
    "glorot_uniform": (lambda: Tensor.glorot_uniform(4, 3), lambda: torch.nn.init.xavier_uniform_(torch.empty(4, 3))),
    "scaled_uniform": (lambda: Tensor.scaled_uniform(4, 3), lambda: torch.empty(4, 3).uniform_(-0.3, 0.3)),
    "randn_like_of_ints": (lambda: Tensor([1, 2]).randn_like(), lambda: torch.randn(2)),
    "int_divided": (lambda: Tensor([1, 2]) / 2, lambda: torch.tensor([1, 2]) / 2),
    "int_sqrt": (lambda: Tensor([1, 4]).sqrt(), lambda: torch.tensor([1, 4]).sqrt()),
}


@pytest.mark.parametrize("name", list(CREATORS))
def test_creators_make_the_default_float(default_float, name):
    ours, theirs = CREATORS[name]
    made = ours()
    assert made.dtype == default_float
    assert theirs().dtype == DEFAULTS[default_float]
    assert np.isfinite(_float32(made)).all()


def test_integer_creators_stay_integers(default_float):
    assert Tensor.arange(3).dtype == dtypes.int32 and Tensor.full((2,), 2).dtype == dtypes.int32
    assert Tensor.randint(5, high=4).dtype == dtypes.int32


@pytest.mark.parametrize("make", ["randn", "uniform", "normal", "kaiming_normal", "kaiming_uniform"])
def test_random_values_are_the_wide_ones_rounded(default_float, make):
    """The same seed gives a 16-bit default the float32 draw rounded, not a draw computed in 16 bits, and float64
    what dtype=float64 gives (rand alone draws as many bits as its dtype holds, as PyTorch's)."""
    kwargs = {"uniform": {"low": -3, "high": 5}, "normal": {"mean": 2, "std": 3}}.get(make, {})
    Tensor.manual_seed(7)
    got = getattr(Tensor, make)(64, 5, **kwargs)
    Tensor.manual_seed(7)
    wide = dtypes.float64 if default_float == dtypes.float64 else dtypes.float32
    reference = getattr(Tensor, make)(64, 5, dtype=wide, **kwargs).cast(default_float)
    assert got.dtype == default_float
    np.testing.assert_array_equal(got.cast(wide).numpy(), reference.cast(wide).numpy())


def test_rand_draws_what_the_dtype_holds(default_float):
    values = _float32(Tensor.rand(4000)).astype(np.float64)
    bits = {dtypes.float16: 11, dtypes.bfloat16: 8, dtypes.float64: 32}[default_float]
    assert values.min() >= 0 and values.max() < 1 and abs(values.mean() - 0.5) < 0.03
    np.testing.assert_array_equal(values * 2**bits, np.floor(values * 2**bits))


def test_randn_has_normal_moments(default_float):
    Tensor.manual_seed(0)
    values = Tensor.randn(20000).cast(dtypes.float32).numpy()
    assert abs(values.mean()) < 0.03 and abs(values.std() - 1) < 0.03


def test_arange_rounds_each_value_once(default_float):
    """start + i * step is rounded once to the default dtype (a 16-bit index is inexact past 2048 or 256)."""
    got = Tensor.arange(0.5, 3000.5, 1.5)
    exact = torch.tensor(np.arange(2000) * 1.5 + 0.5, dtype=torch.float64).to(DEFAULTS[default_float])
    assert got.dtype == default_float
    np.testing.assert_array_equal(_float32(got), exact.float().numpy())


LAYERS = {
    "Linear": (lambda: nn.Linear(3, 4), lambda: torch.nn.Linear(3, 4)),
    "Conv2d": (lambda: nn.Conv2d(2, 4, 3), lambda: torch.nn.Conv2d(2, 4, 3)),
    "ConvTranspose2d": (lambda: nn.ConvTranspose2d(2, 4, 3), lambda: torch.nn.ConvTranspose2d(2, 4, 3)),
    "Embedding": (lambda: nn.Embedding(5, 3), lambda: torch.nn.Embedding(5, 3)),
    "BatchNorm2d": (lambda: nn.BatchNorm2d(3), lambda: torch.nn.BatchNorm2d(3)),
    "LayerNorm": (lambda: nn.LayerNorm(3), lambda: torch.nn.LayerNorm(3)),
    "GroupNorm": (lambda: nn.GroupNorm(1, 3), lambda: torch.nn.GroupNorm(1, 3)),
    "RMSNorm": (lambda: nn.RMSNorm(3), lambda: torch.nn.RMSNorm(3)),
    "LSTMCell": (lambda: nn.LSTMCell(3, 4), lambda: torch.nn.LSTMCell(3, 4)),
}


@pytest.mark.parametrize("name", list(LAYERS))
def test_layer_parameters_have_torchs_dtypes(default_float, name):
    ours, theirs = LAYERS[name][0](), LAYERS[name][1]()
    for key, value in nn.state.get_state_dict(ours).items():
        expected = theirs.state_dict()[key].dtype
        assert str(value.dtype.name) == {torch.float16: "half", torch.bfloat16: "bfloat16", torch.float64: "double",
                                         torch.int64: "long"}[expected], key  # fmt: skip
        assert np.isfinite(_float32(value)).all(), key


def test_a_half_model_trains_a_step(default_float):
    """A model built under the default dtype runs forward and backward in it."""
    Tensor.manual_seed(0)
    layer = nn.Linear(8, 2)
    layer.weight.requires_grad_()
    x = Tensor.randn(4, 8)
    loss = layer(x).relu().sum()
    loss.backward()
    assert loss.dtype == default_float and layer.weight.grad.dtype == default_float
    expected = (x.cast(dtypes.float32) @ layer.weight.cast(dtypes.float32).T + layer.bias.cast(dtypes.float32)).relu()
    np.testing.assert_allclose(loss.cast(dtypes.float32).item(), expected.sum().item(), rtol=2e-2)
