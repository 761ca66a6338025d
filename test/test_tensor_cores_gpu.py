"""Tiled contractions on a GPU (codegen/tensor_cores.py): every configuration, and what the heuristics choose, against
PyTorch, forward and backward: float16, bfloat16, float32 (SIMT) and TF32; odd sizes (1, 7, 50257), transposed,
unaligned and batched operands, prologues (scales, masks, casts, a transposed view) and epilogues (bias, GELU,
residual, casts). The errors are ||C - C_exact|| / ||C_exact||, C_exact the float64 product of the rounded inputs.
Skipped without a GPU; test_tensor_cores.py checks the same kernels compile everywhere.
"""

import sys

import pytest
import torch

import glassgrad.engine.schedule_cache as schedule_cache
from glassgrad import Context, Device, GlobalCounters, Tensor, TinyJit, dtypes
from glassgrad.codegen import choose_opts, get_program
from glassgrad.codegen.opt import Opt
from glassgrad.codegen.tensor_cores import tensor_core_actions
from glassgrad.engine.realize import buffer_of
from helpers import needs_gpu

pytestmark = needs_gpu
F16, BF16, F32 = dtypes.float16, dtypes.bfloat16, dtypes.float32
TORCH = {F16: torch.float16, BF16: torch.bfloat16, F32: torch.float32}
# the output's rounding (half 2**-11, bfloat16 2**-8), float32's sums, TF32's 10-bit inputs
TOLERANCE = {F16: 2e-3, BF16: 1e-2, F32: 1e-5, "tf32": 3e-3}
FORMS = {
    "a@b": lambda a, b: a @ b,
    "a.T@b": lambda a, b: a.transpose(-1, -2) @ b,
    "a@b.T": lambda a, b: a @ b.transpose(-1, -2),
    "a.T@b.T": lambda a, b: a.transpose(-1, -2) @ b.transpose(-1, -2),
}


def _inputs(dtype, *shapes, seed=0):
    """Random normal tensors on the GPU in `dtype`, and the same values as float64 torch tensors."""
    gen = torch.Generator().manual_seed(seed)
    rounded = [torch.randn(*s, generator=gen).to(TORCH[dtype]) for s in shapes]
    ours = [Tensor(x.float().numpy(), device="CUDA").cast(dtype).realize() for x in rounded]
    return ours, [x.double() for x in rounded]


def _values(t: Tensor) -> torch.Tensor:
    return torch.from_numpy(t.cast(F32).numpy()).double()


def _error(got: torch.Tensor, exact: torch.Tensor) -> float:
    assert got.shape == exact.shape and not got.isnan().any(), "every element written, none NaN"
    return float((got - exact).norm() / exact.norm())


def _uses_tiles(t: Tensor) -> bool:
    renderer = Device["CUDA"].renderer
    return any(o.op == "TC" for item in t.schedule() for o in choose_opts(item.ast, renderer))


def _run(t: Tensor, opt: Opt) -> torch.Tensor:
    """t's one kernel launched with `opt`, its output filled with NaN before."""
    (item,) = t.schedule()
    bufs = [buffer_of(b).ensure_allocated() for b in item.bufs]
    bufs[0].copyin(b"\xff" * bufs[0].nbytes)
    spec = get_program(item.ast, Device["CUDA"].renderer, (opt,))
    Device["CUDA"].load(spec.name, spec.src)(
        *(b.handle for b in bufs), global_size=spec.global_size, local_size=spec.local_size, wait=True
    )
    out = torch.frombuffer(bytearray(bufs[0].as_bytes()), dtype=TORCH[bufs[0].dtype])
    return out.reshape(t.shape).double()


def _every_configuration(t: Tensor, exact: torch.Tensor, tolerance: float) -> int:
    """Runs t under every configuration that takes it; how many did."""
    (item,) = t.schedule()
    actions = tensor_core_actions(item.ast, Device["CUDA"].renderer)
    for opt in actions:
        error = _error(_run(t, opt), exact)
        assert error < tolerance, f"{Device['CUDA'].renderer.tile_configs[opt.amount]}: {error}"
    return len(actions)


def _conv(x, w, padding, **kwargs):
    if isinstance(x, torch.Tensor):
        return torch.nn.functional.conv2d(x, w, padding=padding, **kwargs)
    return x.conv2d(w, padding=padding, **kwargs)


def _gelu(x):
    return torch.nn.functional.gelu(x) if isinstance(x, torch.Tensor) else x.gelu()


