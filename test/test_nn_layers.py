"""nn layers against torch.nn: the same state dict (names, shapes, values), outputs and parameter gradients."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest
import torch

from glassgrad import Tensor, nn
from glassgrad.nn.state import get_state_dict, load_state_dict


@pytest.fixture(autouse=True)
def seeded():
    """Every test starts from the same random parameters in torch and in glassgrad, whatever ran before it."""
    torch.manual_seed(0)
    Tensor.manual_seed(0)


def copy_torch_state(theirs: torch.nn.Module, ours) -> None:
    """Load torch's state dict into ours, after checking that both name the same tensors with the same shapes."""
    torch_state = theirs.state_dict()
    own = get_state_dict(ours)
    assert list(own) == list(torch_state), f"state dict keys {list(own)} != torch's {list(torch_state)}"
    for key, value in torch_state.items():
        assert own[key].shape == tuple(value.shape), f"{key}: shape {own[key].shape} != torch's {tuple(value.shape)}"
    load_state_dict(ours, {k: Tensor(v.numpy()) for k, v in torch_state.items()})


def check_layer(
    theirs: torch.nn.Module,
    ours,
    inputs: list[np.ndarray],
    call_torch: Callable | None = None,
    call_ours: Callable | None = None,
    train: bool = False,
    atol: float = 1e-5,
    grad_atol: float = 1e-4,
) -> None:
    """Same parameters in, then the same outputs, input gradients and parameter gradients out.

    The loss is a random weighting of the outputs (a plain sum would give normalization layers zero gradients).
    """
    call_torch = call_torch or (lambda m, *xs: m(*xs))
    call_ours = call_ours or (lambda m, *xs: m(*xs))
    theirs.train(train)
    copy_torch_state(theirs, ours)
    params = dict(theirs.named_parameters())
    own = get_state_dict(ours)
    for name in params:
        own[name].requires_grad_(True)
    floating = [np.issubdtype(x.dtype, np.floating) for x in inputs]
    torch_in = [torch.tensor(x, requires_grad=f) for x, f in zip(inputs, floating)]
    our_in = [Tensor(x, requires_grad=True if f else None) for x, f in zip(inputs, floating)]

    torch_out = call_torch(theirs, *torch_in)
    with Tensor.train(train):
        our_out = call_ours(ours, *our_in)
    torch_outs = torch_out if isinstance(torch_out, tuple) else (torch_out,)
    our_outs = our_out if isinstance(our_out, tuple) else (our_out,)

    rng = np.random.default_rng(1)
    weights = [rng.uniform(-1, 1, tuple(t.shape)).astype(np.float32) for t in torch_outs]
    sum(t.mul(torch.tensor(w)).sum() for t, w in zip(torch_outs, weights)).backward()
    sum((t * Tensor(w)).sum() for t, w in zip(our_outs, weights)).backward()

    for i, (o, t) in enumerate(zip(our_outs, torch_outs)):
        np.testing.assert_allclose(o.numpy(), t.detach().numpy(), atol=atol, rtol=1e-5, err_msg=f"output {i}")
    for i, (o, t) in enumerate(zip(our_in, torch_in)):
        if t.grad is not None:
            np.testing.assert_allclose(o.grad.numpy(), t.grad.numpy(), atol=grad_atol, rtol=1e-4,
                                       err_msg=f"gradient of input {i}")  # fmt: skip
    for name, p in params.items():
        assert own[name].grad is not None, f"{name}: torch has a gradient, glassgrad has none"
        np.testing.assert_allclose(own[name].grad.numpy(), p.grad.numpy(), atol=grad_atol, rtol=1e-4,
                                   err_msg=f"gradient of {name}")  # fmt: skip


def uniform(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-2, 2, shape).astype(np.float32)


# ---- linear and convolutions ----


@pytest.mark.parametrize("bias", [True, False])
def test_linear_matches_torch(bias):
    check_layer(torch.nn.Linear(5, 3, bias=bias), nn.Linear(5, 3, bias=bias), [uniform(2, 4, 5)])


@pytest.mark.parametrize("kwargs", [dict(), dict(stride=2, padding=1, dilation=2), dict(groups=2, padding="same")])
def test_conv1d_matches_torch(kwargs):
    check_layer(torch.nn.Conv1d(4, 6, 3, **kwargs), nn.Conv1d(4, 6, 3, **kwargs), [uniform(2, 4, 9)])


