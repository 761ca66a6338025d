"""index_dtype: int32 index math unless an index the kernel forms could reach 2**31 (then int64)."""

import numpy as np

from glassgrad import Tensor, dtypes
from glassgrad.codegen.lowerer import _fits_int32, index_dtype
from glassgrad.uop.ops import Ops
from glassgrad.uop.view import View


def test_small_contiguous_view_fits():
    assert _fits_int32((View.create((1024, 1024)),))


def test_reach_at_2_31_needs_int64():
    assert _fits_int32((View.create((2**31 - 1,)),))
    assert not _fits_int32((View.create((2**31,)),))
    assert not _fits_int32((View.create((2, 2**30), (2**30 + 1, 1)),))  # addresses up to 2**31 + 2**30 - 1


def test_huge_expanded_loop_nest_with_small_addresses_fits():
    # a convolution's unfolded view: 512*32*20*20*32*5*5 = 5.2e9 positions, every address below 512*32*24*24
    shape, strides = (512, 1, 32, 20, 20, 32, 5, 5), (18432, 0, 0, 24, 1, 576, 24, 1)
    assert np.prod(shape) >= 2**31
    assert _fits_int32((View.create(shape, strides),))


def test_negative_strides_count_their_offset():
    assert _fits_int32((View.create((1000,), (-1,), offset=999),))
    assert not _fits_int32((View.create((10,), (-1,), offset=2**31),))


def test_lower_view_read_flat_must_fit():
    # the view below the last one is read at flat positions up to its size: a 2**31-element lower view needs int64
    lower, top = View.create((2**16, 2**15)), View.create((8, 8))
    assert not _fits_int32((lower, top))
    assert _fits_int32((View.create((2**15, 2**15)), top))


def _sink_asts(t: Tensor) -> list:
    return [item.ast for item in t.schedule() if item.ast.op is Ops.SINK]


def test_conv_kernel_indexes_in_int32():
    x, w = Tensor.rand(512, 32, 24, 24), Tensor.rand(32, 32, 5, 5)
    asts = _sink_asts(x.conv2d(w))
    assert asts and all(index_dtype(ast) == dtypes.int32 for ast in asts)


def test_conv_result_unchanged_by_int32_indices():
    import torch

    xn, wn = np.random.rand(2, 3, 9, 9).astype(np.float32), np.random.rand(4, 3, 3, 3).astype(np.float32)
    out = Tensor(xn).conv2d(Tensor(wn), padding=1).numpy()
    ref = torch.nn.functional.conv2d(torch.tensor(xn), torch.tensor(wn), padding=1).numpy()
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)
