"""nn.optim: parameter trajectories against torch.optim (or a torch reference), schedules, and TinyJit capture."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
import torch

from glassgrad import Tensor, TinyJit, nn
from glassgrad.nn.state import get_parameters, get_state_dict, load_state_dict

STEPS = 10
RNG = np.random.default_rng(0)
X = RNG.uniform(-1, 1, (8, 4)).astype(np.float32)
Y = RNG.uniform(-1, 1, (8, 3)).astype(np.float32)


class TinyModel:
    """Linear(4, 5), tanh, Linear(5, 3): small, but with a nonlinearity so gradients change from step to step."""

    def __init__(self):
        self.layers = [nn.Linear(4, 5), nn.Linear(5, 3)]

    def __call__(self, x: Tensor) -> Tensor:
        return self.layers[1](self.layers[0](x).tanh())


def torch_model() -> torch.nn.Module:
    torch.manual_seed(0)
    model = torch.nn.Module()
    model.layers = torch.nn.ModuleList([torch.nn.Linear(4, 5), torch.nn.Linear(5, 3)])
    return model


def torch_forward(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    return model.layers[1](model.layers[0](x).tanh())


def same_models() -> tuple[torch.nn.Module, TinyModel]:
    theirs, ours = torch_model(), TinyModel()
    load_state_dict(ours, {k: Tensor(v.numpy()) for k, v in theirs.state_dict().items()})
    return theirs, ours


def our_trajectory(make_optimizer: Callable, steps: int = STEPS) -> list[list[np.ndarray]]:
    """The parameters after each step of training ours with mean squared error on a fixed batch."""
    _, ours = same_models()
    optimizer = make_optimizer(get_parameters(ours))
    out = []
    for _ in range(steps):
        optimizer.zero_grad()
        (ours(Tensor(X)) - Tensor(Y)).square().mean().backward()
        optimizer.step()
        out.append([p.numpy() for p in get_state_dict(ours).values()])
    return out


def torch_trajectory(make_optimizer: Callable, steps: int = STEPS) -> list[list[np.ndarray]]:
    """The same for torch: `make_optimizer` gives a torch.optim optimizer (or a TorchReference) for the parameters."""
    theirs, _ = same_models()
    optimizer = make_optimizer(list(theirs.parameters()))
    out = []
    for _ in range(steps):
        optimizer.zero_grad()
        (torch_forward(theirs, torch.tensor(X)) - torch.tensor(Y)).square().mean().backward()
        optimizer.step()
        out.append([p.detach().numpy().copy() for p in theirs.state_dict().values()])
    return out


def assert_same_trajectory(ours: list[list[np.ndarray]], theirs: list[list[np.ndarray]], atol: float = 1e-5) -> None:
    names = list(torch_model().state_dict())
    for step, (a, b) in enumerate(zip(ours, theirs, strict=True)):
        for name, x, y in zip(names, a, b, strict=True):
            np.testing.assert_allclose(x, y, atol=atol, rtol=1e-5, err_msg=f"{name} after step {step + 1}")
    initial = [p.detach().numpy() for p in torch_model().parameters()]
    moved = max(np.abs(x - y).max() for x, y in zip(theirs[-1], initial))
    assert moved > 1e-2, "the parameters barely moved: the comparison says little"


# ---- optimizers that torch.optim has ----

SGD_CASES = {
    "plain": dict(lr=0.1),
    "momentum": dict(lr=0.1, momentum=0.9),
    "dampening": dict(lr=0.1, momentum=0.9, dampening=0.5),
    "nesterov": dict(lr=0.1, momentum=0.9, nesterov=True),
    "weight_decay": dict(lr=0.1, weight_decay=0.1),
    "all": dict(lr=0.05, momentum=0.8, weight_decay=0.05, nesterov=True),
}


@pytest.mark.parametrize("kwargs", SGD_CASES.values(), ids=SGD_CASES.keys())
def test_sgd_matches_torch_trajectory(kwargs):
    assert_same_trajectory(our_trajectory(lambda p: nn.optim.SGD(p, **kwargs)),
                           torch_trajectory(lambda p: torch.optim.SGD(p, **kwargs)))  # fmt: skip


ADAM_CASES = {
    "default": dict(lr=0.01),
    "betas_eps": dict(lr=0.02, betas=(0.8, 0.99), eps=1e-6),
    "weight_decay": dict(lr=0.01, weight_decay=0.1),
}


@pytest.mark.parametrize("kwargs", ADAM_CASES.values(), ids=ADAM_CASES.keys())
def test_adam_matches_torch_trajectory(kwargs):
    assert_same_trajectory(our_trajectory(lambda p: nn.optim.Adam(p, **kwargs)),
                           torch_trajectory(lambda p: torch.optim.Adam(p, **kwargs)))  # fmt: skip


@pytest.mark.parametrize("kwargs", [dict(lr=0.01), dict(lr=0.02, weight_decay=0.5, betas=(0.85, 0.995))],
                         ids=["default", "weight_decay"])  # fmt: skip
def test_adamw_matches_torch_trajectory(kwargs):
    assert_same_trajectory(our_trajectory(lambda p: nn.optim.AdamW(p, **kwargs)),
                           torch_trajectory(lambda p: torch.optim.AdamW(p, **kwargs)))  # fmt: skip


@pytest.mark.parametrize("name", ["SGD", "Adam", "AdamW"])
def test_parameters_of_equal_shape_keep_separate_optimizer_state(name):
    """Momentum buffers (and Adam's m and v) start as equal zero tensors; each must still be its own buffer."""
    kwargs = dict(lr=0.1, momentum=0.9) if name == "SGD" else dict(lr=0.1)
    a0, b0 = np.array([1.0, -2.0, 3.0], np.float32), np.array([0.5, 0.5, -1.0], np.float32)
    a, b = Tensor(a0).contiguous().realize(), Tensor(b0).contiguous().realize()
    ta, tb = torch.nn.Parameter(torch.tensor(a0)), torch.nn.Parameter(torch.tensor(b0))
    ours, theirs = getattr(nn.optim, name)([a, b], **kwargs), getattr(torch.optim, name)([ta, tb], **kwargs)
    for _ in range(5):
        ours.zero_grad()
        (a * a * b).sum().backward()
        ours.step()
        theirs.zero_grad()
        (ta * ta * tb).sum().backward()
        theirs.step()
    np.testing.assert_allclose(a.numpy(), ta.detach().numpy(), atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(b.numpy(), tb.detach().numpy(), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", ["SGD", "Adam", "AdamW"])
def test_a_0d_parameter_made_from_a_number_trains_as_in_pytorch(name):
    """Tensor(2.0) is a 0-d constant until it requires grad (then a node of its own); its update keeps shape ()."""
    kwargs = dict(lr=0.1, momentum=0.9) if name == "SGD" else dict(lr=0.1)
    w, tw = Tensor(2.0, requires_grad=True), torch.tensor(2.0, requires_grad=True)
    ours, theirs = getattr(nn.optim, name)([w], **kwargs), getattr(torch.optim, name)([tw], **kwargs)
    for _ in range(3):
        for optimizer, loss in ((ours, (w * 2.0 + 2.0) ** 2), (theirs, (tw * 2.0 + 2.0) ** 2)):
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    assert w.shape == ()
    np.testing.assert_allclose(w.item(), tw.item(), rtol=1e-5)


# ---- LAMB and LARS: references written in torch ops ----


class TorchReference:
    """A torch optimizer whose per-parameter update is a function (p, g, state, t) -> new p, written in torch ops."""

    def __init__(self, params: list[torch.Tensor], update: Callable):
        self.params, self.update, self.state, self.t = params, update, [{} for _ in params], 0

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        self.t += 1
        for p, state in zip(self.params, self.state):
            p.copy_(self.update(p.clone(), p.grad.clone(), state, self.t))


def trust_ratio(numerator: torch.Tensor, denominator: torch.Tensor, ratio: torch.Tensor) -> torch.Tensor:
    """`ratio` where both norms are positive, else 1 (a zero parameter or a zero update is not rescaled)."""
    return torch.where((numerator > 0) & (denominator > 0), ratio, torch.ones_like(ratio))


def lamb_update(lr: float, b1: float, b2: float, eps: float, weight_decay: float) -> Callable:
    """LAMB (You et al., 2019), per parameter tensor p with gradient g at step t:

    m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
    u = m / (1 - b1^t) / (sqrt(v / (1 - b2^t)) + eps) + weight_decay p
    r = ||p|| / ||u|| (1 if either norm is 0);  p = p - lr r u
    """

    def update(p, g, state, t):
        m = state["m"] = b1 * state.get("m", torch.zeros_like(p)) + (1 - b1) * g
        v = state["v"] = b2 * state.get("v", torch.zeros_like(p)) + (1 - b2) * g * g
        u = (m / (1 - b1**t)) / ((v / (1 - b2**t)).sqrt() + eps) + weight_decay * p
        p_norm, u_norm = p.norm(), u.norm()
        return p - lr * trust_ratio(p_norm, u_norm, p_norm / u_norm) * u

    return update


def lars_update(lr: float, momentum: float, weight_decay: float, trust_coefficient: float, nesterov: bool) -> Callable:
    """LARS (You et al., 2017) on top of SGD with momentum, per parameter tensor p with gradient g:

    r = trust_coefficient ||p|| / (||g|| + weight_decay ||p||) (1 if either norm is 0)
    d = r (g + weight_decay p)
    buf = d on the first step, else momentum buf + d;  p = p - lr (d + momentum buf if nesterov else buf)
    """

    def update(p, g, state, t):
        p_norm, g_norm = p.norm(), g.norm()
        r = trust_ratio(p_norm, g_norm, trust_coefficient * p_norm / (g_norm + weight_decay * p_norm))
        d = r * (g + weight_decay * p)
        buf = state["buf"] = d if t == 1 else momentum * state["buf"] + d
        return p - lr * (d + momentum * buf if nesterov else buf)

    return update


LAMB_CASES = {
    "default": dict(lr=0.01, b1=0.9, b2=0.999, eps=1e-6, weight_decay=0.0),
    "weight_decay": dict(lr=0.02, b1=0.8, b2=0.99, eps=1e-6, weight_decay=0.1),
}


@pytest.mark.parametrize("kwargs", LAMB_CASES.values(), ids=LAMB_CASES.keys())
def test_lamb_matches_reference_trajectory(kwargs):
    assert_same_trajectory(our_trajectory(lambda p: nn.optim.LAMB(p, **kwargs)),
                           torch_trajectory(lambda p: TorchReference(p, lamb_update(**kwargs))))  # fmt: skip


LARS_CASES = {
    "default": dict(lr=1.0, momentum=0.9, weight_decay=0.0, trust_coefficient=0.01, nesterov=False),
    "weight_decay_nesterov": dict(lr=2.0, momentum=0.8, weight_decay=0.01, trust_coefficient=0.02, nesterov=True),
}


@pytest.mark.parametrize("kwargs", LARS_CASES.values(), ids=LARS_CASES.keys())
def test_lars_matches_reference_trajectory(kwargs):
    assert_same_trajectory(our_trajectory(lambda p: nn.optim.LARS(p, **kwargs)),
                           torch_trajectory(lambda p: TorchReference(p, lars_update(**kwargs))))  # fmt: skip


def test_lamb_with_adam_true_matches_torch_adam():
    """adam=True skips the trust ratio (r = 1 in LAMB's formula): that is Adam."""
    kwargs = dict(lr=0.01, b1=0.9, b2=0.999, eps=1e-6, weight_decay=0.0)
    assert_same_trajectory(our_trajectory(lambda p: nn.optim.LAMB(p, adam=True, **kwargs)),
                           torch_trajectory(lambda p: torch.optim.Adam(p, lr=0.01, eps=1e-6)))  # fmt: skip


# ---- learning-rate schedules ----


def lr_schedule(make_scheduler: Callable, steps: int = 20) -> list[float]:
    optimizer = nn.optim.SGD([Tensor.zeros(2).contiguous()], lr=0.1)
    scheduler = make_scheduler(optimizer)
    rates = [optimizer.lr.item()]
    for _ in range(steps):
        scheduler.step()
        rates.append(optimizer.lr.item())
    return rates


def torch_lr_schedule(make_scheduler: Callable, steps: int = 20) -> list[float]:
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(2))], lr=0.1)
    scheduler = make_scheduler(optimizer)
    rates = [optimizer.param_groups[0]["lr"]]
    for _ in range(steps):
        optimizer.step()  # torch warns if the schedule steps first
        scheduler.step()
        rates.append(optimizer.param_groups[0]["lr"])
    return rates


