"""Convolution and pooling backward without big intermediates: hand-written gradients (gradient.custom_gradient),
the transposed convolution that is a convolution's input gradient, windows that are reshapes, and the scheduling
of a reduction inside another."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from glassgrad import Device, GlobalCounters, Tensor
from glassgrad.codegen import get_program
from glassgrad.gradient import custom_gradient
from glassgrad.uop import Ops
from torch_check import check_op

SUMS = {"atol": 3e-5, "rtol": 1e-5}


def _buffers_bytes(*tensors: Tensor) -> list[int]:
    """The size in bytes of every buffer the kernels that realize `tensors` write."""
    items = tensors[0].schedule(*tensors[1:])
    return [item.bufs[0].arg * item.bufs[0].dtype.itemsize for item in items if item.ast.op is Ops.SINK]


def _kernel_names(*tensors: Tensor) -> list[str]:
    items = tensors[0].schedule(*tensors[1:])
    return [get_program(i.ast, Device[Device.DEFAULT].renderer).name for i in items if i.ast.op is Ops.SINK]


# ---- custom_gradient ----


def test_a_custom_rule_replaces_the_derived_gradient():
    a = np.random.default_rng(0).uniform(-2, 2, (3, 4)).astype(np.float32)
    x = Tensor(a, requires_grad=True)
    # the rule says d/dx = 3 * g although the primitives compute x * 2: the rule, not the derivation, is used
    y = custom_gradient(x * 2, (x,), lambda g, x: (g * 3,))
    (y * y).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 3 * (2 * (2 * a)), rtol=1e-6)
    np.testing.assert_allclose(y.numpy(), 2 * a, rtol=1e-6)


def test_a_target_inside_a_custom_op_gets_its_gradient_through_the_primitives():
    a = np.random.default_rng(1).uniform(-2, 2, (5,)).astype(np.float32)
    x = Tensor(a, requires_grad=True)
    inner = x.exp()
    y = custom_gradient(inner * 2, (x,), lambda g, x: (g * 2 * x.exp(),))
    (g_inner, g_x) = y.sum().gradient(inner, x)
    np.testing.assert_allclose(g_inner.numpy(), np.full(5, 2.0), rtol=1e-6)
    np.testing.assert_allclose(g_x.numpy(), 2 * np.exp(a), rtol=1e-5)


def test_a_rule_gives_no_gradient_to_an_input_that_does_not_need_one():
    x, w = Tensor.ones(2, 3), Tensor.ones(3, requires_grad=True)
    y = custom_gradient(x * w, (x, w), lambda g, x, w: (g * w, (g * x).sum(0)))
    y.sum().backward()
    assert x.grad is None
    np.testing.assert_allclose(w.grad.numpy(), np.full(3, 2.0))


# ---- a convolution's gradients ----

GRADIENT_CASES = [
    ((2, 3, 9, 9), (4, 3, 3, 3), {}),
    ((2, 3, 10, 11), (4, 3, 5, 5), {"padding": 2}),
    ((1, 2, 10, 11), (3, 2, 5, 5), {"padding": (1, 2, 0, 3)}),  # F.pad order: uneven padding before and after
    ((1, 2, 7, 7), (3, 2, 1, 1), {"padding": 3}),  # padding wider than the kernel: the spread gradient is cut
    ((2, 4, 9, 8), (6, 2, 3, 2), {"stride": 2, "padding": 1, "dilation": 2, "groups": 2}),
    ((3, 2, 5, 6), (2, 2, 3, 3), {"stride": (3, 2), "padding": 2}),
    ((1, 2, 9, 7), (2, 2, 2, 2), {"stride": (2, 3)}),  # input rows that no window reads get a zero gradient
    ((2, 3, 7, 7), (3, 1, 3, 3), {"groups": 3, "padding": "same"}),
    ((1, 1, 1, 1), (2, 1, 1, 1), {}),
]


@pytest.mark.filterwarnings("ignore:Using padding='same'")
@pytest.mark.parametrize("x, weight, kwargs", GRADIENT_CASES, ids=str)
def test_conv2d_gradients_match_torch(x, weight, kwargs):
    if isinstance(kwargs.get("padding"), tuple) and len(kwargs["padding"]) == 4:
        rest = {k: v for k, v in kwargs.items() if k != "padding"}
        theirs = lambda x, w: F.conv2d(F.pad(x, kwargs["padding"]), w, **rest).square()  # noqa: E731
    else:
        theirs = lambda x, w: F.conv2d(x, w, **kwargs).square()  # noqa: E731
    check_op([x, weight], theirs, lambda x, w: x.conv2d(w, **kwargs).square(), **SUMS)


# Batches whose weight-gradient operands outgrow the L2: on the CPU the weight gradient is summed a part of the
# batch at a time (split_reduce.cache_sized_part), into a buffer of `parts` partial gradients
SPLIT_CASES = [
    ((128, 8, 14, 14), (8, 8, 3, 3), {}, 2),
    ((256, 4, 16, 15), (6, 2, 3, 2), {"stride": 2, "padding": 1, "dilation": 2, "groups": 2}, 2),
    ((512, 8, 100), (4, 8, 5), {"padding": 2}, 4),
]


@pytest.mark.parametrize("x, weight, kwargs, parts", SPLIT_CASES, ids=str)
def test_a_large_batch_weight_gradient_summed_in_parts_matches_torch(x, weight, kwargs, parts, on_the_cpu):
    name = f"conv{len(x) - 2}d"
    w = Tensor.ones(*weight, requires_grad=True)
    (gw,) = getattr(Tensor.ones(*x), name)(w, **kwargs).square().sum().gradient(w)
    assert parts * w.numel() * 4 in _buffers_bytes(gw)
    check_op([x, weight], lambda x, w: getattr(F, name)(x, w, **kwargs).square(),
             lambda x, w: getattr(x, name)(w, **kwargs).square(), atol=1e-3, rtol=1e-4)  # fmt: skip


@pytest.mark.parametrize("nd", [1, 3])
def test_conv1d_and_conv3d_gradients_match_torch(nd):
    x, w = (2, 3, *(7,) * nd), (4, 3, *(3,) * nd)
    name = f"conv{nd}d"
    kwargs = {"stride": 2, "padding": 1} if nd == 1 else {"padding": 1, "dilation": 2}
    check_op([x, w], lambda x, w: getattr(F, name)(x, w, **kwargs).square(),
             lambda x, w: getattr(x, name)(w, **kwargs).square(), **SUMS)  # fmt: skip


def test_conv_transpose2d_gradients_match_torch():
    kwargs = {"stride": 2, "padding": 1, "output_padding": 1, "groups": 2}
    check_op([(2, 4, 5, 4), (4, 3, 3, 3)], lambda x, w: F.conv_transpose2d(x, w, **kwargs).square(),
             lambda x, w: x.conv_transpose2d(w, **kwargs).square(), **SUMS)  # fmt: skip


def test_second_derivative_of_a_convolution_matches_torch():
    rng = np.random.default_rng(3)
    a, b = rng.uniform(-1, 1, (2, 2, 6, 6)).astype(np.float32), rng.uniform(-1, 1, (3, 2, 3, 3)).astype(np.float32)
    x, w = Tensor(a, requires_grad=True), Tensor(b, requires_grad=True)
    (gx,) = x.conv2d(w, padding=1).square().sum().gradient(x)
    (gw,) = gx.square().sum().gradient(w)
    tx, tw = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    (tgx,) = torch.autograd.grad(F.conv2d(tx, tw, padding=1).square().sum(), tx, create_graph=True)
    (tgw,) = torch.autograd.grad(tgx.square().sum(), tw)
    np.testing.assert_allclose(gw.numpy(), tgw.numpy(), rtol=1e-4, atol=1e-4)


def test_conv_gradient_after_its_input_was_realized_matches_torch():
    """The input of the conv is realized before the conv is built: autograd differentiates the graph that built it,
    a different node than the one the conv marked, and the primitives' rules serve."""
    rng = np.random.default_rng(4)
    a, b = rng.uniform(-1, 1, (2, 2, 6, 6)).astype(np.float32), rng.uniform(-1, 1, (3, 2, 3, 3)).astype(np.float32)
    x, w = Tensor(a, requires_grad=True), Tensor(b, requires_grad=True)
    h = (x * 2).realize()
    h.conv2d(w).square().sum().backward()
    tx, tw = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    F.conv2d(tx * 2, tw).square().sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy(), rtol=1e-4, atol=1e-4)


