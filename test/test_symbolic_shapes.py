"""Symbolic shapes (tinygrad's Variable): programs over a bound Variable's sizes against the same programs over the
value's concrete sizes, one compiled kernel serving every value, TinyJit replays, and the errors for bad input."""

import numpy as np
import pytest
import torch

import glassgrad
from glassgrad import Device, Tensor, TinyJit, Variable
from glassgrad.codegen import get_program, symbolic_axes
from glassgrad.codegen.opt import Opt
from glassgrad.engine import realize
from glassgrad.engine.jit import JitError
from glassgrad.renderer.cuda import CUDARenderer
from glassgrad.runtime import ops_cuda
from glassgrad.shape import ShapeError
from glassgrad.uop.ops import Ops, UOp
from glassgrad.uop.variable import UnboundVariableError, sym_infer
from helpers import needs_nvrtc, split_every_cpu_kernel

VALUES = (1, 2, 5, 9)  # 1, odd, the largest


def _data(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _new_kernels(fn):
    """fn's result and the kernels compiled while it ran (a new (device, AST) in the process's cache)."""
    before = set(realize._kernels)
    result = fn()
    return result, set(realize._kernels) - before


# ---- the Variable itself ----


def test_variable_bind_unbind_and_where_it_is_imported():
    i = Variable("i", 1, 10)
    assert glassgrad.uop.Variable is Variable and UOp.variable is Variable
    assert (i.op, i.expr, i.arg) == (Ops.DEFINE_VAR, "i", ("i", 1, 10))
    bound = i.bind(3)
    assert bound.unbind() == (i, 3) and bound.val == 3 and bound.expr == "i"
    assert i.bind(3) is bound  # one node per variable and value
    assert sym_infer(bound * 2 + 1, {}) == 7 and sym_infer(i + 4, {"i": 5}) == sym_infer(i + 4, {i: 5}) == 9


@pytest.mark.parametrize("value", [0, 11, -1])
def test_a_value_outside_the_range_names_the_variable_and_its_range(value):
    with pytest.raises(ValueError, match=rf"bind: {value} is outside the range of Variable i, \[1, 10\]"):
        Variable("i", 1, 10).bind(value)


def test_bad_variables_are_errors():
    with pytest.raises(ValueError, match="need 0 <= min <= max"):
        Variable("i", 5, 4)
    with pytest.raises(ValueError, match="an identifier"):
        Variable("not a name", 1, 4)
    with pytest.raises(TypeError, match="takes an int"):
        Variable("i", 1, 4).bind(2.0)
    with pytest.raises(TypeError, match="only a Variable can be bound"):
        Variable("i", 1, 4).bind(2).bind(3)


# ---- programs over symbolic sizes against the same programs over concrete ones ----

PROGRAMS = {
    "add": lambda a, b: a + b * 2,
    "sum": lambda a, b: (a * b).sum(1),
    "max keepdim": lambda a, b: a - a.amax(1, keepdim=True),
    "softmax": lambda a, b: a.softmax(-1) * b,
    "matmul over the length": lambda a, b: a @ b.T,
}


@pytest.mark.parametrize("name", PROGRAMS)
def test_programs_over_a_symbolic_length_match_concrete_ones(name, device):
    program = PROGRAMS[name]
    a, b = Tensor(_data(3, 9), device=device).realize(), Tensor(_data(3, 9, seed=1), device=device).realize()
    for i in VALUES:
        vi = Variable("i", 1, 9).bind(i)
        ours = program(a[:, :vi], b[:, :vi]).realize()
        shape = tuple(i if s is vi else s for s in ours.shape)
        expected = program(torch.from_numpy(a.numpy()[:, :i]), torch.from_numpy(b.numpy()[:, :i])).numpy()
        np.testing.assert_allclose(ours.reshape(shape).numpy(), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", PROGRAMS)
def test_one_kernel_serves_every_value(name):
    """The symbolic program compiles its kernels for the first value only; each takes the Variable as an int."""
    program = PROGRAMS[name]
    a, b = Tensor(_data(3, 9)).realize(), Tensor(_data(3, 9, seed=1)).realize()
    compiled = []
    for i in (4, 7, 1, 9):
        vi = Variable("i", 1, 9).bind(i)
        out, new = _new_kernels(lambda vi=vi: program(a[:, :vi], b[:, :vi]).realize())
        compiled.append(new)
    assert not any(compiled[1:])
    items = program(a[:, : Variable("i", 1, 9).bind(2)], b[:, : Variable("i", 1, 9).bind(2)]).schedule()
    sources = [realize.get_kernel("CPU", item.ast).spec.src for item in items]
    assert any("int var_i" in src and "< var_i" in src for src in sources)


def test_attention_over_a_symbolic_number_of_keys_matches_pytorch(device):
    q, k, v = (Tensor(_data(2, 3, 1, 8, seed=s), device=device).realize() for s in range(3))
    k, v = (Tensor(_data(2, 3, 10, 8, seed=s), device=device).realize() for s in (4, 5))
    for i in (1, 6, 10):
        vi = Variable("len", 1, 10).bind(i)
        ours = q.scaled_dot_product_attention(k[:, :, :vi], v[:, :, :vi]).numpy()
        tq, tk, tv = (torch.from_numpy(t.numpy()) for t in (q, k, v))
        expected = torch.nn.functional.scaled_dot_product_attention(tq, tk[:, :, :i], tv[:, :, :i]).numpy()
        np.testing.assert_allclose(ours, expected, rtol=1e-5, atol=1e-6)


def test_a_sum_of_a_variable_and_ints_is_a_size():
    a = Tensor(_data(4, 12)).realize()
    for i in (0, 3, 10):
        vi = Variable("pos", 0, 10).bind(i)
        ours = a[:, : vi + 1].sum(1).numpy()
        np.testing.assert_allclose(ours, a.numpy()[:, : i + 1].sum(1), rtol=1e-5)


def test_reshapes_keep_a_symbolic_dim_whole():
    """Merging and splitting the fixed dims beside a symbolic dim, and size-1 dims around it."""
    a = Tensor(_data(2, 3, 8, 4)).realize()
    for i in (1, 5, 8):
        vi = Variable("i", 1, 8).bind(i)
        x = a[:, :, :vi].reshape(6, vi, 2, 2).reshape(6, 1, vi, 4).sum(3)
        assert x.shape == (6, 1, vi)
        expected = a.numpy()[:, :, :i].reshape(6, 1, i, 4).sum(3)
        np.testing.assert_allclose(x.reshape(6, 1, i).numpy(), expected, rtol=1e-5)


def test_assign_into_a_symbolic_slice_writes_only_that_slice():
    """The cache write of a decode step: a where over the first pos+1 entries, the rest left as they were."""
    cache = Tensor(_data(2, 6)).realize()
    expected = cache.numpy().copy()
    for pos in (0, 3, 5):
        sp = Variable("start_pos", 0, 5).bind(pos)
        seen = cache[:, : sp + 1]
        here = Tensor.arange(6)[: sp + 1] == Tensor([pos])
        seen.assign(here.reshape(1, sp + 1).where(Tensor([[10.0 + pos], [20.0 + pos]]), seen)).realize()
        expected[:, pos] = (10.0 + pos, 20.0 + pos)
        np.testing.assert_allclose(cache.numpy(), expected)


# ---- TinyJit ----


def test_tinyjit_captures_once_and_replays_every_value():
    def f(a, b):
        return (a[:, :, None] * b[:, None, :]).sum(2).realize()  # a * the sum of b, (3, i), by an outer product

    jf = TinyJit(f)
    a, b = Tensor(_data(3, 10)).realize(), Tensor(_data(3, 10, seed=1)).realize()
    for i in (3, 4, 1, 10, 7):
        vi = Variable("i", 1, 10).bind(i)
        out, new = _new_kernels(lambda vi=vi: jf(a[:, :vi], b[:, :vi]))
        assert out.shape == (3, vi)
        expected = a.numpy()[:, :i] * b.numpy()[:, :i].sum(1, keepdims=True)
        np.testing.assert_allclose(out.reshape(3, i).numpy(), expected, rtol=1e-5, atol=1e-6)
        if jf.calls > 2:
            assert not new, "a replay compiled a kernel"
    assert jf.variables == {Variable("i", 1, 10)}


def test_tinyjit_takes_a_bound_variable_as_an_argument():
    @TinyJit
    def prefix_sum(x, n):
        return x[:, : n + 1].sum(1).realize()

    x = Tensor(_data(2, 8)).realize()
    for n in (2, 5, 0, 7, 3):
        ours = prefix_sum(x, Variable("n", 0, 7).bind(n)).numpy()
        np.testing.assert_allclose(ours, x.numpy()[:, : n + 1].sum(1), rtol=1e-5)
    with pytest.raises(JitError, match="Variable n"):
        prefix_sum(x, Variable("m", 0, 7).bind(3))


# ---- errors ----


def test_an_unbound_variable_in_a_realize_is_a_clear_error():
    a = Tensor(_data(3, 9)).realize()
    with pytest.raises(UnboundVariableError, match="Variable i in the shape is not bound"):
        (a[:, : Variable("i", 1, 9)] + 1).realize()


def test_one_variable_bound_to_two_values_in_one_realize_is_an_error():
    a = Tensor(_data(3, 9)).realize()
    i = Variable("i", 1, 9)
    with pytest.raises(ValueError, match="Variable i is bound to both"):
        (a[:, : i.bind(2)].sum() + a[:, : i.bind(3)].sum()).realize()


def test_sizes_a_kernel_cannot_take_symbolically_are_errors():
    a = Tensor(_data(3, 9)).realize()
    vi = Variable("i", 1, 9).bind(4)
    with pytest.raises(ShapeError, match=r"takes values 2\.\.10 over its Variables' ranges, outside 0\.\.9"):
        a[:, : vi + 1]
    with pytest.raises(NotImplementedError, match="a symbolic start is not supported"):
        a.shrink((None, (vi, 9)))
    with pytest.raises(NotImplementedError, match="must stay a dim of its own"):
        a[:, :vi].reshape(3 * vi)
    with pytest.raises(ShapeError, match="only size-1 dimensions grow"):
        a[:, :vi].expand(3, 9)
    with pytest.raises(TypeError, match="truth value of the symbolic comparison"):
        bool(vi < 3)


# ---- the CUDA renderer ----


@needs_nvrtc
def test_a_symbolic_kernel_renders_and_compiles_for_cuda():
    a = Tensor.empty(3, 9, device="CPU")
    vi = Variable("i", 1, 9).bind(5)
    (item,) = (a[:, :vi].exp() * 2).schedule()
    spec = get_program(item.ast, CUDARenderer())
    assert "int var_i" in spec.src and spec.vars == (Variable("i", 1, 9),)
    assert spec.global_size == (3,)  # the grid over the fixed rows; each thread loops to var_i
    assert ops_cuda.NVRTCCompiler("sm_80").compile(spec.src)


def test_cpu_threads_split_a_symbolic_kernels_fixed_outer_loop(monkeypatch):
    """The thread pool passes the Variables' values after the buffers (runtime/cpu_threads.py's NAME_range)."""
    split_every_cpu_kernel(monkeypatch, 3)
    a = Tensor(_data(6, 9)).realize()
    for i in (2, 9):
        vi = Variable("i", 1, 9).bind(i)
        np.testing.assert_allclose((a[:, :vi] * 2).sum(1).numpy(), (a.numpy()[:, :i] * 2).sum(1), rtol=1e-5)


def test_a_symbolic_kernel_is_optimized_along_its_fixed_axes_only():
    q, k = Tensor.empty(1, 4, 1, 64), Tensor.empty(1, 4, 128, 64)
    vi = Variable("i", 1, 128).bind(7)
    items = q.scaled_dot_product_attention(k[:, :, :vi], k[:, :, :vi]).schedule()
    optimized = 0
    for item in items:
        symbolic, spec = symbolic_axes(item.ast), get_program(item.ast, Device["CPU"].renderer)
        assert symbolic and all(o.axis not in symbolic for o in spec.opts)
        optimized += bool(spec.opts)
    assert optimized >= 2  # the scores' sum over the head size, the output's head size
    scores = items[0].ast
    (axis,) = symbolic_axes(scores)
    with pytest.raises(ValueError, match="symbolic size"):
        get_program(scores, Device["CPU"].renderer, (Opt("UPCAST", axis, 2),))


# ---- backward: a symbolic crop's gradient pads back to the fixed size ----


@pytest.mark.parametrize("name", PROGRAMS)
def test_gradients_through_a_symbolic_length_match_pytorch(name, device):
    program = PROGRAMS[name]
    an, bn = _data(3, 9), _data(3, 9, seed=1)
    wn = _data(3, 9, seed=2)
    for i in VALUES:
        vi = Variable("i", 1, 9).bind(i)
        a, b = Tensor(an, device=device, requires_grad=True), Tensor(bn, device=device, requires_grad=True)
        out = program(a[:, :vi], b[:, :vi])
        # a weight for each output element (the gradient is not all ones): (3, i), (3,) or (3, 3)
        weights = wn[:, :i] if out.shape[1:] == (vi,) else wn[:, 0] if out.ndim == 1 else wn[:, :3]
        w = Tensor(wn, device=device)[:, :vi] if out.shape[1:] == (vi,) else Tensor(weights, device=device)
        (out * w).sum().backward()
        ta, tb = (torch.from_numpy(n).requires_grad_() for n in (an, bn))
        (program(ta[:, :i], tb[:, :i]) * torch.from_numpy(weights)).sum().backward()
        for ours, theirs in ((a, ta), (b, tb)):  # (max keepdim reads no b: neither has a gradient)
            assert (ours.grad is None) == (theirs.grad is None)
            if theirs.grad is not None:
                np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_attention_gradients_over_a_symbolic_number_of_keys_match_pytorch():
    qn, kn, vn = _data(2, 1, 8), _data(2, 10, 8, seed=1), _data(2, 10, 8, seed=2)
    for i in (1, 7, 10):
        vi = Variable("len", 1, 10).bind(i)
        q, k, v = (Tensor(n, requires_grad=True) for n in (qn, kn, vn))
        q.scaled_dot_product_attention(k[:, :vi], v[:, :vi]).square().sum().backward()
        tq, tk, tv = (torch.from_numpy(n).requires_grad_() for n in (qn, kn, vn))
        torch.nn.functional.scaled_dot_product_attention(tq, tk[:, :i], tv[:, :i]).square().sum().backward()
        for ours, theirs in ((q, tq), (k, tk), (v, tv)):
            np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), rtol=1e-4, atol=1e-6)


