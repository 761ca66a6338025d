"""The schedule cache: graphs that differ only in their buffers are kernelized once; answers are renamed right."""

import numpy as np

import glassgrad.engine.schedule_cache as cache
from glassgrad import Tensor
from glassgrad.dtype import dtypes
from glassgrad.uop.ops import UOp


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
        return cache.shape_key(root)

    assert key(graph(a, b)) == key(graph(a, c)) == key(graph(c, b))
    assert key(graph(a, a)) != key(graph(a, b))
    assert key((a * b).uop) != key((a + b).uop) and key((a * 2).uop) != key((a * 3).uop)
    assert key(a.uop.cast(dtypes.float16)) != key(b.uop.cast(dtypes.bfloat16))


def test_buffers_key_by_dtype_size_and_device_each_time():
    """A buffer's part of the key (kept on its node after the first walk) names its dtype, size and device."""
    a, same = Tensor.ones(4, 3).contiguous().realize(), Tensor.zeros(4, 3).contiguous().realize()
    others = [Tensor.ones(4, 3, dtype=dtypes.int32).contiguous().realize(), Tensor.ones(5, 3).contiguous().realize(),
              Tensor.ones(4, 3, device="PYTHON").contiguous().realize()]  # fmt: skip
    for _ in range(2):  # the second time from the parts kept on the nodes
        assert cache.shape_key(a.uop) == cache.shape_key(same.uop)
        assert cache.shape_key((a + same).uop) == cache.shape_key((same + a).uop) != cache.shape_key((a + a).uop)
        keys = [cache.shape_key(t.uop) for t in (a, *others)]
        assert len(set(keys)) == len(keys)


def test_a_hit_names_the_callers_buffers_and_makes_new_ones():
    rng = np.random.default_rng(1)
    a, b, c = (Tensor(rng.standard_normal((5, 5)).astype(np.float32)).realize() for _ in range(3))
    first = cache.cached_schedule([graph(a, b)]).mapping
    hits = cache.stats["hits"]
    second = cache.cached_schedule([graph(a, c)]).mapping
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
    # each key: the graph's walk, then the roots' positions in it, and NOOPT
    keys = [key for same_hash in cache._cache.values() for key, _ in same_hash]  # kept by the key's hash
    assert all(shape[-1] == (len(shape) - 2,) and noopt in (0, 1) for shape, noopt in keys)


# ---- the schedule comes from the cache too ----


def kernelized_roots(roots: list[UOp]) -> list[UOp]:
    """The roots with kernelize's answer applied, computed afresh (no cache)."""
    from glassgrad.schedule import kernelize

    mapping = kernelize(roots)
    return [mapping[r] if r in mapping else r.substitute(mapping) for r in roots]


def test_a_hit_schedules_what_create_schedule_would():
    """The renamed schedule of a hit is create_schedule's on the renamed roots: same ASTs, the caller's buffers."""
    from glassgrad.schedule import create_schedule

    rng = np.random.default_rng(4)
    a, b, c = (Tensor(rng.standard_normal((6, 5)).astype(np.float32)).realize() for _ in range(3))

    def softmax_graph(x: Tensor, y: Tensor) -> UOp:  # three kernels: a max, a sum of exps, the division
        z = x * y
        return (z - z.max(axis=1, keepdim=True)).exp().uop

    cache.cached_schedule([softmax_graph(a, b)])
    hits = cache.stats["hits"]
    got = cache.cached_schedule([softmax_graph(a, c)])
    assert cache.stats["hits"] == hits + 1
    expected = create_schedule(got.roots)
    assert [i.ast for i in got.items] == [i.ast for i in expected] and len(expected) >= 2
    assert [i.bufs for i in got.items] == [i.bufs for i in expected]
    assert [a.src[0] for a in got.assigns] == [i.bufs[0] for i in got.items]
    assert c.uop.base in {buf for item in got.items for buf in item.bufs}
    assert b.uop.base not in {buf for item in got.items for buf in item.bufs}
    # the same shape as a fresh kernelize's answer, with other new buffers
    fresh = kernelized_roots([softmax_graph(a, c)])
    assert cache.shape_key(fresh[0]) == cache.shape_key(got.roots[0])


def test_a_hit_and_a_miss_compute_the_same_values():
    rng = np.random.default_rng(5)
    x, w = rng.standard_normal((2, 3, 9, 7)).astype(np.float32), rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    tx, tw = Tensor(x).realize(), Tensor(w).realize()
    cache._cache.clear()
    misses = cache.stats["misses"]
    first = tx.conv2d(tw, padding=1).relu().sum(axis=(2, 3)).numpy()
    after_miss = cache.stats["misses"]
    assert after_miss > misses
    results = [tx.conv2d(tw, padding=1).relu().sum(axis=(2, 3)).numpy() for _ in range(3)]
    assert cache.stats["misses"] == after_miss  # every later realize hit
    for got in results:
        np.testing.assert_array_equal(got, first)
    import torch

    expected = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w), padding=1).relu().sum((2, 3))
    np.testing.assert_allclose(first, expected.numpy(), rtol=1e-4, atol=1e-4)


def test_each_hit_writes_new_buffers_and_keeps_earlier_results():
    a = Tensor(np.arange(5, dtype=np.float32)).realize()
    outs = [(a * k).sum(axis=0, keepdim=True) + k for k in range(4)]  # one shape of graph (k only in constants)
    for t in outs:
        t.realize()
    assert len({t.uop for t in outs}) == 4  # four buffers
    for k, t in enumerate(outs):
        np.testing.assert_array_equal(t.numpy(), [10.0 * k + k])


def test_a_changed_graph_misses():
    a = Tensor(np.arange(6, dtype=np.float32)).realize()
    (a + 1).realize()
    misses = cache.stats["misses"]
    (a + 1).realize()
    assert cache.stats["misses"] == misses
    for changed in (lambda: a * 1, lambda: (a + 1).reshape(2, 3), lambda: a.cast("float16") + 1, lambda: a + a):
        changed().realize()
        assert cache.stats["misses"] == misses + 1, "a graph of another shape must not hit"
        misses += 1


def test_kernels_kernelized_earlier_run_on_a_hit():
    """Tensor.kernelize() leaves ASSIGN(BUFFER, KERNEL) nodes in the graph: a hit schedules them too."""
    rng = np.random.default_rng(6)
    for _ in range(3):
        x = rng.standard_normal((4, 4)).astype(np.float32)
        t = Tensor(x).realize()
        y = (t * 2).kernelize()
        z = (y + 1).sum(axis=0)
        np.testing.assert_allclose(z.numpy(), (x * 2 + 1).sum(axis=0), rtol=1e-6)
        np.testing.assert_allclose(y.numpy(), x * 2, rtol=1e-6)


def test_realizing_buffers_only_hits_and_keeps_them():
    """A graph of buffers alone: the roots of a hit are the caller's buffers, not the template's."""
    a, b = Tensor([1.0, 2.0]).realize(), Tensor([3.0, 4.0]).realize()
    Tensor.realize(a, b)
    scheduled = cache.cached_schedule([a.uop, b.uop])
    assert scheduled.roots == [a.uop, b.uop] and scheduled.items == [] and scheduled.mapping == {}
    np.testing.assert_array_equal(b.numpy(), [3.0, 4.0])
