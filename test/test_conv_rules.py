"""The convolution rules of schedule/conv.py (a padded input's buffer, the weight packed with the output channels
inside), each alone, the vector lanes the heuristics then give a convolution, and results against PyTorch forward and
backward over awkward geometries, with one thread and with several."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import glassgrad.engine.schedule_cache as schedule_cache
from glassgrad import Context, Device, GlobalCounters, Tensor
from glassgrad.codegen.heuristics import hand_coded_opts
from glassgrad.codegen.opt import Opt
from glassgrad.schedule import conv
from glassgrad.uop import Ops
from helpers import split_every_cpu_kernel

rng = np.random.default_rng(0)


@pytest.fixture(autouse=True)
def cpu_and_empty_cache(on_the_cpu):
    schedule_cache._cache.clear()
    yield
    schedule_cache._cache.clear()


def rand(*shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


def conv_reduce(x: Tensor, w: Tensor, **kwargs):
    return next(u for u in x.conv2d(w, **kwargs).uop.toposort() if u.op is Ops.REDUCE_AXIS)


def buffers_read(reduce) -> list:
    """The CONTIGUOUS nodes a rewritten sum reads (the buffers the rules made)."""
    return [u for u in reduce.toposort() if u.op is Ops.CONTIGUOUS]


def test_a_padded_input_read_through_windows_gets_a_buffer():
    x, w = Tensor(rand(2, 3, 9, 9)).realize(), Tensor(rand(4, 3, 3, 3)).realize()
    out = conv.buffer_padded_windows(conv_reduce(x, w, padding=1))
    assert out is not None and out.op is Ops.REDUCE_AXIS
    (padded,) = buffers_read(out)
    assert padded.src[0].op is Ops.PAD and padded.shape == (2, 3, 11, 11)
    assert conv.buffer_padded_windows(out) is None  # the windows now read a buffer: nothing left to do


def test_the_rules_ask_the_renderer_and_name_no_device(monkeypatch):
    """A renderer that does not buffer windows gets neither rule's buffers (a GPU's: its threads load masked)."""
    x, w = Tensor(rand(2, 3, 9, 9)).realize(), Tensor(rand(4, 3, 3, 3)).realize()
    reduce = conv_reduce(x, w, padding=1)
    assert conv.buffer_padded_windows(reduce) is not None
    monkeypatch.setattr(type(Device["CPU"].renderer), "buffers_windows", False)
    assert conv.buffer_padded_windows(reduce) is None and conv.pack_broadcast_weight(reduce) is None


@pytest.mark.parametrize(
    "case",
    [
        ("no padding", lambda x, w: conv_reduce(x, w)),
        ("a padded elementwise product", lambda x, w: (x.pad(((0, 0), (0, 0), (1, 1), (1, 1))) * 2).sum(-1).uop),
        ("a padded sum that is no product", lambda x, w: x.avg_pool2d(3, 1, 1).uop.src[0].src[0]),
    ],
    ids=lambda c: c[0],
)
def test_the_padded_input_rule_leaves_other_sums_alone(case):
    x, w = Tensor(rand(2, 3, 9, 9)).realize(), Tensor(rand(4, 3, 3, 3)).realize()
    node = case[1](x, w)
    assert conv.buffer_padded_windows(node) is None


def test_the_weight_is_packed_with_the_output_channels_inside():
    x, w = Tensor(rand(2, 3, 9, 9)).realize(), Tensor(rand(4, 3, 3, 3)).realize()
    out = conv.pack_broadcast_weight(conv_reduce(x, w))
    assert out is not None and out.shape == conv_reduce(x, w).shape
    (packed,) = buffers_read(out)
    assert [s for s in packed.shape if s != 1] == [3, 3, 3, 4]  # (C_in, kH, kW, C_out)
    assert conv.pack_broadcast_weight(out) is None  # packed already


def test_grouped_weights_are_packed_per_group():
    x, w = Tensor(rand(2, 4, 9, 9)).realize(), Tensor(rand(6, 2, 3, 3)).realize()
    (packed,) = buffers_read(conv.pack_broadcast_weight(conv_reduce(x, w, groups=2)))
    # (groups, C_in / g, kH, kW, C_out / g): each group's weight stays together, as the parts of a split sum do
    assert [s for s in packed.shape if s != 1] == [2, 2, 3, 3, 3]


def weight_gradient_reduce(c_in: int):
    x = Tensor(rand(2, c_in, 9, 9), requires_grad=True).realize()
    w = Tensor(rand(4, c_in, 3, 3), requires_grad=True).realize()
    (gw,) = x.conv2d(w).square().sum().gradient(w)
    return next(u for u in gw.uop.toposort() if u.op is Ops.REDUCE_AXIS and u.shape[-2:] == (3, 3))


def test_the_weight_rule_leaves_matmuls_1x1_convs_and_little_reused_gradients_alone():
    a, b = Tensor(rand(64, 40)).realize(), Tensor(rand(3, 40, 96)).realize()
    matmul = next(u for u in (a @ b).uop.toposort() if u.op is Ops.REDUCE_AXIS)
    assert conv.pack_broadcast_weight(matmul) is None
    x, w = Tensor(rand(2, 3, 9, 9)).realize(), Tensor(rand(4, 3, 1, 1)).realize()
    assert conv.pack_broadcast_weight(conv_reduce(x, w)) is None
    assert conv.pack_broadcast_weight(weight_gradient_reduce(3)) is None  # each output gradient read 27 times


def test_a_weight_gradients_output_gradient_is_packed_with_the_channels_inside():
    """dW[o, i, ky, kx] = sum over (n, y, x) of dY[n, o, y, x] * X[n, i, y + ky, x + kx]: dY, read once per (i, ky, kx),
    is copied to (n, y, x, o), so that a vector of output channels is one load (beautiful_mnist's weight gradients)."""
    reduce = weight_gradient_reduce(8)  # each output gradient read 72 times
    out = conv.pack_broadcast_weight(reduce)
    assert out is not None and out.shape == reduce.shape
    (packed,) = buffers_read(out)
    assert [s for s in packed.shape if s != 1] == [2, 7, 7, 4]  # (N, H_out, W_out, C_out)
    assert conv.pack_broadcast_weight(out) is None  # packed already


def test_a_weight_gradient_summed_in_parts_keeps_each_parts_output_gradient_together():
    """A large batch's weight gradient sums 2 parts of 64 images (split_reduce.cache_sized_part): dY is packed as
    (part, n, y, x, o), each part's 64 images together, not (n, y, x, part, o), where a part's kernel would read from
    the whole buffer and no part would stay in cache."""
    x = Tensor(rand(128, 8, 14, 14), requires_grad=True).realize()
    w = Tensor(rand(8, 8, 3, 3), requires_grad=True).realize()
    (gw,) = x.conv2d(w).square().sum().gradient(w)
    reduce = next(u for u in gw.uop.toposort() if u.op is Ops.REDUCE_AXIS and u.shape[0] == 2)  # the parts' sums
    (packed,) = buffers_read(conv.pack_broadcast_weight(reduce))
    assert [s for s in packed.shape if s != 1] == [2, 64, 12, 12, 8]


def test_noopt_other_devices_and_integers_get_neither_rule():
    x, w = rand(2, 3, 9, 9), rand(4, 3, 3, 3)
    with Context(NOOPT=1):
        reduce = conv_reduce(Tensor(x).realize(), Tensor(w).realize(), padding=1)
        assert conv.buffer_padded_windows(reduce) is None and conv.pack_broadcast_weight(reduce) is None
    reduce = conv_reduce(Tensor(x, device="PYTHON").realize(), Tensor(w, device="PYTHON").realize(), padding=1)
    assert conv.buffer_padded_windows(reduce) is None and conv.pack_broadcast_weight(reduce) is None
    xi, wi = Tensor(x.astype(np.int32)).realize(), Tensor(w.astype(np.int32)).realize()
    reduce = conv_reduce(xi, wi, padding=1)
    assert conv.buffer_padded_windows(reduce) is None and conv.pack_broadcast_weight(reduce) is None


def test_a_padded_convolution_is_three_kernels_and_its_lanes_are_the_output_channels():
    """The padded input, the packed weight, and the convolution, whose 16 vector lanes are output channels."""
    x, w = Tensor(rand(4, 8, 12, 12)).realize(), Tensor(rand(32, 8, 3, 3)).realize()
    out = x.conv2d(w, padding=1)
    items = out.schedule()
    assert len(items) == 3
    opts = hand_coded_opts(items[-1].ast, Device["CPU"].renderer.vector_lanes)
    # (N, groups, C_out, H, W): 16 output channels a vector, a block of 12 columns x 2 vectors (24 accumulators, 2
    # registers for the weight's vectors), the window not unrolled (its terms would be added as a tree, not
    # multiply-added into the accumulators)
    assert opts == [Opt("UPCAST", 2, 16), Opt("UPCAST", 4, 12), Opt("UPCAST", 2, 2)]
    GlobalCounters.reset()
    expected = F.conv2d(torch.tensor(x.numpy()), torch.tensor(w.numpy()), padding=1).numpy()
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    "width, c_out, block",
    [(28, 64, (14, 2)), (12, 32, (12, 2)), (28, 16, (28, 1)), (14, 128, (14, 2)), (20, 64, (10, 2)), (9, 48, (9, 3))],
)
def test_the_register_block_across_output_channels_fills_the_registers(width, c_out, block):
    """a columns x b vectors of 16 channels with b registers left for the weight's vectors (32 in all): no more loads
    a step than multiply-adds where any block has that (not with one vector of channels), then the most accumulators
    a*b, then the widest; the convolution still matches PyTorch."""
    a, b = rand(2, 8, 5, width), rand(c_out, 8, 3, 3)
    out = Tensor(a).realize().conv2d(Tensor(b).realize(), padding=1)
    opts = hand_coded_opts(out.schedule()[-1].ast, Device["CPU"].renderer.vector_lanes)
    assert opts == [Opt("UPCAST", 2, 16)] + [Opt("UPCAST", ax, n) for ax, n in zip((4, 2), block) if n > 1]
    expected = F.conv2d(torch.tensor(a), torch.tensor(b), padding=1).numpy()
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-4, atol=1e-4)


