"""Tensor cores (codegen/tensor_cores.py, renderer/cuda_tc.py): which kernels take the TC action, and on a GPU, that
the tensor-core kernel computes float16 and bfloat16 products (plain, transposed, batched, with fused epilogues) as
PyTorch does.

Recognising matrix products, choosing a tile and rendering the source run everywhere; compiling needs NVRTC (the
nvidia-cuda-nvrtc wheel will do, no GPU) and running needs a GPU: those tests skip, saying why, where they are missing.
Hopper's wgmma kernels (renderer/cuda_wgmma.py) compile everywhere NVRTC is and run only on sm_90.
"""

import ctypes

import numpy as np
import pytest
import torch

from glassgrad import Context, Device, GlobalCounters, Tensor, TinyJit, dtypes
from glassgrad.codegen import choose_opts, get_program
from glassgrad.codegen.opt import Opt
from glassgrad.codegen.search import valid
from glassgrad.codegen.tensor_cores import match_matmul, tensor_core_actions, tensor_core_opts
from glassgrad.renderer.cstyle import CRenderer
from glassgrad.renderer.cuda import CUDARenderer
from glassgrad.renderer.cuda_tc import TILE_CONFIGS
from glassgrad.renderer.cuda_wgmma import HOPPER_CONFIGS, WGMMA_CONFIGS, WgmmaConfig
from glassgrad.runtime import ops_cuda
from glassgrad.runtime.device import Buffer
from helpers import needs_gpu, needs_nvrtc

TORCH = {dtypes.float16: torch.float16, dtypes.bfloat16: torch.bfloat16}
FORMS = {  # the four layouts of a product, for glassgrad and torch tensors alike
    "a@b": lambda a, b: a @ b,
    "a.T@b": lambda a, b: a.T @ b,
    "a@b.T": lambda a, b: a @ b.T,
    "a.T@b.T": lambda a, b: a.T @ b.T,
}
CUDA = CUDARenderer()
HOPPER = CUDARenderer()
HOPPER.tile_configs = HOPPER_CONFIGS  # as an sm_90 device sets it


def _ast(t: Tensor):
    return t.schedule()[-1].ast


def _empty(*shape: int, dtype=dtypes.float16) -> Tensor:
    return Tensor.empty(*shape, dtype=dtype, device="CPU")


# ---- everywhere: which kernels are matrix products, which tile they get ----


@pytest.mark.parametrize("dtype", [dtypes.float16, dtypes.bfloat16])
@pytest.mark.parametrize("form", FORMS)
def test_matrix_products_of_16_bit_floats_take_tensor_cores(dtype, form):
    a = _empty(256, 256, dtype=dtype)
    b = _empty(512, 256, dtype=dtype) if form.endswith("b.T") else _empty(256, 512, dtype=dtype)
    ast = _ast(FORMS[form](a, b))
    mm = match_matmul(ast)
    assert mm is not None and (mm.m, mm.n, mm.k, mm.dtype) == (256, 512, 256, dtype)
    assert (mm.a.k_stride == 1) == ("a.T" not in form) and (mm.b.k_stride == 1) == ("b.T" in form)
    assert tensor_core_opts(ast, CUDA) == (Opt("TC", 0, 6),)  # 64x64 tiles: 32 blocks, the most


def test_batched_and_broadcast_products_and_fused_epilogues_take_tensor_cores():
    a, b, bias = _empty(3, 256, 128), _empty(3, 128, 64), _empty(64)
    mm = match_matmul(_ast(a @ b))
    assert mm.batch_shape == (3,) and mm.a.batch_strides == (256 * 128,) and mm.b.batch_strides == (128 * 64,)
    assert match_matmul(_ast(a @ _empty(128, 64))).b.batch_strides == (0,)  # one B for every batch entry
    assert match_matmul(_ast(_empty(2, 3, 64, 32) @ _empty(2, 3, 32, 64))).batch_shape == (2, 3)
    assert match_matmul(_ast((a @ b).relu() + bias)) is not None
    assert match_matmul(_ast((a @ b).float() * 2)) is not None
    assert match_matmul(_ast(a.float().matmul(b.float()))) is not None  # float(a) * float(b): exact products


