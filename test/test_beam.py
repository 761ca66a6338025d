"""BEAM=N: a search over optimization actions timed on the device, whose choice is cached on disk."""

import numpy as np
import pytest

import glassgrad.engine.beam as search
from glassgrad import Context, Device, Tensor
from glassgrad.codegen import get_program
from glassgrad.engine import realize as engine


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    """An empty cache folder (beam choices and compiled kernels) and a count of candidates timed."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    timed = []
    original = search.Timer.seconds

    def counting(self, opts, best):
        timed.append(opts)
        return original(self, opts, best)

    monkeypatch.setattr(search.Timer, "seconds", counting)
    return timed


def small_kernel(rows=12, cols=64):
    x = np.random.default_rng(0).random((rows, cols), dtype=np.float32)
    t = Tensor(x).realize()
    return t.sum(axis=1).schedule()[-1], x


def test_search_times_candidates_and_a_second_search_reads_the_cache(fresh_cache):
    item, _ = small_kernel()
    chosen = search.beam_search(item.ast, "CPU", 2)
    first = len(fresh_cache)
    assert first > 5 and search.valid(item.ast, chosen)
    assert search.beam_search(item.ast, "CPU", 2) == chosen and len(fresh_cache) == first  # nothing timed again
    assert search.cached_opts(item.ast, "CPU", 2) == chosen and search.cached_opts(item.ast, "CPU", 3) is None


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int32, np.bool_])
def test_scratch_buffers_hold_ones_not_untouched_zero_pages(dtype):
    # a kernel timed on memory never written reads one shared page of zeros: memory-bound candidates look alike
    t = Tensor(np.zeros((4, 8), dtype=dtype)).realize()
    item = (t + t).schedule()[-1]
    timer = search.Timer(item.ast, "CPU")
    for buf in timer.bufs:
        values = np.frombuffer(buf.as_bytes(), dtype=dtype)
        assert values.size == buf.size and (values == 1).all()


def test_changed_heuristics_search_again(fresh_cache, monkeypatch):
    item, _ = small_kernel()
    chosen = search.beam_search(item.ast, "CPU", 2)
    assert search.cached_opts(item.ast, "CPU", 2) == chosen
    # the search starts from the heuristics' choice: a winner found from another start is not reused
    monkeypatch.setattr(search, "_heuristic_opts", lambda ast, device: ())
    assert search.cached_opts(item.ast, "CPU", 2) is None
    first = len(fresh_cache)
    search.beam_search(item.ast, "CPU", 2)
    assert len(fresh_cache) > first


def test_changed_code_searches_again(fresh_cache, monkeypatch):
    # an Opt names an action or a tile configuration by its place in the code's lists: another source, another entry
    item, _ = small_kernel()
    chosen = search.beam_search(item.ast, "CPU", 2)
    assert search.cached_opts(item.ast, "CPU", 2) == chosen
    monkeypatch.setattr(search, "source_digest", lambda: "another source")
    assert search.cached_opts(item.ast, "CPU", 2) is None


def test_beam_realize_gives_the_right_answer_and_a_second_run_does_not_search(fresh_cache):
    _, x = small_kernel(10, 48)

    def run():
        engine._kernels.clear()  # a new process: nothing compiled yet
        with Context(BEAM=2):
            return Tensor(x).realize().sum(axis=1).numpy()

    np.testing.assert_allclose(run(), x.sum(axis=1), rtol=1e-5)
    searched = len(fresh_cache)
    np.testing.assert_allclose(run(), x.sum(axis=1), rtol=1e-5)
    assert searched > 0 and len(fresh_cache) == searched
    engine._kernels.clear()


def test_the_chosen_opts_are_the_fastest_timed(fresh_cache, monkeypatch):
    """With a fake clock that favours one action, the search returns it."""
    item, _ = small_kernel()
    favourite = search.Opt("UNROLL", 1, 4)

    def fake_seconds(self, opts, best):
        fresh_cache.append(opts)
        return 1.0 if favourite in opts and len(opts) == 1 else 2.0

    monkeypatch.setattr(search.Timer, "seconds", fake_seconds)
    assert search.beam_search(item.ast, "CPU", 2) == (favourite,)


def test_a_candidate_that_fails_to_compile_is_not_chosen(fresh_cache, monkeypatch):
    item, _ = small_kernel()
    real = get_program

    def broken(ast, renderer, opts=None):
        if opts and opts[0].op == "UNROLL":
            raise RuntimeError("compiler error")
        return real(ast, renderer, opts)

    monkeypatch.setattr(search, "get_program", broken)
    chosen = search.beam_search(item.ast, "CPU", 1)
    assert not chosen or chosen[0].op != "UNROLL"
    program = real(item.ast, Device["CPU"].renderer, chosen)
    assert program.opts == chosen
