"""Which tensors backward() fills (glassgrad/backward_targets.py): PyTorch's rule where some input has
requires_grad=True, tinygrad 0.14's (every float tensor that did not say False) where none has, PyTorch's error where
nothing can have a gradient. Values against PyTorch with requires_grad=True (and retain_grad for intermediates)."""

import numpy as np
import pytest
import torch

from glassgrad import Tensor, dtypes, nn

SHAPES = [((3,), (3,)), ((0, 3), (0, 3)), ((1, 3), (4, 1)), ((2, 1, 3), (1,)), ((5,), ())]


def _values(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32) + 0.5


@pytest.mark.parametrize("shape_a,shape_b", SHAPES, ids=str)
def test_where_nothing_asked_every_float_tensor_gets_its_gradient_as_torch_computes_it(device, shape_a, shape_b):
    a, b = _values(shape_a, 0), _values(shape_b, 1)
    x, y = Tensor(a), Tensor(b)  # requires_grad not said, as a tinygrad 0.14 script makes them
    mid = (x * y).exp()
    (mid * x + y).sum().backward()
    tx, ty = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    tmid = (tx * ty).exp()
    tmid.retain_grad()
    (tmid * tx + ty).sum().backward()
    for ours, theirs in ((x, tx), (y, ty), (mid, tmid)):  # an intermediate too, as tinygrad fills it
        np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), rtol=1e-5, atol=1e-6)
    assert x.requires_grad is None and x.is_leaf


def test_where_some_input_asked_only_those_get_gradients_as_in_pytorch():
    a = Tensor([1.0, 2.0], requires_grad=True)
    b = Tensor([3.0, 4.0])  # not said: with a asking, b is data, as in PyTorch
    (a * b).sum().backward()
    assert a.grad.tolist() == [3.0, 4.0] and b.grad is None


def test_a_training_step_fills_only_the_parameters_not_the_data():
    model = nn.Linear(3, 2)
    nn.optim.SGD(nn.state.get_parameters(model), lr=0.1)  # marks its parameters requires_grad=True
    x = Tensor(_values((4, 3), 2))
    model(x).square().mean().backward()
    assert model.weight.grad is not None and model.bias.grad is not None and x.grad is None


def test_a_python_number_is_no_input_that_gets_a_gradient():
    x, s = Tensor([1.0, 2.0]), Tensor(3.0)
    (x * s * 2).sum().backward()
    assert x.grad.tolist() == [6.0, 6.0] and s.grad is None


@pytest.mark.parametrize(
    "build",
    [
        lambda: (Tensor([1, 2]) * 3).sum(),  # integers only
        lambda: Tensor(2.0) * 3,  # constants only
        lambda: (Tensor([1.0, 2.0], requires_grad=False) * 2).sum(),  # said False
        lambda: (Tensor([1.0, 2.0], requires_grad=False) + Tensor([3.0, 1.0], requires_grad=False)).sum(),
    ],
    ids=["ints", "constants", "said False", "two said False"],
)
def test_a_graph_where_nothing_can_have_a_gradient_is_pytorchs_error(build):
    with pytest.raises(RuntimeError, match="does not require grad and does not have a grad_fn"):
        build().backward()


def test_a_result_keeps_false_from_inputs_that_said_false_as_tinygrad():
    no, unsaid, yes = Tensor([1.0], requires_grad=False), Tensor([2.0]), Tensor([3.0], requires_grad=True)
    assert (no * 2).requires_grad is False and (no + no).exp().requires_grad is False
    assert (no * unsaid).requires_grad is None and (no * yes).requires_grad is True
    assert (Tensor([1, 2], requires_grad=False) + 1).requires_grad is False
    # PyTorch: a result of tensors that do not require grad does not either
    assert not (torch.tensor([1.0]) * 2).requires_grad


def test_tinygrads_rule_accumulates_across_backward_calls_as_pytorch():
    x = Tensor([1.0, -2.0])
    (x * x).sum().backward()
    (x * 3).sum().backward()
    tx = torch.tensor([1.0, -2.0], requires_grad=True)
    (tx * tx).sum().backward()
    (tx * 3).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy())
    assert x.grad.dtype == dtypes.float32


def _layers():
    """A small network of nn layers and PyTorch's with the same parameters."""
    ours = [nn.Linear(4, 3), nn.LayerNorm(3), nn.Linear(3, 2, bias=False)]
    theirs = [torch.nn.Linear(4, 3), torch.nn.LayerNorm(3), torch.nn.Linear(3, 2, bias=False)]
    for layer, twin in zip(ours, theirs):
        for name in ("weight", "bias"):
            if getattr(twin, name) is not None:
                getattr(twin, name).data = torch.tensor(getattr(layer, name).numpy())
    return ours, theirs


def test_where_an_input_asked_the_layers_parameters_get_gradients_too_as_pytorchs_parameters():
    """A PyTorch script without an optimizer: x asks, the layers' weights are nn.Parameter there (None here, as
    tinygrad's): backward fills x's and every parameter's .grad, not a data tensor's that said nothing."""
    ours, theirs = _layers()
    values, scale = _values((5, 4), 2), _values((5, 2), 3)
    x, data = Tensor(values, requires_grad=True), Tensor(scale)
    tx, tdata = torch.tensor(values, requires_grad=True), torch.tensor(scale)
    out, tout = x, tx
    for layer, twin in zip(ours, theirs):
        out, tout = layer(out), twin(tout)
    (out * data).sum().backward()
    (tout * tdata).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-6)
    assert data.grad is None and tdata.grad is None
    for layer, twin in zip(ours, theirs):
        for name in ("weight", "bias"):
            if getattr(twin, name) is not None:
                param = getattr(layer, name)
                assert param.requires_grad is None  # said nothing, as tinygrad's
                np.testing.assert_allclose(param.grad.numpy(), getattr(twin, name).grad.numpy(), rtol=1e-5, atol=1e-6)


def test_a_frozen_parameter_and_running_statistics_get_no_gradient():
    lin, bn = nn.Linear(3, 3), nn.BatchNorm(3)
    lin.weight.requires_grad = False  # PyTorch's freezing
    x = Tensor(_values((4, 3), 4), requires_grad=True)
    with Tensor.train():
        bn(lin(x)).sum().backward()
    assert lin.weight.grad is None and lin.bias.grad is not None and bn.weight.grad is not None
    assert bn.running_mean.grad is None and bn.running_var.grad is None and x.grad is not None


def test_where_nothing_asked_the_layers_and_the_input_get_gradients_as_tinygrad():
    ours, theirs = _layers()
    values = _values((5, 4), 5)
    x, tx = Tensor(values), torch.tensor(values, requires_grad=True)  # tinygrad's x.grad after backward
    out, tout = x, tx
    for layer, twin in zip(ours, theirs):
        out, tout = layer(out), twin(tout)
    out.sum().backward(), tout.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ours[0].weight.grad.numpy(), theirs[0].weight.grad.numpy(), rtol=1e-5, atol=1e-6)
