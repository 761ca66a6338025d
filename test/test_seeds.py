"""The forward-only examples of the seed documents, with tinygrad replaced by glassgrad, and their values checked.

Seed 003 ("Introduction to Tinygrad"): tensor, device, lazy UOp graph, realization, dedup, kernelize, the generated
code under DEBUG/NOOPT, low-level UOps and the pattern matcher. Seed 000 ("A Deep Learning Framework In The Mind"):
the lazy graph, shapes, ops and transpose examples. Autograd is not covered here.
"""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from glassgrad import Device, GlobalCounters, Tensor, dtypes
from glassgrad.codegen import full_rewrite_to_sink
from glassgrad.uop import Ops, UOp
from glassgrad.uop.ops import PatternMatcher, UPat, graph_rewrite

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# ---- seed 003: The Tensor ----


def test_003_tensor_basic_operations(device):
    t = Tensor([1, 2, 3, 4])
    doubled = t * 2
    assert doubled.tolist() == [2, 4, 6, 8]
    result = t + 3 + 4
    assert result.tolist() == [8, 9, 10, 11]  # the seed's comment says [8, 10, 12, 14]; 1+3+4 is 8, 2+3+4 is 9


# ---- seed 003: The Devices ----


def test_003_default_device_is_settable():
    old = Device.DEFAULT
    try:
        Device.DEFAULT = "CPU"
        assert Device.DEFAULT == "CPU"
        Device.DEFAULT = "python"  # names are canonicalized
        assert Device.DEFAULT == "PYTHON"
        assert Tensor([1]).device == "PYTHON"
    finally:
        Device.DEFAULT = old


# ---- seed 003: Lazy Evaluation, The UOP, Realization ----


def test_003_a_new_tensor_is_a_lazy_copy_from_python():
    old = Device.DEFAULT
    Device.DEFAULT = "CPU"
    try:
        t = Tensor([1, 2, 3, 4])
        assert t.device == Device.DEFAULT and t.dtype == dtypes.int and t.shape == (4,)
        assert repr(t) == "<Tensor <UOp CPU (4,) int (Ops.COPY, None)> on CPU with grad None>"
        # UOp(Ops.COPY, dtypes.int, src=(UOp(Ops.BUFFER, arg=4, src=(UNIQUE, DEVICE 'PYTHON')), DEVICE 'CPU'))
        copy = t.uop
        assert copy.op is Ops.COPY and copy.dtype == dtypes.int and copy.arg is None
        buffer, target = copy.src
        assert buffer.op is Ops.BUFFER and buffer.arg == 4
        assert [s.op for s in buffer.src] == [Ops.UNIQUE, Ops.DEVICE] and buffer.src[1].arg == "PYTHON"
        assert target.op is Ops.DEVICE and target.arg == "CPU"
        text = str(copy)
        assert text.startswith("UOp(Ops.COPY, dtypes.int, arg=None, src=(\n  UOp(Ops.BUFFER, dtypes.int, arg=4, src=(")
        assert "UOp(Ops.DEVICE, dtypes.void, arg='PYTHON', src=())" in text

        t.realize()  # the COPY is replaced by a BUFFER on the CPU, with a new UNIQUE
        assert t.uop.op is Ops.BUFFER and t.uop.arg == 4
        assert t.uop.src[0].op is Ops.UNIQUE and t.uop.src[0].arg != buffer.src[0].arg
        assert t.uop.src[1].op is Ops.DEVICE and t.uop.src[1].arg == "CPU"
    finally:
        Device.DEFAULT = old


def test_003_operations_build_graphs_with_explicit_broadcasting(device):
    t = Tensor([1, 2, 3, 4]).realize()
    t_times_2 = t * 2
    # MUL(BUFFER, EXPAND((4,), RESHAPE((1,), CONST 2)))
    mul = t_times_2.uop
    assert mul.op is Ops.MUL and mul.src[0] is t.uop
    expand = mul.src[1]
    assert expand.op is Ops.EXPAND and expand.arg == (4,)
    assert expand.src[0].op is Ops.RESHAPE and expand.src[0].arg == (1,)
    assert expand.src[0].src[0].op is Ops.CONST and expand.src[0].src[0].arg == 2
    assert t_times_2.tolist() == [2, 4, 6, 8]