def test_a_weight_gradients_block_takes_a_second_column_axis_beside_a_short_kernel_row():
    """(C_out, C_in, kH, kW) with lanes along C_out: 5 columns of the kernel row x 2 vectors are 10 accumulators, under
    MIN_BLOCK; two input channels more make 20, each step 2 vector loads of the packed output gradient and 10 scalar
    broadcasts of the input for 20 multiply-adds. The gradient still matches PyTorch."""
    a, b = rand(4, 32, 12, 12), rand(32, 32, 5, 5)
    x, w = Tensor(a).realize(), Tensor(b, requires_grad=True).realize()
    (gw,) = (x.conv2d(w) * x.conv2d(w)).sum().gradient(w)
    ast = gw.schedule()[-1].ast
    assert ast.src[0].src[1].arg.shape[-6:] == (32, 32, 1, 1, 5, 5)  # (C_out, C_in, ..., kH, kW)
    opts = hand_coded_opts(ast, Device["CPU"].renderer.vector_lanes)
    assert opts == [Opt("UPCAST", 2, 16), Opt("UPCAST", 7, 5), Opt("UPCAST", 3, 2), Opt("UPCAST", 2, 2)]
    tx, tw = torch.tensor(a), torch.tensor(b, requires_grad=True)
    (F.conv2d(tx, tw) ** 2).sum().backward()
    np.testing.assert_allclose(gw.numpy(), tw.grad.numpy(), rtol=1e-3, atol=1e-2)


