"""LOCAL and GROUP, the GPU's optimization actions: a block of threads along an output axis, and threads that share a
reduction loop and combine through shared memory.

Their checks and the CUDA source they render run everywhere (the CUDA renderer needs no GPU); running the kernels
against NumPy needs a GPU and skips without one.
"""

import re

import numpy as np
import pytest

from glassgrad import Context, Device, Tensor, dtypes
from glassgrad.codegen import get_program, kernel_name
from glassgrad.codegen.heuristics import GROUP_THREADS, _accesses, hand_coded_opts
from glassgrad.codegen.opt import Opt, main_reduce
from glassgrad.codegen.search import actions, valid
from glassgrad.engine.realize import buffer_of, run_schedule
from glassgrad.renderer.cuda import CUDARenderer
from helpers import CUDA_MISSING, needs_gpu

rng = np.random.default_rng(0)


MISSING = CUDA_MISSING
DEVICE = "CUDA" if MISSING is None else "CPU"  # where the inputs live: kernels are rendered for CUDA either way


def conv(x, w):
    if isinstance(x, np.ndarray):
        import torch

        return torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w), padding=1).numpy()
    return x.conv2d(w, padding=1)


def weight_gradient(x, g):
    """A 3x3 convolution's weight gradient: the sum over the batch and the image of input window times gradient."""
    if isinstance(x, np.ndarray):
        windows = np.lib.stride_tricks.sliding_window_view(x, (3, 3), axis=(2, 3))  # b, ci, y, x, ky, kx
        return np.einsum("bcyxij,boyx->ocij", windows, g)
    w = Tensor.zeros(g.shape[1], x.shape[1], 3, 3, device=x.device, requires_grad=True)
    (x.conv2d(w) * g).sum().backward()
    return w.grad


# (input shapes, glassgrad/NumPy function): reductions of every shape the heuristics meet, and elementwise kernels
KERNELS = {
    "row_sum": ([(24, 300)], lambda a: a.sum(axis=1)),
    "column_sum": ([(300, 24)], lambda a: a.sum(axis=0)),
    "sum_all_odd": ([(37, 61)], lambda a: a.sum()),
    "row_max": ([(12, 257)], lambda a: a.max(axis=1)),
    "matmul_odd": ([(33, 65), (65, 17)], lambda a, b: a @ b),
    "conv_3x3_pad1": ([(2, 3, 8, 8), (4, 3, 3, 3)], conv),
    "weight_gradient": ([(16, 3, 18, 18), (16, 5, 16, 16)], weight_gradient),
    "broadcast_add_mul": ([(16, 1), (1, 32)], lambda a, b: a * b + a),
}


def kernel_under_test(name: str, device: str = DEVICE):
    """The last kernel of the computation, with the kernels before it run, and NumPy's result."""
    shapes, fn = KERNELS[name]
    arrays = [(rng.standard_normal(s) * 2).astype(np.float32) for s in shapes]
    *before, item = fn(*[Tensor(a, device=device).realize() for a in arrays]).schedule()
    if device == "CUDA":
        run_schedule(before)
    return item, np.asarray(fn(*arrays), dtype=np.float32)


def thread_actions(item) -> list[Opt]:
    return [a for a in actions(item.ast, has_local=True) if a.op in ("LOCAL", "GROUP")]


# ---- everywhere: the checks, the source, the names, the heuristics ----


def test_thread_actions_need_a_renderer_with_blocks():
    item, _ = kernel_under_test("row_sum", "CPU")
    group, local = Opt("GROUP", 1, 32), Opt("LOCAL", 0, 8)
    assert not valid(item.ast, (group,)) and valid(item.ast, (group,), has_local=True)
    assert not valid(item.ast, (local,)) and valid(item.ast, (local,), has_local=True)
    assert not any(a.op in ("LOCAL", "GROUP") for a in actions(item.ast))
    assert {a.op for a in actions(item.ast, has_local=True)} >= {"LOCAL", "GROUP"}
    with pytest.raises(ValueError, match=r"\[GROUP\(1, 32\)\] need blocks of threads \(a GPU's\); CPU has none"):
        get_program(item.ast, Device["CPU"].renderer, (group,))


