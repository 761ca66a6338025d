"""Convolutions read channels-last on a GPU (schedule/channels_last.py): forward, input gradient and weight gradient
in float16, bfloat16 and TF32 against PyTorch over 1x1, 3x3, stride 2, dilation, groups and odd sizes, the scheduler
having laid the operands out for the tensor cores. The errors are ||C - C_exact|| / ||C_exact||,
C_exact float64 over the rounded inputs. Skipped without a GPU; test_channels_last.py checks the rule and the
kernels' copies and compiles them everywhere."""

import pytest
import torch
import torch.nn.functional as F

import glassgrad.engine.schedule_cache as schedule_cache
from glassgrad import Context, Device, Tensor, dtypes
from glassgrad.codegen import choose_opts
from helpers import needs_gpu
from test_channels_last import GEOMETRIES, record_rewrites

pytestmark = needs_gpu
F16, BF16, F32 = dtypes.float16, dtypes.bfloat16, dtypes.float32
TORCH = {F16: torch.float16, BF16: torch.bfloat16, F32: torch.float32}
TOLERANCE = {F16: 2e-3, BF16: 1e-2, F32: 3e-3}  # the outputs' rounding; TF32's 10-bit inputs


def _rounded(shape, dtype, gen) -> tuple[Tensor, torch.Tensor]:
    x = torch.randn(*shape, generator=gen).to(TORCH[dtype])
    return Tensor(x.float().numpy(), device="CUDA").cast(dtype).realize(), x.double()


def _error(got: Tensor, exact: torch.Tensor) -> float:
    values = torch.from_numpy(got.cast(F32).numpy()).double()
    assert values.shape == exact.shape and not values.isnan().any()
    return float((values - exact).norm() / exact.norm())


@pytest.mark.parametrize("dtype", [F16, BF16, F32])
@pytest.mark.parametrize("geometry", GEOMETRIES)
def test_convolutions_forward_and_backward_channels_last_match_torch(monkeypatch, dtype, geometry):
    x_shape, w_shape, kwargs = GEOMETRIES[geometry]
    gen = torch.Generator().manual_seed(0)
    (x, rx), (w, rw) = _rounded(x_shape, dtype, gen), _rounded(w_shape, dtype, gen)
    g, rg = _rounded(F.conv2d(rx, rw, **kwargs).shape, dtype, gen)
    rewritten = record_rewrites(monkeypatch)
    schedule_cache._cache.clear()
    with Context(TF32=int(dtype == F32)):
        x.requires_grad_(), w.requires_grad_()
        y = x.conv2d(w, **kwargs)
        y.backward(g)
        items = Tensor.schedule(y, x.grad, w.grad)
        tiled = [i for i in items if any(o.op == "TC" for o in choose_opts(i.ast, Device["CUDA"].renderer))]
        # products on the tensor cores, their operands laid out (the heuristics leave a grouped convolution's small
        # products of 8 channels a group on the SIMT path on an H200: its values are compared all the same)
        assert (tiled and rewritten) or (kwargs.get("groups", 1) > 1 and not tiled)
        Tensor.realize(y, x.grad, w.grad)
    rx.requires_grad_(), rw.requires_grad_()
    ry = F.conv2d(rx, rw, **kwargs)
    ry.backward(rg)
    for ours, exact in ((y, ry.detach()), (x.grad, rx.grad), (w.grad, rw.grad)):
        assert _error(ours, exact) < TOLERANCE[dtype]