def test_a_half_linear_layers_gradients_take_tensor_cores():
    x, w = _empty(256, 512).requires_grad_(), _empty(1024, 512).requires_grad_()
    x.linear(w).backward(_empty(256, 1024))  # the gradient reaches each product as half(float(g))
    assert tensor_core_opts(_ast(x.grad), CUDA) and tensor_core_opts(_ast(w.grad), CUDA)
    assert match_matmul(_ast(_empty(256, 256) @ _empty(256, 256).float().cast(dtypes.bfloat16))) is None


def test_large_matrices_take_the_large_tile():
    a, b = _empty(4096, 4096), _empty(4096, 4096)
    assert tensor_core_opts(_ast(a @ b), CUDA) == (Opt("TC", 0, 0),)
    assert (TILE_CONFIGS[0].bm, TILE_CONFIGS[0].bn) == (128, 128)


@pytest.mark.parametrize(
    "make",
    [
        lambda: _empty(256, 256, dtype=dtypes.float32) @ _empty(256, 256, dtype=dtypes.float32),  # not 16-bit
        lambda: _empty(256, 256) + 1,  # no sum
        lambda: _empty(256, 256).sum(axis=1),  # no product
        lambda: _empty(256, 257)[:, 1:] @ _empty(256, 256),  # rows 257 elements apart: not 16-byte aligned
        lambda: _empty(256 * 256 + 1)[1:].reshape(256, 256) @ _empty(256, 256),  # starts 1 element in
        lambda: _empty(256, 256).pad(((0, 0), (0, 8))) @ _empty(264, 256),  # padding: a masked view
        lambda: (_empty(256, 256) @ _empty(256, 256)).T.contiguous(),  # the sum read away from its own position
        lambda: (_empty(256, 256) @ _empty(256, 256)).sum(axis=0),  # two reductions
        lambda: _empty(256, 256) @ _empty(256, 256).to("CPU").cast(dtypes.bfloat16),  # half times bfloat16
    ],
)
def test_other_kernels_are_not_matrix_products(make):
    assert match_matmul(_ast(make())) is None


def test_aligned_slices_are_matrix_products():
    mm = match_matmul(_ast(_empty(264, 256)[8:] @ _empty(256, 272)[:, 16:]))
    assert (mm.a.offset, mm.b.offset, mm.b.row_stride) == (8 * 256, 16, 1)


@pytest.mark.parametrize("shape", [(100, 70, 50), (256, 256, 40), (250, 256, 64), (1, 256, 256)])
def test_sizes_no_tile_divides_keep_the_ordinary_kernel(shape):
    m, k, n = shape
    ast = _ast(_empty(m, k) @ _empty(k, n))
    assert tensor_core_actions(ast, CUDA) == [] and tensor_core_opts(ast, CUDA) == ()
    assert all(o.op != "TC" for o in choose_opts(ast, CUDA))


def test_only_a_renderer_with_tensor_cores_and_not_noopt_chooses_them():
    ast = _ast(_empty(256, 256) @ _empty(256, 256))
    assert choose_opts(ast, CUDA)[0].op == "TC"
    assert tensor_core_opts(ast, CRenderer()) == () and all(o.op != "TC" for o in choose_opts(ast, CRenderer()))
    with Context(NOOPT=1):
        assert choose_opts(ast, CUDA) == ()


def test_beam_takes_a_tensor_core_kernel_alone():
    ast = _ast(_empty(512, 512) @ _empty(512, 512))
    actions = tensor_core_actions(ast, CUDA)
    assert [o.amount for o in actions] == list(range(len(TILE_CONFIGS)))  # 512 is divided by every tile
    assert not valid(ast, (actions[0], Opt("UPCAST", 0, 2))) and not valid(ast, (Opt("UPCAST", 0, 2), actions[0]))


def test_a_tile_that_does_not_fit_is_an_error():
    ast = _ast(_empty(64, 64) @ _empty(64, 64))
    with pytest.raises(ValueError, match=r"TC\(0, 0\) does not apply to this kernel"):
        get_program(ast, CUDA, (Opt("TC", 0, 0),))