@pytest.mark.parametrize(
    "opts, message",
    [
        ((Opt("LOCAL", 0, 7),), r"LOCAL\(0, 7\) does not divide output axis 0, whose loop has 24 iterations left"),
        ((Opt("LOCAL", 3, 2),), r"LOCAL\(3, 2\): the output has no axis 3"),
        ((Opt("GROUP", 0, 4),), r"GROUP\(0, 4\): axis 0 is not a reduced axis"),
        ((Opt("GROUP", 1, 4), Opt("GROUP", 1, 8)), r"GROUP\(1, 8\): reduced axis 1 is already shared"),
        ((Opt("UNROLL", 1, 300), Opt("GROUP", 1, 2)), r"GROUP\(1, 2\) needs a loop of 2 or more iterations"),
        ((Opt("LOCAL", 0, 8), Opt("GROUP", 1, 256)), r"ask for 2048 threads in a block; a block holds at most 1024"),
    ],
)
def test_a_thread_action_that_cannot_apply_is_refused(opts, message):
    item, _ = kernel_under_test("row_sum", "CPU")
    assert not valid(item.ast, opts, has_local=True)
    with pytest.raises(ValueError, match=message):
        get_program(item.ast, CUDARenderer(), opts)


def test_a_group_need_not_divide_its_loop_but_an_unroll_under_it_must():
    item, _ = kernel_under_test("row_max", "CPU")  # 257 columns: prime
    assert valid(item.ast, (Opt("GROUP", 1, 32),), has_local=True)
    assert not valid(item.ast, (Opt("UNROLL", 1, 2), Opt("GROUP", 1, 32)), has_local=True)


