"""Tiled contractions (codegen/tensor_cores.py, renderer/cuda_tc.py, cuda_wgmma.py, cuda_simt.py), everywhere: which
kernels are matrix products, which configuration the heuristics choose, what the source holds, and that every kernel's
source compiles with NVRTC (the nvidia-cuda-nvrtc wheel will do, no GPU). test_tensor_cores_gpu.py runs them.
"""

import sys

import pytest

from api.test_linalg import MATMUL_SHAPES
from glassgrad import Context, Tensor, backends, dtypes, get_float32_matmul_precision, set_float32_matmul_precision
from glassgrad.codegen import choose_opts, get_program
from glassgrad.codegen.opt import Opt
from glassgrad.codegen.search import valid
from glassgrad.codegen.tensor_cores import match_matmul, tensor_core_actions, tensor_core_opts
from glassgrad.engine.realize import _kernel_key
from glassgrad.renderer.cstyle import CRenderer
from glassgrad.renderer.cuda import HOPPER_CONFIGS, MATMUL_CONFIGS, CUDARenderer
from glassgrad.renderer.cuda_simt import SimtConfig
from glassgrad.renderer.cuda_tc import TileConfig
from glassgrad.renderer.cuda_wgmma import WGMMA_CONFIGS, WgmmaConfig
from glassgrad.runtime import ops_cuda
from glassgrad.uop.ops import Ops
from helpers import needs_nvrtc, nvrtc_log, ptxas_report

FORMS = {  # the four layouts of a product, for glassgrad and torch tensors alike
    "a@b": lambda a, b: a @ b,
    "a.T@b": lambda a, b: a.T @ b,
    "a@b.T": lambda a, b: a @ b.T,
    "a.T@b.T": lambda a, b: a.T @ b.T,
}
CUDA = CUDARenderer()  # an sm_80 device's configurations
HOPPER = CUDARenderer()
HOPPER.tile_configs = HOPPER_CONFIGS  # as an sm_90 device sets it
F16, BF16, F32 = dtypes.float16, dtypes.bfloat16, dtypes.float32


def _ast(t: Tensor):
    """The last kernel of t's schedule, scheduled as for a GPU: the tensors live on the CPU, whose renderer would
    have the scheduler lay a float32 B out in panels (schedule/pack.py), which a GPU's renderer does not ask for."""
    with Context(NOOPT=1):
        return t.schedule()[-1].ast


def _empty(*shape: int, dtype=F16) -> Tensor:
    return Tensor.empty(*shape, dtype=dtype, device="CPU")


def _operands(form: str, m: int, k: int, n: int, dtype=F16) -> tuple[Tensor, Tensor]:
    a = _empty(k, m, dtype=dtype) if "a.T" in form else _empty(m, k, dtype=dtype)
    b = _empty(n, k, dtype=dtype) if "b.T" in form else _empty(k, n, dtype=dtype)
    return a, b


def _config(renderer: CUDARenderer, opts: tuple[Opt, ...]):
    return renderer.tile_configs[opts[0].amount]


# ---- which kernels are matrix products ----


@pytest.mark.parametrize("dtype", [F16, BF16, F32])
@pytest.mark.parametrize("form", FORMS)
def test_matrix_products_of_floats_are_recognised_in_every_layout(dtype, form):
    mm = match_matmul(_ast(FORMS[form](*_operands(form, 256, 320, 512, dtype))))
    assert mm is not None and (mm.m, mm.n, mm.k, mm.dtype) == (256, 512, 320, dtype)
    assert (mm.a.strided.k_stride == 1) == ("a.T" not in form) and (mm.b.strided.k_stride == 1) == ("b.T" in form)


@pytest.mark.parametrize("m,k,n", [(1, 7, 50257), (7, 7, 7), (7, 50257, 1), (300, 768, 50257), (100, 70, 50)])
def test_any_size_is_a_matrix_product_and_every_configuration_takes_it(m, k, n):
    ast = _ast(_empty(m, k) @ _empty(k, n))
    mm = match_matmul(ast)
    assert {mm.m, mm.n} == {m, n} and mm.k == k and mm.m * mm.n == m * n
    sixteen = [i for i, c in enumerate(HOPPER_CONFIGS) if not isinstance(c, SimtConfig) and not getattr(c, "tf32", 0)]
    assert [o.amount for o in tensor_core_actions(ast, HOPPER)] == sixteen
    if min(m, n, k) < 16:  # too thin for tiles: the ordinary kernel's threads share its sums
        assert tensor_core_opts(ast, HOPPER) == ()


