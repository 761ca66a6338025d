"""A VIEW over an expression (not a load) is indexed through without a flat index where it only permutes, expands,
splits the expression's dims and crops them to a prefix (lowerer._axes_of_view): each dim's index is a weighted
sum of the view's. Other views (merges, crops from an offset, pads, flips) take the flat index; both lower to the
same values."""

import numpy as np
import pytest

from glassgrad import Tensor
from glassgrad.codegen.lowerer import _axes_of_view
from glassgrad.dtype import dtypes
from glassgrad.uop.ops import Ops, UOp
from glassgrad.uop.view import ShapeTracker


def _view_over_product(shape: tuple[int, ...], move) -> UOp:
    buf = UOp(Ops.DEFINE_GLOBAL, dtypes.float.ptr(int(np.prod(shape))), (), 0)
    load = UOp(Ops.LOAD, dtypes.float, (buf, UOp(Ops.VIEW, dtypes.void, (), ShapeTracker.from_shape(shape))))
    return UOp(Ops.VIEW, dtypes.float, (load * load,), move(ShapeTracker.from_shape(shape)))


@pytest.mark.parametrize(
    "shape, move, expected",
    [
        ((4, 6), lambda st: st.permute((1, 0)), (((1, 1),), ((0, 1),))),  # a permute: one dim each
        ((4, 6), lambda st: st.reshape((2, 2, 6)), (((0, 2), (1, 1)), ((2, 1),))),  # a split: 4 = 2 x 2
        ((4, 6), lambda st: st.reshape((2, 2, 6)).permute((2, 1, 0)), (((1, 1), (2, 2)), ((0, 1),))),
        ((4, 1, 6), lambda st: st.expand((4, 3, 6)), (((0, 1),), (), ((2, 1),))),  # an expand: dim 1 unread
        ((4, 6), lambda st: st.reshape((24,)), None),  # a merge: a division of one index, left to the flat index
        ((4, 6), lambda st: st.shrink(((0, 4), (0, 3))), (((0, 1),), ((1, 1),))),  # a prefix: indexed as it is
        ((4, 6), lambda st: st.shrink(((0, 4), (1, 4))), None),  # a part from an offset: the flat index
        ((4, 6), lambda st: st.shrink(((0, 4), (0, 4))).reshape((4, 2, 2)), (((0, 1),), ((1, 2), (2, 1)))),
    ],
)
def test_which_views_index_their_expression_directly(shape, move, expected):
    assert _axes_of_view(_view_over_product(shape, move)) == expected


def test_a_two_stage_sum_of_a_product_matches_numpy():
    """A sum of a product cut in parts along its first dim (the view over the product splits it): the values."""
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((64, 5, 7)).astype(np.float32), rng.standard_normal((64, 1, 7)).astype(np.float32)
    product = Tensor(a) * Tensor(b)
    parts = product.reshape(8, 8, 5, 7).sum(axis=(1, 3)).contiguous().sum(axis=0)
    np.testing.assert_allclose(parts.numpy(), (a * b).sum(axis=(0, 2)), rtol=1e-5)
