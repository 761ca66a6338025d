"""tinygrad's N-dimensional reading of the 2d spatial ops (mixin/spatial_nd.py) against PyTorch's 1d, 2d and 3d
functions: conv2d with any weight rank, max_pool2d and avg_pool2d with any kernel length, and max_unpool2d."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from glassgrad import Tensor, dtypes
from torch_check import check_op, weighted

UNPOOL_CASES = [
    ((1, 2, 4, 6), dict(kernel_size=2), {}),
    ((2, 1, 5, 5), dict(kernel_size=3, stride=2, padding=1), dict(output_size=(5, 5))),
    ((3, 4, 6), dict(kernel_size=(2, 3)), {}),  # no batch dim
    ((1, 1, 1, 1), dict(kernel_size=1), {}),
    ((1, 2, 4, 4, 4), dict(kernel_size=(2, 2, 2)), {}),  # 3 spatial dims: max_unpool3d
    ((2, 3, 7), dict(kernel_size=(2,), stride=(2,)), {}),  # 1 spatial dim: max_unpool1d
]


@pytest.mark.parametrize("shape, pool, extra", UNPOOL_CASES)
def test_max_unpool2d_matches_torch(shape, pool, extra):
    nd = len(pool["kernel_size"]) if isinstance(pool["kernel_size"], tuple) else 2
    torch_pool = (F.max_pool1d, F.max_pool2d, F.max_pool3d)[nd - 1]
    torch_unpool = (F.max_unpool1d, F.max_unpool2d, F.max_unpool3d)[nd - 1]
    x = torch.tensor(np.random.default_rng(0).permutation(int(np.prod(shape))).astype(np.float32).reshape(shape))
    pooled, indices = torch_pool(x, **pool, return_indices=True)
    theirs_indices = indices

    def unpool(p):
        if isinstance(p, torch.Tensor):
            return torch_unpool(p, theirs_indices, **pool, **extra)
        return p.max_unpool2d(Tensor(indices.numpy()), **pool, **extra)

    check_op([pooled.shape], weighted(unpool), inputs=[pooled.numpy()])


def test_max_unpool2d_inverts_glassgrads_own_max_pool2d_as_tinygrad():
    t = Tensor.arange(1, 17).reshape(1, 1, 4, 4).float()
    output, indices = t.max_pool2d(return_indices=True)
    assert indices.dtype == dtypes.int64
    expected = [[[[0, 0, 0, 0], [0, 6, 0, 8], [0, 0, 0, 0], [0, 14, 0, 16]]]]
    assert output.max_unpool2d(indices).tolist() == expected


def test_max_unpool2d_refuses_float_indices_and_other_shapes():
    x = Tensor.ones(1, 1, 2, 2)
    with pytest.raises(TypeError, match="max_unpool2d: indices must be an integer tensor"):
        x.max_unpool2d(Tensor.ones(1, 1, 2, 2))
    with pytest.raises(RuntimeError, match=r"max_unpool2d: indices of shape \(1, 1, 2\) must have the input's shape"):
        x.max_unpool2d(Tensor.ones(1, 1, 2, dtype=dtypes.int32))