def test_batched_and_broadcast_products():
    a, b = _empty(3, 256, 128), _empty(3, 128, 64)
    mm = match_matmul(_ast(a @ b))
    assert mm.batch_shape == (3,) and (mm.a.strided.batch_strides, mm.b.strided.batch_strides) == ((32768,), (8192,))
    broadcast = match_matmul(_ast(a @ _empty(128, 64)))  # one B for every batch entry: A's rows are all 768 of them
    assert broadcast.batch_shape == () and (broadcast.m, broadcast.a.strided.row_stride) == (768, 128)
    assert match_matmul(_ast(_empty(2, 3, 64, 32) @ _empty(2, 3, 32, 64))).batch_shape == (2, 3)
    scores = match_matmul(_ast(_empty(2, 12, 77, 64) @ _empty(2, 12, 77, 64).transpose(-1, -2)))
    assert scores.batch_shape == (2, 12) and (scores.m, scores.n, scores.k) == (77, 77, 64)


def test_epilogues_and_prologues_are_part_of_the_product():
    a, b, bias, res = _empty(256, 128), _empty(128, 64), _empty(64), _empty(256, 64)
    assert match_matmul(_ast(((a @ b) + bias).gelu() + res)) is not None  # bias, GELU, residual: the epilogue
    assert match_matmul(_ast((a @ b).float() * 2)) is not None
    scaled = match_matmul(_ast((a * 0.125) @ b))  # a scale before the sum: A is computed
    assert scaled.dtype == F16 and scaled.a.strided is None and scaled.b.strided is not None
    mask = _empty(256, 128, dtype=dtypes.bool)
    assert match_matmul(_ast(mask.where(a, 0) @ b)).a.strided is None  # a mask
    autocast = match_matmul(_ast(_empty(256, 128, dtype=F32).cast(F16) @ b))  # float32 weights cast to half
    assert autocast.dtype == F16 and autocast.a.strided is None


def test_products_mixing_dtypes_multiply_in_float32():
    mm = match_matmul(_ast(_empty(256, 256) @ _empty(256, 256).float().cast(BF16)))  # half times bfloat16
    assert mm.dtype == F32 and mm.a.strided is None and mm.b.strided is None
    mm = match_matmul(_ast(_empty(256, 64).float() @ _empty(64, 32, dtype=F32)))
    assert mm.dtype == F32 and mm.a.strided is None and mm.b.strided is not None


def test_the_attention_output_projection_reads_its_heads_in_chunks():
    heads = _empty(2, 12, 64, 64)  # batch, heads, tokens, head size: back into rows of 768
    ast = _ast(heads.transpose(1, 2).reshape(2, 64, 768) @ _empty(768, 768).T)
    mm = match_matmul(ast)
    assert mm is not None and mm.a.strided is None and mm.a.k_fast
    src = get_program(ast, HOPPER, tensor_core_opts(ast, HOPPER)).src
    assert "gg_v0_7" in src and "*(const uint4*)((const unsigned char*)(data1" in src  # 16-byte loads of 8 lanes


@pytest.mark.parametrize(
    "make",
    [
        lambda: _empty(256, 256) + 1,  # no sum
        lambda: _empty(256, 256).sum(axis=1),  # no product
        lambda: (_empty(256, 256) @ _empty(256, 256)).T.contiguous(),  # the sum read away from its own position
        lambda: (_empty(256, 256) @ _empty(256, 256)).sum(axis=0),  # two reductions
        lambda: _empty(64, 64, dtype=dtypes.int32) @ _empty(64, 64, dtype=dtypes.int32),  # integers
        lambda: _empty(64, 64, dtype=dtypes.float64) @ _empty(64, 64, dtype=dtypes.float64),  # float64
        lambda: _empty(1, 64) @ _empty(64, 1),  # a dot product: no axis of A's or B's own
    ],
)
def test_other_kernels_are_not_matrix_products(make):
    assert match_matmul(_ast(make())) is None


def test_a_weight_gradient_sums_over_batch_and_time_as_one_k():
    x, w = _empty(3, 37, 70).requires_grad_(), _empty(50257, 70).requires_grad_()
    x.linear(w).backward(_empty(3, 37, 50257))
    mm = match_matmul(_ast(w.grad))  # dw = g.T @ x over the 111 rows of both
    assert (mm.m, mm.n, mm.k) == (50257, 70, 111) and (mm.a.strided.row_stride, mm.a.strided.k_stride) == (1, 50257)
    assert match_matmul(_ast(x.grad)).k == 50257


