"""Optimization actions (UPCAST, UNROLL, TILE), each alone and combined, keep every kernel's results, with 1 thread and
with several; kernel names and DEBUG=3 show the actions; the vectorizer and the C renderer's vector forms."""

import numpy as np
import pytest
import torch

import glassgrad.runtime.ops_cpu as ops_cpu
from glassgrad import Context, Device, Tensor, dtypes
from glassgrad.codegen import get_program, kernel_name
from glassgrad.codegen.heuristics import hand_coded_opts
from glassgrad.codegen.opt import Opt
from glassgrad.codegen.search import actions, valid
from glassgrad.engine.realize import buffer_of, run_schedule
from glassgrad.uop import Ops

rng = np.random.default_rng(0)


pytestmark = pytest.mark.usefixtures("on_the_cpu")  # the CPU's own actions, whatever the default device


def inputs(*shapes, dtype=np.float32):
    arrays = [(rng.standard_normal(s) * 3).astype(dtype) for s in shapes]
    return arrays, [Tensor(a).realize() for a in arrays]


# (name, input shapes, glassgrad/NumPy function): matmuls, a conv, reductions and broadcast elementwise kernels
KERNELS = {
    "matmul_64x48x80": ([(64, 48), (48, 80)], lambda a, b: a @ b),
    "matmul_odd_7x13x5": ([(7, 13), (13, 5)], lambda a, b: a @ b),
    "matmul_transposed": ([(32, 16), (32, 24)], lambda a, b: a.T @ b),
    "batched_matmul": ([(2, 8, 12), (2, 12, 16)], lambda a, b: a @ b),
    "packed_matmul_64x130x2048": ([(64, 130), (130, 2048)], lambda a, b: a @ b),  # B read from panels (pack.py)
    "row_sum": ([(24, 64)], lambda a: a.sum(axis=1)),
    "column_sum": ([(24, 64)], lambda a: a.sum(axis=0)),
    "row_max": ([(12, 48)], lambda a: a.max(axis=1)),
    "sum_all": ([(8, 32)], lambda a: a.sum()),
    "broadcast_add_mul": ([(16, 1), (1, 32)], lambda a, b: a * b + a),
    "elementwise_exp_where": ([(4, 48)], lambda a: exp(a * 0.5) * (a > 0)),
    "transposed_copy": ([(16, 32)], lambda a: a.T * 2),
    "softmax_like": ([(8, 32)], lambda a: exp(a - row_max(a)).sum(axis=1)),
}


def exp(x):
    return np.exp(x) if isinstance(x, np.ndarray) else x.exp()


def row_max(x):
    return x.max(axis=1, keepdims=True) if isinstance(x, np.ndarray) else x.max(axis=1, keepdim=True)


def conv(x, w):
    if isinstance(x, np.ndarray):
        return torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w), padding=1).numpy()
    return x.conv2d(w, padding=1)


KERNELS["conv_3x3_pad1"] = ([(2, 3, 8, 8), (4, 3, 3, 3)], conv)


def close(got, expected, opts):
    """Equal up to float32 rounding of sums as long as the packed matmul's (130 products of values up to ~100)."""
    np.testing.assert_allclose(got.reshape(expected.shape), expected, rtol=1e-4, atol=3e-4, err_msg=str(opts))


def kernel_under_test(name):
    """The last kernel of the computation (the interesting one), its buffers, and NumPy's result."""
    shapes, fn = KERNELS[name]
    arrays, tensors = inputs(*shapes)
    *before, item = fn(*tensors).schedule()
    run_schedule(before)  # the kernels that compute its inputs
    return item, np.asarray(fn(*arrays), dtype=np.float32)


def run(item, opts, threads: int, device: str = "CPU") -> np.ndarray:
    """Run the kernel with exactly these opts, split over `threads` threads; its output as a NumPy array."""
    dev = Device[device]
    spec = get_program(item.ast, dev.renderer, tuple(opts))
    program = dev.load(spec.name, spec.src)
    bufs = [buffer_of(b).ensure_allocated() for b in item.bufs]
    if device == "PYTHON":
        program(*(b.handle for b in bufs))
    else:
        old = ops_cpu.THREADS, ops_cpu.THREADING_THRESHOLD_S
        ops_cpu.THREADS, ops_cpu.THREADING_THRESHOLD_S = threads, -1.0  # split however small
        try:
            program(*(b.handle for b in bufs), global_size=spec.global_size)
        finally:
            ops_cpu.THREADS, ops_cpu.THREADING_THRESHOLD_S = old
    out = bufs[0]
    return np.frombuffer(out.as_bytes(), dtype=np.float32).copy()