def test_pads_of_a_symbolic_dim_other_than_back_to_a_fixed_size_are_errors():
    vi = Variable("i", 1, 9).bind(4)
    x = Tensor(_data(3, 9))[:, :vi]
    with pytest.raises(NotImplementedError, match="pads back to a fixed size only"):
        x.pad(((0, 0), (0, 2)))
    with pytest.raises(ShapeError, match="would crop it"):
        x.pad(((0, 0), (0, 7 - vi)))
    np.testing.assert_allclose(x.pad(((0, 0), (1, 10 - vi))).numpy()[:, 1:5], _data(3, 9)[:, :4])


def test_reading_or_flipping_a_symbolic_shape_is_a_clear_error():
    x = Tensor(_data(3, 9))[:, : Variable("i", 1, 9).bind(4)]
    with pytest.raises(TypeError, match=r"the symbolic size i=4 is not an int, .* reshape it to ints first"):
        x.numpy()
    with pytest.raises(TypeError, match=r"the symbolic size i=4 is not an int"):
        Tensor(_data(9))[Variable("i", 1, 9).bind(4)]
    with pytest.raises(NotImplementedError, match=r"flip: dimension 1 of \(3, i=4\) is symbolic"):
        x.flip(1)
    np.testing.assert_allclose(x.flip(0).reshape(3, 4).numpy(), _data(3, 9)[::-1, :4])


def test_tinyjit_refuses_a_replay_whose_kernels_hold_another_value():
    """A function that crops a symbolic size back to ints bakes the capture's value into its kernels: a replay with
    another value is an error, never a result computed for the old one."""

    @TinyJit
    def first_values(x, n):
        return (x[:, :n].reshape(2, n.val) * 2).realize()

    x = Tensor(_data(2, 8)).realize()
    for n in (3, 3, 3):
        np.testing.assert_allclose(first_values(x, Variable("n", 1, 8).bind(n)).numpy(), x.numpy()[:, :n] * 2)
    with pytest.raises(JitError, match="read the value of Variable n when captured"):
        first_values(x, Variable("n", 1, 8).bind(5))