@pytest.mark.parametrize(
    "shape, pads, lanes",
    [
        ((32, 4, 28, 28), ((0, 0), (0, 0), (1, 1), (1, 1)), 30),  # a convolution's padded input: rows of 30
        ((3, 5, 7), ((0, 0), (2, 1), (1, 2)), 10),
        ((2, 31), ((0, 0), (1, 0)), None),  # 32: GCC vectorizes the guarded loop itself (a multiple of 8 floats)
        ((2, 54, 54), ((0, 0), (1, 1), (1, 1)), None),  # 56: the same
        ((2, 31), ((0, 0), (1, 2)), 17),  # 34 = 2 * 17
        ((4, 60), ((0, 0), (1, 1)), 31),  # 62: the largest divisor up to 32 lanes
        ((2, 36), ((0, 0), (0, 1)), None),  # 37 is prime: no lanes
        ((1, 1), ((0, 0), (3, 2)), 6),
    ],
)
def test_a_padded_copy_takes_its_innermost_axis_as_scalar_lanes(shape, pads, lanes, monkeypatch):
    """The padding's guard changes along the innermost axis: that axis becomes scalar lanes on the CPU (each lane's
    guard simplified on its own) unless GCC vectorizes the row itself, never on a GPU; the copy is exact with one
    thread and with three."""
    a = rand(*shape)
    out = Tensor(a).realize().pad(pads).contiguous()
    (item,) = out.schedule()
    vector_lanes = Device["CPU"].renderer.vector_lanes
    last = len(item.ast.src[0].src[1].arg.shape) - 1  # the kernel's innermost axis (unpadded outer axes merge)
    assert hand_coded_opts(item.ast, vector_lanes) == ([Opt("UPCAST", last, lanes)] if lanes else [])
    assert hand_coded_opts(item.ast, vector_lanes, has_local=True) == []
    for threads in (1, 3):
        got = run_with_threads(lambda: Tensor(a).realize().pad(pads).contiguous().numpy(), threads, monkeypatch)
        np.testing.assert_array_equal(got, np.pad(a, pads))