def test_conv_gradients_write_no_buffer_bigger_than_the_activations():
    """The input gradient is a transposed convolution: no buffer of every window's elements (kernel**2 times the
    output, a col2im's input) is written, only the padded output gradient it reads (the input's size plus the
    kernel's reach), the two gradients, the flipped weight (mixin/conv.py: a tiled product reads it as a plain
    matrix), and on the CPU that weight laid out for the transposed convolution and the output gradient laid out for
    the weight gradient, output channels inside (schedule/conv.py)."""
    x = Tensor.rand(4, 8, 16, 16, requires_grad=True).realize()
    w = Tensor.rand(8, 8, 5, 5, requires_grad=True).realize()
    upstream = Tensor.rand(4, 8, 12, 12).realize()
    (x.conv2d(w) * upstream).sum().backward()
    written = _buffers_bytes(x.grad, w.grad)
    assert len(written) == (6 if Device.DEFAULT == "CPU" else 4)
    assert max(written) == 4 * 8 * (12 + 2 * 4) ** 2 * 4  # the padded gradient; the windows were 4 * 8 * 12**2 * 25
    if Device.DEFAULT == "CPU":
        assert 4 * 8 * 12 * 12 * 4 in written  # the output gradient as (batch, y, x, channel)


def test_two_convolutions_backward_peak_memory_stays_near_the_activations():
    """conv -> relu -> conv, as beautiful_mnist: the first conv's weight gradient reads the second's input gradient
    (a realized buffer); nothing else of the backward pass is materialized."""
    x = Tensor.rand(8, 1, 28, 28).realize()
    w1, w2 = Tensor.rand(16, 1, 5, 5, requires_grad=True).realize(), Tensor.rand(16, 16, 5, 5, requires_grad=True)
    w2 = w2.realize()
    loss = x.conv2d(w1).relu().conv2d(w2).relu().sum()
    loss.backward()
    # the biggest is the second conv's padded output gradient, 28x28 per channel; the unfolded tensor was 25x 20x20
    assert max(_buffers_bytes(w1.grad, w2.grad)) <= 8 * 16 * 28 * 28 * 4
    x1, t1, t2 = torch.tensor(x.numpy()), torch.tensor(w1.numpy(), requires_grad=True), torch.tensor(w2.numpy())
    t2.requires_grad_()
    F.conv2d(F.conv2d(x1, t1).relu(), t2).relu().sum().backward()
    np.testing.assert_allclose(w1.grad.numpy(), t1.grad.numpy(), rtol=1e-4)
    np.testing.assert_allclose(w2.grad.numpy(), t2.grad.numpy(), rtol=1e-4)


