"""The names tinygrad scripts use beyond Tensor: nn.datasets, helpers (getenv, colored, trange), Context as a context
manager and a decorator with TRAINING, `function`, Tensor.sequential, optimizer schedule_step, Muon and
OptimizerGroup, and renderer.supported_dtypes(); checked against PyTorch where it has the same thing."""

import io

import numpy as np
import pytest
import torch
import torch.optim._muon as torch_muon

import glassgrad
from glassgrad import Context, Device, Tensor, TinyJit, dtypes, function, nn
from glassgrad.helpers import TRAINING, colored, getenv, tqdm, trange


def test_nn_datasets_is_an_attribute_of_nn_as_in_tinygrad():
    assert nn.datasets is glassgrad.nn.datasets and callable(nn.datasets.mnist)


def test_getenv_converts_to_the_defaults_type(monkeypatch):
    monkeypatch.setenv("GG_TEST_FLAG", "3")
    assert getenv("GG_TEST_FLAG") == 3 and getenv("GG_TEST_FLAG", 0.0) == 3.0 and getenv("GG_TEST_FLAG", "") == "3"
    assert getenv("GG_TEST_UNSET", 7) == 7


def test_colored_is_plain_text_off_a_terminal():
    assert colored("ok", "green") == "ok"  # pytest captures stdout: no terminal, no escape codes


def test_trange_iterates_and_shows_its_description_and_count():
    out = io.StringIO()
    bar = trange(4, file=out)
    seen = []
    for i in bar:
        bar.set_description(f"step {i}")
        seen.append(i)
    assert seen == [0, 1, 2, 3] and bar.n == 4 and len(bar) == 4
    assert "step 3" in out.getvalue() and "4/4" in out.getvalue() and "100%" in out.getvalue()
    assert list(tqdm([5, 6], file=io.StringIO())) == [5, 6]


def test_context_sets_flags_for_a_block_or_a_function_and_restores_them():
    assert TRAINING.value == 0

    @Context(TRAINING=1)
    def inside(depth: int) -> list[int]:
        return [TRAINING.value] + (inside(depth - 1) if depth else [])

    assert inside(2) == [1, 1, 1] and TRAINING.value == 0
    with Context(TRAINING=1):
        with Context(TRAINING=0):
            assert not Tensor.training
        assert Tensor.training and Tensor([1.0]).training
    with pytest.raises(RuntimeError, match="inside"):
        with Context(TRAINING=1):
            raise RuntimeError("inside")
    assert TRAINING.value == 0 and not Tensor.training
    with pytest.raises(KeyError, match="unknown flag.*NOT_A_FLAG"):
        Context(NOT_A_FLAG=1)


def test_training_flag_and_tensor_train_are_one_switch():
    with Tensor.train():
        assert TRAINING.value == 1
    assert TRAINING.value == 0
    Tensor.training = True
    try:
        assert TRAINING.value == 1 and Tensor.training
    finally:
        Tensor.training = False
    assert TRAINING.value == 0


@pytest.mark.parametrize("how", ["Context", "Tensor.train"])
def test_batchnorm_under_context_training_is_pytorchs_training_mode(how):
    x = np.random.default_rng(0).standard_normal((4, 3, 5, 5)).astype(np.float32)
    ours, theirs = nn.BatchNorm2d(3), torch.nn.BatchNorm2d(3)
    with Context(TRAINING=1) if how == "Context" else Tensor.train():
        y = ours(Tensor(x)).numpy()
    theirs.train()
    expected = theirs(torch.tensor(x)).detach().numpy()
    np.testing.assert_allclose(y, expected, atol=1e-5)
    np.testing.assert_allclose(ours.running_mean.numpy(), theirs.running_mean.numpy(), atol=1e-6)
    theirs.eval()
    np.testing.assert_allclose(ours(Tensor(x)).numpy(), theirs(torch.tensor(x)).detach().numpy(), atol=1e-5)


def test_function_gives_the_bodys_values_and_gradients_as_torch():
    rng = np.random.default_rng(1)
    w, xs = rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal((2, 3)).astype(np.float32)

    class Model:
        def __init__(self):
            self.w = Tensor(w, requires_grad=True)

        @function
        def __call__(self, x: Tensor) -> Tensor:
            return (x @ self.w).relu()

    model, x = Model(), Tensor(xs, requires_grad=True)
    tw, tx = torch.tensor(w, requires_grad=True), torch.tensor(xs, requires_grad=True)
    out = model(x)
    (out * out).sum().backward()
    t_out = (tx @ tw).relu()
    (t_out * t_out).sum().backward()
    np.testing.assert_allclose(out.numpy(), t_out.detach().numpy(), atol=1e-6)
    np.testing.assert_allclose(model.w.grad.numpy(), tw.grad.numpy(), atol=1e-5)
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), atol=1e-5)