# ---- seed 003: Smart Deduplication ----


def test_003_identical_computations_are_one_uop(device):
    t = Tensor([1, 2, 3, 4]).realize()
    A = t * 4
    B = t * 4
    assert A is not B
    assert A.uop is B.uop
    A.realize()
    assert A.uop is B.uop  # both now point at the same realized buffer
    GlobalCounters.reset()
    assert B.tolist() == [4, 8, 12, 16]
    assert GlobalCounters.kernel_count == 0  # no computation needed


# ---- seed 003: Graph Optimization and Kernel Generation ----


def test_003_graph_has_two_adds_until_kernelize(device):
    t = Tensor([1, 2, 3, 4])
    t_plus_3_plus_4 = t + 3 + 4
    outer = t_plus_3_plus_4.uop
    assert outer.op is Ops.ADD and outer.src[0].op is Ops.ADD
    constants = sorted(u.arg for u in outer.toposort() if u.op is Ops.CONST)
    assert constants == [3, 4]


def test_003_kernelize_then_full_rewrite_folds_3_plus_4_into_7(device):
    t = Tensor([1, 2, 3, 4])
    t_plus_3_plus_4 = t + 3 + 4
    t_plus_3_plus_4.kernelize()
    assign = t_plus_3_plus_4.uop
    assert assign.op is Ops.ASSIGN and assign.src[0].op is Ops.BUFFER and assign.src[1].op is Ops.KERNEL
    kernel_ast = t_plus_3_plus_4.uop.src[1].arg.ast
    rewritten_ast = full_rewrite_to_sink(kernel_ast)
    constants = [u.arg for u in rewritten_ast.toposort() if u.op is Ops.CONST and u.dtype == dtypes.int]
    assert 7 in constants and 3 not in constants and 4 not in constants[1:]
    assert "UOp(Ops.CONST, dtypes.int, arg=7, src=())" in str(rewritten_ast)
    # SINK(STORE(INDEX(output), ADD(LOAD(INDEX(input)), CONST 7)))
    assert rewritten_ast.op is Ops.SINK and any(u.op is Ops.STORE for u in rewritten_ast.src)
    adds = [u for u in rewritten_ast.toposort() if u.op is Ops.ADD and u.dtype == dtypes.int and
            any(s.op is Ops.LOAD for s in u.src)]  # fmt: skip
    assert len(adds) == 1 and any(s.op is Ops.CONST and s.arg == 7 for s in adds[0].src)
    assert t_plus_3_plus_4.tolist() == [8, 9, 10, 11]


def _generated_code(tmp_path, **flags) -> str:
    code = textwrap.dedent("""
        from glassgrad import Tensor
        t = Tensor([1, 2, 3, 4], device="CPU")
        print("result", (t + 3 + 4).tolist())
    """)
    env = {k: v for k, v in os.environ.items() if k not in ("DEBUG", "NOOPT", "BEAM")}
    env.update(PYTHONPATH=REPO, NO_COLOR="1", XDG_CACHE_HOME=str(tmp_path), **{k: str(v) for k, v in flags.items()})
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "result [8, 9, 10, 11]" in done.stdout
    return done.stdout


def test_003_debug_3_prints_the_kernel_with_7_folded(tmp_path):
    out = _generated_code(tmp_path, DEBUG=3)
    assert "int* restrict data0" in out and "+7)" in out
    assert "+3)" not in out and "+4)" not in out


def test_003_noopt_shows_the_plain_loop(tmp_path):
    out = _generated_code(tmp_path, DEBUG=3, NOOPT=1)
    assert "void E_4(" in out and "for (int ridx0 = " in out and "ridx0++" in out  # one loop over the 4 elements
    assert "+7)" in out


