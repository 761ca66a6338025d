"""codegen/gather.py alone: a sum over a one-hot mask becomes one indexed load, also where the mask is further
masked by a condition the loop does not change (a cross-entropy's target pick under ignore_index)."""

import numpy as np

from glassgrad import Tensor, dtypes
from glassgrad.codegen import collapse_gathers
from glassgrad.codegen.lowerer import lower_kernel
from glassgrad.uop.ops import Ops
from glassgrad.uop.rewrite import graph_rewrite
from glassgrad.uop.symbolic import symbolic

rng = np.random.default_rng(0)


def _loops_left(t: Tensor) -> list[int]:
    """The sizes of the loops of t's last kernel once simplified and collapsed."""
    sink = graph_rewrite(lower_kernel(t.schedule()[-1].ast, [], ()), symbolic + collapse_gathers)
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