@pytest.mark.parametrize("shape", [(0, 4), (1, 4), (5, 4), (4, 5)], ids=["0-size", "1-size", "odd", "transposed"])
def test_sequential_applies_each_layer_in_turn_as_torch_sequential(shape):
    rng = np.random.default_rng(2)
    xs = rng.standard_normal(shape).astype(np.float32)
    lin1, lin2 = nn.Linear(4, 3), nn.Linear(3, 2)
    t_seq = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))
    with torch.no_grad():
        for ours, theirs in ((lin1, t_seq[0]), (lin2, t_seq[2])):
            theirs.weight.copy_(torch.tensor(ours.weight.numpy()))
            theirs.bias.copy_(torch.tensor(ours.bias.numpy()))
    x, tx = Tensor(xs), torch.tensor(xs, requires_grad=True)  # tinygrad's way: no tensor says requires_grad
    x_in, tx_in = (x.T, tx.T) if shape == (4, 5) else (x, tx)  # a non-contiguous view goes in
    out, t_out = x_in.sequential([lin1, Tensor.relu, lambda v: v * 2, lin2]), t_seq[2](t_seq[1](t_seq[0](tx_in)) * 2)
    (out * out).sum().backward()
    (t_out * t_out).sum().backward()
    np.testing.assert_allclose(out.numpy(), t_out.detach().numpy(), atol=1e-5)
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), atol=1e-5)
    np.testing.assert_allclose(lin1.weight.grad.numpy(), t_seq[0].weight.grad.numpy(), atol=1e-5)
    assert x.sequential([]) is x  # nothing to apply: the tensor itself, as functools.reduce gives


def test_function_with_options_tuples_and_wrong_returns():
    @function(precompile=True)
    def pair(a: Tensor, b: Tensor) -> tuple[Tensor, Tensor]:
        return a + b, a * b

    s, p = pair(Tensor([1, 2, 0]), Tensor([3, 4, 5]))
    assert s.tolist() == [4, 6, 5] and p.tolist() == [3, 8, 0] and pair.__name__ == "pair"

    @function
    def not_a_tensor(a: Tensor) -> int:
        return 3

    with pytest.raises(TypeError, match="not_a_tensor: must return a Tensor"):
        not_a_tensor(Tensor([1]))
    with pytest.raises(NotImplementedError, match="grad_fxn"):
        function(lambda a: a, grad_fxn=lambda *g: g)


def _model_and_data(seed: int):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((6, 4)).astype(np.float32), rng.standard_normal(6).astype(np.float32),
            rng.standard_normal((8, 4)).astype(np.float32), rng.integers(0, 6, 8))  # fmt: skip


@pytest.mark.parametrize("how", ["step", "schedule_step", "schedule_step under TinyJit"])
def test_schedule_step_trains_as_step_does_and_as_torch(how):
    w, b, x, y = _model_and_data(2)
    model = nn.Linear(4, 6)
    model.weight.assign(Tensor(w)).realize()
    model.bias.assign(Tensor(b)).realize()
    opt = nn.optim.Adam(nn.state.get_parameters(model), lr=0.05)
    tmodel = torch.nn.Linear(4, 6)
    with torch.no_grad():
        tmodel.weight.copy_(torch.tensor(w))
        tmodel.bias.copy_(torch.tensor(b))
    topt = torch.optim.Adam(tmodel.parameters(), lr=0.05)

    @Context(TRAINING=1)
    def train_step(xb: Tensor, yb: Tensor) -> Tensor:
        opt.zero_grad()
        loss = model(xb).sparse_categorical_crossentropy(yb).backward()
        if how == "step":
            opt.step()
            return loss
        return loss.realize(*opt.schedule_step())

    step = TinyJit(train_step) if "TinyJit" in how else train_step
    for _ in range(4):
        loss = step(Tensor(x), Tensor(y.astype(np.int32))).item()
        topt.zero_grad()
        t_loss = torch.nn.functional.cross_entropy(tmodel(torch.tensor(x)), torch.tensor(y))
        t_loss.backward()
        topt.step()
        assert loss == pytest.approx(t_loss.item(), rel=1e-5)
    np.testing.assert_allclose(model.weight.numpy(), tmodel.weight.detach().numpy(), atol=1e-5)
    np.testing.assert_allclose(model.bias.numpy(), tmodel.bias.detach().numpy(), atol=1e-5)


def test_realize_with_other_tensors_returns_the_tensor_and_realizes_them_all():
    a, b = Tensor([1.0, 2.0]) * 2, Tensor([3.0]) + 1
    assert a.realize(b) is a
    assert a.uop.base.op.name == "BUFFER" and b.uop.base.op.name == "BUFFER"
    assert a.tolist() == [2.0, 4.0] and b.tolist() == [4.0]


