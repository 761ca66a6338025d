"""The eager path: a realize whose graph has the shape of one realized before is answered from the schedule cache
(engine/schedule_cache.py) and runs straight to its buffers. A hit must never run a wrong program: graphs that differ
in a constant, a dtype, a shape, a view or a device are other keys, and graphs that differ only in their buffers
compute their own values. Compared with NumPy (and PyTorch for gradients)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import glassgrad.engine.schedule_cache as cache
from glassgrad import Tensor, dtypes
from glassgrad.uop.ops import Ops

RNG = np.random.default_rng(23)


def floats(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def hits_and_misses(fn) -> tuple[int, int]:
    """How many schedule-cache hits and misses fn() made."""
    before = dict(cache.stats)
    fn()
    return cache.stats["hits"] - before["hits"], cache.stats["misses"] - before["misses"]


OPS = {  # name: (glassgrad, NumPy) on two operands of one shape
    "add": (lambda a, b: a + b, lambda a, b: a + b),
    "mul_add": (lambda a, b: a * b + a, lambda a, b: a * b + a),
    "where": (lambda a, b: (a > b).where(a, b * 2), lambda a, b: np.where(a > b, a, b * 2)),
    "sum": (lambda a, b: (a - b).sum(), lambda a, b: (a - b).sum()),
    "softmax": (lambda a, b: (a * b).softmax(-1), lambda a, b: np.exp(a * b) / np.exp(a * b).sum(-1, keepdims=True)),
}


@pytest.mark.parametrize("name", OPS)
def test_a_hit_on_other_buffers_computes_their_values(device, name):
    ours, numpy = OPS[name]
    for shape in ((10,), (3, 5)):
        first = [floats(*shape) for _ in range(2)]
        ours(*(Tensor(x, device=device).realize() for x in first)).realize()  # the template, if not made yet
        for _ in range(3):  # then hits, each on new buffers
            xs = [floats(*shape) for _ in range(2)]
            a, b = (Tensor(x, device=device).realize() for x in xs)
            out = ours(a, b)
            hits, misses = hits_and_misses(out.realize)
            assert (hits, misses) == (1, 0)
            np.testing.assert_allclose(out.numpy(), numpy(*xs), rtol=1e-5, atol=1e-6)


def test_results_of_earlier_hits_keep_their_values(device):
    x = floats(7)
    a = Tensor(x, device=device).realize()
    results = [(a + i).realize() for i in range(2)] + [(a * a).realize() for _ in range(3)]
    expected = [x, x + 1, x * x, x * x, x * x]
    for got, want in zip(results, expected):
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-6)


@pytest.mark.parametrize("pairs", [(1.0, 2.0), (0.0, -0.0), (2, 3), (True, False)])
def test_a_constant_is_part_of_the_key(device, pairs):
    x = np.array([1.5, -2.0, 3.0, 0.0], dtype=np.float32)
    a = Tensor(x, device=device).realize()
    for c in pairs * 2:  # each constant twice: the second is a hit on its own template
        got = (a * c).numpy()
        np.testing.assert_array_equal(got, x * np.float32(c))
        assert np.array_equal(np.signbit(got), np.signbit(x * np.float32(c)))  # 0.0 and -0.0 apart


@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.float16, dtypes.int32, dtypes.int64, dtypes.uint8])
def test_a_dtype_is_part_of_the_key(device, dtype):
    x, y = np.arange(1, 11) % 7, np.arange(10) % 5
    numpy_dtype = {dtypes.float32: np.float32, dtypes.float16: np.float16, dtypes.int32: np.int32,
                   dtypes.int64: np.int64, dtypes.uint8: np.uint8}[dtype]  # fmt: skip
    for _ in range(2):  # a hit the second time, on a template of this dtype
        a, b = Tensor(x.astype(numpy_dtype), device=device), Tensor(y.astype(numpy_dtype), device=device)
        out = (a * b + a).realize()
        assert out.dtype == dtype
        np.testing.assert_array_equal(out.numpy(), (x * y + x).astype(numpy_dtype))


@pytest.mark.parametrize("shapes", [((10,), (11,)), ((0,), (1,)), ((3, 4), (4, 3)), ((1, 5), (5, 1))])
def test_a_shape_is_part_of_the_key(device, shapes):
    for shape in shapes * 2:
        x, y = floats(*shape), floats(*shape)
        out = (Tensor(x, device=device) - Tensor(y, device=device)).exp().realize()
        assert out.shape == shape
        np.testing.assert_allclose(out.numpy(), np.exp(x - y), rtol=1e-5)


VIEWS = {  # name: (glassgrad, NumPy) of one 4x6 operand: views of one buffer read through other strides
    "transpose": (lambda t: t.T, lambda x: x.T),
    "every_other_row": (lambda t: t[::2], lambda x: x[::2]),
    "odd_rows": (lambda t: t[1::2], lambda x: x[1::2]),
    "reversed": (lambda t: t.flip(1), lambda x: x[:, ::-1]),
    "column_broadcast": (lambda t: t[:, :1].expand(4, 6), lambda x: np.broadcast_to(x[:, :1], (4, 6))),
    "padded": (lambda t: t.pad(((1, 0), (0, 2))), lambda x: np.pad(x, ((1, 0), (0, 2)))),
}


def test_a_view_is_part_of_the_key(device):
    """The same buffers read through other views: each view its own key, each right, hit or miss."""
    for _ in range(2):
        x = floats(4, 6)
        a = Tensor(x, device=device).realize()
        for ours, numpy in VIEWS.values():
            expected = numpy(x)
            b = Tensor(np.ones(expected.shape, np.float32), device=device).realize()
            np.testing.assert_allclose((ours(a) + b).numpy(), expected + 1, rtol=1e-6)


def test_a_device_is_part_of_the_key():
    x, y = floats(6), floats(6)
    for device in ("CPU", "PYTHON", "CPU", "PYTHON"):
        out = (Tensor(x, device=device) + Tensor(y, device=device)).realize()
        assert out.device == device
        np.testing.assert_allclose(out.numpy(), x + y, rtol=1e-6)


def test_reading_one_buffer_twice_is_another_key(device):
    x, y = floats(8), floats(8)
    a, b = Tensor(x, device=device).realize(), Tensor(y, device=device).realize()
    for _ in range(2):
        np.testing.assert_allclose((a * b).numpy(), x * y, rtol=1e-6)
        np.testing.assert_allclose((a * a).numpy(), x * x, rtol=1e-6)
        np.testing.assert_allclose((b * a).numpy(), y * x, rtol=1e-6)


def test_a_hit_keeps_an_intermediate_a_lazy_tensor_reads(device):
    """A multi-kernel hit may share the memory of its intermediates, but not of one another tensor still reads."""
    for _ in range(3):
        x = floats(3, 5)
        t = Tensor(x, device=device)
        top = t.max(-1, keepdim=True)
        later = top * 2  # lazy: reads the max, which the softmax's realize computes as an intermediate
        out = ((t - top).exp() / (t - top).exp().sum(-1, keepdim=True)).realize()
        e = np.exp(x - x.max(-1, keepdims=True))
        np.testing.assert_allclose(out.numpy(), e / e.sum(-1, keepdims=True), rtol=1e-5)
        np.testing.assert_allclose(later.numpy(), x.max(-1, keepdims=True) * 2, rtol=1e-6)


def test_gradients_after_hits_match_torch(device):
    for _ in range(3):  # the forward realized on a hit keeps the graph backward needs
        x = floats(4, 3)
        ours = Tensor(x, device=device, requires_grad=True)
        hidden = (ours * ours).relu() + ours
        hidden.realize()
        hidden.sum().backward()
        ref = torch.tensor(x, requires_grad=True)
        ((ref * ref).relu() + ref).sum().backward()
        np.testing.assert_allclose(hidden.numpy(), ((ref * ref).relu() + ref).detach().numpy(), rtol=1e-6)
        np.testing.assert_allclose(ours.grad.numpy(), ref.grad.numpy(), rtol=1e-6)


def test_another_tensor_of_a_realized_node_follows_it(device):
    x = floats(5)
    a = Tensor(x, device=device).realize()
    for _ in range(2):
        out = a * 3
        alias = Tensor(out.uop)  # another tensor of the same node
        out.realize()
        assert alias.uop.base.op is Ops.BUFFER and alias.uop is out.uop
        np.testing.assert_allclose(alias.numpy(), x * 3, rtol=1e-6)


def test_a_failed_check_on_a_hit_raises_and_keeps_what_ran(device):
    """A hit whose run raises leaves the graphs as a miss would: the failure raises again, the rest stands."""
    table = Tensor([1.0, 2.0, 3.0], device=device).realize()
    for good in ([2, 0], [1, 1]):  # the template, then a hit
        picks = Tensor(good, device=device, dtype=dtypes.int32).realize()
        gathered, doubled = table.gather(0, picks * 1), table * 2
        Tensor.realize(gathered, doubled)
        assert gathered.tolist() == [[1.0, 2.0, 3.0][i] for i in good] and doubled.tolist() == [2.0, 4.0, 6.0]
    picks = Tensor([0, 7], device=device, dtype=dtypes.int32).realize()
    bad = table.gather(0, picks * 1)
    doubled = table * 2
    hits, misses = hits_and_misses(lambda: _raises(IndexError, lambda: Tensor.realize(bad, doubled)))
    assert hits == 1
    assert doubled.tolist() == [2.0, 4.0, 6.0]  # computed by the run that raised, and kept
    _raises(IndexError, bad.numpy)  # still unrealized: it raises again
    picks = Tensor([1, 2], device=device, dtype=dtypes.int32).realize()
    assert table.gather(0, picks * 1).tolist() == [2.0, 3.0]  # the same kernel on good values


def _raises(kind: type[Exception], fn) -> None:
    """fn() raises `kind` (not pytest.raises: its traceback would keep the failed tensors alive)."""
    try:
        fn()
    except kind:
        return
    pytest.fail(f"no {kind.__name__} was raised")