def test_a_factor_that_comes_twice_and_an_axis_no_factor_reads():
    a, b = _empty(64, 32, dtype=F32), _empty(32, 48, dtype=F32)
    mm = match_matmul(_ast((a * a) @ b))  # both of A's factors, though they are one UOp
    assert mm is not None and mm.a.value.op is Ops.MUL and mm.a.value.src[0] is mm.a.value.src[1]
    x, y = _empty(3, dtype=F32).requires_grad_(), _empty(4, dtype=F32).requires_grad_()
    Tensor.einsum("i,j->ij", x, y).sum().backward()  # x.grad[i] = sum_j 1 * y[j]: nothing reads i, no product
    assert match_matmul(_ast(x.grad)) is None


def test_a_factor_that_moves_along_both_sides_joins_b_as_a_batch():  # sum_k a[i,k] b[j,k] c[i,j]: i is a batch
    mm = match_matmul(_ast((_empty(64, 1, 32) * _empty(1, 64, 32) * _empty(64, 64, 1)).sum(-1)))
    assert (mm.batch_shape, mm.m, mm.n, mm.k) == ((64,), 1, 64, 32)


def test_aligned_and_unaligned_slices_are_matrix_products():
    mm = match_matmul(_ast(_empty(264, 256)[8:] @ _empty(256, 272)[:, 16:]))
    assert (mm.a.strided.offset, mm.b.strided.offset, mm.b.strided.row_stride) == (8 * 256, 16, 1)
    mm = match_matmul(_ast(_empty(256, 257)[:, 1:] @ _empty(256, 256)))  # rows 257 elements apart
    assert (mm.a.strided.row_stride, mm.a.strided.offset) == (257, 1)


@pytest.mark.parametrize("dtype", [F16, F32])
@pytest.mark.parametrize(
    "shapes,fn",
    [(shapes, "a@b") for shapes in MATMUL_SHAPES]
    + [(((3,), (4,)), "i,j->ij"), (((3, 1), (4, 5)), "ij,jk->ik"), (((2, 3, 5), (2, 5, 4)), "bij,bjk->bik")],
    ids=str,
)
def test_every_kernel_of_the_api_tests_forward_and_backward_renders(shapes, fn, dtype):
    """What test/api/test_linalg.py runs on a GPU (CUDA=1): each kernel, where it is a product, under every
    configuration that takes it."""
    a, b = (_empty(*s, dtype=dtype).requires_grad_() for s in shapes)
    out = a @ b if fn == "a@b" else Tensor.einsum(fn, a, b)
    out.sum().backward()
    for t in (out, a.grad, b.grad):
        for item in t.schedule():
            for opt in tensor_core_actions(item.ast, HOPPER):
                assert get_program(item.ast, HOPPER, (opt,)).src


# ---- which configuration ----


def test_large_matrices_take_the_large_tile_and_small_ones_more_blocks():
    big, small = _ast(_empty(4096, 4096) @ _empty(4096, 4096)), _ast(_empty(256, 256) @ _empty(256, 512))
    assert tensor_core_opts(big, HOPPER) == (Opt("TC", 0, 0),) and HOPPER_CONFIGS[0] is WGMMA_CONFIGS[0]
    assert _config(CUDA, tensor_core_opts(big, CUDA)) == TileConfig(128, 128, 32, 64, 64, 4)
    assert _config(HOPPER, tensor_core_opts(small, HOPPER)) == TileConfig(64, 64, 32, 32, 32, 4)  # 32 blocks: most


def test_float32_takes_the_simt_kernel_and_tf32_only_when_allowed():
    ast = _ast(_empty(2048, 2048, dtype=F32) @ _empty(2048, 2048, dtype=F32))
    assert isinstance(_config(HOPPER, tensor_core_opts(ast, HOPPER)), SimtConfig)
    assert all(not getattr(HOPPER.tile_configs[o.amount], "tf32", False) for o in tensor_core_actions(ast, HOPPER))
    tf32 = next(i for i, c in enumerate(HOPPER_CONFIGS) if getattr(c, "tf32", False))
    with pytest.raises(ValueError, match="TF32 is off"):
        get_program(ast, HOPPER, (Opt("TC", 0, tf32),))
    with Context(TF32=1):
        config = _config(HOPPER, tensor_core_opts(ast, HOPPER))  # sm_90: warpgroup MMA, k8 a product, no transposes
        assert isinstance(config, WgmmaConfig) and config.tf32 and config.bk == 32
        assert "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32" in get_program(ast, HOPPER).src
        config = _config(CUDA, tensor_core_opts(ast, CUDA))  # sm_80: mma.sync
        assert isinstance(config, TileConfig) and config.tf32
        assert "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32" in get_program(ast, CUDA).src
        assert _kernel_key("CUDA", ast) != (key := _kernel_key("CUDA", ast)[:-1] + (0,)) and key[-1] == 0