def _newton_schulz_float32(grad, coefficients, steps, eps):
    """torch's Newton-Schulz for Muon, in float32 instead of bfloat16, so the update compares to float rounding."""
    a, b, c = coefficients
    x = grad.float().T if grad.size(0) > grad.size(1) else grad.float()
    x = x / x.norm().clamp(min=eps)
    for _ in range(steps):
        gram = x @ x.T
        x = a * x + (b * gram + c * gram @ gram) @ x
    return x.T if grad.size(0) > grad.size(1) else x


@pytest.mark.parametrize("shape", [(4, 6), (5, 5), (1, 3), (6, 4)], ids=str)
@pytest.mark.parametrize("nesterov", [True, False])
def test_muon_steps_as_torch_muon(monkeypatch, shape, nesterov):
    monkeypatch.setattr(torch_muon, "_zeropower_via_newtonschulz", _newton_schulz_float32)
    rng = np.random.default_rng(3)
    w0 = rng.standard_normal(shape).astype(np.float32)
    ours, theirs = Tensor(w0, requires_grad=True), torch.tensor(w0, requires_grad=True)
    # torch scales a tall matrix's rate by sqrt(rows / cols); tinygrad's Muon does not: give ours that rate
    scale = max(1.0, shape[0] / shape[1]) ** 0.5
    opt = nn.optim.Muon([ours], lr=0.02 * scale, weight_decay=0.1 / scale, nesterov=nesterov)
    topt = torch.optim.Muon([theirs], lr=0.02, weight_decay=0.1, nesterov=nesterov)
    for _ in range(3):
        x = rng.standard_normal((5, shape[1])).astype(np.float32)
        opt.zero_grad()
        (Tensor(x) @ ours.T).square().sum().backward()
        opt.step()
        topt.zero_grad()
        (torch.tensor(x) @ theirs.T).square().sum().backward()
        topt.step()
    np.testing.assert_allclose(ours.numpy(), theirs.detach().numpy(), atol=2e-6)


def test_muon_treats_a_vector_as_a_column_as_tinygrad_does():
    g = np.array([3.0, -4.0, 12.0], dtype=np.float32)
    p = Tensor([1.0, 1.0, 1.0], requires_grad=True)
    opt = nn.optim.Muon([p], lr=0.1, weight_decay=0.0, momentum=0.0, nesterov=False, ns_steps=5)
    (p * Tensor(g)).sum().backward()
    opt.step()
    # a (3, 1) column is orthogonalized as its (1, 3) row: each step is a*x + (b + c*s)*s*x with s = |x|^2
    x = g / (np.linalg.norm(g) + 1e-7)
    for _ in range(5):
        s = float(x @ x)
        x = 3.4445 * x + (-4.775 + 2.0315 * s) * s * x
    np.testing.assert_allclose(p.numpy(), 1.0 - 0.1 * x, atol=1e-6)


def test_optimizer_group_steps_each_optimizer_as_torch():
    w, b, x, y = _model_and_data(4)
    model = nn.Linear(4, 6)
    model.weight.assign(Tensor(w)).realize()
    model.bias.assign(Tensor(b)).realize()
    group = nn.optim.OptimizerGroup(nn.optim.SGD([model.weight], lr=0.1, momentum=0.9),
                                    nn.optim.Adam([model.bias], lr=0.05))  # fmt: skip
    tmodel = torch.nn.Linear(4, 6)
    with torch.no_grad():
        tmodel.weight.copy_(torch.tensor(w))
        tmodel.bias.copy_(torch.tensor(b))
    topts = [torch.optim.SGD([tmodel.weight], lr=0.1, momentum=0.9), torch.optim.Adam([tmodel.bias], lr=0.05)]
    for i in range(3):
        group.zero_grad()
        loss = model(Tensor(x)).sparse_categorical_crossentropy(Tensor(y.astype(np.int32))).backward()
        group.step() if i % 2 == 0 else loss.realize(*group.schedule_step())
        for o in topts:
            o.zero_grad()
        torch.nn.functional.cross_entropy(tmodel(torch.tensor(x)), torch.tensor(y)).backward()
        for o in topts:
            o.step()
    np.testing.assert_allclose(model.weight.numpy(), tmodel.weight.detach().numpy(), atol=1e-5)
    np.testing.assert_allclose(model.bias.numpy(), tmodel.bias.detach().numpy(), atol=1e-5)
    assert group[1].params == [model.bias] and group.params == [model.weight, model.bias]
    with pytest.raises(TypeError, match="OptimizerGroup"):
        nn.optim.OptimizerGroup([model.weight])


def test_renderer_supported_dtypes_lists_what_the_device_holds(device):
    supported = Device[device].renderer.supported_dtypes()
    assert {dtypes.float32, dtypes.int64, dtypes.bool, *dtypes.fp8s} <= supported
    assert all(Device[device].supports(d) for d in supported)
