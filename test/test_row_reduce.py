"""Row reductions on the CPU: the heuristics read two rows side by side where the reduced axis is contiguous, results
match NumPy for every shape (0-size, 1-size, odd, non-contiguous, several dtypes) with 1, 2 and 3 threads, and the
thread split hands out every index of the outer loop exactly once."""

import threading

import numpy as np
import pytest

import glassgrad.runtime.ops_cpu as ops_cpu
from glassgrad import Device, Tensor
from glassgrad.codegen.heuristics import INTERLEAVED_ROWS, hand_coded_opts
from glassgrad.codegen.opt import Opt

rng = np.random.default_rng(6)


@pytest.fixture(autouse=True)
def on_the_cpu():
    """These are the CPU's heuristics and threads: run them there whatever the default device is."""
    old = Device.DEFAULT
    Device.DEFAULT = "CPU"
    yield
    Device.DEFAULT = old


@pytest.fixture(params=[1, 2, 3])
def threads(request, monkeypatch):
    """Every kernel split over this many threads, however small."""
    monkeypatch.setattr(ops_cpu, "THREADS", request.param)
    monkeypatch.setattr(ops_cpu, "THREADING_THRESHOLD_S", -1.0)
    return request.param


def opts_of(t: Tensor) -> list[Opt]:
    return hand_coded_opts(t.schedule()[-1].ast, Device["CPU"].renderer.vector_lanes)


# ---- the heuristics' choice ----


def test_row_sum_reads_two_rows_side_by_side():
    x = Tensor(rng.random((4096, 4096), dtype=np.float32)).realize()
    assert opts_of(x.sum(axis=1)) == [Opt("UNROLL", 1, 16), Opt("UPCAST", 0, INTERLEAVED_ROWS)]


def test_rows_interleave_along_the_innermost_output_axis_of_any_row_reduction():
    x = Tensor(rng.random((4, 6, 64), dtype=np.float32)).realize()
    assert opts_of(x.max(axis=2)) == [Opt("UNROLL", 2, 16), Opt("UPCAST", 1, INTERLEAVED_ROWS)]
    assert opts_of(x.mean(axis=-1)) == [Opt("UNROLL", 2, 16), Opt("UPCAST", 1, INTERLEAVED_ROWS)]


@pytest.mark.parametrize("shape", [(7, 64), (1, 64), (3, 5, 64)])
def test_an_odd_or_single_row_count_is_not_interleaved(shape):
    x = Tensor(rng.random(shape, dtype=np.float32)).realize()
    assert opts_of(x.sum(axis=-1)) == [Opt("UNROLL", len(shape) - 1, 16)]


def test_column_sums_and_whole_sums_keep_their_opts():
    x = Tensor(rng.random((64, 48), dtype=np.float32)).realize()
    assert opts_of(x.sum(axis=0)) == [Opt("UPCAST", 1, 16)]  # lanes along the output: no rows to interleave
    assert opts_of(x.sum()) == [Opt("UNROLL", 1, 16)]  # one output


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


# ---- the thread split ----


class Recorder:
    """Stands in for a kernel: records each (start, end) it is called with."""

    def __init__(self):
        self.calls: list[tuple[int, int]] = []
        self.lock = threading.Lock()

    def __call__(self, start, end):
        with self.lock:
            self.calls.append((start.value, end.value))


@pytest.mark.parametrize("size", [1, 2, 3, 7, 100, 2048])
def test_the_split_runs_every_index_once(size, threads):
    kernel = Recorder()
    ops_cpu._run_split(kernel, [], size)
    ranges = sorted(kernel.calls)
    assert all(s < e for s, e in ranges)
    assert [i for s, e in ranges for i in range(s, e)] == list(range(size))

