"""TinyJit: replays match eager bit for bit, run no scheduling, refuse calls that changed, handle outputs that alias
inputs, hold memory steady, and draw new random numbers each call."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from collections.abc import Callable

import numpy as np
import pytest

import glassgrad.engine.lazy
import glassgrad.schedule
from glassgrad import Context, Device, GlobalCounters, Tensor, TinyJit, dtypes, nn
from glassgrad.engine.jit import JitError
from glassgrad.engine.realize import CompiledKernel
from glassgrad.nn.state import get_parameters

CALLS = 6  # eager first call, capture, then replays


def fresh(*shape: int, seed: int, device: str | None = None) -> Tensor:
    """A realized tensor of random float32 values, on the default device unless `device` says otherwise."""
    array = np.random.default_rng(seed).uniform(-3, 3, shape).astype(np.float32)
    return Tensor(array, device=device).realize()


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def captured_kernels(jit: TinyJit) -> int:
    return sum(isinstance(item.runner, CompiledKernel) for item in jit.items)


# ---- replay gives the same bits as eager ----


FUNCTIONS: dict[str, tuple[Callable[..., Tensor], list[tuple[int, ...]]]] = {
    "elementwise_chain": (lambda x, y: ((x * 2 + y).relu() - y.exp() * 0.5).abs().sqrt().neg(), [(4, 5), (4, 5)]),
    "sum_over_axis": (lambda x: x.sum(axis=1), [(6, 7)]),
    "max_over_axis": (lambda x: x.max(axis=0), [(6, 7)]),
    "matmul_relu": (lambda x, w: (x @ w).relu(), [(5, 8), (8, 3)]),
    "softmax": (lambda x: x.softmax(axis=-1), [(4, 9)]),
}


@pytest.mark.parametrize("name", list(FUNCTIONS))
def test_replay_is_bit_identical_to_eager_with_fresh_inputs_each_call(name):
    fn, shapes = FUNCTIONS[name]
    jitted = TinyJit(fn)
    for call in range(CALLS):
        inputs = [fresh(*shape, seed=100 * call + i) for i, shape in enumerate(shapes)]
        got = jitted(*inputs).numpy()
        expected = fn(*inputs).numpy()
        assert same_bits(got, expected), f"{name}, call {call + 1}"
    assert jitted.calls == 2 and captured_kernels(jitted) > 0, "the function was never replayed"


class MLP:
    def __init__(self):
        self.layers = [nn.Linear(4, 8), nn.Linear(8, 3)]

    def __call__(self, x: Tensor) -> Tensor:
        return self.layers[1](self.layers[0](x).relu())


class ConvNet:
    def __init__(self):
        self.conv, self.fc = nn.Conv2d(1, 2, 3), nn.Linear(2 * 4 * 4, 3)

    def __call__(self, x: Tensor) -> Tensor:
        return self.fc(self.conv(x.reshape(-1, 1, 6, 6)).relu().flatten(1))


def training_step(model, optimizer: nn.optim.Optimizer) -> Callable[[Tensor, Tensor], Tensor]:
    """Forward, backward and an optimizer step (updates through assign); returns the loss."""

    def step(x: Tensor, y: Tensor) -> Tensor:
        optimizer.zero_grad()
        loss = (model(x) - y).square().mean()
        loss.backward()
        optimizer.step()
        return loss.realize()

    return step


def copy_of(model_class, weights: list[np.ndarray]):
    model = model_class()
    for p, w in zip(get_parameters(model), weights):
        p.assign(Tensor(w)).realize()
    return model


@pytest.mark.parametrize("model_class, x_shape", [(MLP, (16, 4)), (ConvNet, (4, 36))], ids=["mlp", "convnet"])
def test_jitted_adam_training_matches_eager_bit_for_bit_over_20_steps(model_class, x_shape):
    Tensor.manual_seed(0)
    initial = [p.numpy() for p in get_parameters(model_class())]
    eager_model, jit_model = copy_of(model_class, initial), copy_of(model_class, initial)
    eager_step = training_step(eager_model, nn.optim.Adam(get_parameters(eager_model), lr=0.01))
    jit_step = TinyJit(training_step(jit_model, nn.optim.Adam(get_parameters(jit_model), lr=0.01)))
    rng = np.random.default_rng(1)
    for step in range(20):
        x = rng.standard_normal(x_shape).astype(np.float32)
        y = rng.standard_normal((x_shape[0], 3)).astype(np.float32)
        eager_loss = eager_step(Tensor(x), Tensor(y)).numpy()
        jit_loss = jit_step(Tensor(x), Tensor(y)).numpy()
        assert same_bits(jit_loss, eager_loss), f"loss at step {step + 1}"
    for i, (a, b) in enumerate(zip(get_parameters(jit_model), get_parameters(eager_model))):
        assert np.array_equal(a.numpy(), b.numpy()), f"parameter {i} after 20 steps"
    assert jit_step.calls == 2 and captured_kernels(jit_step) > 0


# ---- a replay runs the captured kernels and nothing else ----


def forbid_scheduling(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a replay scheduled kernels")

    monkeypatch.setattr(glassgrad.schedule, "kernelize", refuse)
    monkeypatch.setattr(sys.modules["glassgrad.schedule.kernelize"], "kernelize", refuse)
    monkeypatch.setattr(glassgrad.engine.lazy, "cached_schedule", refuse)  # lazy.py calls the names it imported
    monkeypatch.setattr(glassgrad.engine.lazy, "cached_template", refuse)
    monkeypatch.setattr(glassgrad.schedule, "create_schedule", refuse)


def test_replay_runs_exactly_the_captured_kernels_without_scheduling_or_calling_the_function(monkeypatch):
    Tensor.manual_seed(0)
    model = MLP()
    step = training_step(model, nn.optim.Adam(get_parameters(model), lr=0.01))
    ran = []
    jitted = TinyJit(lambda x, y: ran.append(1) or step(x, y))
    batches = [(fresh(16, 4, seed=2 * i), fresh(16, 3, seed=2 * i + 1)) for i in range(5)]
    for x, y in batches[:2]:
        jitted(x, y)
    assert len(ran) == 2
    expected = captured_kernels(jitted)
    with monkeypatch.context() as patch:
        forbid_scheduling(patch)
        for x, y in batches[2:]:
            before = GlobalCounters.kernel_count
            jitted(x, y)
            assert GlobalCounters.kernel_count - before == expected
    assert len(ran) == 2, "a replay called the Python function"


def test_forbidding_scheduling_does_catch_an_eager_realize(monkeypatch):
    """The check above means something: with the same patches, eager work fails."""
    x = fresh(3, seed=0)
    forbid_scheduling(monkeypatch)
    with pytest.raises(AssertionError, match="scheduled"):
        (x + 1).realize()


# ---- calls that differ from the captured one are errors that say what changed ----


def captured_jit() -> TinyJit:
    jitted = TinyJit(lambda x, scale: (x * scale).sum(axis=0))
    for seed in range(3):
        jitted(fresh(2, 3, seed=seed), 2)
    return jitted


CHANGED_CALLS = {
    "shape": ((lambda: fresh(3, 2, seed=9), 2), ["argument 0", "(2, 3)", "(3, 2)"]),
    "dtype": (
        (lambda: Tensor.ones(2, 3, dtype=dtypes.int32).contiguous().realize(), 2),
        ["argument 0", "float", "int"],
    ),
    "device": ((lambda: fresh(2, 3, seed=9, device="PYTHON"), 2), ["argument 0", f"on {Device.DEFAULT}", "on PYTHON"]),
    "not_a_tensor": ((lambda: np.ones((2, 3), np.float32), 2), ["argument 0", "a Tensor of shape (2, 3)", "ndarray"]),
    "scalar_value": ((lambda: fresh(2, 3, seed=9), 3), ["argument 1", "int 2", "int 3"]),
    "scalar_type": ((lambda: fresh(2, 3, seed=9), 2.0), ["argument 1", "int 2", "float 2.0"]),
}


@pytest.mark.parametrize("change", list(CHANGED_CALLS))
def test_changed_input_raises_type_error_naming_argument_and_both_values(change):
    (make_x, scale), needles = CHANGED_CALLS[change]
    jitted = captured_jit()
    with pytest.raises(TypeError) as error:
        jitted(make_x(), scale)
    assert isinstance(error.value, JitError)  # tinygrad's class (`except JitError` catches it), a TypeError as well
    message = str(error.value)
    for needle in needles:
        assert needle in message, f"{needle!r} not in {message!r}"
    assert message.index(needles[1]) < message.index(needles[2]), "the captured value comes first"
    x = fresh(2, 3, seed=5)  # the capture survives the refused call
    assert np.array_equal(jitted(x, 2).numpy(), (x * 2).sum(axis=0).numpy())


def test_changed_keyword_argument_is_named_in_the_error():
    jitted = TinyJit(lambda x, *, bias: x + bias)
    for seed in range(3):
        jitted(fresh(4, seed=seed), bias=fresh(4, seed=10 + seed))
    with pytest.raises(TypeError, match=r"argument 'bias' .* shape \(4,\).* shape \(5,\)"):
        jitted(fresh(4, seed=0), bias=fresh(5, seed=0))


def test_keyword_order_does_not_matter_for_replay():
    jitted = TinyJit(lambda *, a, b: a - b)
    for seed in range(2):
        jitted(a=fresh(3, seed=seed), b=fresh(3, seed=seed + 50))
    a, b = fresh(3, seed=7), fresh(3, seed=8)
    assert np.array_equal(jitted(b=b, a=a).numpy(), (a - b).numpy())


def test_list_of_tensors_argument_replays_with_new_tensors():
    jitted = TinyJit(lambda xs: xs[0] * xs[1])
    for seed in range(CALLS):
        xs = [fresh(4, seed=seed), fresh(4, seed=seed + 50)]
        assert np.array_equal(jitted(xs).numpy(), (xs[0] * xs[1]).numpy()), f"call {seed + 1}"
    with pytest.raises(TypeError, match=r"list of \[a Tensor of shape \(4,\).*list of \[a Tensor of shape \(5,\)"):
        jitted([fresh(5, seed=0), fresh(4, seed=0)])


def test_passing_one_tensor_for_two_inputs_captured_apart_raises():
    """Kernels captured for two buffers may read one while writing the other: sharing one buffer is refused."""
    jitted = TinyJit(lambda a, b: a + b.flip(0))
    for seed in range(3):
        jitted(fresh(4, seed=seed), fresh(4, seed=seed + 50))
    x = fresh(4, seed=0)
    with pytest.raises(JitError, match="tensor input 1 .* its own buffer when captured .* buffer of tensor input 0"):
        jitted(x, x)


# ---- JIT=0 ----


def test_jit_0_runs_the_function_eagerly_every_call():
    ran = []
    jitted = TinyJit(lambda x: ran.append(1) or (x * 3 + 1))
    with Context(JIT=0):  # as JIT=0 in the environment does, read when glassgrad is imported
        for seed in range(CALLS):
            x = fresh(5, seed=seed)
            assert np.array_equal(jitted(x).numpy(), (x * 3 + 1).numpy())
    assert len(ran) == CALLS and jitted.calls == 0 and not jitted.items


def test_jit_0_in_the_environment_turns_tinyjit_off_in_a_new_process():
    code = "from glassgrad import Tensor, TinyJit\nf = TinyJit(lambda x: (x + 1).realize())\n"
    code += "for _ in range(3): f(Tensor([1.0]))\nprint(f.calls, len(f.items))"
    env = {**os.environ, "JIT": "0"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["0", "0"]


# ---- outputs that alias inputs ----


def test_function_returning_its_input_returns_each_calls_input():
    jitted = TinyJit(lambda x: x)
    for seed in range(CALLS):
        x = fresh(3, seed=seed)
        out = jitted(x)
        assert out is x and np.array_equal(out.numpy(), x.numpy())


def test_function_returning_a_view_of_its_input_reads_each_calls_input():
    jitted = TinyJit(lambda x: x.reshape(2, 3))
    for seed in range(CALLS):
        x = fresh(6, seed=seed)
        assert np.array_equal(jitted(x).numpy(), x.numpy().reshape(2, 3)), f"call {seed + 1}"


def test_assign_into_the_same_input_then_returning_it_increments_each_replay():
    jitted = TinyJit(lambda x: x.assign(x + 1))
    x = Tensor.zeros(3).contiguous().realize()
    for call in range(1, CALLS + 1):
        out = jitted(x)
        assert out is x
        assert np.array_equal(x.numpy(), np.full(3, call, np.float32)), f"call {call}"


def test_assign_into_a_fresh_input_each_call_then_returning_it():
    def add_one(x: Tensor) -> Tensor:
        x.assign(x + 1)
        return x

    jitted = TinyJit(add_one)
    for seed in range(CALLS):
        x = fresh(4, seed=seed)
        before = x.numpy()
        out = jitted(x)
        assert out is x and np.array_equal(x.numpy(), before + 1), f"call {seed + 1}"


def test_output_passed_back_as_the_next_input():
    """h = f(h): a replay writes the output buffer that it reads the input from, so it must read a copy."""
    jitted = TinyJit(lambda h: h.flip(0) * 2)
    h, expected = fresh(8, seed=0), fresh(8, seed=0).numpy()
    for call in range(CALLS):
        h, expected = jitted(h), expected[::-1] * 2
        assert np.array_equal(h.numpy(), expected), f"call {call + 1}"


# ---- memory ----


def tiny_training_step() -> TinyJit:
    Tensor.manual_seed(0)
    model = [nn.Linear(2, 4), nn.Linear(4, 1)]
    optimizer = nn.optim.Adam(get_parameters(model), lr=0.01)
    return TinyJit(training_step(lambda x: model[1](model[0](x).relu()), optimizer))


def test_memory_after_5000_jitted_training_steps_equals_memory_after_50():
    step = tiny_training_step()
    batches = [(fresh(4, 2, seed=2 * i), fresh(4, 1, seed=2 * i + 1)) for i in range(4)]
    for i in range(50):
        step(*batches[i % 4])
    gc.collect()
    after_50 = GlobalCounters.mem_used
    for i in range(50, 5000):
        step(*batches[i % 4])
    gc.collect()
    assert GlobalCounters.mem_used == after_50


def test_capture_does_not_keep_the_capture_calls_input_buffers():
    def on_device(value: float) -> Tensor:
        return Tensor.full((1000,), value).contiguous().realize()

    jitted = TinyJit(lambda x: x * 2)
    jitted(on_device(1.0))
    x = on_device(2.0)
    jitted(x)  # captured
    gc.collect()
    before = GlobalCounters.mem_used
    del x
    gc.collect()
    assert GlobalCounters.mem_used == before - 4000
    assert np.array_equal(jitted(on_device(3.0)).numpy(), np.full(1000, 6.0, np.float32))


def test_memory_steady_over_jitted_training_steps_with_fresh_host_batches():
    step = tiny_training_step()
    rng = np.random.default_rng(0)
    batches = [(rng.standard_normal((4, 2)).astype(np.float32), rng.standard_normal((4, 1)).astype(np.float32))
               for _ in range(4)]  # fmt: skip
    for i in range(300):
        step(Tensor(batches[i % 4][0]), Tensor(batches[i % 4][1]))
        if i == 49:
            gc.collect()
            after_50 = GlobalCounters.mem_used
    gc.collect()
    assert GlobalCounters.mem_used == after_50


def test_realizing_host_data_eagerly_frees_its_buffers():
    data = np.ones((4, 2), np.float32)
    Tensor(data).realize()
    gc.collect()
    before = GlobalCounters.mem_used
    for _ in range(10):
        Tensor(data).realize()
    gc.collect()
    assert GlobalCounters.mem_used == before


# ---- random numbers ----


def test_rand_inside_jit_draws_new_numbers_each_replay_as_eager_does():
    Tensor.manual_seed(0)
    eager = [Tensor.rand(16).numpy() for _ in range(CALLS)]
    Tensor.manual_seed(0)
    jitted = TinyJit(lambda: Tensor.rand(16))
    draws = [jitted().numpy() for _ in range(CALLS)]
    assert jitted.calls == 2 and captured_kernels(jitted) > 0
    assert len({d.tobytes() for d in draws}) == CALLS, "a replay repeated the numbers of an earlier call"
    for call, (a, b) in enumerate(zip(draws, eager)):
        assert np.array_equal(a, b), f"call {call + 1} differs from eager"


def test_rand_inside_jit_follows_manual_seed_after_capture():
    jitted = TinyJit(lambda: Tensor.rand(8))
    for _ in range(3):
        jitted()
    Tensor.manual_seed(123)
    replayed = jitted().numpy()
    Tensor.manual_seed(123)
    assert np.array_equal(replayed, Tensor.rand(8).numpy())