CASES = {  # name: (dtype, input shapes, the kernel, glassgrad and torch alike) -- every way of copying an operand
    "half, scaled A, B transposed, 50257 columns, bias and GELU": (
        F16, [(3, 37, 70), (50257, 70), (50257,)], lambda a, w, bias: _gelu((a * 0.5) @ w.transpose(-1, -2) + bias)),
    "bfloat16, A transposed, B's rows unaligned": (
        BF16, [(2, 70, 37), (70, 101)], lambda a, b: a.transpose(-1, -2) @ b[:, 1:]),
    "float32, attention heads back into rows, residual": (
        F32, [(2, 12, 33, 64), (768, 50), (2, 33, 50)],
        lambda y, w, res: y.transpose(1, 2).reshape(2, 33, 768) @ w + res),
    "float32, 7 x 7 x 7": (F32, [(7, 7), (7, 7)], lambda a, b: a @ b),
    # a convolution's windows: read along the image's rows a chunk at a time, lane by lane where a chunk crosses the
    # padding; an odd width or a stride leaves no chunk (element by element)
    "bfloat16, 3 x 3 convolution, padding 1": (BF16, [(2, 8, 16, 16), (16, 8, 3, 3)], lambda x, w: _conv(x, w, 1)),
    "half, 3 x 3 convolution, padding 2, dilation 2": (
        F16, [(3, 8, 24, 24), (16, 8, 3, 3)], lambda x, w: _conv(x, w, 2, dilation=2)),
    "half, 3 x 3 convolution, odd width, stride 2": (
        F16, [(2, 5, 13, 13), (16, 5, 3, 3)], lambda x, w: _conv(x, w, 1, stride=2)),
}  # fmt: skip


@pytest.mark.parametrize("case", CASES)
def test_every_configuration_computes_every_kind_of_operand(case):
    dtype, shapes, make = CASES[case]
    ours, exact = _inputs(dtype, *shapes)
    for tf32 in (0, 1) if dtype == F32 else (0,):
        with Context(TF32=tf32):
            ran = _every_configuration(make(*ours), make(*exact), TOLERANCE["tf32" if tf32 else dtype])
            assert ran >= 3


@pytest.mark.parametrize("dtype,shapes", [(F16, [(1, 7), (7, 50257)]), (BF16, [(50257, 7), (7, 1)])])
def test_one_row_or_one_column_over_50257(dtype, shapes):
    (a, b), (ra, rb) = _inputs(dtype, *shapes)
    assert _every_configuration(a @ b, ra @ rb, TOLERANCE[dtype]) >= 3


@pytest.mark.parametrize("dtype", [F16, BF16, F32])
@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("m,k,n", [(256, 512, 128), (77, 300, 1001)])
def test_products_match_pytorch(dtype, form, m, k, n):
    shapes = [(k, m) if "a.T" in form else (m, k), (n, k) if "b.T" in form else (k, n)]
    (a, b), (ra, rb) = _inputs(dtype, *shapes)
    out = FORMS[form](a, b)
    assert _uses_tiles(out)
    assert _error(_values(out), FORMS[form](ra, rb)) < TOLERANCE[dtype]


def test_tf32_when_allowed():
    (a, b), (ra, rb) = _inputs(F32, (300, 700), (700, 200))
    with Context(TF32=1):
        out = (a @ b).realize()
        (item,) = (a @ b).schedule()
        assert Device["CUDA"].renderer.tile_configs[choose_opts(item.ast, Device["CUDA"].renderer)[0].amount].tf32
    error = _error(_values(out), ra @ rb)
    assert 1e-5 < error < TOLERANCE["tf32"]  # TF32's rounding shows; float32 would be near 1e-7
    assert _error(_values(a @ b), ra @ rb) < TOLERANCE[F32]  # off again: float32


@pytest.mark.parametrize("dtype", [F16, BF16, F32])
def test_a_linear_layers_gradients_over_50257_outputs(dtype):
    (x, w, bias, g), (rx, rw, rbias, rg) = _inputs(dtype, (3, 37, 70), (50257, 70), (50257,), (3, 37, 50257))
    for t in (x, w, bias):
        t.requires_grad_()
    out = x.linear(w, bias)
    out.backward(g)  # dx = g @ w, dw = g.T @ x: g's rows are 50257 elements apart
    assert all(_uses_tiles(t) for t in (out, x.grad, w.grad))
    tolerance = TOLERANCE[dtype] * (4 if dtype == F32 else 1)  # sums of 111 to 50257 terms
    assert _error(_values(out), rx @ rw.T + rbias) < tolerance
    assert _error(_values(x.grad), rg @ rw) < tolerance
    assert _error(_values(w.grad), rg.reshape(-1, 50257).T @ rx.reshape(-1, 70)) < tolerance


