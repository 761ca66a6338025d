"""Row reductions on the CPU: the heuristics read two rows side by side where the reduced axis is contiguous, results
match NumPy for every shape (0-size, 1-size, odd, non-contiguous, several dtypes) with 1, 2 and 3 threads, and the
thread pool runs every index of the outer loop exactly once, from several Python threads at once and in a forked
child too."""

import ctypes
import os
import signal
import tempfile
import threading

import numpy as np
import pytest

import glassgrad.runtime.ops_cpu as ops_cpu
from glassgrad import Device, Tensor
from glassgrad.codegen import get_program
from glassgrad.codegen.heuristics import INTERLEAVED_ROWS, hand_coded_opts
from glassgrad.codegen.opt import Opt
from glassgrad.runtime.cpu_threads import CThreads
from helpers import split_every_cpu_kernel

rng = np.random.default_rng(6)


pytestmark = pytest.mark.usefixtures("on_the_cpu")  # the CPU's own actions, whatever the default device


@pytest.fixture(params=[1, 2, 3])
def threads(request, monkeypatch):
    """Every kernel split over this many threads, however small."""
    split_every_cpu_kernel(monkeypatch, request.param)
    return request.param


def opts_of(t: Tensor) -> list[Opt]:
    return hand_coded_opts(t.schedule()[-1].ast, Device["CPU"].renderer.vector_lanes)


# ---- the heuristics' choice ----


def test_row_sum_reads_two_rows_side_by_side():
    x = Tensor(rng.random((4096, 4096), dtype=np.float32)).realize()
    assert opts_of(x.sum(axis=1)) == [Opt("UNROLL", 1, 16), Opt("UPCAST", 0, INTERLEAVED_ROWS)]


def test_rows_interleave_along_the_innermost_output_axis_of_any_row_reduction():
    x = Tensor(rng.random((6, 4, 64), dtype=np.float32)).realize().permute(1, 0, 2)  # two output axes that don't merge
    assert opts_of(x.max(axis=2)) == [Opt("UNROLL", 2, 16), Opt("UPCAST", 1, INTERLEAVED_ROWS)]
    assert opts_of(x.mean(axis=-1)) == [Opt("UNROLL", 2, 16), Opt("UPCAST", 1, INTERLEAVED_ROWS)]


@pytest.mark.parametrize("shape", [(7, 64), (1, 64), (3, 5, 64)])
def test_an_odd_or_single_row_count_is_not_interleaved(shape):
    x = Tensor(rng.random(shape, dtype=np.float32)).realize()
    assert opts_of(x.sum(axis=-1)) == [Opt("UNROLL", 1, 16)]  # (3, 5) rows are one axis of 15 (merge_axes.py)


def test_column_sums_and_whole_sums_keep_their_opts():
    x = Tensor(rng.random((64, 48), dtype=np.float32)).realize()
    assert opts_of(x.sum(axis=0)) == [Opt("UPCAST", 1, 16)]  # lanes along the output: no rows to interleave
    assert opts_of(x.sum()) == [Opt("UNROLL", 0, 16)]  # one output: the 64 x 48 summed as one axis of 3072


# ---- results, every shape, 1-3 threads ----