@pytest.mark.parametrize("width, lanes", [(5, 7), (6, None)])  # rows of 7 doubles; 8 doubles make GCC's vectors
def test_guarded_lanes_count_the_row_in_bytes(width, lanes):
    a = rand(3, width, dtype=np.float64)
    out = Tensor(a).realize().pad(((0, 0), (1, 1))).contiguous()
    (item,) = out.schedule()
    assert hand_coded_opts(item.ast, Device["CPU"].renderer.vector_lanes) == (
        [Opt("UPCAST", 1, lanes)] if lanes else []
    )
    np.testing.assert_array_equal(out.numpy(), np.pad(a, ((0, 0), (1, 1))))


def test_a_concatenation_along_the_innermost_axis_stays_exact_with_guarded_lanes():
    a, b = rand(3, 7, 13), rand(3, 7, 22)
    out = Tensor(a).realize().cat(Tensor(b).realize(), dim=-1)
    (item,) = out.schedule()
    # the 3 x 7 rows are one axis of 21 (schedule/merge_axes.py); 35 = 5 * 7 lanes along the concatenated one
    assert hand_coded_opts(item.ast, Device["CPU"].renderer.vector_lanes) == [Opt("UPCAST", 1, 7)]
    np.testing.assert_array_equal(out.numpy(), np.concatenate([a, b], axis=-1))


GEOMETRIES = {
    "odd_sizes_padding_1": ((3, 5, 11, 7), (6, 5, 3, 3), dict(padding=1)),
    "padding_0": ((2, 3, 10, 10), (16, 3, 3, 3), dict()),
    "padding_2_kernel_5": ((2, 4, 9, 9), (32, 4, 5, 5), dict(padding=2)),
    "uneven_padding_stride_2": ((2, 3, 13, 12), (8, 3, 3, 2), dict(padding=(2, 1), stride=2)),
    "dilation_2": ((2, 3, 12, 12), (16, 3, 3, 3), dict(padding=2, dilation=2)),
    "groups_2": ((2, 4, 9, 9), (32, 2, 3, 3), dict(padding=1, groups=2)),
    "depthwise": ((2, 8, 9, 9), (8, 1, 3, 3), dict(padding=1, groups=8)),
    "one_output_channel": ((1, 3, 7, 7), (1, 3, 3, 3), dict(padding=1)),
    "float64": ((2, 3, 8, 8), (16, 3, 3, 3), dict(padding=1)),
}