def test_step_lr_matches_torch():
    np.testing.assert_allclose(lr_schedule(lambda o: nn.optim.StepLR(o, step_size=3, gamma=0.5)),
                               torch_lr_schedule(lambda o: torch.optim.lr_scheduler.StepLR(o, 3, gamma=0.5)),
                               rtol=1e-6)  # fmt: skip


@pytest.mark.parametrize("T_max, eta_min", [(20, 0.0), (7, 0.01)], ids=["one_period", "past_T_max"])
def test_cosine_annealing_lr_matches_torch(T_max, eta_min):
    np.testing.assert_allclose(
        lr_schedule(lambda o: nn.optim.CosineAnnealingLR(o, T_max=T_max, eta_min=eta_min)),
        torch_lr_schedule(lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=T_max, eta_min=eta_min)),
        rtol=1e-6, atol=1e-9,
    )  # fmt: skip


@pytest.mark.parametrize("pct_start", [0.3, 0.25, 0.02, 0.9])
def test_one_cycle_lr_matches_torch(pct_start):
    kwargs = dict(max_lr=0.5, total_steps=21, pct_start=pct_start, div_factor=10.0, final_div_factor=100.0)
    np.testing.assert_allclose(
        lr_schedule(lambda o: nn.optim.OneCycleLR(o, **kwargs)),
        torch_lr_schedule(lambda o: torch.optim.lr_scheduler.OneCycleLR(
            o, **kwargs, anneal_strategy="cos", three_phase=False, cycle_momentum=False)),
        rtol=1e-6, atol=1e-9,
    )  # fmt: skip