SHAPES = [(0, 64), (64, 0), (1, 1), (1, 64), (2, 16), (7, 33), (10, 48), (33, 130), (256, 1024), (2, 3, 5, 80)]


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_row_sum_matches_numpy(shape, threads):
    x = rng.standard_normal(shape).astype(np.float32)
    got = Tensor(x).sum(axis=-1).numpy()
    np.testing.assert_allclose(got, x.sum(axis=-1, dtype=np.float64), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("dtype", [np.int32, np.float64, np.float16, np.uint8])
def test_row_reductions_of_other_dtypes(dtype, threads):
    x = (rng.random((10, 96)) * 20).astype(dtype)
    t = Tensor(x)
    assert np.array_equal(t.max(axis=1).numpy(), x.max(axis=1))
    if dtype in (np.int32, np.uint8):  # integer sums are exact
        assert np.array_equal(t.sum(axis=1).numpy().astype(np.int64), x.astype(np.int64).sum(axis=1))
    else:
        np.testing.assert_allclose(t.sum(axis=1).numpy(), x.sum(axis=1, dtype=np.float64), rtol=2e-3)


def test_non_contiguous_rows_match_numpy(threads):
    x = rng.standard_normal((48, 40)).astype(np.float32)
    t = Tensor(x)
    np.testing.assert_allclose(t.T.sum(axis=1).numpy(), x.T.sum(axis=1), rtol=1e-5, atol=1e-5)  # rows of a transpose
    np.testing.assert_allclose(t[::2, 1::3].sum(axis=1).numpy(), x[::2, 1::3].sum(axis=1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(t.expand(1, 48, 40).sum(axis=2).numpy()[0], x.sum(axis=1), rtol=1e-5, atol=1e-5)


def test_softmax_rows_match_numpy(threads):
    x = rng.standard_normal((6, 64)).astype(np.float32)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(Tensor(x).softmax(axis=1).numpy(), e / e.sum(axis=1, keepdims=True), rtol=1e-5)


def test_threads_do_not_change_a_row_sum(monkeypatch):
    x = rng.standard_normal((66, 256)).astype(np.float32)
    monkeypatch.setattr(ops_cpu, "THREADING_THRESHOLD_S", -1.0)
    results = []
    for n in (1, 2, 3):
        monkeypatch.setattr(ops_cpu, "THREADS", n)
        results.append(Tensor(x).sum(axis=1).numpy())
    assert all(np.array_equal(results[0], r) for r in results[1:])


def test_a_small_kernel_whose_first_run_was_slow_goes_back_to_one_core(monkeypatch):
    """A kernel's first run can be slow for reasons of its own (cold caches, fresh pages), which sends it to the pool;
    a threaded run under a quarter of THREADING_THRESHOLD_S shows it is small: the next run is on one core again."""
    from glassgrad.engine import realize as engine

    monkeypatch.setattr(ops_cpu, "THREADS", 2)
    # far above this kernel's time however busy the machine (0.02 s was not, under a 14-process test run: a threaded
    # run then took over its quarter)
    monkeypatch.setattr(ops_cpu, "THREADING_THRESHOLD_S", 1.0)
    engine._kernels.clear()  # this test's kernel is then the only one
    x = Tensor(rng.standard_normal((8, 16)).astype(np.float32)).realize()
    expected = x.numpy().sum(axis=1)
    np.testing.assert_allclose(x.sum(axis=1).numpy(), expected, rtol=1e-5)
    (program,) = [k.program for k in engine._kernels.values() if k.spec.name.startswith("r_") and k.spec.global_size]
    program.single_thread_seconds = 10.0  # as if its first run had taken ten seconds
    np.testing.assert_allclose(x.sum(axis=1).numpy(), expected, rtol=1e-5)  # on the pool, in microseconds
    assert program.single_thread_seconds == 0.0
    np.testing.assert_allclose(x.sum(axis=1).numpy(), expected, rtol=1e-5)  # on one core, timed again
    assert 0.0 < program.single_thread_seconds < ops_cpu.THREADING_THRESHOLD_S


# ---- the thread pool ----

COUNT_SOURCE = """
void count_range(void** args, long long start, long long end) {
  int* seen = args[0];
  for (int i = start; i < end; i++) seen[i] += 1;
}
"""


@pytest.fixture(scope="module")
def count_range():
    """A stand-in kernel in C: adds one to seen[i] for each index i of its share."""
    with tempfile.NamedTemporaryFile(suffix=".so", delete=False) as f:
        f.write(ops_cpu.CCompiler().compile_cached(COUNT_SOURCE))
    lib = ctypes.CDLL(f.name)
    os.unlink(f.name)
    return ctypes.cast(lib.count_range, ctypes.c_void_p).value, lib


def pool() -> CThreads:
    if ops_cpu.CPUProgram.threads is None:
        ops_cpu.CPUProgram.threads = CThreads(ops_cpu.CCompiler())
    return ops_cpu.CPUProgram.threads


@pytest.mark.parametrize("size", [1, 2, 3, 7, 100, 2048])
@pytest.mark.parametrize("n", [1, 2, 3, 5])
def test_the_pool_runs_every_index_once(count_range, size, n):
    seen = np.zeros(size, dtype=np.int32)
    args = (ctypes.c_void_p * 1)(seen.ctypes.data)
    for _ in range(3):  # the workers started by the first run take the next ones
        pool().run(count_range[0], args, size, n)
    assert np.array_equal(seen, np.full(size, 3))


def test_python_threads_running_kernels_at_once_get_their_own_results(count_range):
    arrays = [np.zeros(999, dtype=np.int32) for _ in range(4)]

    def work(seen):
        args = (ctypes.c_void_p * 1)(seen.ctypes.data)
        for _ in range(50):
            pool().run(count_range[0], args, seen.size, 2)  # a call while another runs takes its loop alone

    threads = [threading.Thread(target=work, args=(a,)) for a in arrays]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(np.array_equal(a, np.full(999, 50)) for a in arrays)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork is POSIX")
def test_a_forked_child_starts_its_own_workers(monkeypatch):
    monkeypatch.setattr(ops_cpu, "THREADS", 2)
    monkeypatch.setattr(ops_cpu, "THREADING_THRESHOLD_S", -1.0)
    x = rng.standard_normal((64, 256)).astype(np.float32)
    expected = Tensor(x).sum(axis=1).numpy()  # the parent's workers have started
    pid = os.fork()
    if pid == 0:  # the child: exit code 0 only if its threaded kernel ran and agreed
        ok = False  # an error in the child must end it too, not let it run the rest of the suite
        signal.alarm(60)  # nor may a pool that hangs after fork hang the suite
        try:
            ok = np.array_equal(Tensor(x).sum(axis=1).numpy(), expected)
        finally:
            os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_cpu_kernels_with_an_outer_loop_have_a_range_entry():
    x = Tensor(rng.random((8, 64), dtype=np.float32)).realize()
    item = x.sum(axis=1).schedule()[-1]
    src = get_program(item.ast, Device["CPU"].renderer).src
    name = get_program(item.ast, Device["CPU"].renderer).name
    entry = (
        f"void {name}_range(void** args, long long start, long long end) {{ {name}(args[0], args[1], start, end); }}"
    )
    assert entry in src