@pytest.mark.parametrize("kwargs", [dict(), dict(stride=2, padding=1), dict(groups=2, dilation=2, bias=False)])
def test_conv2d_matches_torch(kwargs):
    check_layer(torch.nn.Conv2d(4, 6, 3, **kwargs), nn.Conv2d(4, 6, 3, **kwargs), [uniform(2, 4, 7, 7)])


@pytest.mark.parametrize("kwargs", [dict(), dict(stride=2, padding=1, output_padding=1), dict(groups=2, dilation=2)])
def test_conv_transpose2d_matches_torch(kwargs):
    check_layer(torch.nn.ConvTranspose2d(4, 6, 3, **kwargs), nn.ConvTranspose2d(4, 6, 3, **kwargs),
                [uniform(2, 4, 5, 5)])  # fmt: skip


@pytest.mark.parametrize("kwargs", [dict(), dict(stride=2, padding=1, output_padding=1), dict(groups=2, dilation=2)])
@pytest.mark.parametrize("dims", [1, 3])
def test_conv_transpose1d_and_3d_match_torch(kwargs, dims):
    theirs = (torch.nn.ConvTranspose1d, None, torch.nn.ConvTranspose3d)[dims - 1](4, 6, 3, **kwargs)
    ours = (nn.ConvTranspose1d, None, nn.ConvTranspose3d)[dims - 1](4, 6, 3, **kwargs)
    check_layer(theirs, ours, [uniform(2, 4, *(5,) * dims)])


# ---- normalization ----