def test_the_tf32_switches_are_pytorchs():
    assert not backends.cuda.matmul.allow_tf32 and get_float32_matmul_precision() == "highest"  # off by default
    try:
        backends.cuda.matmul.allow_tf32 = True
        assert get_float32_matmul_precision() == "high"
        set_float32_matmul_precision("highest")
        assert not backends.cuda.matmul.allow_tf32
        set_float32_matmul_precision("medium")
        assert backends.cuda.matmul.allow_tf32
        with pytest.raises(ValueError, match="precision must be one of"):
            set_float32_matmul_precision("low")
    finally:
        backends.cuda.matmul.allow_tf32 = False


def test_only_a_renderer_with_tiles_and_not_noopt_chooses_them():
    ast = _ast(_empty(256, 256) @ _empty(256, 256))
    assert choose_opts(ast, CUDA)[0].op == "TC"
    assert tensor_core_opts(ast, CRenderer()) == () and all(o.op != "TC" for o in choose_opts(ast, CRenderer()))
    with Context(NOOPT=1):
        assert choose_opts(ast, CUDA) == ()


def test_beam_takes_a_tiled_kernel_alone():
    ast = _ast(_empty(512, 512) @ _empty(512, 512))
    actions = tensor_core_actions(ast, CUDA)
    assert [CUDA.tile_configs[o.amount] for o in actions] == [c for c in MATMUL_CONFIGS if c.accepts(F16, False)]
    assert not valid(ast, (actions[0], Opt("UPCAST", 0, 2))) and not valid(ast, (Opt("UPCAST", 0, 2), actions[0]))


def test_a_configuration_that_does_not_apply_is_an_error():
    ast = _ast(_empty(64, 64) @ _empty(64, 64))
    simt = next(i for i, c in enumerate(MATMUL_CONFIGS) if isinstance(c, SimtConfig))
    with pytest.raises(ValueError, match=r"does not apply to this kernel: .* simt .* does not multiply half"):
        get_program(ast, CUDA, (Opt("TC", 0, simt),))
    with pytest.raises(ValueError, match=r"TC\(0, 0\) does not apply to this kernel"):
        get_program(_ast(_empty(64, 64) + 1), CUDA, (Opt("TC", 0, 0),))


# ---- the source ----


def test_the_source_has_the_tensor_core_pipeline_and_the_epilogue():
    a, b, bias = _empty(512, 256, dtype=BF16), _empty(256, 512, dtype=BF16), _empty(512)
    spec = get_program(_ast((a @ b).relu() + bias.cast(BF16)), CUDA, (Opt("TC", 0, 0),))
    assert spec.global_size == (16,) and spec.local_size == (128,)  # 4 x 4 tiles of 128 x 128, 4 warps each
    for text in ("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", "ldmatrix.sync.aligned.m8n8.x4.trans",
                 "cp.async.cg.shared.global [%0], [%1], 16, %2;", "gg_dynamic_shared_bytes = 65536", "gg_f2bf",
                 "data3"):  # fmt: skip
        assert text in spec.src, text
    assert "#include" not in spec.src
    assert spec.ops == 2 * 512 * 512 * 256


def test_edge_tiles_are_masked_and_unaligned_rows_are_realigned():
    spec = get_program(_ast(_empty(300, 768) @ _empty(768, 50257)), HOPPER, (Opt("TC", 0, 0),))
    assert spec.global_size == (3 * 197,)  # 128 x 256 tiles, the last row and column of them part empty
    assert "if (gg_row < 300 && gg_col < 50257)" in spec.src  # only the output's own elements are stored
    assert "gg_loadu(gB + " in spec.src  # B's rows are 50257 elements apart: its chunks start anywhere
    assert "gg_load_part(" in spec.src  # the last chunk of a row: only its elements inside


@pytest.mark.parametrize("form", FORMS)
def test_the_wgmma_source_reads_each_operand_in_its_own_layout(form):
    a, b = _operands(form, 512, 256, 256, BF16)
    spec = get_program(_ast(FORMS[form](a, b)), HOPPER, (Opt("TC", 0, 0),))
    assert spec.global_size == (4,) and spec.local_size == (256,)  # 4 x 1 tiles of 128 x 256, 2 warpgroups each
    trans_a, trans_b = int("a.T" in form), int("b.T" not in form)  # 1: MN-major (rows contiguous, not k)
    assert "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {%0, " in spec.src
    assert f", p, 1, 1, {trans_a}, {trans_b}; }}" in spec.src
    for text in ("wgmma.fence", "wgmma.commit_group", "wgmma.wait_group", "fence.proxy.async.shared::cta",
                 "cp.async.cg.shared.global", "1ull << 62", "ldmatrix", "mma.sync"):  # fmt: skip
        assert (text in spec.src) == (text not in ("ldmatrix", "mma.sync")), text


