"""A tensor the user makes and asks gradients of is a node of its own, beside PyTorch.

Graph nodes are interned: Tensor(2.0) is the constant 2.0, Tensor.ones(3) the constant 1 expanded, b[0] the same
view each time it is written. Gradients find a tensor by its node, so a leaf that requires grad and shared its node
collected the gradient of every other use of it ((x * 2.0 + c).sum().gradient(c) was 5.0 for x = [1., 2.] and
c = Tensor(2.0): PyTorch 2.0).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from glassgrad import Tensor

# (name, glassgrad leaf, torch leaf): values any other part of a graph may build again as the same node
LEAVES = {
    "scalar 2.0": (lambda: Tensor(2.0), lambda: torch.tensor(2.0)),
    "scalar 0.5": (lambda: Tensor(0.5), lambda: torch.tensor(0.5)),
    "scalar -1.0": (lambda: Tensor(-1.0), lambda: torch.tensor(-1.0)),
    "ones(3)": (lambda: Tensor.ones(3), lambda: torch.ones(3)),
    "full((2, 3), 2.0)": (lambda: Tensor.full((2, 3), 2.0), lambda: torch.full((2, 3), 2.0)),
    "zeros(0)": (lambda: Tensor.zeros(0), lambda: torch.zeros(0)),
    "eye(3)": (lambda: Tensor.eye(3), lambda: torch.eye(3)),
    "arange(4.)": (lambda: Tensor.arange(4.0), lambda: torch.arange(4.0)),
}


def _marked(leaf, how: str):
    if how == "requires_grad_()":
        return leaf.requires_grad_()
    leaf.requires_grad = True
    return leaf


def _loss(leaf, again):
    """Uses the leaf once and a value equal to it (built the same way) twice more."""
    return (leaf * 3 + again * again).sum() + (again * leaf).sum()


@pytest.mark.parametrize("how", ["requires_grad_()", "requires_grad = True"])
@pytest.mark.parametrize("name", list(LEAVES))
def test_a_leaf_gets_only_its_own_gradient(device, name, how):
    ours, theirs = LEAVES[name]
    leaf = _marked(ours().to(device), how)
    expected = _marked(theirs(), how)
    _loss(expected, theirs()).backward()
    (grad,) = _loss(leaf, ours().to(device)).gradient(leaf)
    np.testing.assert_allclose(grad.numpy(), expected.grad.numpy())


@pytest.mark.parametrize("value", [2.0, 1.0, 0.0, -0.5])
def test_a_constant_leaf_made_with_requires_grad(device, value):
    x = Tensor([1.0, 2.0], device=device, requires_grad=True)
    c = Tensor(value, device=device, requires_grad=True)
    tx, tc = torch.tensor([1.0, 2.0], requires_grad=True), torch.tensor(value, requires_grad=True)
    (tx * value + tc).sum().backward()
    (x * value + c).sum().backward()
    assert c.grad.item() == tc.grad.item()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy())


def test_two_equal_leaves_get_their_own_gradients(device):
    a, b = Tensor(-1.0, device=device, requires_grad=True), Tensor(-1.0, device=device, requires_grad=True)
    ta, tb = torch.tensor(-1.0, requires_grad=True), torch.tensor(-1.0, requires_grad=True)
    (ta.minimum(tb) * 3 + tb).backward()
    (a.minimum(b) * 3 + b).backward()
    assert (a.grad.item(), b.grad.item()) == (ta.grad.item(), tb.grad.item())


VIEWS = {"b[0]": lambda b: b[0], "b.T": lambda b: b.T, "b[:, 1:]": lambda b: b[:, 1:], "b * 2": lambda b: b * 2}


@pytest.mark.parametrize("view", list(VIEWS))
def test_a_leaf_made_from_a_view_or_a_result_of_another_tensor(device, view):
    data, make = np.arange(6, dtype=np.float32).reshape(2, 3), VIEWS[view]
    b, tb = Tensor(data, device=device), torch.tensor(data)
    leaf, expected = make(b).requires_grad_(), make(tb).requires_grad_()
    _loss(expected, make(tb)).backward()
    (grad,) = _loss(leaf, make(b)).gradient(leaf)
    np.testing.assert_allclose(grad.numpy(), expected.grad.numpy())
