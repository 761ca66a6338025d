"""codegen/vectorize.py: the addresses of lanes that are not neighbours (a convolution's 16 output channels, stored a
row of outputs apart) are lane 0's plus a constant step, worked out without simplifying each lane again."""

import numpy as np
import pytest
import torch

from glassgrad import Device, Tensor
from glassgrad.codegen import collapse_gathers, get_program
from glassgrad.codegen.heuristics import hand_coded_opts
from glassgrad.codegen.lowerer import lower_kernel
from glassgrad.codegen.vectorize import Vectorizer, _plus, is_lane, lane_step, scalar_lanes
from glassgrad.dtype import dtypes
from glassgrad.uop import Ops
from glassgrad.uop.ops import UOp
from glassgrad.uop.rewrite import graph_rewrite
from glassgrad.uop.symbolic import _as_term, _sum_terms, symbolic

pytestmark = pytest.mark.usefixtures("on_the_cpu")


def lowered_conv():
    """A small convolution's kernel lowered with the CPU's opts (its lanes: 16 output channels, stored H*W apart)."""
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((2, 8, 6, 6), dtype=np.float32), rng.standard_normal((16, 8, 3, 3), dtype=np.float32)
    out = Tensor(x).realize().conv2d(Tensor(w).realize(), padding=1)
    ast = out.schedule()[-1].ast
    lanes = Device["CPU"].renderer.vector_lanes
    sink = graph_rewrite(lower_kernel(ast, hand_coded_opts(ast, lanes), lanes), symbolic + collapse_gathers)
    return sink, ast, out, torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w), padding=1).numpy()


def linear(index: UOp) -> dict:
    """An INDEX's address as {term: factor} (None: the constant), whatever order simplify wrote the terms in."""
    found: dict = {}
    for term in _sum_terms(index.src[1]) or [index.src[1]]:
        base, factor = _as_term(term)
        found[base] = found.get(base, 0) + factor
    return found


def test_lanes_a_constant_step_apart_get_lane_0s_address_plus_the_step():
    sink, ast, out, expected = lowered_conv()
    lane = next(u for u in sink.toposort() if is_lane(u))
    v = Vectorizer(sink, lane)
    strided = [
        s.src[0] for s in sink.src if s.op is Ops.STORE and v.depends[s.src[0]] and v.contiguous(s.src[0]) is None
    ]
    assert strided, "the convolution stores its lanes a row of outputs apart"
    for index in strided:
        assert lane_step(index.src[1], lane, v.depends) not in (None, 0, 1)
        quick = v.lane_indices(index)
        assert [linear(q) for q in quick] == [linear(v.at_lane(index, i)) for i in range(v.n)]  # the same addresses
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-4, atol=1e-4)
    assert get_program(ast, Device["CPU"].renderer).name.startswith("r_")


def test_a_constant_is_added_to_the_constant_term():
    x = UOp(Ops.RANGE, dtypes.int, (UOp.const(dtypes.int, 10),), 0)
    assert _plus(x * 4 + 3, 5) is x * 4 + 8
    assert _plus(x * 4, 5) is x * 4 + 5
    assert _plus(UOp.const(dtypes.int, 2), 5) is UOp.const(dtypes.int, 7)


def test_scalar_lanes_rule_reads_a_scalar_for_any_lane():
    """codegen/vectorize.py scalar_lanes alone: GEP(x, i) of a scalar x is x; of a vector it stays."""
    x = UOp(Ops.SPECIAL, dtypes.int32, (), ("i", 8))
    assert scalar_lanes.rewrite(UOp(Ops.GEP, dtypes.int32, (x,), 3)) is x
    vector = UOp(Ops.VECTORIZE, dtypes.int32.vec(2), (x, x + 1))
    assert scalar_lanes.rewrite(UOp(Ops.GEP, dtypes.int32, (vector,), 1)) is None
    sink = UOp(Ops.SINK, dtypes.void, (UOp(Ops.GEP, dtypes.int32, (x,), 0) + UOp(Ops.GEP, dtypes.int32, (vector,), 1),))
    assert graph_rewrite(sink, scalar_lanes).src[0] is x + UOp(Ops.GEP, dtypes.int32, (vector,), 1)