def test_local_gives_neighbouring_outputs_to_neighbouring_threads():
    # rows of 1024 of a (20, 1030) buffer: two axes that don't merge into one
    x = Tensor(np.ones((20, 1030), np.float32), device="CPU").realize()[:, :1024]
    item = ((x + 1) * 2).schedule()[-1]
    spec = get_program(item.ast, CUDARenderer(), (Opt("LOCAL", 1, 64), Opt("UPCAST", 1, 4)))
    assert spec.local_size == (64,) and spec.global_size == (20 * 1024 // 256,)
    assert "int gidx = blockIdx.x;" in spec.src and "__shared__" not in spec.src and "gitem" not in spec.src
    assert 'extern "C" __global__ void __launch_bounds__(64) E_20_4_64_4(' in spec.src  # it launches, whatever
    # thread t computes t, t+64, t+128, t+192 of its block's 256 columns: each store is one coalesced line per warp
    assert re.search(r"\(ridx1\*256\)\+threadIdx.x\)", spec.src) and spec.src.count("*(data0+") == 4
    assert spec.name == "E_20_4_64_4" and spec.ops == 2 * 20 * 1024


def test_group_combines_partial_results_as_a_tree_in_shared_memory():
    x = Tensor(np.ones((20, 3000), np.float32), device="CPU").realize()
    spec = get_program(x.sum(axis=1).schedule()[-1].ast, CUDARenderer(), (Opt("GROUP", 1, 100),))
    assert spec.local_size == (100,) and spec.global_size == (20,)
    assert spec.src.count("__shared__ float part0[100];") == 1
    assert re.search(r"for \(int (ridx\d) = threadIdx.x; \1 < 3000; \1 \+= 100\) \{", spec.src)
    assert "for (int step = 64; step > 0; step >>= 1) {" in spec.src
    assert "if (threadIdx.x < step && threadIdx.x+step < 100)" in spec.src  # 100 threads: a tree over a ragged top
    assert "__syncthreads();" in spec.src and "if ((threadIdx.x<1)) *(data0+ridx0) = red0;" in spec.src
    assert spec.name == "r_20_30_100"


def test_local_and_group_split_the_thread_index_in_the_order_given():
    x = Tensor(np.ones((20, 3000), np.float32), device="CPU").realize()
    item = x.sum(axis=0).schedule()[-1]
    spec = get_program(item.ast, CUDARenderer(), (Opt("LOCAL", 1, 40), Opt("GROUP", 0, 4)))
    assert spec.local_size == (160,) and spec.global_size == (75,)
    assert "(threadIdx.x%40)" in spec.src and "ridx2 = (threadIdx.x/40); ridx2 < 20; ridx2 += 4" in spec.src
    assert "part0[threadIdx.x-(threadIdx.x/40)*40]" in spec.src  # each LOCAL position reads its own total
    swapped = get_program(item.ast, CUDARenderer(), (Opt("GROUP", 0, 4), Opt("LOCAL", 1, 40)))
    assert "ridx2 = (threadIdx.x%4); ridx2 < 20; ridx2 += 4" in swapped.src and "(threadIdx.x/4)" in swapped.src


def test_kernel_names_show_local_and_group_threads_in_their_colours(monkeypatch):
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setattr("sys.stdout.isatty", lambda: True)
    item, _ = kernel_under_test("matmul_odd", "CPU")
    opts = (Opt("LOCAL", 1, 17), Opt("GROUP", 2, 8), Opt("UPCAST", 0, 3))
    assert kernel_name(item.ast, opts) == "r_11_17_9_8_3"  # loops, local threads, each thread's reduce, group, lanes
    name = kernel_name(item.ast, opts, color=True)
    assert "\x1b[94m17\x1b[0m" in name and "\x1b[32m8\x1b[0m" in name  # LOCAL light blue, GROUP green (seed 003)


def _reduce_loop(ast, axis: int) -> int:
    return len(ast.src[0].src[1].arg.shape) + list(main_reduce(ast).arg[1]).index(axis)


def test_heuristics_group_a_weight_gradient_along_its_contiguous_axis_first():
    x, g = (
        Tensor(rng.standard_normal(s).astype(np.float32), device="CPU").realize() for s in KERNELS["weight_gradient"][0]
    )
    (item,) = [i for i in weight_gradient(x, g).schedule() if i.ast.op.name == "SINK" and main_reduce(i.ast)]
    opts = hand_coded_opts(item.ast, CUDARenderer.vector_lanes, has_local=True)
    groups = [o for o in opts if o.op == "GROUP"]
    accesses, _ = _accesses(item.ast)
    loads = [acc for acc in accesses if not acc.is_store]
    steps = {abs(acc.steps.get(_reduce_loop(item.ast, groups[0].axis), 0) or 0) for acc in loads}
    assert steps <= {0, 1} and 1 in steps, opts  # neighbouring threads read neighbouring addresses
    assert 2 <= len(groups) and 32 <= np.prod([o.amount for o in groups]) <= GROUP_THREADS
    assert not any(o.op == "UNROLL" and o.axis == groups[0].axis for o in opts)


def test_heuristics_group_a_whole_sum_and_leave_other_kernels_to_one_thread_each():
    def opts_of(t: Tensor) -> list[Opt]:
        return hand_coded_opts(t.schedule()[-1].ast, CUDARenderer.vector_lanes, has_local=True)

    x = Tensor(rng.random((20, 3000), dtype=np.float32), device="CPU").realize()
    # the whole sum is one axis of 60,000 (merge_axes.py); no UNROLL: neighbouring threads, neighbouring floats
    assert opts_of(x.sum()) == [Opt("GROUP", 0, GROUP_THREADS)]
    assert opts_of(x.max(axis=1)) == [Opt("GROUP", 1, GROUP_THREADS)]
    assert not any(o.op in ("LOCAL", "GROUP") for o in opts_of(x * 2 + 1))  # elementwise: a thread per element
    big = Tensor(rng.random((9000, 200), dtype=np.float32), device="CPU").realize()
    assert not any(o.op == "GROUP" for o in opts_of(big.sum(axis=1)))  # enough outputs to fill the GPU
    table = Tensor(rng.random((3000, 8), dtype=np.float32), device="CPU").realize()
    index = Tensor(np.array([5, 2999, 0], np.int32), device="CPU").realize()
    assert not any(o.op == "GROUP" for o in opts_of(table[index]))  # a gather's one-hot sum collapses into a load
    assert hand_coded_opts(x.sum().schedule()[-1].ast) == [Opt("UNROLL", 0, 8)]  # the CPU's choice is unchanged
    # a row sum of 768 half floats into 4096 rows (LayerNorm's statistics): 768 terms, though an UNROLL of 8 leaves 96
    rows = Tensor.empty(4096, 768, dtype=dtypes.half, device="CPU")
    assert Opt("GROUP", 1, GROUP_THREADS) in opts_of(rows.float().sum(axis=1))
    # many rows of 256 (attention's softmax at T=256): a warp a row, each lane one unrolled step of 8
    scores = Tensor.empty(4, 12, 256, 256, device="CPU")
    assert Opt("GROUP", 1, 32) in opts_of(scores.max(axis=-1))  # its axes merged: (12288, 256)


def test_a_candidate_that_fails_to_launch_is_timed_as_never_finishing(monkeypatch):
    import glassgrad.engine.beam as search

    item, _ = kernel_under_test("row_sum", "CPU")
    timer = search.Timer(item.ast, "CPU")

    def no_launch(*args, **kwargs):
        raise RuntimeError("CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES")

    monkeypatch.setattr(timer.device, "load", lambda name, src: no_launch)
    assert timer.seconds((), 1.0) == float("inf")


# ---- on a GPU: every action keeps every kernel's results ----


def run_cuda(item, opts) -> np.ndarray:
    dev = Device["CUDA"]
    spec = get_program(item.ast, dev.renderer, tuple(opts))
    program = dev.load(spec.name, spec.src)
    bufs = [buffer_of(b).ensure_allocated() for b in item.bufs]
    program(*(b.handle for b in bufs), global_size=spec.global_size, local_size=spec.local_size, wait=True)
    return np.frombuffer(bufs[0].as_bytes(), dtype=np.float32).copy()


def spread(items: list, n: int) -> list:
    return items if len(items) <= n else [items[i * len(items) // n] for i in range(n)]


@needs_gpu
@pytest.mark.parametrize("name", sorted(KERNELS))
def test_each_local_and_group_action_alone_and_combined_keeps_results(name):
    item, expected = kernel_under_test(name)
    singles = [(a,) for a in thread_actions(item) if valid(item.ast, (a,), True)]
    base = tuple(hand_coded_opts(item.ast, (), has_local=True))
    combos = [base] + spread([base + a for a in singles if valid(item.ast, base + a, True)], 4)
    combos += spread([a + b for a in singles for b in singles if valid(item.ast, a + b, True)], 6)
    combos += spread([(o,) + a for a in singles for o in actions(item.ast) if valid(item.ast, (o,) + a, True)], 4)
    for opts in spread(singles, 8) + combos:
        got = run_cuda(item, opts).reshape(expected.shape)
        # sums in another order: an output near zero among large ones differs by the large ones' rounding
        atol = 1e-5 * max(1.0, float(np.abs(expected).max()))
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=atol, err_msg=str(opts))


@needs_gpu
@pytest.mark.parametrize("shape", [(1,), (257,), (100_003,), (2, 70_000), (3, 5, 4099)])
def test_grouped_reductions_of_awkward_sizes_match_numpy(shape):
    data = (rng.standard_normal(shape) * 3).astype(np.float32)
    t = Tensor(data, device="CUDA")
    for axis in (None, -1, 0):
        np.testing.assert_allclose(t.sum(axis=axis).numpy(), data.sum(axis=axis), rtol=1e-4, atol=1e-3)
        np.testing.assert_array_equal(t.max(axis=axis).numpy(), data.max(axis=axis))


@needs_gpu
def test_debug_3_lists_the_group_on_the_gpu(capsys):
    x = Tensor(rng.random((32, 4096), dtype=np.float32), device="CUDA").realize()
    with Context(DEBUG=3):
        (x.sum(axis=1) + 0.25).realize()
    out = capsys.readouterr().out
    assert "optimizations: [GROUP(1, 256)]" in out and "__shared__" in out


@needs_gpu
def test_beam_on_the_gpu_offers_local_and_group_and_keeps_results(tmp_path, monkeypatch):
    import glassgrad.engine.beam as search

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    item, expected = kernel_under_test("column_sum")
    favourite = Opt("LOCAL", 1, 8)
    timed = []

    def fake_seconds(self, opts, best):
        timed.append(opts)
        return 1.0 if favourite in opts and len(opts) == 1 else 2.0

    monkeypatch.setattr(search.Timer, "seconds", fake_seconds)
    assert search.beam_search(item.ast, "CUDA", 2) == (favourite,)
    assert any(o.op == "GROUP" for opts in timed for o in opts)
    monkeypatch.undo()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "real"))
    chosen = search.beam_search(item.ast, "CUDA", 1)  # timed for real: whatever it picks computes the same
    np.testing.assert_allclose(run_cuda(item, chosen).reshape(expected.shape), expected, rtol=1e-4, atol=1e-4)
