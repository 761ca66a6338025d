"""codegen/gather.py alone: a sum over a one-hot mask becomes one indexed load, also where the mask is further
masked by a condition the loop does not change (a cross-entropy's target pick under ignore_index)."""

import numpy as np

from glassgrad import Tensor, dtypes
from glassgrad.codegen import collapse_gathers
from glassgrad.codegen.heuristics import hand_coded_opts
from glassgrad.codegen.lowerer import lower_kernel
from glassgrad.renderer.cuda import CUDARenderer
from glassgrad.uop.ops import Ops, UOp
from glassgrad.uop.rewrite import graph_rewrite
from glassgrad.uop.symbolic import symbolic

rng = np.random.default_rng(0)


def _loops_left(t: Tensor, gpu: bool = False) -> list[int]:
    """The sizes of the loops of t's last kernel once simplified and collapsed (with the GPU heuristics' actions)."""
    ast = t.schedule()[-1].ast
    opts = hand_coded_opts(ast, CUDARenderer.vector_lanes, has_local=True) if gpu else []
    sink = graph_rewrite(lower_kernel(ast, opts, ()), symbolic + collapse_gathers)
    return [u.src[0].arg for u in sink.toposort() if u.op is Ops.RANGE]


def _masked_pick(logits: Tensor, targets: Tensor, ignore: int) -> Tensor:
    classes = Tensor.arange(logits.shape[-1])
    one_hot = (targets.unsqueeze(-1) == classes) & (targets != ignore).unsqueeze(-1)
    return one_hot.where(logits, 0.0).sum(-1)


def test_a_one_hot_sum_is_one_load():
    table, index = Tensor.empty(7, 1000), Tensor.empty(7, dtype=dtypes.int32)
    assert 1000 not in _loops_left((index.unsqueeze(-1) == Tensor.arange(1000)).where(table, 0.0).sum(-1))


def test_a_one_hot_sum_under_another_condition_is_one_load():
    logits, targets = Tensor.empty(7, 1000), Tensor.empty(7, dtype=dtypes.int32)
    assert 1000 not in _loops_left(_masked_pick(logits, targets, -100))
    # a condition that the loop changes is no one-hot mask: the sum stays
    classes = Tensor.arange(1000)
    both = (targets.unsqueeze(-1) == classes) & (classes < 500)
    assert 1000 in _loops_left(both.where(logits, 0.0).sum(-1))


def test_the_masked_pick_keeps_its_values():
    logits = rng.standard_normal((9, 13)).astype(np.float32)
    targets = np.array([0, 12, -100, 5, -100, 7, 1, 2, 3], np.int32)
    got = _masked_pick(Tensor(logits), Tensor(targets), -100).numpy()
    picked = np.where(targets != -100, logits[np.arange(9), np.clip(targets, 0, 12)], 0.0)
    np.testing.assert_array_equal(got, picked)


def test_a_one_hot_sum_over_rows_and_classes_keeps_the_rows_loop_only():
    """The rule alone on a sum over two loops of two unrolled rows' selects (GPT-2's mean cross-entropy, summed over
    rows and classes in one kernel: one block read 1024 x 50257 logits): the classes' loop goes, the rows' stays."""
    rows, classes = (UOp(Ops.RANGE, dtypes.int32, (UOp.const(dtypes.int32, n),), axis) for axis, n in ((0, 4), (1, 10)))
    value = classes.cast(dtypes.float) * 1.5 + rows.cast(dtypes.float)
    selects = [classes.eq(rows * 2 + k).where(value, 0.0) for k in (0, 1)]  # two unrolled rows' targets
    red = UOp(Ops.REDUCE, dtypes.float, (selects[0] + selects[1], rows, classes), arg=Ops.ADD)
    out = graph_rewrite(red, collapse_gathers)
    assert out.op is Ops.REDUCE and out.src[1:] == (rows,) and classes not in out.toposort()


def test_the_masked_picks_summed_keep_their_value():
    logits = rng.standard_normal((33, 17)).astype(np.float32)
    targets = rng.integers(-1, 17, 33).astype(np.int32)
    got = _masked_pick(Tensor(logits), Tensor(targets), -1).sum().item()
    expected = np.where(targets != -1, logits[np.arange(33), np.clip(targets, 0, 16)], 0.0).sum()
    np.testing.assert_allclose(got, expected, rtol=1e-5)