def spread(items: list, n: int) -> list:
    """n items picked evenly from the list (all of them when it is short): each kind of action, few compiles."""
    return items if len(items) <= n else [items[i * len(items) // n] for i in range(n)]


def single_actions(item, n: int = 14):
    return spread([(a,) for a in actions(item.ast) if valid(item.ast, (a,))], n)


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_every_single_action_keeps_results_with_one_thread_and_with_four(name):
    item, expected = kernel_under_test(name)
    candidates = single_actions(item)
    assert candidates, "no action applies"
    for opts in [(), *candidates]:
        one = run(item, opts, threads=1)
        close(one, expected, opts)
        assert np.array_equal(one, run(item, opts, threads=4), equal_nan=True), f"threads change {opts}"


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_combined_actions_keep_results(name):
    """The heuristics' choice, and it extended by each valid second action (register blocks, tiles, unrolls)."""
    item, expected = kernel_under_test(name)
    base = tuple(hand_coded_opts(item.ast, Device["CPU"].renderer.vector_lanes))
    combos = [base] + spread([base + (a,) for a in actions(item.ast) if valid(item.ast, base + (a,))], 5)
    combos += spread([(a, b) for (a,) in single_actions(item) for b in actions(item.ast) if valid(item.ast, (a, b))], 5)
    for opts in combos:
        one = run(item, opts, threads=1)
        close(one, expected, opts)
        assert np.array_equal(one, run(item, opts, threads=3), equal_nan=True), f"threads change {opts}"


@pytest.mark.parametrize("name", ["matmul_odd_7x13x5", "row_sum", "broadcast_add_mul", "conv_3x3_pad1"])
def test_actions_on_the_python_device_run_as_scalar_lanes(name):
    shapes, fn = KERNELS[name]
    arrays = [(rng.standard_normal(s)).astype(np.float32) for s in shapes]
    tensors = [Tensor(a, device="PYTHON").realize() for a in arrays]
    *before, item = fn(*tensors).schedule()
    run_schedule(before)
    expected = np.asarray(fn(*arrays), dtype=np.float32)
    for opts in [(), *single_actions(item)[:8]]:
        got = run(item, opts, threads=1, device="PYTHON")
        np.testing.assert_allclose(got.reshape(expected.shape), expected, rtol=1e-4, atol=1e-4, err_msg=str(opts))


def test_an_action_that_does_not_divide_its_axis_is_refused():
    item, _ = kernel_under_test("matmul_64x48x80")
    with pytest.raises(ValueError, match="does not divide"):
        get_program(item.ast, Device["CPU"].renderer, (Opt("UPCAST", 0, 6),))
    with pytest.raises(ValueError, match="does not divide"):
        get_program(item.ast, Device["CPU"].renderer, (Opt("UNROLL", 2, 5),))
    assert not valid(item.ast, (Opt("UPCAST", 0, 6),)) and valid(item.ast, (Opt("UPCAST", 0, 8),))


# ---- what the actions produce ----


def test_matmul_heuristics_build_a_register_block_of_vector_fmas():
    a, b = Tensor(rng.random((256, 256), dtype=np.float32)).realize(), Tensor(rng.random((256, 256), dtype=np.float32))
    item = (a @ b.realize()).schedule()[-1]
    opts = hand_coded_opts(item.ast, Device["CPU"].renderer.vector_lanes)
    assert opts[0] == Opt("UPCAST", 1, 16)  # lanes along the output's contiguous axis: one 64-byte vector
    spec = get_program(item.ast, Device["CPU"].renderer, tuple(opts))
    assert "gg_floatx16_fma(" in spec.src and "*(gg_floatx16_u*)(data2+" in spec.src  # vector loads of B, fused
    accumulators = [u for u in spec.program if u.op is Ops.DEFINE_ACC]
    assert 8 <= len(accumulators) <= 16 and all(u.dtype == dtypes.float32.vec(16) for u in accumulators)


def test_row_sum_accumulates_in_a_vector_and_combines_lanes_after_the_loop():
    x = rng.random((64, 256), dtype=np.float32)
    item = Tensor(x).realize().sum(axis=1).schedule()[-1]
    opts = hand_coded_opts(item.ast, Device["CPU"].renderer.vector_lanes)
    assert opts == [Opt("UNROLL", 1, 16), Opt("UPCAST", 0, 2)]  # and two rows side by side (heuristics)
    program = get_program(item.ast, Device["CPU"].renderer, tuple(opts)).program
    assert [u.dtype.count for u in program if u.op is Ops.DEFINE_ACC] == [16, 16]
    assert sum(u.op is Ops.GEP for u in program) == 32


def test_transposed_input_is_gathered_lane_by_lane():
    item, expected = kernel_under_test("transposed_copy")
    spec = get_program(item.ast, Device["CPU"].renderer, (Opt("UPCAST", 1, 8),))
    assert any(u.op is Ops.VECTORIZE and u.dtype.count == 8 and len(set(u.src)) == 8 for u in spec.program)
    np.testing.assert_allclose(run(item, (Opt("UPCAST", 1, 8),), 1).reshape(expected.shape), expected, rtol=1e-6)


@pytest.mark.parametrize("dtype", [np.int32, np.float64, np.uint8, np.float16])
def test_vector_lanes_of_other_dtypes(dtype):
    x = (rng.random((8, 32)) * 50).astype(dtype)
    t = Tensor(x).realize()
    got = (t * 3 + t).numpy()
    np.testing.assert_allclose(got, x * 3 + x, rtol=1e-3)
    b = (Tensor(x) > 10).realize()
    assert np.array_equal(b.where(t, t * 2).numpy(), np.where(x > 10, x, x * 2))


def test_nan_and_infinity_survive_vector_kernels():
    x = np.array([np.nan, np.inf, -np.inf, 1.0] * 8, dtype=np.float32).reshape(2, 16)
    t = Tensor(x).realize()
    np.testing.assert_array_equal((t * 2 + 1).numpy(), x * 2 + 1)
    np.testing.assert_array_equal(t.max(axis=1).numpy(), np.array([np.nan, np.nan], dtype=np.float32))
    np.testing.assert_array_equal(t.sum(axis=1).numpy(), x.sum(axis=1))


# ---- names ----


def test_kernel_name_shows_loops_reduces_and_lanes():
    item, _ = kernel_under_test("matmul_64x48x80")
    ast = item.ast
    assert kernel_name(ast) == "r_64_80_48"
    opts = (Opt("UPCAST", 1, 16), Opt("UPCAST", 0, 8), Opt("TILE", 0, 4), Opt("UNROLL", 2, 4))
    assert kernel_name(ast, opts) == "r_2_4_5_12_16_8_4"  # tile, loops, reduce, then upcast and unroll lanes


def test_kernel_name_colours_each_kind(monkeypatch):
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setattr("sys.stdout.isatty", lambda: True)
    item, _ = kernel_under_test("matmul_64x48x80")
    name = kernel_name(item.ast, (Opt("UPCAST", 1, 16), Opt("UNROLL", 2, 4)), color=True)
    assert "\x1b[34m64\x1b[0m" in name and "\x1b[31m12\x1b[0m" in name  # loop blue, reduce red
    assert "\x1b[33m16\x1b[0m" in name and "\x1b[35m4\x1b[0m" in name  # upcast yellow, unroll magenta


def test_debug_3_lists_the_optimizations(capsys):
    x = Tensor(rng.random((32, 64), dtype=np.float32)).realize()
    with Context(DEBUG=3):
        (x.sum(axis=1) + 0.25).realize()
    out = capsys.readouterr().out
    assert "optimizations: [UNROLL(1, 16), UPCAST(0, 2)]" in out and "gg_floatx16" in out


def test_noopt_gives_plain_loops():
    x = Tensor(rng.random((32, 64), dtype=np.float32)).realize()
    item = x.sum(axis=1).schedule()[-1]
    with Context(NOOPT=1):
        spec = get_program(item.ast, Device["CPU"].renderer)
    assert spec.opts == () and "gg_" not in spec.src and spec.name == "r_32_64"


@pytest.mark.parametrize("dtype", [np.int32, np.int8, np.uint8, np.float32])
def test_vector_max_of_each_dtype_starts_from_its_minimum(dtype):
    info = np.iinfo(dtype) if np.issubdtype(dtype, np.integer) else np.finfo(dtype)
    x = np.full((4, 32), info.min, dtype=dtype)
    x[1, 5] = info.min + 1
    got = Tensor(x).realize().max(axis=1).numpy()
    np.testing.assert_array_equal(got, x.max(axis=1))


def test_where_on_a_scalar_condition_in_a_vector_loop():
    """GCC 12's SLP pass once turned this lane-by-lane select into lanes 1..3 = 0 (the momentum update of SGD)."""
    a, b = rng.random((5, 4), dtype=np.float32), rng.random((5, 4), dtype=np.float32)
    for flag in (1, 2):
        step = Tensor([flag], dtype=dtypes.int32).realize()
        got = (step == 1).where(Tensor(a), Tensor(b) * 0.9 + Tensor(a)).numpy()
        np.testing.assert_allclose(got, a if flag == 1 else b * np.float32(0.9) + a, rtol=1e-6)
