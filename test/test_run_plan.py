"""The run plan (engine/realize.py RunPlan): a realized template keeps its kernels ready to call with buffer slots,
and every hit binds its own buffers into it. A hit must compute its own values whatever it runs on: new buffers
each call, views, another constant or dtype (other templates, other plans), an assign, a bound Variable, a kernel
whose check fails, a TinyJit capture. Compared with NumPy."""

from __future__ import annotations

import numpy as np
import pytest

import glassgrad.engine.schedule_cache as cache
from glassgrad import Tensor, TinyJit, Variable, dtypes
from glassgrad.engine import realize
from glassgrad.helpers import Context

RNG = np.random.default_rng(7)


def floats(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def plans_of(fn) -> list:
    """The run plans of the template that realizing fn()'s result hits (made by an earlier call)."""
    out = fn()
    template, _ = cache.cached_template([out.uop])
    out.realize()
    return list(template.realized.plans.values())


def test_one_plan_serves_every_hit_on_new_buffers(device):
    xs = [(floats(4, 5), floats(4, 5)) for _ in range(4)]
    outs, plans = [], []
    for x, y in xs:
        a, b = Tensor(x, device=device).realize(), Tensor(y, device=device).realize()
        plans.append(plans_of(lambda a=a, b=b: a * b + a)[0] if outs else None)
        outs.append((a * b + a).realize())
    assert plans[1] is plans[2] is plans[3]  # made once, at the template's first run
    for out, (x, y) in zip(outs, xs):  # each result its own buffer, still holding its values
        np.testing.assert_allclose(out.numpy(), x * y + x, rtol=1e-6)


VIEWS = {  # name: (glassgrad, NumPy)
    "transpose": (lambda t: t.T, lambda x: x.T),
    "strided": (lambda t: t[1:, ::2], lambda x: x[1:, ::2]),
    "flipped": (lambda t: t.reshape(20).flip(0)[:8], lambda x: x.reshape(20)[::-1][:8]),
    "empty": (lambda t: t[0:0], lambda x: x[0:0]),
}


@pytest.mark.parametrize("name", VIEWS)
def test_hits_on_views_read_their_own_buffers(device, name):
    ours, numpy = VIEWS[name]
    for _ in range(3):
        x, y = floats(4, 5), floats(4, 5)
        a, b = Tensor(x, device=device).realize(), Tensor(y, device=device).realize()
        got, want = (ours(a) * 2 - ours(b)).numpy(), numpy(x) * 2 - numpy(y)
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-6)


@pytest.mark.parametrize("constant", [2.0, -0.0, 3])
def test_another_constant_runs_another_plan(device, constant):
    x = floats(6)
    a = Tensor(x, device=device).realize()
    for _ in range(2):  # the first makes (or hits) this constant's template, the second hits it
        np.testing.assert_allclose((a * 1.5).numpy(), x * 1.5, rtol=1e-6)
        np.testing.assert_allclose((a * constant).numpy(), x * constant, rtol=1e-6)


@pytest.mark.parametrize("dtype", [dtypes.int32, dtypes.float16, dtypes.bool])
def test_another_dtype_runs_another_plan(device, dtype):
    x = (floats(9) * 4).astype(np.int32)
    for _ in range(2):
        a = Tensor(x, device=device).realize()
        cast = a.cast(dtype)
        out = (cast + cast).numpy()
        ref = x.astype(np.float16) if dtype == dtypes.float16 else x.astype(bool) if dtype == dtypes.bool else x
        np.testing.assert_array_equal(out, ref + ref)


def test_assigns_between_hits(device):
    x = floats(8)
    target = Tensor(x.copy(), device=device).realize()
    expected = x.copy()
    for step in range(4):  # the assign's graph (ASSIGN path), then plain ops on the result (realized path), hit
        target.assign(target * 0.5 + step).realize()
        expected = expected * 0.5 + step
        read = (target + 1).realize()
        np.testing.assert_allclose(read.numpy(), expected + 1, rtol=1e-6)
    np.testing.assert_allclose(target.numpy(), expected, rtol=1e-6)


def test_a_bound_variable_takes_each_hits_value(device):
    x = floats(3, 9)
    a = Tensor(x, device=device).realize()
    i = Variable("i", 1, 9)
    for value in (2, 5, 9, 1, 5):  # the first makes the template, the others hit it with their own value
        got = (a[:, : i.bind(value)] * 2).sum(1).numpy()
        np.testing.assert_allclose(got, (x[:, :value] * 2).sum(1), rtol=1e-5)