def run_with_threads(fn, threads: int, monkeypatch):
    split_every_cpu_kernel(monkeypatch, threads)
    return fn()


@pytest.mark.parametrize("name", sorted(GEOMETRIES))
def test_convolutions_match_torch_forward_and_backward_with_one_thread_and_three(name, monkeypatch):
    xs, ws, kwargs = GEOMETRIES[name]
    dtype = np.float64 if name == "float64" else np.float32
    a, b, bias = rand(*xs, dtype=dtype), rand(*ws, dtype=dtype), rand(ws[0], dtype=dtype)
    ta, tb, tbias = (torch.tensor(v, requires_grad=True) for v in (a, b, bias))
    tout = F.conv2d(ta, tb, tbias, **kwargs)
    (tout.relu() * tout).sum().backward()

    def ours():
        x, w, c = (Tensor(v, requires_grad=True) for v in (a, b, bias))
        out = x.conv2d(w, c, **kwargs)
        (out.relu() * out).sum().backward()
        return out.numpy(), x.grad.numpy(), w.grad.numpy(), c.grad.numpy()

    tol = 1e-10 if dtype == np.float64 else 2e-4
    one = run_with_threads(ours, 1, monkeypatch)
    for got, want in zip(one, (tout, ta.grad, tb.grad, tbias.grad)):
        np.testing.assert_allclose(got, want.detach().numpy(), rtol=tol, atol=tol * 10)
    three = run_with_threads(ours, 3, monkeypatch)
    for got, same in zip(three, one):
        np.testing.assert_allclose(got, same, rtol=tol, atol=tol)


def test_a_fused_input_is_computed_once_into_the_padded_buffer():
    """relu(x) before a padded convolution: the padded buffer holds relu(x), the convolution reads it."""
    a, b = rand(2, 4, 8, 8), rand(16, 4, 3, 3)
    out = Tensor(a).realize().relu().conv2d(Tensor(b).realize(), padding=1)
    expected = F.conv2d(torch.tensor(a).relu(), torch.tensor(b), padding=1).numpy()
    items = out.schedule()
    assert len(items) == 3 and not any(u.op is Ops.WHERE for u in items[-1].ast.toposort())
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-4, atol=1e-4)


def test_a_training_step_computes_each_convolution_once():
    """conv2(relu(conv1(x))) and its gradients: conv1's weight gradient reads x's padded buffer through its windows,
    while its output gradient comes through the forward pass that read the same buffer; the rule gives the window its
    buffer and leaves the other operand alone (a buffer of that buffer made the forward pass again: ResNet-18's step
    was 3,251 kernels instead of 641). The gradients against PyTorch."""
    a, w1, w2 = rand(2, 3, 8, 8), rand(4, 3, 3, 3), rand(4, 4, 3, 3)
    x = Tensor(a).realize()
    p1, p2 = Tensor(w1, requires_grad=True).realize(), Tensor(w2, requires_grad=True).realize()
    loss = x.conv2d(p1, padding=1).relu().conv2d(p2, padding=1).square().sum()
    loss.backward()
    items = Tensor.schedule(loss, p1.grad, p2.grad)
    products = [i for i in items if i.ast.op is Ops.SINK and any(u.op is Ops.REDUCE_AXIS for u in i.ast.toposort())
                and i.bufs[0].size == 2 * 4 * 8 * 8]  # fmt: skip
    assert len(products) == 3  # conv1 and conv2 forward, conv2's input gradient
    padded = [i for i in items if i.ast.op is Ops.SINK and i.bufs[0].size == 2 * 3 * 10 * 10]
    assert len(padded) == 1  # x's padded buffer, once
    xt, t1, t2 = torch.tensor(a), torch.tensor(w1, requires_grad=True), torch.tensor(w2, requires_grad=True)
    F.conv2d(F.conv2d(xt, t1, padding=1).relu(), t2, padding=1).square().sum().backward()
    for ours, theirs in ((p1, t1), (p2, t2)):
        np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), rtol=1e-3, atol=1e-3)