# ---- windows that do not overlap ----


@pytest.mark.parametrize("kwargs", [{"kernel_size": 2}, {"kernel_size": 2, "stride": 3},
                                    {"kernel_size": 2, "stride": 5, "dilation": 2},
                                    {"kernel_size": 2, "padding": 1}, {"kernel_size": 3, "ceil_mode": True}],
                         ids=str)  # fmt: skip
def test_max_pool2d_of_disjoint_windows_matches_torch(kwargs):
    check_op([(2, 3, 11, 10)], lambda t: F.max_pool2d(t, **kwargs), lambda t: t.max_pool2d(**kwargs))


@pytest.mark.parametrize("kwargs", [{"kernel_size": 2}, {"kernel_size": (2, 3), "stride": (3, 4)},
                                    {"kernel_size": 2, "padding": 1, "ceil_mode": True}], ids=str)  # fmt: skip
def test_avg_pool2d_of_disjoint_windows_matches_torch(kwargs):
    check_op([(2, 3, 11, 10)], lambda t: F.avg_pool2d(t, **kwargs), lambda t: t.avg_pool2d(**kwargs))


def test_conv2d_with_stride_equal_to_the_kernel_matches_torch():
    kwargs = {"stride": 2, "padding": (0, 1)}
    check_op([(2, 3, 9, 8), (4, 3, 2, 2)], lambda x, w: F.conv2d(x, w, **kwargs),
             lambda x, w: x.conv2d(w, **kwargs), **SUMS)  # fmt: skip