def test_a_failed_check_leaves_the_plan_usable(device):
    table = Tensor([1.0, 2.0, 3.0], device=device).realize()
    for picks, fails in (([0, 2], False), ([1, 1], False), ([0, 5], True), ([2, 1], False), ([-9, 0], True)):
        out = table.gather(0, Tensor(picks, device=device, dtype=dtypes.int32).realize() * 1)
        if fails:
            with pytest.raises(IndexError):
                out.realize()
        else:
            assert out.tolist() == [[1.0, 2.0, 3.0][p] for p in picks]


def test_tinyjit_captures_a_hit(device):
    x0, y0 = floats(5), floats(5)
    a, b = Tensor(x0, device=device).realize(), Tensor(y0, device=device).realize()
    (a * b - 1).realize()  # the template and its plan, before TinyJit captures the same graph

    @TinyJit
    def step(a: Tensor, b: Tensor) -> Tensor:
        return (a * b - 1).realize()

    for _ in range(4):  # run, capture, replays
        x, y = floats(5), floats(5)
        out = step(Tensor(x, device=device).realize(), Tensor(y, device=device).realize())
        np.testing.assert_allclose(out.numpy(), x * y - 1, rtol=1e-6)


def test_a_plan_per_optimization_flags(on_the_cpu):
    x, y = floats(16, 16), floats(16, 16)
    a, b = Tensor(x).realize(), Tensor(y).realize()
    (a @ b).realize()
    with Context(BEAM=0, TF32=1):
        np.testing.assert_allclose((a @ b).realize().numpy(), x @ y, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose((a @ b).realize().numpy(), x @ y, rtol=1e-5, atol=1e-5)
    flags = {plan.flags for plan in plans_of(lambda: a @ b)}
    assert len(flags) == 2  # TF32 picks the programs: the plan made under it is not the plain one


def test_intermediates_of_a_hit_share_memory_and_keep_values(device):
    for _ in range(3):
        x = floats(6, 7)
        a = Tensor(x, device=device).realize()
        soft = (a * 2).softmax(-1)
        total = (soft * 3).sum()
        Tensor.realize(soft, total)
        e = np.exp(x * 2 - (x * 2).max(-1, keepdims=True))
        want = e / e.sum(-1, keepdims=True)
        np.testing.assert_allclose(soft.numpy(), want, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(total.item(), (want * 3).sum(), rtol=1e-5)


def test_a_plan_lets_go_of_kernels_the_kernel_cache_forgets(device, monkeypatch):
    monkeypatch.setattr(realize, "KERNEL_CACHE_SIZE", 2)  # (the kernel cache unloads what it forgets)
    x = floats(5)
    a = Tensor(x, device=device).realize()
    (a + 1.5).realize()
    first = plans_of(lambda: a + 1.5)[0]
    for c in (2.5, 3.5, 4.5):  # three new kernels: the first is forgotten
        np.testing.assert_allclose((a + c).realize().numpy(), x + c, rtol=1e-6)
    assert first.stale and first.steps == ()  # it holds no kernel that the cache let go
    np.testing.assert_allclose((a + 1.5).realize().numpy(), x + 1.5, rtol=1e-6)  # a new plan, compiled again
    (now,) = plans_of(lambda: a + 1.5)
    assert now is not first and not now.stale


@pytest.mark.parametrize("debug", [0, 2])
def test_a_hit_counts_its_kernels_and_debug_2_numbers_each_line(debug, capsys):
    """GlobalCounters count every kernel a plan runs (once per run, or one by one under DEBUG=2, whose line for a
    kernel shows the count with it)."""
    from glassgrad import GlobalCounters

    a, b = Tensor(floats(64, 33)).realize(), Tensor(floats(64, 33)).realize()
    with Context(DEBUG=debug):
        for _ in range(3):  # a miss, then hits of the same plan
            GlobalCounters.reset()
            before = GlobalCounters.kernel_count
            out = ((a + b).sum(axis=0) * (a - b).max(axis=1).sum()).realize()
            x, y = a.numpy(), b.numpy()
            np.testing.assert_allclose(out.numpy(), (x + y).sum(0) * (x - y).max(1).sum(), rtol=1e-4, atol=1e-4)
            ran = GlobalCounters.kernel_count - before
            assert ran >= 2 and GlobalCounters.global_ops > 0
            lines = [line.split()[2] for line in capsys.readouterr().out.splitlines() if line.startswith("*** ")]
            assert lines == ([str(before + i + 1) for i in range(ran)] if debug else [])
