"""schedule/channels_last.py: a convolution's operands read channels-last where the renderer prefers it, checked on
the CPU with the preference forced (as CUDA's renderer answers it, or for every dtype): the rule alone (where it
fires, what it leaves alone), results against PyTorch forward and backward, and the CUDA kernels it leads to, each
operand copied 16 bytes at a time, compiled with NVRTC (no GPU). test_channels_last_gpu.py runs them on a GPU."""

import importlib

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import glassgrad.engine.schedule_cache as schedule_cache
from glassgrad import Device, Tensor, dtypes
from glassgrad.codegen import get_program
from glassgrad.codegen.tensor_cores import lower_operand, match_matmul, tensor_core_opts
from glassgrad.schedule.channels_last import channels_last_operands
from glassgrad.uop.ops import Ops, UOp
from glassgrad.uop.rewrite import PatternMatcher, UPat
from helpers import needs_nvrtc, nvrtc_log
from test_tensor_cores import HOPPER

kernelize = importlib.import_module("glassgrad.schedule.kernelize")  # the module (the package exports its function)
BF16 = dtypes.bfloat16
rng = np.random.default_rng(0)

# name: (input shape, weight shape, conv2d's keywords); every one has 8 or more channels a group and an output width
# that is no multiple of 8 (or a stride): NCHW, a tiled copy of its windows goes element by element
GEOMETRIES = {
    "3x3, padding 1, 14 wide": ((2, 16, 14, 14), (16, 16, 3, 3), {"padding": 1}),
    "3x3, stride 2, odd size": ((2, 16, 15, 15), (24, 16, 3, 3), {"padding": 1, "stride": 2}),
    "3x3, dilation 2": ((2, 16, 13, 13), (16, 16, 3, 3), {"padding": 2, "dilation": 2}),
    "3x3, 2 groups of 8 channels": ((2, 16, 14, 14), (16, 8, 3, 3), {"padding": 1, "groups": 2}),
    "1x1, 14 wide": ((2, 16, 14, 14), (32, 16, 1, 1), {}),
    "1x1, stride 2": ((2, 16, 14, 14), (32, 16, 1, 1), {"stride": 2}),
    "3x2 kernel, no padding, odd sizes": ((3, 24, 11, 10), (8, 24, 3, 2), {}),
}


@pytest.fixture(autouse=True)
def cpu_and_empty_cache(on_the_cpu):
    schedule_cache._cache.clear()  # a graph of the same shape scheduled with another preference
    yield
    schedule_cache._cache.clear()


def _prefer(monkeypatch, prefers) -> None:
    monkeypatch.setattr(Device["CPU"].renderer, "prefers_channels_last", prefers)


def _convolution(x_shape, w_shape, kwargs, dtype=BF16) -> tuple[Tensor, Tensor, Tensor]:
    """The convolution's output and its input's and weight's gradients (for an output gradient g), unrealized."""
    x = Tensor(rng.standard_normal(x_shape).astype(np.float32)).cast(dtype).realize().requires_grad_()
    w = Tensor(rng.standard_normal(w_shape).astype(np.float32)).cast(dtype).realize().requires_grad_()
    y = x.conv2d(w, **kwargs)
    g = Tensor(rng.standard_normal(y.shape).astype(np.float32)).cast(dtype).realize()
    y.backward(g)
    return y, x.grad, w.grad


def record_rewrites(monkeypatch) -> list[UOp]:
    """The sums the scheduler rewrites channels-last from now on (the rule's own table, recording)."""
    rewritten = []

    def recorded(reduce: UOp) -> UOp | None:
        if (out := channels_last_operands(reduce)) is not None:
            rewritten.append(out)
        return out

    monkeypatch.setattr(kernelize, "channels_last", PatternMatcher([(UPat(Ops.REDUCE_AXIS, name="reduce"), recorded)]))
    return rewritten


def _sum(t: Tensor) -> UOp:
    """The convolution's sum in t's graph (one over several axes)."""
    return next(u for u in t.uop.toposort() if u.op is Ops.REDUCE_AXIS and len(u.arg[1]) > 1)