def test_the_source_has_the_tensor_core_pipeline_and_the_epilogue():
    a, b, bias = _empty(512, 256, dtype=dtypes.bfloat16), _empty(256, 512, dtype=dtypes.bfloat16), _empty(512)
    spec = get_program(_ast((a @ b).relu() + bias.cast(dtypes.bfloat16)), CUDA, (Opt("TC", 0, 0),))
    assert spec.global_size == (16,) and spec.local_size == (128,)  # 4 x 4 tiles of 128 x 128, 4 warps each
    for text in ("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", "ldmatrix.sync.aligned.m8n8.x4.trans",
                 "cp.async.cg.shared.global", "gg_dynamic_shared_bytes = 65536", "gg_f2bf", "data3"):  # fmt: skip
        assert text in spec.src, text
    assert "#include" not in spec.src
    assert spec.ops == 2 * 512 * 512 * 256


@needs_nvrtc
@pytest.mark.parametrize("config", range(len(HOPPER_CONFIGS)))
@pytest.mark.parametrize("form,dtype", [("a@b", dtypes.float16), ("a.T@b.T", dtypes.bfloat16)])
def test_every_tile_configuration_compiles_for_sm_90_without_spills(config, form, dtype):
    a, b = _empty(512, 512, dtype=dtype), _empty(512, 512, dtype=dtype)
    spec = get_program(_ast(FORMS[form](a, b).relu()), HOPPER, (Opt("TC", 0, config),))
    compiler = ops_cuda.NVRTCCompiler("sm_90")
    options = compiler.options_for(spec.src) + ["--ptxas-options=-v"]
    assert (options[0] == "--gpu-architecture=sm_90a") == isinstance(HOPPER_CONFIGS[config], WgmmaConfig)
    lib, program = ops_cuda.libnvrtc(), ctypes.c_void_p()
    lib.nvrtcCreateProgram(ctypes.byref(program), spec.src.encode(), b"kernel.cu", 0, None, None)
    try:
        assert lib.nvrtcCompileProgram(program, len(options), (ctypes.c_char_p * len(options))(
            *(o.encode() for o in options))) == 0, compiler._log(program)  # fmt: skip
        log = compiler._log(program)
        assert "0 bytes spill stores" in log and "serialized" not in log, log  # wgmma kept asynchronous (C7514)
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(program))


def test_hopper_prefers_wgmma_for_large_products_and_keeps_mma_sync_for_small_ones():
    big, small = _ast(_empty(4096, 4096) @ _empty(4096, 4096)), _ast(_empty(256, 256) @ _empty(256, 512))
    assert tensor_core_opts(big, HOPPER) == (Opt("TC", 0, 0),) and HOPPER_CONFIGS[0] is WGMMA_CONFIGS[0]
    assert not isinstance(HOPPER_CONFIGS[tensor_core_opts(small, HOPPER)[0].amount], WgmmaConfig)  # 64x64: more blocks
    assert len(tensor_core_actions(big, HOPPER)) == len(HOPPER_CONFIGS)  # BEAM times wgmma beside mma.sync


@pytest.mark.parametrize("form", FORMS)
def test_the_wgmma_source_reads_each_operand_in_its_own_layout(form):
    a = _empty(256, 512, dtype=dtypes.bfloat16) if "a.T" in form else _empty(512, 256, dtype=dtypes.bfloat16)
    b = _empty(256, 256, dtype=dtypes.bfloat16)
    spec = get_program(_ast(FORMS[form](a, b)), HOPPER, (Opt("TC", 0, 0),))
    assert spec.global_size == (4,) and spec.local_size == (256,)  # 4 x 1 tiles of 128 x 256, 2 warpgroups each
    trans_a, trans_b = int("a.T" in form), int("b.T" not in form)  # 1: MN-major (rows contiguous, not k)
    assert "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {%0, " in spec.src
    assert f", p, 1, 1, {trans_a}, {trans_b}; }}" in spec.src
    for text in ("wgmma.fence", "wgmma.commit_group", "wgmma.wait_group", "fence.proxy.async.shared::cta",
                 "cp.async.cg.shared.global", "1ull << 62", "ldmatrix", "mma.sync"):  # fmt: skip
        assert (text in spec.src) == (text not in ("ldmatrix", "mma.sync")), text


# ---- on a GPU ----


def _inputs(dtype, *shapes, seed=0):
    """Random normal tensors on the GPU in `dtype`, and the same values as float64 torch tensors."""
    gen = torch.Generator().manual_seed(seed)
    rounded = [torch.randn(*s, generator=gen).to(TORCH[dtype]) for s in shapes]
    ours = [Tensor(x.float().numpy(), device="CUDA").cast(dtype).realize() for x in rounded]
    return ours, [x.double() for x in rounded]


