"""engine/lazy.py finds the tensors that stand for a node through the node (become) and the tensors with an assign
still to run through a list of them (pending_assigns), not by looking at every live tensor: every way a tensor's
node changes (ops, realize, assign, setitem, requires_grad, an optimizer step, a TinyJit replay) keeps both true."""

import numpy as np

from glassgrad import Tensor, TinyJit, nn
from glassgrad.engine import lazy
from glassgrad.uop.ops import Ops


def check_the_index() -> None:
    live = lazy.live_tensors()
    unlisted = [t for t in live if not any(ref() is t for ref in t.uop.__dict__.get(lazy.TENSORS, {}).values())]
    assert not unlisted, f"{len(unlisted)} tensors are not listed under their node, e.g. {unlisted[0]!r}"
    assert {id(t) for t in lazy.pending_assigns()} == {id(t) for t in live if t.uop.op is Ops.ASSIGN}


def test_every_way_a_tensor_changes_its_node_keeps_it_listed():
    rng = np.random.default_rng(0)
    layer = nn.Linear(5, 3)
    optimizer = nn.optim.Adam(nn.state.get_parameters(layer), lr=0.1)
    x, y = Tensor(rng.standard_normal((4, 5)).astype(np.float32)), Tensor([0, 2, 1, 2])
    leaf = Tensor(2.0).requires_grad_()  # a shared constant's node: the leaf gets a node of its own
    check_the_index()

    def step() -> Tensor:
        with Tensor.train():
            optimizer.zero_grad()
            loss = (layer(x) * leaf).sparse_categorical_crossentropy(y).backward()
            check_the_index()  # gradients made, not realized
            optimizer.step()
            check_the_index()  # assigns pending
            return loss.realize()

    losses = [step().item() for _ in range(2)]
    check_the_index()
    jitted = TinyJit(step)
    losses += [jitted().item() for _ in range(3)]
    check_the_index()
    buffer = Tensor.zeros(6).contiguous().realize()
    buffer[1:3] = 5.0  # setitem: an assign into the buffer
    buffer.assign(buffer + 1)
    check_the_index()
    lazy_view = buffer * 2  # reads the buffer before the next assign runs
    buffer.assign(buffer * 0)
    check_the_index()
    assert lazy_view.tolist() == [2.0, 12.0, 12.0, 2.0, 2.0, 2.0] and buffer.tolist() == [0.0] * 6
    grad_leaf = Tensor([1.0, 2.0, 3.0], requires_grad=True)
    written = grad_leaf * 1
    written[0] = 7.0  # setitem on a tensor with autograd history: a new graph, not an assign
    check_the_index()
    assert written.tolist() == [7.0, 2.0, 3.0] and all(np.isfinite(losses)) and losses[0] > losses[-1]


def test_a_node_lists_each_tensor_once_however_often_it_is_pointed_there():
    t = Tensor([1.0, 2.0]).realize()
    for _ in range(50):
        t.realize()  # each realize points the tensor at its node again
        (t + 1).realize()
    assert len(t.uop.__dict__[lazy.TENSORS]) < 8