def _channels_last_buffers(node: UOp) -> list[UOp]:
    """The buffers a rewritten sum reads laid out channels-last (N, *S, C)."""
    return [
        u
        for u in node.toposort()
        if u.op is Ops.CONTIGUOUS and u.src[0].op is Ops.PERMUTE and u.src[0].arg == (0, 2, 3, 1)
    ]


def _summed(node: UOp) -> UOp:
    """The sum itself under the inverse permute (a weight gradient's output axes reordered)."""
    while node.op is not Ops.REDUCE_AXIS:
        node = node.src[0]
    return node


def test_the_rule_asks_the_renderer_for_the_operands_dtype(monkeypatch):
    x_shape, w_shape, kwargs = GEOMETRIES["3x3, padding 1, 14 wide"]
    sixteen_bit, single = (
        _sum(_convolution(x_shape, w_shape, kwargs)[0]),
        _sum(_convolution(x_shape, w_shape, kwargs, dtypes.float32)[0]),
    )
    assert channels_last_operands(sixteen_bit) is None  # the CPU's renderer prefers no layout
    _prefer(monkeypatch, HOPPER.prefers_channels_last)  # CUDA's: where the tensor cores multiply the dtype
    assert channels_last_operands(sixteen_bit) is not None
    assert channels_last_operands(single) is None  # float32 without TF32: the SIMT kernels
    _prefer(monkeypatch, lambda dtype: False)
    assert channels_last_operands(sixteen_bit) is None


@pytest.mark.parametrize("geometry", GEOMETRIES)
def test_a_convolution_and_its_gradients_read_channels_last(monkeypatch, geometry):
    _prefer(monkeypatch, HOPPER.prefers_channels_last)
    y, dx, dw = _convolution(*GEOMETRIES[geometry])
    for t in (y, dx, dw):
        reduce = _sum(t)
        out = channels_last_operands(reduce)
        assert out is not None and out.shape == reduce.shape
        assert _channels_last_buffers(out)
        assert channels_last_operands(_summed(out)) is None  # laid out already: nothing left to do
    # the forward sum's innermost reduced axis is now the channels (kh, kw, c), its output axes where they were
    out = channels_last_operands(_sum(y))
    assert out.op is Ops.REDUCE_AXIS and out.src[0].op is Ops.PERMUTE and out.src[0].arg[-1] == len(out.shape) - 3


@pytest.mark.parametrize(
    "case",
    [
        ("3 input channels (an image)", lambda: _sum(_convolution((2, 3, 14, 14), (16, 3, 3, 3), {"padding": 1})[0])),
        ("depthwise", lambda: _sum(_convolution((2, 16, 14, 14), (16, 1, 3, 3), {"padding": 1, "groups": 16})[0])),
        (
            "copied 16 bytes at a time as it lies",
            lambda: _sum(_convolution((2, 16, 16, 16), (16, 16, 3, 3), {"padding": 1})[0]),
        ),
        ("a matmul", lambda: (Tensor.empty(64, 32, dtype=BF16) @ Tensor.empty(32, 48, dtype=BF16)).uop.src[0]),
        ("a 3-d linear layer's weight gradient", lambda: _linear_weight_gradient()),
    ],
    ids=lambda c: c[0],
)
def test_the_rule_leaves_other_sums_alone(monkeypatch, case):
    _prefer(monkeypatch, lambda dtype: True)
    node = case[1]()
    reduce = node if node.op is Ops.REDUCE_AXIS else _summed(node)
    assert channels_last_operands(reduce) is None


def _linear_weight_gradient() -> UOp:
    """A weight gradient summed over a batch and its tokens (two axes, as a convolution's), already laid out."""
    x = Tensor.empty(4, 32, 64, dtype=BF16)
    w = Tensor.empty(48, 64, dtype=BF16).requires_grad_()
    x.linear(w).backward(Tensor.empty(4, 32, 48, dtype=BF16))
    return _sum(w.grad)