def _error(ours: Tensor, exact: torch.Tensor) -> float:
    got = torch.from_numpy(ours.cast(dtypes.float32).numpy()).double()
    assert not got.isnan().any()
    return float((got - exact).norm() / exact.norm())


def _uses_tensor_cores(t: Tensor) -> bool:
    renderer = Device["CUDA"].renderer
    return any(o.op == "TC" for item in t.schedule() for o in choose_opts(item.ast, renderer))


TOLERANCE = {dtypes.float16: 2e-3, dtypes.bfloat16: 1e-2}  # the output's rounding: half 2**-11, bfloat16 2**-8


@needs_gpu
@pytest.mark.parametrize("dtype", [dtypes.float16, dtypes.bfloat16])
@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("m,k,n", [(256, 512, 128), (1024, 256, 768), (128, 4096, 256)])
def test_products_match_pytorch(dtype, form, m, k, n):
    shapes = [(k, m) if "a.T" in form else (m, k), (n, k) if "b.T" in form else (k, n)]
    (a, b), (ra, rb) = _inputs(dtype, *shapes)
    out = FORMS[form](a, b)
    assert _uses_tensor_cores(out)
    assert _error(out, FORMS[form](ra, rb)) < TOLERANCE[dtype]


def _device_config(config) -> int:
    """The index of `config` among the GPU's tile configurations (skipping where the GPU lacks it: wgmma is sm_90's)."""
    configs = Device["CUDA"].renderer.tile_configs
    if config not in configs:
        pytest.skip(f"{config} needs an sm_90 GPU, this is {Device['CUDA'].arch}")
    return configs.index(config)


@needs_gpu
@pytest.mark.parametrize("config", HOPPER_CONFIGS, ids=str)
@pytest.mark.parametrize("form", FORMS)
def test_every_tile_configuration_is_right(config, form):
    index = _device_config(config)
    gen = torch.Generator().manual_seed(index)
    ra, rb = (torch.randn(512, 512, generator=gen).half() for _ in range(2))
    a, b = (Tensor.empty(512, 512, dtype=dtypes.float16, device="CPU") for _ in range(2))
    spec = get_program(_ast(FORMS[form](a, b)), Device["CUDA"].renderer, (Opt("TC", 0, index),))
    out, *inputs = (Buffer("CUDA", 512 * 512, dtypes.float16) for _ in range(3))
    out.copyin(torch.full((512, 512), float("nan")).half().numpy().tobytes())  # every element must be written
    for buf, x in zip(inputs, (ra, rb)):
        buf.copyin(x.numpy().tobytes())
    Device["CUDA"].load(spec.name, spec.src)(
        out.handle, *(buf.handle for buf in inputs), global_size=spec.global_size, local_size=spec.local_size, wait=True
    )
    got = torch.from_numpy(np.frombuffer(out.as_bytes(), dtype=np.float16).reshape(512, 512).astype(np.float64))
    exact = FORMS[form](ra.double(), rb.double())
    assert not got.isnan().any() and float((got - exact).norm() / exact.norm()) < TOLERANCE[dtypes.float16]


def _uses_wgmma(t: Tensor) -> bool:
    renderer = Device["CUDA"].renderer
    opts = choose_opts(t.schedule()[-1].ast, renderer)
    return bool(opts) and opts[0].op == "TC" and isinstance(renderer.tile_configs[opts[0].amount], WgmmaConfig)


@needs_gpu
@pytest.mark.parametrize("dtype", [dtypes.float16, dtypes.bfloat16])
def test_wgmma_batched_broadcast_and_transposed_products_with_epilogues(dtype):
    _device_config(WGMMA_CONFIGS[0])
    (a, at, b, c, bias), (ra, rat, rb, rc, rbias) = _inputs(dtype, (4, 1024, 256), (4, 256, 1024), (4, 256, 1024),
                                                            (1024, 256), (1024,), seed=1)  # fmt: skip
    for out, exact in [
        ((a @ b).relu() + bias, (ra @ rb).relu() + rbias),  # B n-contiguous (MN-major), a fused epilogue
        (a @ c.T, ra @ rc.T),  # one B (k-contiguous) for every batch entry
        (at.transpose(1, 2) @ b * 0.5, rat.transpose(1, 2) @ rb * 0.5),  # A m-contiguous (MN-major)
    ]:
        assert _uses_wgmma(out)  # 4 x 8 x 4 tiles of 128 x 256
        assert _error(out, exact) < TOLERANCE[dtype]