@pytest.mark.parametrize("dtype", [F16, BF16])
def test_prologues_forward_and_backward(dtype):
    shapes = (2, 12, 33, 64), (768, 768), (2, 33, 768), (2, 33, 768)
    (y, w, mask_src, g), (ry, rw, rmask_src, rg) = _inputs(dtype, *shapes)
    (x32,), (rx32,) = _inputs(F32, (2, 33, 768), seed=1)
    y.requires_grad_(), w.requires_grad_()
    mask, rmask = mask_src > 0, rmask_src > 0
    projected = y.transpose(1, 2).reshape(2, 33, 768) @ w.T  # attention's output projection
    masked = mask.where(y.transpose(1, 2).reshape(2, 33, 768), 0) @ w.T * 0.25
    autocast = x32.cast(dtype) @ w.T  # float32 activations cast as they are read
    for out in (projected, masked, autocast):
        assert _uses_tiles(out) and len(out.schedule()) == 1
    ry_rows = ry.transpose(1, 2).reshape(2, 33, 768)
    assert _error(_values(projected), ry_rows @ rw.T) < TOLERANCE[dtype]
    assert _error(_values(masked), torch.where(rmask, ry_rows, 0) @ rw.T * 0.25) < TOLERANCE[dtype]
    assert _error(_values(autocast), rx32.to(TORCH[dtype]).double() @ rw.T) < TOLERANCE[dtype]
    projected.backward(g)
    assert _uses_tiles(w.grad)  # summed over the batch and the tokens; y.grad is stored back into heads
    assert _error(_values(w.grad), rg.reshape(-1, 768).T @ ry_rows.reshape(-1, 768)) < TOLERANCE[dtype]
    assert _error(_values(y.grad), (rg @ rw).reshape(2, 33, 12, 64).transpose(1, 2)) < TOLERANCE[dtype]


@pytest.mark.parametrize("dtype", [F16, BF16])
def test_attention_scores_with_odd_lengths_and_a_residual_epilogue(dtype):
    (q, k, res), (rq, rk, rres) = _inputs(dtype, (2, 12, 77, 64), (2, 12, 77, 64), (2, 12, 77, 77))
    scores = q @ k.transpose(-1, -2) * 0.125 + res
    assert _uses_tiles(scores) and len(scores.schedule()) == 1
    assert _error(_values(scores), rq @ rk.transpose(-1, -2) * 0.125 + rres) < TOLERANCE[dtype]


def test_batched_and_broadcast_products():
    (a, b, c), (ra, rb, rc) = _inputs(BF16, (3, 128, 256), (3, 256, 64), (256, 64))
    for out, exact in [
        (a @ b, ra @ rb),
        (a @ c, ra @ rc),
        (a.reshape(3, 1, 128, 256) @ b.reshape(1, 3, 256, 64), ra.reshape(3, 1, 128, 256) @ rb.reshape(1, 3, 256, 64)),
    ]:
        assert _uses_tiles(out)
        assert _error(_values(out), exact) < TOLERANCE[BF16]


def test_a_jitted_product_replays_as_a_cuda_graph():
    (a, b), (ra, rb) = _inputs(BF16, (512, 256), (256, 500))
    step = TinyJit(lambda x, y: (x @ y).realize())
    for _ in range(4):
        out = step(a, b)
    assert _error(_values(out), ra @ rb) < TOLERANCE[BF16]


def test_the_counters_count_the_product():
    (a, b), _ = _inputs(F16, (256, 512), (512, 100))
    GlobalCounters.reset()
    (a @ b).realize()
    assert GlobalCounters.global_ops == 2 * 256 * 512 * 100


def test_an_assign_into_a_slice(monkeypatch):
    kernelize_module = sys.modules["glassgrad.schedule.kernelize"]
    build, asts = kernelize_module.build_kernel, []
    monkeypatch.setattr(kernelize_module, "build_kernel", lambda p: asts.append((k := build(p)).src[1].arg.ast) or k)
    schedule_cache._cache.clear()
    (base, a, b), (rbase, ra, rb) = _inputs(F16, (256, 256), (256, 64), (64, 128))
    base[:, 64:192].assign(a @ b)  # written at once (a view of base); the epilogue stores through the slice's view
    assert any(o.op == "TC" for ast in asts for o in choose_opts(ast, Device["CUDA"].renderer))
    rbase[:, 64:192] = ra @ rb
    assert _error(_values(base), rbase) < TOLERANCE[F16]