def test_one_cycle_lr_defaults_match_torch():
    np.testing.assert_allclose(
        lr_schedule(lambda o: nn.optim.OneCycleLR(o, max_lr=0.1, total_steps=21)),
        torch_lr_schedule(lambda o: torch.optim.lr_scheduler.OneCycleLR(o, max_lr=0.1, total_steps=21,
                                                                         cycle_momentum=False)),
        rtol=1e-6, atol=1e-12,
    )  # fmt: skip


def test_schedule_drives_the_optimizer_step():
    """The rate a schedule writes is the rate the next step uses (SGD: p -= lr * g)."""
    p = Tensor([1.0]).contiguous().realize()
    optimizer = nn.optim.SGD([p], lr=1.0)
    scheduler = nn.optim.StepLR(optimizer, step_size=1, gamma=0.5)
    for expected in (0.0, -0.5, -0.75):  # the gradient of p is 1 every step
        optimizer.zero_grad()
        p.sum().backward()
        optimizer.step()
        scheduler.step()
        assert p.item() == pytest.approx(expected)


# ---- TinyJit captures a whole training step ----


JIT_OPTIMIZERS = {"sgd_momentum": lambda p: nn.optim.SGD(p, lr=0.1, momentum=0.9),
                  "adam": lambda p: nn.optim.Adam(p, lr=0.01)}  # fmt: skip


