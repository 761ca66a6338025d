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
    assert indices.dtype == dtypes.default_int
    expected = [[[[0, 0, 0, 0], [0, 6, 0, 8], [0, 0, 0, 0], [0, 14, 0, 16]]]]
    assert output.max_unpool2d(indices).tolist() == expected


def test_max_unpool2d_refuses_float_indices_and_other_shapes():
    x = Tensor.ones(1, 1, 2, 2)
    with pytest.raises(TypeError, match="max_unpool2d: indices must be an integer tensor"):
        x.max_unpool2d(Tensor.ones(1, 1, 2, 2))
    with pytest.raises(RuntimeError, match=r"max_unpool2d: indices of shape \(1, 1, 2\) must have the input's shape"):
        x.max_unpool2d(Tensor.ones(1, 1, 2, dtype=dtypes.int32))


# ---- conv2d and the pools, N-dimensional as tinygrad reads them ----

CONV_CASES = [  # input shape, weight shape, keyword arguments
    ((2, 3, 9), (4, 3, 3), dict(padding=1)),
    ((1, 2, 5), (2, 1, 2), dict(stride=2, groups=2)),
    ((2, 2, 5, 4, 6), (3, 2, 2, 3, 2), dict(padding=(1, 0, 1))),
    ((1, 1, 3, 3, 3), (1, 1, 1, 1, 1), {}),
    ((3, 4), (2, 3, 2), dict(dilation=2)),  # unbatched 1-d
]


@pytest.mark.parametrize("x_shape, w_shape, kwargs", CONV_CASES)
@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_conv2d_of_a_1d_or_3d_weight_matches_conv1d_and_conv3d(x_shape, w_shape, kwargs, layout):
    torch_conv = (F.conv1d, F.conv2d, F.conv3d)[len(w_shape) - 3]
    check_op([x_shape, w_shape], weighted(lambda x, w: torch_conv(x, w, **kwargs)),
             weighted(lambda x, w: x.conv2d(w, **kwargs)), layout=layout, atol=1e-5, grad_atol=1e-4)  # fmt: skip


@pytest.mark.parametrize("x_shape, w_shape", [((2, 3, 7), (3, 2, 3)), ((1, 2, 3, 4, 3), (2, 2, 2, 2, 2))])
def test_conv_transpose2d_of_a_1d_or_3d_weight_matches_torch(x_shape, w_shape):
    torch_conv = (F.conv_transpose1d, F.conv_transpose2d, F.conv_transpose3d)[len(w_shape) - 3]
    check_op([x_shape, w_shape], weighted(lambda x, w: torch_conv(x, w, stride=2)),
             weighted(lambda x, w: x.conv_transpose2d(w, stride=2)), atol=1e-5, grad_atol=1e-4)  # fmt: skip


POOL_CASES = [  # input shape, kernel_size, keyword arguments
    ((2, 3, 9), (3,), dict(stride=2)),
    ((1, 2, 4, 5, 6), (2, 2, 2), {}),
    ((2, 3, 5, 5, 5), (3, 1, 2), dict(stride=(1, 1, 2), padding=(1, 0, 1))),
    ((3, 8), (4,), {}),  # unbatched 1-d
]


@pytest.mark.parametrize("x_shape, kernel, kwargs", POOL_CASES)
@pytest.mark.parametrize("pool", ["max", "avg"])
def test_pool2d_of_a_1d_or_3d_kernel_matches_pool1d_and_pool3d(x_shape, kernel, kwargs, pool):
    theirs = getattr(F, f"{pool}_pool{len(kernel)}d")
    values = np.random.default_rng(1).permutation(int(np.prod(x_shape))).astype(np.float32).reshape(x_shape)
    check_op([x_shape], weighted(lambda x: theirs(x, kernel, **kwargs)),
             weighted(lambda x: getattr(x, f"{pool}_pool2d")(kernel, **kwargs)), inputs=[values])  # fmt: skip


def test_pool2d_with_an_int_kernel_stays_2d():
    x = Tensor.arange(2 * 4 * 4 * 4).reshape(2, 4, 4, 4).float()
    assert x.max_pool2d(2).shape == (2, 4, 2, 2) and x.avg_pool2d().shape == (2, 4, 2, 2)