LAID_OUT = {  # the layout changes: every GEOMETRIES case, and 1-d and 3-d ones
    **GEOMETRIES,
    "conv1d, stride 2": ((2, 16, 13), (8, 16, 3), {"padding": 1, "stride": 2}),
    "conv3d, 6 cubed": ((2, 8, 6, 6, 6), (8, 8, 3, 3, 3), {"padding": 1}),
}
KEPT = {  # the forward sum keeps NCHW (its output gradient may still be laid out for the weight's)
    "3 input channels": ((2, 3, 14, 14), (16, 3, 3, 3), {"padding": 1}),
    "depthwise": ((2, 16, 14, 14), (16, 1, 3, 3), {"padding": 1, "groups": 16}),
}


@pytest.mark.parametrize("geometry", [*LAID_OUT, *KEPT])
def test_results_match_torch_with_the_layout_forced_on(monkeypatch, geometry):
    """float32 on the CPU, the preference forced for every dtype: the layout changes, the results do not."""
    x_shape, w_shape, kwargs = {**LAID_OUT, **KEPT}[geometry]
    nd = len(x_shape) - 2
    torch_conv = getattr(F, f"conv{nd}d")
    x, w = rng.standard_normal(x_shape).astype(np.float32), rng.standard_normal(w_shape).astype(np.float32)
    g = rng.standard_normal(torch_conv(torch.from_numpy(x), torch.from_numpy(w), **kwargs).shape).astype(np.float32)
    tx, tw = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    torch_conv(tx, tw, **kwargs).backward(torch.from_numpy(g))
    expected = torch_conv(tx, tw, **kwargs).detach(), tx.grad, tw.grad
    rewritten = record_rewrites(monkeypatch)
    _prefer(monkeypatch, lambda dtype: True)
    ox, ow = Tensor(x, requires_grad=True), Tensor(w, requires_grad=True)
    y = getattr(ox, f"conv{nd}d")(ow, **kwargs)
    y.backward(Tensor(g))
    Tensor.realize(y, ox.grad, ow.grad)
    assert rewritten or geometry in KEPT  # the scheduler laid them out
    for ours, theirs in zip((y, ox.grad, ow.grad), expected, strict=True):
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-4, atol=1e-4)


def _copied_16_bytes_at_a_time(ast: UOp) -> bool:
    """Whether every operand of a tiled product is copied a chunk at a time (cp.async or vector loads)."""
    mm = match_matmul(ast)
    lanes = 16 // mm.dtype.itemsize
    return all(o.strided is not None or lower_operand(ast, o, lanes, HOPPER).chunk is not None for o in (mm.a, mm.b))


@needs_nvrtc
@pytest.mark.parametrize("geometry", ["3x3, padding 1, 14 wide", "1x1, stride 2"])
def test_the_cuda_kernels_copy_every_operand_16_bytes_at_a_time_and_compile(monkeypatch, geometry):
    """Scheduled as for CUDA (its renderer's preference), every tiled kernel of the forward and backward pass copies
    its operands 16 bytes at a time (without the layout, the windows go element by element) and compiles."""
    tiled = lambda items: [i.ast for i in items if tensor_core_opts(i.ast, HOPPER)]  # noqa: E731
    before = tiled(Tensor.schedule(*_convolution(*GEOMETRIES[geometry])))
    assert not all(_copied_16_bytes_at_a_time(ast) for ast in before)
    _prefer(monkeypatch, HOPPER.prefers_channels_last)
    schedule_cache._cache.clear()
    after = tiled(Tensor.schedule(*_convolution(*GEOMETRIES[geometry])))
    assert len(after) == len(before) == 3  # the forward sum, the input's and the weight's gradients
    for ast in after:
        assert _copied_16_bytes_at_a_time(ast)
        nvrtc_log(get_program(ast, HOPPER, tensor_core_opts(ast, HOPPER)).src, "sm_90")  # fails on an error
