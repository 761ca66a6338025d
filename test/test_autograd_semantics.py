"""Autograd and lazy-assign semantics that once gave silent wrong answers, each beside PyTorch.

A value built before an assign keeps the value it had when built (however and whenever the assign is realized);
any float tensor with requires_grad and no history is a leaf; backward() twice needs retain_graph; only float
tensors require grad; max's gradient goes to the largest inputs even where they are recomputed; an optimizer step
skips parameters without a gradient.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from glassgrad import Tensor, TinyJit, dtypes, nn
from glassgrad.nn.state import get_parameters

OPTIMIZERS = {
    "sgd": (lambda ps: nn.optim.SGD(ps, lr=0.1), lambda ps: torch.optim.SGD(ps, lr=0.1)),
    "momentum": (
        lambda ps: nn.optim.SGD(ps, lr=0.1, momentum=0.9),
        lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9),
    ),
    "adam": (lambda ps: nn.optim.Adam(ps, lr=0.1), lambda ps: torch.optim.Adam(ps, lr=0.1)),
}


def _losses(framework, make_optimizer, zero_grad: bool, read_after: int, steps: int = 4) -> list[float]:
    """The loss (w * w).sum() of each step of a loop that calls backward() and step(), each loss read `read_after`
    steps after its own (0: right after step(); the last ones at the end)."""
    w = (
        framework.tensor([2.0, -1.0], requires_grad=True)
        if framework is torch
        else Tensor([2.0, -1.0], requires_grad=True)
    )
    opt = make_optimizer([w])
    pending, read = [], []
    for _ in range(steps):
        if zero_grad:
            opt.zero_grad()
        loss = (w * w).sum()
        loss.backward()
        opt.step()
        pending.append(loss)
        if len(pending) > read_after:
            read.append(pending.pop(0).item())
    return read + [loss.item() for loss in pending]


@pytest.mark.parametrize("read_after", [0, 2])
@pytest.mark.parametrize("zero_grad", [True, False])
@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_a_loss_read_after_the_step_is_the_loss_before_it(name, zero_grad, read_after):
    ours, theirs = OPTIMIZERS[name]
    expected = _losses(torch, theirs, zero_grad, read_after)
    np.testing.assert_allclose(_losses(Tensor, ours, zero_grad, read_after), expected, rtol=1e-5)


def test_a_lazy_value_keeps_its_value_when_another_tensors_realize_runs_the_assign():
    w = Tensor([2.0]).contiguous().realize()
    before = w * 2
    w.assign(w + 1)
    after = w * 3
    after.realize()  # runs the assign: `before` must be computed first
    assert (before.item(), after.item(), w.item()) == (4.0, 9.0, 3.0)


def test_a_lazy_value_whose_graph_was_realized_in_part_still_reads_the_old_value():
    w = Tensor([2.0])  # not realized yet: its node is replaced by a buffer when realized below
    square = w * w
    (w + 0).realize()
    w.assign(w - 1).realize()
    assert square.item() == 4.0 and w.item() == 1.0


def test_a_pending_assign_that_reads_an_overwritten_buffer_runs_before_it():
    w, running = Tensor([2.0]).contiguous().realize(), Tensor([0.0]).contiguous().realize()
    running.assign(w * 0.5)  # (as a batchnorm's running statistics read the weights before the optimizer's step)
    w.assign(w + 1).realize()
    assert running.item() == 1.0 and w.item() == 3.0


def test_a_value_read_between_chained_assigns_keeps_the_first_assigns_value():
    w = Tensor([2.0]).contiguous().realize()
    w.assign(w + 1)
    between = w * 2
    w.assign(w * 10)
    w.realize()
    assert between.item() == 6.0 and w.item() == 30.0


def test_a_view_of_an_assigned_buffer_sees_the_new_values_as_in_pytorch():
    w, ref = Tensor([1.0, 2.0]).contiguous().realize(), torch.tensor([1.0, 2.0])
    view, ref_view = w.reshape(2, 1), ref.reshape(2, 1)
    w.assign(w * 5).realize()
    ref.mul_(5)
    assert view.tolist() == ref_view.tolist()


def test_a_lazy_value_keeps_its_value_across_a_tinyjit_replay_that_overwrites_what_it_reads():
    w = Tensor([1.0]).contiguous().realize()

    @TinyJit
    def bump() -> Tensor:
        w.assign(w + 1)
        return w

    for _ in range(3):  # run, capture, replay
        bump()
    lazy = [w * 1]  # built before each replay
    for _ in range(2):
        bump()
        lazy.append(w * 1)
    assert [t.item() for t in lazy] == [4.0, 5.0, 6.0] and w.item() == 6.0


def test_a_jitted_training_step_returns_the_loss_before_its_update():
    ours = Tensor([2.0, -1.0], requires_grad=True)
    theirs = torch.tensor([2.0, -1.0], requires_grad=True)
    opt, ref_opt = nn.optim.SGD([ours], lr=0.1), torch.optim.SGD([theirs], lr=0.1)

    @TinyJit
    def step() -> Tensor:
        opt.zero_grad()
        loss = (ours * ours).sum()
        loss.backward()
        opt.step()
        return loss

    for _ in range(5):
        ref_opt.zero_grad()
        expected = (theirs * theirs).sum()
        expected.backward()
        ref_opt.step()
        assert step().item() == pytest.approx(expected.item(), rel=1e-6)


# ---- leaves ----


@pytest.mark.parametrize("how", ["attribute", "requires_grad_"])
def test_requires_grad_set_on_a_layers_parameters_makes_them_leaves_that_train(how):
    torch.manual_seed(0)
    ref = torch.nn.Linear(3, 2)
    layer = nn.Linear(3, 2)
    layer.weight.assign(Tensor(ref.weight.detach().numpy())).realize()
    layer.bias.assign(Tensor(ref.bias.detach().numpy())).realize()
    for p in (layer.weight, layer.bias):  # computed by an initializer, but with no autograd history: leaves
        p.requires_grad_() if how == "requires_grad_" else setattr(p, "requires_grad", True)
        assert p.is_leaf
    x = np.arange(12, dtype=np.float32).reshape(4, 3) / 10
    layer(Tensor(x)).square().sum().backward()
    ref(torch.tensor(x)).square().sum().backward()
    np.testing.assert_allclose(layer.weight.grad.numpy(), ref.weight.grad.numpy(), rtol=1e-5)
    np.testing.assert_allclose(layer.bias.grad.numpy(), ref.bias.grad.numpy(), rtol=1e-5)


def test_a_model_whose_flags_were_set_by_assignment_trains_as_in_pytorch():
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    layers = [nn.Linear(4, 8), nn.Linear(8, 1)]
    for ours, theirs in zip(layers, (ref[0], ref[2])):
        ours.weight.assign(Tensor(theirs.weight.detach().numpy())).realize()
        ours.bias.assign(Tensor(theirs.bias.detach().numpy())).realize()
        ours.weight.requires_grad = ours.bias.requires_grad = True
    opt, ref_opt = nn.optim.SGD(get_parameters(layers), lr=0.1), torch.optim.SGD(ref.parameters(), lr=0.1)
    x = np.random.default_rng(0).uniform(-1, 1, (16, 4)).astype(np.float32)
    y = x.sum(1, keepdims=True)
    for _ in range(5):
        opt.zero_grad(), ref_opt.zero_grad()
        loss = (layers[1](layers[0](Tensor(x)).tanh()) - Tensor(y)).square().mean()
        ref_loss = (ref(torch.tensor(x)) - torch.tensor(y)).square().mean()
        loss.backward(), ref_loss.backward()
        opt.step(), ref_opt.step()
        assert loss.item() == pytest.approx(ref_loss.item(), rel=1e-5)


def test_a_result_of_tensors_that_require_grad_is_not_a_leaf_and_keeps_its_flag():
    x = Tensor([1.0, 2.0], requires_grad=True)
    y = x * 2
    assert not y.is_leaf and y.requires_grad and (x.detach() * 2).is_leaf
    with pytest.raises(RuntimeError, match="only change requires_grad flags of leaf"):
        y.requires_grad = False
    with pytest.raises(RuntimeError, match="only change requires_grad flags of leaf"):
        y.requires_grad_(False)
    assert y.requires_grad_() is y and not y.is_leaf  # as PyTorch: asking again for what it has is no change
    y.sum().backward()
    assert x.grad.tolist() == [2.0, 2.0] and y.grad is None


# ---- backward twice ----


@pytest.mark.parametrize("build", ["x * x", "x.exp()", "x.relu()", "x * y"])
def test_backward_twice_through_a_graph_that_keeps_values_raises_as_in_pytorch(build):
    y = Tensor([3.0, 4.0])  # noqa: F841  (read by eval)
    x = Tensor([1.0, -2.0], requires_grad=True)
    loss = eval(build).sum()
    loss.backward()
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        loss.backward()
    tx = torch.tensor([1.0, -2.0], requires_grad=True)
    ref = eval(build, {"x": tx, "y": torch.tensor([3.0, 4.0])}).sum()
    ref.backward()
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        ref.backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy())


@pytest.mark.parametrize("build", ["x * x", "x.exp()", "(x * x).sum(0)", "x.sum() + x.mean()"])
@pytest.mark.parametrize("realized", [False, True])
def test_backward_with_retain_graph_can_run_again_and_accumulates_as_pytorch(build, realized):
    x = Tensor([[1.0, -2.0], [0.5, 3.0]], requires_grad=True)
    tx = torch.tensor([[1.0, -2.0], [0.5, 3.0]], requires_grad=True)
    loss, ref = eval(build).sum(), eval(build, {"x": tx}).sum()
    loss.backward(retain_graph=True)
    ref.backward(retain_graph=True)
    if realized:
        loss.realize()
    loss.backward()
    ref.backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-6)


@pytest.mark.parametrize("build", ["x.sum()", "(x + 1).sum()", "x.mean()", "x.reshape(2, 2).T.sum()"])
def test_backward_twice_through_sums_and_views_accumulates_as_pytorch(build):
    x, tx = Tensor([1.0, 2.0, 3.0, 4.0], requires_grad=True), torch.tensor([1.0, 2.0, 3.0, 4.0], requires_grad=True)
    loss, ref = eval(build), eval(build, {"x": tx})
    for _ in range(2):  # these graphs keep no values of the forward pass: PyTorch allows it
        loss.backward()
        ref.backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy())


# ---- only floats require grad ----

NOT_FLOAT = {dtypes.int32: torch.int32, dtypes.int64: torch.int64, dtypes.uint8: torch.uint8, dtypes.bool: torch.bool}


@pytest.mark.parametrize("dtype", list(NOT_FLOAT))
@pytest.mark.parametrize("how", ["constructor", "requires_grad_", "attribute", "zeros", "arange"])
def test_an_integer_or_bool_tensor_cannot_require_grad(dtype, how):
    value = True if dtype == dtypes.bool else 1
    make = {
        "constructor": lambda: Tensor([value, value], dtype=dtype, requires_grad=True),
        "requires_grad_": lambda: Tensor([value, value], dtype=dtype).requires_grad_(),
        "attribute": lambda: setattr(Tensor([value, value], dtype=dtype), "requires_grad", True),
        "zeros": lambda: Tensor.zeros(2, dtype=dtype, requires_grad=True),
        "arange": lambda: Tensor.arange(3, dtype=dtype, requires_grad=True),
    }[how]
    with pytest.raises(RuntimeError, match="(?i)only tensors of floating point"):
        make()
    with pytest.raises(RuntimeError, match="(?i)only tensors of floating point"):  # as PyTorch
        torch.tensor([value, value], dtype=NOT_FLOAT[dtype], requires_grad=True)


def test_integer_tensors_may_say_they_need_no_grad_and_results_of_floats_that_are_ints_need_none():
    ints = Tensor([1, 2])
    ints.requires_grad = False
    ints.requires_grad_(False)
    x = Tensor([1.5, -2.0], requires_grad=True)
    assert not x.argmax().requires_grad and not (x > 0).requires_grad and not x.int().requires_grad
    assert (x.int().float() * x).requires_grad  # a float result of x still does
    opt = nn.optim.SGD([Tensor([1.0]), Tensor([3], dtype=dtypes.int32)])  # an int state tensor among them
    assert opt.params[0].requires_grad and not opt.params[1].requires_grad


# ---- max's gradient ----


def test_logsumexp_then_max_gives_every_row_its_softmax():
    x = np.random.default_rng(1).standard_normal((128, 17)).astype(np.float32)
    ours, theirs = Tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    ours.logsumexp(1, keepdim=True).max(1).sum().backward()
    theirs.logsumexp(1, keepdim=True).amax(1).sum().backward()
    np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("read_first", [None, "realize", "tolist"])
@pytest.mark.parametrize("op", ["max", "min"])
@pytest.mark.parametrize("shape", [(4, 5), (16, 33), (128, 17)])
def test_max_over_columns_of_a_softmax_goes_to_the_largest_entries(shape, op, read_first):
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)  # no ties: either framework's rounding
    ours, theirs = Tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    out = getattr(ours.softmax(1), op)(0)
    if read_first:
        getattr(out, read_first)()
    out.sum().backward()
    (torch.amax if op == "max" else torch.amin)(theirs.softmax(1), dim=0).sum().backward()
    np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("read_first", [None, "realize", "tolist"])
@pytest.mark.parametrize("axis", [None, 0, 1])
@pytest.mark.parametrize("shape", [(5, 7, 6), (33, 64, 17), (1, 100, 1)])
def test_max_of_a_matmul_gives_its_gradient_to_the_largest_products(shape, axis, read_first):
    n, k, m = shape
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((n, k)).astype(np.float32), rng.standard_normal((k, m)).astype(np.float32)
    ta, tb = Tensor(a, requires_grad=True), Tensor(b, requires_grad=True)
    ra, rb = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    out = (ta @ tb).max(axis=axis)
    if read_first:
        getattr(out, read_first)()
    out.sum().backward()
    torch.amax(ra @ rb, dim=axis if axis is not None else (0, 1)).sum().backward()
    np.testing.assert_allclose(ta.grad.numpy(), ra.grad.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(tb.grad.numpy(), rb.grad.numpy(), rtol=1e-4, atol=1e-5)


# max over no elements is an error (in PyTorch too): an empty input only reduces over its other axis
SHAPES_AND_AXES = [(s, a) for s in [(3, 4), (1, 5), (4, 1)] for a in (None, 0, 1, (0, 1))] + [((0, 3), 1)]


@pytest.mark.parametrize("read_first", [None, "realize", "tolist"])
@pytest.mark.parametrize("op", ["max", "min"])
@pytest.mark.parametrize("shape, axis", SHAPES_AND_AXES)
def test_max_and_min_share_the_gradient_among_ties_whether_or_not_the_output_was_read(shape, axis, op, read_first):
    x = np.random.default_rng(3).integers(-1, 2, shape).astype(np.float32)  # many ties
    ours, theirs = Tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    out = getattr(ours.exp(), op)(axis, keepdim=True)
    if read_first:
        getattr(out, read_first)()
    (out * 2).sum().backward()
    reference = torch.amax if op == "max" else torch.amin
    (reference(theirs.exp(), dim=axis if axis is not None else (0, 1), keepdim=True) * 2).sum().backward()
    np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), rtol=1e-6)


# ---- an optimizer step before any backward ----

ALL_OPTIMIZERS = {
    "SGD": lambda ps: nn.optim.SGD(ps, lr=0.1, momentum=0.9),
    "LARS": lambda ps: nn.optim.LARS(ps, lr=0.1),
    "LAMB": lambda ps: nn.optim.LAMB(ps, lr=0.1),
    "Adam": lambda ps: nn.optim.Adam(ps, lr=0.1),
    "AdamW": lambda ps: nn.optim.AdamW(ps, lr=0.1),
}
TORCH_OPTIMIZERS = {
    "SGD": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9),
    "Adam": lambda ps: torch.optim.Adam(ps, lr=0.1),
    "AdamW": lambda ps: torch.optim.AdamW(ps, lr=0.1),
}


def _step_before_any_backward_then_train(make_tensor, make_optimizer) -> tuple[list, list]:
    """An optimizer over a used and an unused parameter: step() before any backward(), then three steps of training
    the used one; the used one after each step, and the unused one at the end."""
    used, unused = make_tensor([1.0, -2.0]), make_tensor([5.0])
    opt = make_optimizer([used, unused])
    opt.step()
    trajectory = [used.tolist()]
    for _ in range(3):
        opt.zero_grad()
        (used * used).sum().backward()
        opt.step()
        trajectory.append(used.tolist())
    return trajectory, unused.tolist()


@pytest.mark.parametrize("name", list(ALL_OPTIMIZERS))
def test_a_step_skips_parameters_without_a_gradient(name):
    trajectory, unused = _step_before_any_backward_then_train(
        lambda v: Tensor(v, requires_grad=True), ALL_OPTIMIZERS[name]
    )
    assert trajectory[0] == [1.0, -2.0] and unused == [5.0]  # nothing changed where nothing had a gradient
    if name in TORCH_OPTIMIZERS:  # the first real step is the first step (Adam's bias correction counts from it)
        expected, _ = _step_before_any_backward_then_train(
            lambda v: torch.tensor(v, requires_grad=True), TORCH_OPTIMIZERS[name]
        )
        np.testing.assert_allclose(trajectory, expected, rtol=1e-5)