@pytest.mark.parametrize("make_optimizer", JIT_OPTIMIZERS.values(), ids=JIT_OPTIMIZERS.keys())
def test_jitted_training_steps_match_eager_steps(make_optimizer):
    batches = [np.random.default_rng(i).uniform(-1, 1, (8, 4)).astype(np.float32) for i in range(5)]

    def train(step: Callable) -> list[list[np.ndarray]]:
        _, model = same_models()
        optimizer = make_optimizer(get_parameters(model))
        trajectory, losses = [], []
        for x in batches:
            losses.append(step(model, optimizer, Tensor(x).contiguous().realize()).item())
            trajectory.append([p.numpy() for p in get_state_dict(model).values()])
        return trajectory + [losses]

    def eager_step(model, optimizer, x: Tensor) -> Tensor:
        optimizer.zero_grad()
        loss = (model(x) - Tensor(Y)).square().mean().backward()
        optimizer.step()
        return loss

    jitted = {}  # one TinyJit per model: it captures that model's buffers

    def jit_step(model, optimizer, x: Tensor) -> Tensor:
        if id(model) not in jitted:
            jitted[id(model)] = TinyJit(lambda x: eager_step(model, optimizer, x))
        return jitted[id(model)](x)

    eager, jit = train(eager_step), train(jit_step)
    np.testing.assert_allclose(jit[-1], eager[-1], rtol=1e-6, err_msg="losses")
    for step, (a, b) in enumerate(zip(jit[:-1], eager[:-1])):
        for i, (x, y) in enumerate(zip(a, b)):
            np.testing.assert_allclose(x, y, rtol=1e-6, atol=1e-7, err_msg=f"parameter {i} after step {step + 1}")
    assert next(iter(jitted.values())).calls >= 2, "the step was never captured"