def test_003_debug_2_prints_one_line_per_kernel(tmp_path):
    out = _generated_code(tmp_path, DEBUG=2)
    kernel_lines = [line for line in out.splitlines() if line.startswith("***")]
    assert len(kernel_lines) == 1 and "E_4" in kernel_lines[0] and "GFLOPS" in kernel_lines[0]


# ---- seed 003: Low-Level UOp Construction, Pattern Matching ----


def test_003_uops_are_interned():
    a = UOp(Ops.CONST, dtypes.int, arg=2)
    b = UOp(Ops.CONST, dtypes.int, arg=2)
    assert a is b
    a_plus_b = a + b
    assert str(a_plus_b) == ("UOp(Ops.ADD, dtypes.int, arg=None, src=(\n"
                             "  x0:=UOp(Ops.CONST, dtypes.int, arg=2, src=()),\n"
                             "   x0,))")  # fmt: skip


def test_003_pattern_matcher_folds_constants():
    a = UOp(Ops.CONST, dtypes.int, arg=2)
    a_plus_b = a + a
    simple_pm = PatternMatcher([
        (UPat(Ops.ADD, src=(UPat(Ops.CONST, name="c1"), UPat(Ops.CONST, name="c2"))),
         lambda c1, c2: UOp(Ops.CONST, dtype=c1.dtype, arg=c1.arg + c2.arg)),
    ])  # fmt: skip
    a_plus_b_simplified = graph_rewrite(a_plus_b, simple_pm)
    assert str(a_plus_b_simplified) == "UOp(Ops.CONST, dtypes.int, arg=4, src=())"
    simpler_pm = PatternMatcher([(UPat.cvar("c1") + UPat.cvar("c2"), lambda c1, c2: c1.const_like(c1.arg + c2.arg))])
    assert graph_rewrite(a_plus_b, simple_pm) is graph_rewrite(a_plus_b, simpler_pm)


# ---- seed 000: lazy evaluation and the computation graph ----


def test_000_operations_build_a_graph_and_run_when_read(device):
    x = Tensor([1.0, 2.0, 3.0])
    y = Tensor([4.0, 5.0, 6.0])
    z = x * y + x
    assert z.uop.op is Ops.ADD and z.uop.src[0].op is Ops.MUL  # ADD(MUL(x, y), x): nothing ran yet
    assert z.uop.src[0].src[0] is x.uop and z.uop.src[1] is x.uop
    assert z.numpy().tolist() == [5.0, 12.0, 21.0]
    assert (x * y).sum().item() == 32.0


def test_000_three_ops_fuse_into_one_kernel(device):
    x = Tensor([1, 2, 3]).realize()
    y = x + 1
    z = y * 2
    w = z + 3
    GlobalCounters.reset()
    result = w.numpy()
    assert result.tolist() == [7, 9, 11] and GlobalCounters.kernel_count == 1  # (((x + 1) * 2) + 3)


def test_000_relu_scale_sum_is_one_kernel(device):
    Tensor.manual_seed(0)
    x = Tensor.rand(100).realize()
    w = (x.relu() * 2).sum()
    GlobalCounters.reset()
    assert w.item() == pytest.approx(float((np.maximum(x.numpy(), 0) * 2).sum()), rel=1e-5)
    assert GlobalCounters.kernel_count == 1


def test_000_fused_elementwise_kernel(device):
    Tensor.manual_seed(0)
    x = Tensor.rand(50).realize()
    y = (x * 2 + 1).relu()
    GlobalCounters.reset()
    np.testing.assert_allclose(y.numpy(), np.maximum(x.numpy() * 2 + 1, 0), rtol=1e-6)
    assert GlobalCounters.kernel_count == 1


def test_000_graph_of_x_plus_2_times_3(device):
    x = Tensor([1.0])
    y = (x + 2) * 3
    assert y.uop.op is Ops.MUL and y.uop.src[0].op is Ops.ADD
    assert y.tolist() == [9.0]