@needs_gpu
@pytest.mark.parametrize("dtype", [dtypes.float16, dtypes.bfloat16])
def test_batched_and_broadcast_products(dtype):
    (a, b, c), (ra, rb, rc) = _inputs(dtype, (3, 128, 256), (3, 256, 64), (256, 64))
    for out, exact in [
        (a @ b, ra @ rb),
        (a @ c, ra @ rc),
        (a.reshape(3, 1, 128, 256) @ b.reshape(1, 3, 256, 64), ra.reshape(3, 1, 128, 256) @ rb.reshape(1, 3, 256, 64)),
    ]:
        assert _uses_tensor_cores(out)
        assert _error(out, exact) < TOLERANCE[dtype]


@needs_gpu
@pytest.mark.parametrize("dtype", [dtypes.float16, dtypes.bfloat16])
def test_fused_epilogues(dtype):
    (a, b, bias), (ra, rb, rbias) = _inputs(dtype, (256, 128), (128, 192), (192,))
    out = (a @ b).relu() + bias
    assert _uses_tensor_cores(out) and len(out.schedule()) == 1
    assert _error(out, (ra @ rb).relu() + rbias) < TOLERANCE[dtype]
    wide = a.matmul(b, dtype=dtypes.float32) * 0.5  # a float32 output, no rounding to 16 bits
    assert _error(wide, (ra @ rb) * 0.5) < 1e-5


@needs_gpu
@pytest.mark.parametrize("dtype", [dtypes.float16, dtypes.bfloat16])
def test_odd_sizes_keep_the_ordinary_kernel_and_stay_right(dtype):
    (a, b), (ra, rb) = _inputs(dtype, (100, 70), (70, 50))
    out = a @ b
    assert not _uses_tensor_cores(out)
    assert _error(out, ra @ rb) < TOLERANCE[dtype]


@needs_gpu
def test_a_jitted_product_replays_as_a_cuda_graph():
    (a, b), (ra, rb) = _inputs(dtypes.bfloat16, (512, 256), (256, 512))
    step = TinyJit(lambda x, y: (x @ y).realize())
    for _ in range(4):
        out = step(a, b)
    assert _error(out, ra @ rb) < TOLERANCE[dtypes.bfloat16]


@needs_gpu
def test_the_counters_count_the_product():
    (a, b), _ = _inputs(dtypes.float16, (256, 512), (512, 128))
    GlobalCounters.reset()
    (a @ b).realize()
    assert GlobalCounters.global_ops == 2 * 256 * 512 * 128


@needs_gpu
@pytest.mark.parametrize("dtype", [dtypes.float16, dtypes.bfloat16])
def test_a_linear_layers_gradients_match_pytorch(dtype):
    (x, w, g), (rx, rw, rg) = _inputs(dtype, (256, 512), (1024, 512), (256, 1024))
    x.requires_grad_(), w.requires_grad_()
    x.linear(w).backward(g)  # dx = g @ w and dw = g.T @ x: both tensor-core products
    assert all(_uses_tensor_cores(t) for t in (x.grad, w.grad))
    assert _error(x.grad, rg @ rw) < TOLERANCE[dtype] and _error(w.grad, rg.T @ rx) < TOLERANCE[dtype]


@needs_gpu
def test_attention_scores_and_an_assign_into_a_slice():
    (q, k, base, a, b), (rq, rk, rbase, ra, rb) = _inputs(dtypes.float16, (2, 4, 128, 64), (2, 4, 128, 64),
                                                          (256, 256), (256, 64), (64, 128))  # fmt: skip
    scores = q @ k.transpose(-1, -2) * 0.125
    assert _uses_tensor_cores(scores) and _error(scores, rq @ rk.transpose(-1, -2) * 0.125) < 2e-3
    part = base[:, 64:192]
    part.assign(a @ b)  # the epilogue stores through the slice's view
    assert _uses_tensor_cores(part)
    part.realize()
    rbase[:, 64:192] = ra @ rb
    assert _error(base, rbase) < 2e-3
