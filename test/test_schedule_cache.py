"""The schedule cache: graphs that differ only in their buffers are kernelized once; answers are renamed right."""

import numpy as np

import glassgrad.schedule.cache as cache
from glassgrad import Tensor
from glassgrad.dtype import dtypes
from glassgrad.uop.ops import Ops, UOp


def graph(a: Tensor, b: Tensor) -> UOp:
    return ((a + b) * 2).sum(axis=0).uop


def test_graphs_that_differ_only_in_buffers_normalize_alike():
    rng = np.random.default_rng(0)
    a, b, c = (Tensor(rng.standard_normal((4, 3)).astype(np.float32)).realize() for _ in range(3))
    one, _ = cache.normalize(graph(a, b))
    two, _ = cache.normalize(graph(a, c))
    same_buffer_twice, _ = cache.normalize(graph(a, a))
    assert one[graph(a, b)] is two[graph(a, c)]
    assert same_buffer_twice[graph(a, a)] is not one[graph(a, b)]  # reading one buffer twice is another shape
    assert cache.normalize((a * b).uop)[0][(a * b).uop] is not one[graph(a, b)]


def test_shape_keys_tell_graphs_apart_as_normalize_does():
    """Equal keys where only the buffers differ; another key where one buffer is read twice, or an op differs."""
    rng = np.random.default_rng(3)
    a, b, c = (Tensor(rng.standard_normal((4, 3)).astype(np.float32)).realize() for _ in range(3))

    def key(root: UOp) -> tuple:
        return cache.shape_key(root.toposort())

    assert key(graph(a, b)) == key(graph(a, c)) == key(graph(c, b))
    assert key(graph(a, a)) != key(graph(a, b))
    assert key((a * b).uop) != key((a + b).uop) and key((a * 2).uop) != key((a * 3).uop)
    assert key(a.uop.cast(dtypes.float16)) != key(b.uop.cast(dtypes.bfloat16))


def test_a_hit_names_the_callers_buffers_and_makes_new_ones():
    rng = np.random.default_rng(1)
    a, b, c = (Tensor(rng.standard_normal((5, 5)).astype(np.float32)).realize() for _ in range(3))
    first = cache.cached_kernelize([graph(a, b)])
    hits = cache.stats["hits"]
    second = cache.cached_kernelize([graph(a, c)])
    assert cache.stats["hits"] == hits + 1
    (value1,), (value2,) = first.values(), second.values()
    kernel1, kernel2 = value1.base.src[1], value2.base.src[1]
    assert kernel1.arg.ast is kernel2.arg.ast  # the same AST object: its compiled program is found again
    assert c.uop.base in kernel2.src and b.uop.base not in kernel2.src
    assert value1.base.src[0] is not value2.base.src[0]  # each realize writes a buffer of its own


def test_repeated_work_is_kernelized_once_and_stays_correct(monkeypatch):
    calls = []
    real = cache.kernelize
    monkeypatch.setattr(cache, "kernelize", lambda roots: calls.append(1) or real(roots))
    rng = np.random.default_rng(2)
    for _ in range(5):
        x, y = rng.standard_normal((7, 9)).astype(np.float32), rng.standard_normal((9,)).astype(np.float32)
        got = ((Tensor(x) * Tensor(y)).exp().sum(axis=1) - 1).numpy()
        np.testing.assert_allclose(got, np.exp(x * y).sum(axis=1) - 1, rtol=1e-5)
    assert len(calls) <= 2  # the first shape of graph (and at most one more: the inputs' first upload)


def test_assigns_and_contiguous_keep_their_meaning_on_a_hit():
    x = Tensor.zeros(6).contiguous().realize()
    for step in range(1, 5):
        x.assign(x + step).realize()
    np.testing.assert_array_equal(x.numpy(), np.full(6, 10.0))
    base = Tensor.arange(4).float()
    for _ in range(2):
        p, q = (base * 3).contiguous(), (base * 3).contiguous()
        Tensor.realize(p, q)
        p.assign(p + 1).realize()
        np.testing.assert_array_equal(q.numpy(), [0.0, 3.0, 6.0, 9.0])  # equal graphs, separate buffers
        np.testing.assert_array_equal(p.numpy(), [1.0, 4.0, 7.0, 10.0])


def test_the_cache_is_bounded():
    for n in range(cache.CACHE_SIZE + 5):
        (Tensor.ones(n + 1).contiguous() * 2).realize()
    assert len(cache._cache) <= cache.CACHE_SIZE
    # each key: the graph's walk, its last node the SINK over the roots, and NOOPT
    assert all(shape[-1][:2] == (Ops.SINK, dtypes.void) and noopt in (0, 1) for shape, noopt in cache._cache)