def test_the_simt_source_multiplies_in_float32():
    spec = get_program(_ast(_empty(512, 512, dtype=F32) @ _empty(512, 512, dtype=F32)), CUDA)
    assert "__fmaf_rn(fa[i], fb[j], acc[i][j])" in spec.src and "mma" not in spec.src
    assert "*(const float4*)(s_a + kk*" in spec.src  # a thread's values of a k: 16-byte reads of shared memory


# ---- every kernel compiles ----

HARD = {  # kernels that take every way of copying an operand, and odd sizes
    F16: lambda: ((_empty(3, 37, 70) * 0.5) @ _empty(1, 50257, 70).transpose(-1, -2)).gelu() + _empty(50257),
    BF16: lambda: _empty(2, 70, 37, dtype=BF16).transpose(-1, -2) @ _empty(70, 101, dtype=BF16)[:, 1:],
    F32: lambda: (
        _empty(2, 12, 33, 64, dtype=F32).transpose(1, 2).reshape(2, 33, 768) @ _empty(768, 50, dtype=F32)
    ).relu(),
}
PLAIN = {dtype: (lambda dtype=dtype: (_empty(512, 512, dtype=dtype) @ _empty(512, 512, dtype=dtype)).relu())
         for dtype in (F16, BF16, F32)}  # fmt: skip


@needs_nvrtc
@pytest.mark.parametrize("config", range(len(HOPPER_CONFIGS)), ids=lambda i: str(HOPPER_CONFIGS[i]))
@pytest.mark.parametrize("kind", ["plain", "hard"])
def test_every_configuration_compiles_for_sm_90_without_spills(config, kind):
    c = HOPPER_CONFIGS[config]
    dtype = F32 if isinstance(c, SimtConfig) or getattr(c, "tf32", False) else BF16 if config % 2 else F16
    with Context(TF32=int(getattr(c, "tf32", False))):
        ast = _ast((PLAIN if kind == "plain" else HARD)[dtype]())
        assert Opt("TC", 0, config) in tensor_core_actions(ast, HOPPER)
        log = ptxas_report(get_program(ast, HOPPER, (Opt("TC", 0, config),)).src, "sm_90")
    assert ("sm_90a" in " ".join(ops_cuda.NVRTCCompiler("sm_90").options_for("wgmma."))) and log
    assert "0 bytes spill stores" in log and "serialized" not in log, log  # wgmma kept asynchronous (C7514)


@needs_nvrtc
@pytest.mark.parametrize("dtype", [F16, F32])
def test_the_kernels_compile_for_sm_80(dtype):
    for config in range(len(MATMUL_CONFIGS)):
        with Context(TF32=1):
            ast = _ast(HARD[dtype]())
            if Opt("TC", 0, config) in tensor_core_actions(ast, CUDA):
                nvrtc_log(get_program(ast, CUDA, (Opt("TC", 0, config),)).src, "sm_80")


def test_a_weight_gradient_written_flat_into_a_part_of_a_buffer_is_the_same_product(monkeypatch):
    """DDP wrote each gradient flat into its part of one buffer: the kernel stores the product in its own axes
    (schedule/store_shape.py), so the matcher finds the product of the gradient alone, and every configuration
    stores it from the part's first element on."""
    kernelize_module = sys.modules["glassgrad.schedule.kernelize"]
    build, asts = kernelize_module.build_kernel, []
    monkeypatch.setattr(kernelize_module, "build_kernel", lambda p: asts.append((k := build(p)).src[1].arg.ast) or k)

    def weight_gradient() -> Tensor:
        x, w = _empty(3, 37, 70).requires_grad_(), _empty(96, 70).requires_grad_()
        x.linear(w).backward(_empty(3, 37, 96))
        return w.grad

    _empty(96 * 70 + 200)[100 : 100 + 96 * 70].assign(weight_gradient().reshape(-1))  # the kernel runs here
    ast = asts[-1]
    flat, alone = match_matmul(ast), match_matmul(_ast(weight_gradient()))
    assert (flat.m, flat.n, flat.k) == (alone.m, alone.n, alone.k) == (96, 70, 111)
    assert flat.a.strided == alone.a.strided and flat.b.strided == alone.b.strided
    for opt in tensor_core_actions(ast, HOPPER):
        assert "*(data0+(((gg_row*70)+gg_col)+100))" in get_program(ast, HOPPER, (opt,)).src