@pytest.mark.parametrize("train", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("torch_class, shape", [(torch.nn.BatchNorm1d, (6, 3)), (torch.nn.BatchNorm1d, (4, 3, 5)),
                                                (torch.nn.BatchNorm2d, (2, 3, 4, 4))])  # fmt: skip
def test_batchnorm_matches_torch(torch_class, shape, train):
    theirs = torch_class(3)
    with torch.no_grad():  # non-trivial affine parameters and running statistics
        theirs.weight.uniform_(0.5, 1.5)
        theirs.bias.uniform_(-0.5, 0.5)
        theirs.running_mean.uniform_(-1, 1)
        theirs.running_var.uniform_(0.5, 2)
    check_layer(theirs, nn.BatchNorm(3), [uniform(*shape)], train=train)


@pytest.mark.parametrize("torch_class, shape", [(torch.nn.BatchNorm1d, (8, 3)), (torch.nn.BatchNorm2d, (4, 3, 5, 5))])
def test_batchnorm_running_stats_update_like_torch(torch_class, shape):
    theirs, ours = torch_class(3, momentum=0.2), nn.BatchNorm(3, momentum=0.2)
    copy_torch_state(theirs, ours)
    theirs.train()
    for step in range(3):
        x = uniform(*shape, seed=step) * (step + 1) + step  # each batch with its own mean and spread
        theirs(torch.tensor(x))
        with Tensor.train():
            ours(Tensor(x)).realize()
    for key, value in theirs.state_dict().items():
        got = get_state_dict(ours)[key].numpy()
        assert got.shape == tuple(value.shape), key
        np.testing.assert_allclose(got, value.numpy(), atol=1e-5, rtol=1e-5, err_msg=key)
    # and eval mode then normalizes with the running statistics, as torch's does
    theirs.eval()
    x = uniform(*shape, seed=9)
    np.testing.assert_allclose(ours(Tensor(x)).numpy(), theirs(torch.tensor(x)).detach().numpy(), atol=1e-5)


def test_batchnorm_state_dict_names_match_torch():
    assert list(get_state_dict(nn.BatchNorm2d(4))) == list(torch.nn.BatchNorm2d(4).state_dict())
    assert get_state_dict(nn.BatchNorm2d(4))["num_batches_tracked"].shape == ()


@pytest.mark.parametrize("normalized_shape, shape", [(5, (3, 5)), ((4, 5), (2, 3, 4, 5))])
def test_layernorm_matches_torch(normalized_shape, shape):
    theirs = torch.nn.LayerNorm(normalized_shape)
    with torch.no_grad():
        theirs.weight.uniform_(0.5, 1.5)
        theirs.bias.uniform_(-0.5, 0.5)
    check_layer(theirs, nn.LayerNorm(normalized_shape), [uniform(*shape)])


def test_layernorm2d_matches_torch_layernorm_over_channels():
    theirs = torch.nn.LayerNorm(6)
    with torch.no_grad():
        theirs.weight.uniform_(0.5, 1.5)
        theirs.bias.uniform_(-0.5, 0.5)
    over_channels = lambda m, x: m(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
    check_layer(theirs, nn.LayerNorm2d(6), [uniform(2, 6, 3, 4)], call_torch=over_channels)


@pytest.mark.parametrize("groups", [1, 2, 6])
def test_groupnorm_matches_torch(groups):
    theirs = torch.nn.GroupNorm(groups, 6)
    with torch.no_grad():
        theirs.weight.uniform_(0.5, 1.5)
        theirs.bias.uniform_(-0.5, 0.5)
    check_layer(theirs, nn.GroupNorm(groups, 6), [uniform(2, 6, 3, 3)])


@pytest.mark.parametrize("affine", [False, True])
@pytest.mark.parametrize("torch_class, shape", [(torch.nn.InstanceNorm1d, (2, 3, 7)),
                                                (torch.nn.InstanceNorm2d, (2, 3, 4, 4))])  # fmt: skip
def test_instancenorm_matches_torch(torch_class, shape, affine):
    theirs = torch_class(3, affine=affine)
    if affine:
        with torch.no_grad():
            theirs.weight.uniform_(0.5, 1.5)
            theirs.bias.uniform_(-0.5, 0.5)
    check_layer(theirs, nn.InstanceNorm(3, affine=affine), [uniform(*shape)])


@pytest.mark.parametrize("eps", [None, 1e-3])
def test_rmsnorm_matches_torch(eps):
    theirs = torch.nn.RMSNorm((3, 4), eps=eps)
    with torch.no_grad():
        theirs.weight.uniform_(0.5, 1.5)
    check_layer(theirs, nn.RMSNorm((3, 4), eps=eps), [uniform(2, 3, 4)])


# ---- embedding and recurrent ----


def test_embedding_matches_torch():
    idx = np.array([[1, 0, 6], [6, 6, 2]], dtype=np.int64)  # repeated rows accumulate their gradients
    check_layer(torch.nn.Embedding(7, 4), nn.Embedding(7, 4), [idx])


def test_lstm_cell_matches_torch():
    x, h, c = uniform(3, 5), uniform(3, 4, seed=1), uniform(3, 4, seed=2)
    check_layer(torch.nn.LSTMCell(5, 4), nn.LSTMCell(5, 4), [x, h, c],
                call_torch=lambda m, x, h, c: m(x, (h, c)), call_ours=lambda m, x, h, c: m(x, (h, c)))  # fmt: skip


def test_lstm_cell_without_state_starts_from_zeros_like_torch():
    theirs, ours, x = torch.nn.LSTMCell(5, 4), nn.LSTMCell(5, 4), uniform(3, 5)
    copy_torch_state(theirs, ours)
    for got, expected in zip(ours(Tensor(x)), theirs(torch.tensor(x)), strict=True):
        np.testing.assert_allclose(got.numpy(), expected.detach().numpy(), atol=1e-5, rtol=1e-5)


# ---- default initialisation ----


def assert_uniform_within(t: Tensor, bound: float, what: str) -> None:
    """Values of U(-bound, bound): all inside, the largest near the bound, mean near 0 (tolerances scale with size)."""
    w = t.numpy().reshape(-1)
    n, largest = w.size, np.abs(w).max()
    assert largest <= bound, f"{what}: max |w| {largest} exceeds the bound {bound}"
    # P(max |w| < (1 - e) * bound) = (1 - e)**n < exp(-e * n): with e = 12 / n that is below 1e-5
    assert largest >= (1 - min(12 / n, 0.9)) * bound, f"{what}: max |w| {largest} of {n} is far below {bound}"
    assert abs(w.mean()) < 5 * bound / math.sqrt(3 * n), f"{what}: mean {w.mean()} is not near 0"  # 5 sigma


@pytest.mark.parametrize(
    "make, fan_in",
    [
        (lambda: nn.Linear(64, 32), 64),
        (lambda: nn.Conv1d(8, 16, 5), 8 * 5),
        (lambda: nn.Conv2d(8, 16, 3), 8 * 9),
        (lambda: nn.Conv2d(8, 16, 3, groups=4), 2 * 9),
        (lambda: nn.ConvTranspose2d(8, 16, 3), 16 * 9),  # torch takes fan_in from dim 1 of (in, out, kh, kw)
        (lambda: nn.ConvTranspose1d(8, 16, 3), 16 * 3),
        (lambda: nn.LSTMCell(8, 16), 16),  # every LSTM tensor is U(-1/sqrt(hidden), 1/sqrt(hidden))
    ],
    ids=["linear", "conv1d", "conv2d", "conv2d_groups", "conv_transpose2d", "conv_transpose1d", "lstm_cell"],
)
def test_default_init_is_uniform_within_one_over_sqrt_fan_in(make, fan_in):
    for name, t in get_state_dict(make()).items():
        assert_uniform_within(t, 1 / math.sqrt(fan_in), name)


def test_default_init_bounds_match_torch():
    """The same bound torch uses: the largest |w| of a big layer is within 2% of torch's."""
    for theirs, ours in [(torch.nn.Conv2d(6, 8, 5), nn.Conv2d(6, 8, 5)),
                         (torch.nn.ConvTranspose2d(6, 8, 5), nn.ConvTranspose2d(6, 8, 5))]:  # fmt: skip
        bound = np.abs(ours.weight.numpy()).max()
        torch_max = theirs.weight.abs().max().item()
        assert torch_max <= bound * 1.02 and bound <= torch_max * 1.02, f"{type(ours).__name__}: {bound} vs {torch_max}"


def test_default_init_of_norms_and_embedding():
    for layer in (nn.BatchNorm(5), nn.LayerNorm(5), nn.GroupNorm(1, 5), nn.InstanceNorm(5, affine=True)):
        state = get_state_dict(layer)
        np.testing.assert_array_equal(state["weight"].numpy(), np.ones(5, np.float32))
        np.testing.assert_array_equal(state["bias"].numpy(), np.zeros(5, np.float32))
    bn = get_state_dict(nn.BatchNorm(5))
    np.testing.assert_array_equal(bn["running_mean"].numpy(), np.zeros(5, np.float32))
    np.testing.assert_array_equal(bn["running_var"].numpy(), np.ones(5, np.float32))
    assert bn["num_batches_tracked"].item() == 0
    np.testing.assert_array_equal(nn.RMSNorm(5).weight.numpy(), np.ones(5, np.float32))
    weight = nn.Embedding(100, 50).weight.numpy()  # N(0, 1)
    assert abs(weight.mean()) < 0.05 and abs(weight.std() - 1) < 0.05


# ---- every parameter has a buffer of its own ----


def test_parameters_of_equal_shape_do_not_share_buffers():
    """A weight of ones and a running_var of ones (or two LayerNorms' weights) are equal lazy graphs; writing one
    must leave the others alone."""
    bn, ln1, ln2 = nn.BatchNorm(3), nn.LayerNorm(3), nn.LayerNorm(3)
    bn.weight.assign(Tensor([2.0, 3.0, 4.0])).realize()
    ln1.bias.assign(Tensor([5.0, 6.0, 7.0])).realize()
    assert bn.running_var.tolist() == [1.0, 1.0, 1.0]
    assert ln1.weight.tolist() == ln2.weight.tolist() == [1.0, 1.0, 1.0]
    assert bn.bias.tolist() == bn.running_mean.tolist() == ln2.bias.tolist() == [0.0, 0.0, 0.0]


def test_contiguous_tensors_of_equal_graphs_get_their_own_buffers():
    a = Tensor.zeros(3).contiguous()
    b = Tensor.zeros(3).contiguous()
    a.assign(Tensor.ones(3)).realize()
    assert b.tolist() == [0.0, 0.0, 0.0]  # b reads a's buffer: [1.0, 1.0, 1.0]


@pytest.mark.parametrize("kwargs", [{"padding": "same", "stride": 2}, {"padding": "same", "stride": (1, 2)},
                                    {"padding": "not_same"}], ids=str)  # fmt: skip
def test_conv_layer_rejects_a_bad_padding_string_when_made_as_torch(kwargs):
    with pytest.raises(ValueError):
        torch.nn.Conv2d(4, 8, 3, **kwargs)
    with pytest.raises(ValueError, match="padding must be 'same'"):
        nn.Conv2d(4, 8, 3, **kwargs)
    assert nn.Conv2d(4, 8, 3, padding="same", stride=(1, 1)).padding == "same"


def test_batchnorm_takes_tinygrads_sz_for_the_number_of_features():
    layer, twin = nn.BatchNorm(sz=3), torch.nn.BatchNorm2d(3).eval()
    x = np.random.default_rng(0).standard_normal((2, 3, 4, 4)).astype(np.float32)
    np.testing.assert_allclose(layer(Tensor(x)).numpy(), twin(torch.tensor(x)).detach().numpy(), rtol=1e-5, atol=1e-6)
    with pytest.raises(TypeError, match="once"):
        nn.BatchNorm(3, sz=3)