def test_disjoint_windows_index_without_division():
    """The reshapes of disjoint windows compose into one strided view, as the general windows do."""
    # on the CPU: a GPU kernel divides its thread index into loop indices, whatever the view
    x, w = Tensor.rand(2, 3, 7, 9, device="CPU").realize(), Tensor.rand(4, 3, 2, 2, device="CPU").realize()
    for t in (x.max_pool2d(2), x.max_pool2d(2, 3), x.avg_pool2d(2, padding=1), x.conv2d(w, stride=2)):
        (item,) = [i for i in t.schedule() if i.ast.op is Ops.SINK]
        src = get_program(item.ast, Device["CPU"].renderer).src
        assert "/" not in src and "%" not in src, src


def test_a_grouped_convolution_keeps_its_groups_as_an_axis():
    """The kernel stores (N, groups, C_out / groups, H, W) under the reshape to (N, C_out, H, W): no load divides a
    channel back into its group (that kernel was 12x slower)."""
    x, w = Tensor.rand(4, 8, 10, 10, device="CPU").realize(), Tensor.rand(8, 4, 3, 3, device="CPU").realize()
    out = x.conv2d(w, groups=2, padding=1)
    for item in [i for i in out.schedule() if i.ast.op is Ops.SINK]:
        src = get_program(item.ast, Device["CPU"].renderer).src
        assert "/" not in src and "%" not in src, src
    expected = F.conv2d(torch.tensor(x.numpy()), torch.tensor(w.numpy()), groups=2, padding=1).numpy()
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5, atol=1e-5)


def test_gradient_of_a_2x2_max_pool_sums_no_repeated_copies():
    """The gradient of windows that do not overlap is a view of the output's gradient: the kernel that computes
    the input gradient reduces nothing."""
    x = Tensor.rand(2, 4, 8, 8, requires_grad=True).realize()
    x.max_pool2d(2).square().sum().backward()
    assert _kernel_names(x.grad)[-1].startswith("E_")


# ---- scheduling: a reduction inside a reduction ----


def test_a_reduction_read_only_by_a_broadcast_reduction_fuses_into_it():
    """r2 (a sum over a padded view of r1, another sum) is read through a broadcast, so it gets a buffer; r1 is read
    once, by r2's kernel, through no broadcast: it fuses there instead of getting a buffer too."""
    a = np.random.default_rng(5).uniform(-1, 1, (3, 4, 5)).astype(np.float32)
    x = Tensor(a).realize()
    r1 = x.sum(2, keepdim=True)  # (3, 4, 1)
    r2 = r1.pad(((0, 0), (1, 2), (0, 0))).sum(1, keepdim=True)  # (3, 1, 1)
    out = x - r2
    GlobalCounters.reset()
    out.realize()
    assert GlobalCounters.kernel_count == 2
    np.testing.assert_allclose(out.numpy(), a - a.sum((1, 2), keepdims=True), rtol=1e-5, atol=1e-6)