# ---- reads before writes (engine bugs; nn.optim realizes the gradients before its assigns to stay clear of them) ----


def test_a_read_scheduled_with_an_assign_sees_the_old_value():
    a = Tensor([1.0, 2.0]).contiguous().realize()
    b = Tensor([0.0, 0.0]).contiguous().realize()
    old = a * 10  # built from a's value before the assign below
    a.assign(a + 1)
    b.assign(old)
    Tensor.realize(a, b)
    assert b.tolist() == [10.0, 20.0]  # got [20.0, 30.0]


def test_a_training_step_returns_the_loss_before_the_update():
    theirs, ours = same_models()
    optimizer = nn.optim.SGD(get_parameters(ours), lr=0.5)
    loss = (ours(Tensor(X)) - Tensor(Y)).square().mean().backward()
    optimizer.step()
    expected = (torch_forward(theirs, torch.tensor(X)) - torch.tensor(Y)).square().mean().item()
    assert loss.item() == pytest.approx(expected, rel=1e-6)  # got the loss of the updated parameters


def test_adam_builds_its_bias_corrections_once_a_step(monkeypatch):
    """1 - b^t is the same for every parameter: built once a step (a power's graph is large), and the same values."""
    powers, original = [], Tensor.pow

    def counted(self, *args, **kwargs):
        powers.append(1)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Tensor, "pow", counted)
    rng = np.random.default_rng(3)
    params = [Tensor(rng.standard_normal(shape).astype(np.float32), requires_grad=True) for shape in [(3,), (2, 2), ()]]
    torch_params = [torch.tensor(p.numpy(), requires_grad=True) for p in params]
    ours, theirs = nn.optim.Adam(params, lr=0.1), torch.optim.Adam(torch_params, lr=0.1)
    for _ in range(3):
        ours.zero_grad()
        sum((p * p * (i + 1)).sum() for i, p in enumerate(params)).backward()
        ours.step()
        theirs.zero_grad()
        sum((p * p * (i + 1)).sum() for i, p in enumerate(torch_params)).backward()
        theirs.step()
    assert len(powers) == 3 * 2  # b1^t and b2^t, each step
    for p, q in zip(params, torch_params, strict=True):
        np.testing.assert_allclose(p.numpy(), q.detach().numpy(), rtol=1e-5, atol=1e-5)
