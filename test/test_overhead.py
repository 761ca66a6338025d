"""What a repeated realize reuses to save Python time gives the same graph and values as building it afresh."""

import numpy as np
import pytest
import torch

import glassgrad.mixin.conv as nn_mixin
from glassgrad import Tensor
from glassgrad.uop.ops import GroupOp

WINDOW_CASES = [  # (input shape, kernel, stride, dilation)
    ((2, 3, 9, 7), (3, 3), (1, 1), (1, 1)),
    ((2, 3, 9, 7), (3, 2), (2, 1), (1, 2)),
    ((1, 4, 8, 8), (2, 2), (2, 2), (1, 1)),  # disjoint windows (a 2x2 max-pool's)
    ((5, 11), (4,), (3,), (2,)),
    ((1, 1, 5, 6, 7), (2, 3, 1), (1, 2, 3), (2, 1, 1)),
    ((3, 1, 1), (1, 1), (1, 1), (1, 1)),
]


@pytest.mark.parametrize("shape, kernel, stride, dilation", WINDOW_CASES)
def test_a_window_view_made_again_is_the_view_the_tensor_methods_build(shape, kernel, stride, dilation):
    nn_mixin._window_views.clear()
    rng = np.random.default_rng(0)
    a, b = (Tensor(rng.standard_normal(shape).astype(np.float32)).realize() for _ in range(2))
    first = nn_mixin._windows(a, kernel, stride, dilation)  # built, and its movement ops remembered
    assert len(nn_mixin._window_views) == 1
    again = nn_mixin._windows(b, kernel, stride, dilation)  # made from the remembered ops, on another buffer
    assert again.uop is nn_mixin._build_windows(b, kernel, stride, dilation).uop
    assert again.shape == first.shape and again.uop is not first.uop
    (steps,) = nn_mixin._window_views.values()
    assert nn_mixin._movements_between(b.uop, again.uop) == steps and all(op in GroupOp.Movement for op, _ in steps)


def test_convolutions_and_pools_with_remembered_views_match_torch():
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal((2, 3, 10, 9)).astype(np.float32), rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    tx, tw = torch.from_numpy(x), torch.from_numpy(w)
    for _ in range(3):  # the first builds each view, the others make it from the remembered ops
        gx, gw = Tensor(x, requires_grad=True), Tensor(w, requires_grad=True)
        out = gx.conv2d(gw, padding=1, stride=(1, 2)).max_pool2d(2) + gx.avg_pool2d(3, stride=1, padding=1).sum()
        out.sum().backward()
        ref_x, ref_w = tx.clone().requires_grad_(), tw.clone().requires_grad_()
        ref = torch.nn.functional.conv2d(ref_x, ref_w, padding=1, stride=(1, 2))
        ref = torch.nn.functional.max_pool2d(ref, 2) + torch.nn.functional.avg_pool2d(ref_x, 3, 1, 1).sum()
        ref.sum().backward()
        np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(gx.grad.numpy(), ref_x.grad.numpy(), rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(gw.grad.numpy(), ref_w.grad.numpy(), rtol=1e-4, atol=1e-4)


def test_the_remembered_views_are_bounded():
    nn_mixin._window_views.clear()
    for n in range(nn_mixin.WINDOW_VIEWS + 3):
        nn_mixin._windows(Tensor.empty(1, n + 2), (2,), (1,), (1,))
    assert 0 < len(nn_mixin._window_views) <= nn_mixin.WINDOW_VIEWS