def test_000_lazy_versus_eager(device):
    x = Tensor([1, 2, 3])
    y = x + 1
    z = y * 2
    assert z.numpy().tolist() == [4, 6, 8]


def test_000_in_place_assign(device):
    x = Tensor([1.0, 2.0, 3.0])
    x.realize()
    x.assign(x + 1)
    assert x.tolist() == [2.0, 3.0, 4.0]


# ---- seed 000: shapes, transpose without copying, ops ----


def test_000_transpose_moves_no_data(device):
    x = Tensor.rand(10, 20).realize()
    GlobalCounters.reset()
    y = x.T
    assert y.shape == (20, 10) and y.uop.op is Ops.PERMUTE and y.uop.src[0] is x.uop
    assert y.schedule() == [] and GlobalCounters.kernel_count == 0
    np.testing.assert_array_equal(y.numpy(), x.numpy().T)


def test_000_reshape_and_transpose(device):
    x = Tensor.rand(10, 20)
    y = x.reshape(20, 10)
    z = x.T  # permute((1, 0))
    assert y.shape == (20, 10) and z.shape == (20, 10)
    np.testing.assert_array_equal(y.numpy(), x.numpy().reshape(20, 10))
    np.testing.assert_array_equal(z.numpy(), x.numpy().T)
    np.testing.assert_array_equal(x.permute(1, 0).numpy(), z.numpy())


def test_000_ops_examples(device):
    x = Tensor([1.0, 2.0, 3.0])
    np.testing.assert_allclose(x.exp().numpy(), np.exp([1.0, 2.0, 3.0]), rtol=1e-6)
    x, y = Tensor([1, 2, 3]), Tensor([4, 5, 6])
    assert (x + y).tolist() == [5, 7, 9]
    x = Tensor([[1, 2], [3, 4]])
    assert x.sum(axis=0).tolist() == [4, 6]
    assert x.sum().item() == 10


def test_000_devices_run_the_same_ops():
    x_cpu = Tensor([1, 2, 3], device="CPU")
    x_python = Tensor([1, 2, 3], device="PYTHON")
    assert (x_cpu * 2).device == "CPU" and (x_python * 2).device == "PYTHON"
    assert (x_cpu * 2).tolist() == (x_python * 2).tolist() == [2, 4, 6]


# ---- the seeds' autograd examples (seed 000 chapters 1 and 3, seed 003 "Automatic Differentiation") ----


def test_000_gradient_of_x_cubed_is_3x_squared(device):
    x = Tensor([2.0], requires_grad=True)
    y = x * x * x
    y.backward()
    assert x.grad.numpy().tolist() == [12.0]


def test_000_gradient_of_x_plus_2_times_3_is_3(device):
    x = Tensor([1.0], requires_grad=True)
    y = (x + 2) * 3
    y.backward()
    assert x.grad.tolist() == [3.0]


def test_000_gradient_of_a_dot_product(device):
    x = Tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = Tensor([4.0, 5.0, 6.0], requires_grad=True)
    z = (x * y).sum()
    z.backward()
    assert x.grad.tolist() == [4.0, 5.0, 6.0]
    assert y.grad.tolist() == [1.0, 2.0, 3.0]


def test_003_gradient_of_a_quadratic(device):
    x = Tensor([2.0], requires_grad=True)
    y = x**2 + 3 * x + 1
    loss = y.sum()
    assert x.item() == 2.0
    assert y.item() == 11.0
    (grad,) = loss.gradient(x)
    assert grad.item() == 7.0


def test_003_chain_rule_through_log(device):
    x = Tensor([2.0], requires_grad=True)
    z = (x**2 + 1).log()
    loss = z.sum()
    assert abs(z.item() - 1.6094378232955933) < 1e-6  # log(5)
    (grad,) = loss.gradient(x)
    assert abs(grad.item() - 0.8) < 1e-6  # 2x / (x^2 + 1) at x = 2
