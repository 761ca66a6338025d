"""schedule/merge_axes.py: adjacent axes that every view of a kernel steps through as one become one axis."""

import importlib

import numpy as np
import pytest

import glassgrad.engine.schedule_cache as schedule_cache
from glassgrad import Tensor
from glassgrad.schedule.merge_axes import merge_axes
from glassgrad.uop import Ops
from helpers import split_every_cpu_kernel

pytestmark = pytest.mark.usefixtures("on_the_cpu")
rng = np.random.default_rng(0)
kernelize = importlib.import_module("glassgrad.schedule.kernelize")  # the module (the package exports the function)


def rand(*shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


@pytest.fixture
def unmerged(monkeypatch):
    """The last kernel of a tensor's schedule as kernelize builds it before its axes are merged."""

    def ast_of(t: Tensor):
        schedule_cache._cache.clear()  # a cached schedule would keep the unmerged kernel for later graphs
        with monkeypatch.context() as m:
            m.setattr(kernelize, "merge_axes", lambda sink: sink)
            ast = t.schedule()[-1].ast
        schedule_cache._cache.clear()
        return ast

    return ast_of


def shapes(ast) -> list[tuple[int, ...]]:
    """The shapes of the kernel's loads, in the order a walk meets them."""
    return [n.src[1].arg.shape for n in ast.toposort() if n.op is Ops.LOAD]


def reduced_axes(ast) -> set[tuple[int, ...]]:
    return {n.arg[1] for n in ast.toposort() if n.op is Ops.REDUCE_AXIS}


def test_an_elementwise_kernel_over_contiguous_buffers_is_one_axis(unmerged):
    a, b = rand(2, 3, 4, 5), rand(2, 3, 4, 5)
    x, y = Tensor(a).realize(), Tensor(b).realize()
    merged = merge_axes(unmerged(x * 2 + y))
    assert shapes(merged) == [(120,), (120,)]
    np.testing.assert_allclose((x * 2 + y).numpy(), a * 2 + b, rtol=1e-6)


def test_a_batchnorm_sum_merges_the_image_but_keeps_summed_and_kept_axes_apart(unmerged):
    a = rand(8, 3, 4, 5)
    x = Tensor(a).realize()
    merged = merge_axes(unmerged(x.sum(axis=(0, 2, 3))))
    assert shapes(merged) == [(8, 3, 20)] and reduced_axes(merged) == {(0, 2)}
    np.testing.assert_allclose(x.sum(axis=(0, 2, 3)).numpy(), a.sum(axis=(0, 2, 3)), rtol=1e-5)


def test_a_broadcast_operand_merges_where_it_is_broadcast_along_both_axes(unmerged):
    a, b = rand(4, 5, 6), rand(6)
    x, y = Tensor(a).realize(), Tensor(b).realize()
    assert shapes(merge_axes(unmerged(x + y))) == [(20, 6), (20, 6)]  # y steps 0, 0, 1: the last axis stays apart
    np.testing.assert_allclose((x + y).numpy(), a + b, rtol=1e-6)


@pytest.mark.parametrize(
    "make, numpy, merged, why",
    [
        (lambda x: x.permute(0, 2, 1) + 1, lambda a: a.transpose(0, 2, 1) + 1, None,
         "a transposed read steps through the axes in another order"),
        (lambda x: x.sum(axis=1), lambda a: a.sum(axis=1), None, "a summed axis between kept ones"),
        (lambda x: x.sum(axis=2), lambda a: a.sum(axis=2), (20, 6), "the kept axes merge, the summed one stays"),
        (lambda x: x.reshape(4, 30)[:, 1:29] * 2, lambda a: a.reshape(4, 30)[:, 1:29] * 2, None,
         "a shrunk row: the next row starts further on"),
        (lambda x: x.pad(((0, 0), (1, 1), (0, 0))) * 2, lambda a: np.pad(a, ((0, 0), (1, 1), (0, 0))) * 2, (4, 42),
         "padded rows: each image's padding is one range of 42, the images' are not one range of 168"),
        (lambda x: x.reshape(1, 120) + 1, lambda a: a.reshape(1, 120) + 1, None, "size-1 axes stay"),
        (lambda x: x.permute(2, 0, 1).reshape(6, 4, 5).permute(1, 0, 2) + 1,
         lambda a: a.transpose(2, 0, 1).reshape(6, 4, 5).transpose(1, 0, 2) + 1, None,
         "two views: merging would divide the index back"),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)  # fmt: skip
def test_axes_that_some_view_does_not_step_through_as_one_stay_apart(make, numpy, merged, why, unmerged):
    a = rand(4, 5, 6)
    x = Tensor(a).realize()
    ast = unmerged(make(x))
    if merged is None:
        assert merge_axes(ast) is ast, why
    else:
        assert shapes(merge_axes(ast))[0] == merged, why
    np.testing.assert_allclose(make(x).numpy(), numpy(a), rtol=1e-5)


def test_a_kernel_reading_a_computed_value_through_a_view_is_left_alone():
    from glassgrad.dtype import dtypes
    from glassgrad.uop.ops import UOp
    from glassgrad.uop.view import ShapeTracker

    glob = UOp(Ops.DEFINE_GLOBAL, dtypes.float.ptr(24), (), 1)
    load = UOp(Ops.LOAD, dtypes.float, (glob, UOp(Ops.VIEW, dtypes.void, (), ShapeTracker.from_shape((2, 3, 4)))))
    summed = UOp(Ops.REDUCE_AXIS, dtypes.float, (load,), (Ops.ADD, (2,)))
    spread = UOp(Ops.VIEW, dtypes.float, (summed,), ShapeTracker.from_shape((2, 3, 1)).expand((2, 3, 4)))
    out = UOp(Ops.DEFINE_GLOBAL, dtypes.float.ptr(24), (), 0)
    store_view = UOp(Ops.VIEW, dtypes.void, (), ShapeTracker.from_shape((2, 3, 4)))
    sink = UOp(Ops.SINK, dtypes.void, (UOp(Ops.STORE, dtypes.void, (out, store_view, load - spread)),))
    assert merge_axes(sink) is sink  # the VIEW over the sum has a shape of its own to merge: not attempted


@pytest.mark.parametrize("threads", [1, 3])
def test_merged_kernels_give_the_same_results_with_threads(threads, monkeypatch):
    split_every_cpu_kernel(monkeypatch, threads)
    a, b = rand(16, 8, 6, 10), rand(8)
    x, y = Tensor(a).realize(), Tensor(b).realize()
    got = ((x + y.reshape(1, 8, 1, 1)).relu().sum(axis=(0, 2, 3)), (x * 3).exp().max(axis=(2, 3)), x.sum())
    want = (np.maximum(a + b.reshape(1, 8, 1, 1), 0).sum(axis=(0, 2, 3)), np.exp(a * 3).max(axis=(2, 3)), a.sum())
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g.numpy(), w, rtol=1e-4, atol=1e-4)
