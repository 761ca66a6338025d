"""Tensor.register_post_accumulate_grad_hook: called after backward() fills a leaf's .grad, as PyTorch's."""

import numpy as np
import pytest
import torch

from glassgrad import Tensor


def test_the_hook_sees_the_accumulated_gradient_as_torchs(device):
    x_values, w_values = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    seen, seen_torch = [], []
    w = Tensor(w_values, requires_grad=True)
    w.register_post_accumulate_grad_hook(lambda t: seen.append(t.grad.numpy()))
    tw = torch.tensor(w_values, requires_grad=True)
    tw.register_post_accumulate_grad_hook(lambda t: seen_torch.append(t.grad.numpy().copy()))
    for _ in range(2):  # the second backward accumulates: the hook sees the sum
        (Tensor(x_values) * w).square().sum().backward()
        (torch.tensor(x_values) * tw).square().sum().backward()
    assert len(seen) == len(seen_torch) == 2
    for ours, theirs in zip(seen, seen_torch):
        np.testing.assert_allclose(ours, theirs, rtol=1e-6)


def test_hooks_run_once_every_grad_of_the_backward_is_filled(device):
    a, b = Tensor.ones(3, requires_grad=True), Tensor.full((2,), 2.0, requires_grad=True)
    filled = []
    a.register_post_accumulate_grad_hook(lambda t: filled.append((a.grad is not None, b.grad is not None)))
    (a.sum() * b.sum()).backward()
    assert filled == [(True, True)]


def test_a_non_leaf_refuses_the_hook_as_torch():
    y = Tensor.ones(2, requires_grad=True) * 2
    with pytest.raises(RuntimeError, match="cannot be registered on non-leaf tensors"):
        y.register_post_accumulate_grad_hook(lambda t: None)
    with pytest.raises(RuntimeError, match="non-leaf"):
        (torch.ones(2, requires_grad=True) * 2).register_post_accumulate_grad_hook(lambda t: None)
