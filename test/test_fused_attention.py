"""Fused attention (mixin/fused_attention.py, renderer/attention.py, renderer/cuda_attention.py and the tensor cores'
renderer/cuda_mma_attention.py): forward and backward against PyTorch's scaled_dot_product_attention on the CPU (and
the GPU, skipped without one), which cases take the fused kernel, and that the CUDA source compiles with NVRTC (no GPU
needed; test_mma_attention_emulated.py runs the tensor-core kernel on the CPU)."""

import math

import numpy as np
import pytest
import torch

from glassgrad import Context, Device, Tensor, dtypes
from glassgrad.codegen import get_program
from glassgrad.codegen.attention import is_attention
from glassgrad.renderer.cuda import CUDARenderer
from glassgrad.runtime import ops_cuda
from glassgrad.uop.ops import Ops, UOp
from helpers import attention_reference, needs_gpu, needs_nvrtc, ptxas_report

F16, BF16, F32 = dtypes.float16, dtypes.bfloat16, dtypes.float32
TORCH_DTYPES = {F16: torch.float16, BF16: torch.bfloat16, F32: torch.float32}
# forward and backward (the backward's products in the inputs' dtype) against float32 PyTorch on the same inputs
TOLERANCE = {F32: (2e-5, 1e-4), F16: (2e-3, 2e-2), BF16: (1.6e-2, 8e-2)}

# (batch dims, L, S, E, Ev): 1-sizes, odd sizes, L != S, head sizes 1, 64, 80, 128, no batch dims, more query rows
# than the CPU kernel's task takes (131: 128 and 3) over two blocks of keys, the second of one key
SHAPES = [((1, 1), 1, 1, 1, 1), ((3, 5), 37, 37, 64, 64), ((2, 3), 7, 11, 80, 80), ((1,), 37, 20, 128, 128),
          ((), 5, 70, 64, 16), ((2, 1), 70, 9, 32, 48), ((2,), 131, 65, 24, 40)]  # fmt: skip
MASKS = ["none", "causal", "bool", "float", "padding bool", "padding float"]


def _padding_mask(kind: str, batch: tuple[int, ...], source: int, rng) -> np.ndarray:
    """A mask over the keys alone, the same for every query row (a padded batch's, BERT's (batch, 1, 1, S)): each
    entry of the first batch dim keeps its first few keys, the first entry none (where there is a batch); as floats,
    random values there and -inf past them."""
    lead = batch[:1]
    real = rng.integers(1, source + 1, lead)
    if lead:
        real[0] = 0
    keep = np.arange(source) < real[..., None]
    shape = (*lead, *(1,) * (len(batch) - len(lead)), 1, source)
    if kind == "padding bool":
        return keep.reshape(shape)
    return np.where(keep, rng.standard_normal(keep.shape), -np.inf).astype(np.float32).reshape(shape)


def _mask(kind: str, batch: tuple[int, ...], length: int, source: int, rng) -> np.ndarray | None:
    """A bool mask (L, S) broadcast over the batch with its first row all False (a row with every key masked), a
    float mask (1, ..., L, S) with -inf in places and a row all -inf, or a padding mask (_padding_mask)."""
    if kind.startswith("padding"):
        return _padding_mask(kind, batch, source, rng)
    if kind == "bool":
        mask = rng.random((length, source)) > 0.3
        mask[0] = False
        return mask
    if kind == "float":
        mask = rng.standard_normal((*(1,) * len(batch), length, source)).astype(np.float32)
        mask[..., rng.random((length, source)) < 0.2] = -np.inf
        mask[..., length // 2, :] = -np.inf
        return mask
    return None


@pytest.fixture
def cuda_fused(monkeypatch):
    """CUDA's renderer asked for its fused kernel, which it keeps off by default (renderer/cuda.py says why)."""
    monkeypatch.setattr(CUDARenderer, "fused_attention", True)


def _inputs(batch, length, source, head, value, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(np.float32) for s in ((*batch, length, head), (*batch, source, head),
                                                                  (*batch, source, value))]  # fmt: skip


def _torch_attention(arrays, mask, causal, dtype, grad_out):
    """PyTorch's output and q, k, v gradients in float32 from the inputs rounded to `dtype`; 0 where a row's keys are
    all masked (PyTorch gives nan there, glassgrad 0 as its unfused path)."""
    tq, tk, tv = (torch.tensor(a).to(TORCH_DTYPES[dtype]).float().requires_grad_() for a in arrays)
    tmask = None if mask is None else torch.tensor(mask)
    out = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, attn_mask=tmask, is_causal=causal)
    out = torch.nan_to_num(out, nan=0.0)
    (out * torch.tensor(grad_out)).sum().backward()
    return [x.detach().nan_to_num(nan=0.0).numpy() for x in (out, tq.grad, tk.grad, tv.grad)]


def _attention(arrays, mask, causal, dtype, device, grad_out, transposed=False, **kwargs):
    """glassgrad's output and q, k, v gradients; with `transposed`, q, k and v are read through a transpose, as a
    model's heads are (batch, length, heads, size) seen as (batch, heads, length, size)."""
    if transposed:
        tensors = [Tensor(np.ascontiguousarray(a.swapaxes(-2, -3)), device=device).cast(dtype).realize()
                   .transpose(-2, -3) for a in arrays]  # fmt: skip
    else:
        tensors = [Tensor(a, device=device).cast(dtype).realize() for a in arrays]
    for t in tensors:
        t.requires_grad = True
    tmask = None if mask is None else Tensor(mask, device=device)
    out = tensors[0].scaled_dot_product_attention(tensors[1], tensors[2], attn_mask=tmask, is_causal=causal, **kwargs)
    fused = _fused_kernels(out)
    (out.float() * Tensor(grad_out, device=device)).sum().backward()
    return fused, [x.float().numpy() for x in (out, *(t.grad for t in tensors))]


def _fused_kernels(t: Tensor) -> int:
    """How many ATTENTION kernels t's schedule has."""
    return sum(item.ast.op.name == "SINK" and is_attention(item.ast) for item in t.schedule())


def _compare(shape, mask_kind, dtype, device, transposed=False) -> int:
    batch, length, source, head, value = shape
    if transposed and len(batch) < 2:
        pytest.skip("a transpose of heads needs a batch and a heads dim")
    rng = np.random.default_rng(1)
    arrays = _inputs(*shape)
    mask, causal = _mask(mask_kind, batch, length, source, rng), mask_kind == "causal"
    grad_out = rng.standard_normal((*batch, length, value)).astype(np.float32)
    fused, ours = _attention(arrays, mask, causal, dtype, device, grad_out, transposed)
    expected = _torch_attention(arrays, mask, causal, dtype, grad_out)
    forward, backward = TOLERANCE[dtype]
    for name, got, want, tol in zip(("out", "dq", "dk", "dv"), ours, expected, (forward, *[backward] * 3)):
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol, err_msg=name)
    return fused


@pytest.mark.parametrize("mask_kind", MASKS)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_fused_attention_matches_pytorch_forward_and_backward(shape, mask_kind):
    assert _compare(shape, mask_kind, F32, "CPU") == 1


@pytest.mark.parametrize("dtype", [F16, BF16], ids=["f16", "bf16"])
@pytest.mark.parametrize("mask_kind", ["causal", "bool"])
def test_sixteen_bit_inputs(dtype, mask_kind):
    assert _compare(((2, 3), 37, 37, 64, 64), mask_kind, dtype, "CPU") == 1


@pytest.mark.parametrize("mask_kind", ["causal", "float"])
def test_heads_read_through_a_transpose(mask_kind):
    assert _compare(((2, 3), 37, 21, 64, 64), mask_kind, F32, "CPU", transposed=True) == 1


@pytest.mark.parametrize("device", ["CPU", pytest.param("CUDA", marks=needs_gpu)])
def test_q_k_and_v_slices_of_one_buffer(device, cuda_fused):
    """GPT-2's heads: one (batch, length, 3, heads, size) buffer, q, k and v its slices (one kernel argument)."""
    rng = np.random.default_rng(4)
    qkv = rng.standard_normal((2, 7, 3, 3, 16)).astype(np.float32)
    ours = Tensor(qkv, device=device).realize().permute(2, 0, 3, 1, 4)
    out = ours[0].scaled_dot_product_attention(ours[1], ours[2], is_causal=True)
    assert _fused_kernels(out) == 1
    q, k, v = torch.tensor(qkv).permute(2, 0, 3, 1, 4)
    want = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    np.testing.assert_allclose(out.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.usefixtures("on_the_cpu")  # the C renderer fuses (CUDA=1 makes CUDA the default)
def test_a_float_mask_gets_its_gradient():
    rng = np.random.default_rng(2)
    arrays, mask = _inputs((2, 3), 9, 13, 16, 16), rng.standard_normal((3, 9, 13)).astype(np.float32)
    ours = Tensor(mask, requires_grad=True)
    q, k, v = (Tensor(a) for a in arrays)
    out = q.scaled_dot_product_attention(k, v, attn_mask=ours)
    assert _fused_kernels(out) == 1
    (out * out).sum().backward()
    tmask = torch.tensor(mask, requires_grad=True)
    tout = torch.nn.functional.scaled_dot_product_attention(*(torch.tensor(a) for a in arrays), attn_mask=tmask)
    (tout * tout).sum().backward()
    np.testing.assert_allclose(ours.grad.numpy(), tmask.grad.numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.usefixtures("on_the_cpu")  # the C renderer fuses (CUDA=1 makes CUDA the default)
def test_grouped_query_heads_are_copied_in_order_first():
    """enable_gqa repeats key's and value's heads: a view no strides describe, copied before the fused kernel."""
    arrays = _inputs((2, 4), 6, 5, 8, 8)
    q, k, v = Tensor(arrays[0]), Tensor(arrays[1][:, :2].copy()), Tensor(arrays[2][:, :2].copy())
    out = q.scaled_dot_product_attention(k, v, enable_gqa=True)
    assert _fused_kernels(out) == 1
    tq, tk, tv = (torch.tensor(t.numpy()) for t in (q, k, v))
    want = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, enable_gqa=True)
    np.testing.assert_allclose(out.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("case", ["dropout", "head 129", "value 130", "mixed dtypes", "PYTHON"])
def test_uncovered_cases_take_the_ordinary_path_and_stay_correct(case):
    head, value = {"head 129": (129, 8), "value 130": (8, 130)}.get(case, (8, 8))
    arrays = _inputs((2, 3), 5, 7, head, value)
    device = "PYTHON" if case == "PYTHON" else "CPU"
    q, k, v = (Tensor(a, device=device) for a in arrays)
    if case == "mixed dtypes":
        v = v.cast(F16)
    with Tensor.train(case == "dropout"):
        out = q.scaled_dot_product_attention(k, v, dropout_p=0.5 if case == "dropout" else 0.0)
        assert _fused_kernels(out) == 0
    if case == "dropout":  # training: some weights dropped, the rest scaled up
        return
    want = torch.nn.functional.scaled_dot_product_attention(*(torch.tensor(a) for a in arrays))
    np.testing.assert_allclose(out.float().numpy(), want.numpy(), rtol=2e-3, atol=2e-3)


@pytest.mark.usefixtures("on_the_cpu")  # the C renderer fuses (CUDA=1 makes CUDA the default)
def test_a_mask_that_broadcasts_the_batch_up():
    """q and k with no batch dims, a mask of a batch: the output has the mask's batch."""
    rng = np.random.default_rng(3)
    arrays, mask = _inputs((), 6, 5, 8, 8), rng.random((4, 6, 5)) > 0.2
    out = Tensor(arrays[0]).scaled_dot_product_attention(Tensor(arrays[1]), Tensor(arrays[2]), attn_mask=Tensor(mask))
    assert _fused_kernels(out) == 1
    q, k, v = (torch.tensor(a) for a in arrays)  # (PyTorch's own function refuses a mask that adds batch dims)
    scores = (q @ k.T / 8**0.5).masked_fill(~torch.tensor(mask), -torch.inf)
    want = torch.nan_to_num(scores.softmax(-1)) @ v
    np.testing.assert_allclose(out.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)


# ---- CUDA: the source compiles here; the GPU runs it where there is one ----


def _cuda_source(dtype, mask_kind: str, shape=((2, 3), 37, 37, 80, 64), k_transposed: bool = False) -> str:
    batch, length, source, head, value = shape
    q, k, v = (Tensor.empty(*batch, n, e, dtype=dtype, device="CPU") for n, e in ((length, head), (source, head),
                                                                                 (source, value)))  # fmt: skip
    if k_transposed:  # rows of k not contiguous: the tensor-core kernel copies them through registers
        k = Tensor.empty(*batch, head, source, dtype=dtype, device="CPU").transpose(-1, -2)
    mask = _mask(mask_kind, batch, length, source, np.random.default_rng(0))
    out = q.scaled_dot_product_attention(k, v, attn_mask=None if mask is None else Tensor(mask),
                                         is_causal=mask_kind == "causal")  # fmt: skip
    (item,) = [i for i in out.schedule() if i.ast.op.name == "SINK" and is_attention(i.ast)]
    return get_program(item.ast, CUDARenderer()).src


@needs_nvrtc
@pytest.mark.usefixtures("on_the_cpu")  # the kernel built from CPU tensors, rendered for CUDA
@pytest.mark.parametrize("dtype", [F16, BF16, F32], ids=["f16", "bf16", "f32"])
@pytest.mark.parametrize("mask_kind", MASKS)
def test_the_cuda_kernel_compiles(dtype, mask_kind):
    src = _cuda_source(dtype, mask_kind)
    assert "__shfl_xor_sync" in src and "gg_dynamic_shared_bytes" in src
    assert ops_cuda.NVRTCCompiler("sm_80").compile(src)


@needs_nvrtc
@pytest.mark.usefixtures("on_the_cpu")
@pytest.mark.parametrize("dtype", [F16, BF16], ids=["f16", "bf16"])
@pytest.mark.parametrize("mask_kind", MASKS)
@pytest.mark.parametrize("head, value", [(16, 16), (64, 64), (80, 48), (128, 128)])
def test_the_tensor_core_kernel_compiles_for_sm_90_without_spills(dtype, mask_kind, head, value):
    for k_transposed in (False, True):
        src = _cuda_source(dtype, mask_kind, ((3, 5), 100, 257, head, value), k_transposed)
        assert "mma.sync.aligned.m16n8k16" in src and ("cp.async" in src)
        log = ptxas_report(src, "sm_90")
        assert "0 bytes spill stores" in log, log


def test_cuda_fuses_sixteen_bits_with_head_sizes_the_tensor_cores_take():
    """CUDA asks for the tensor-core kernel (16-bit inputs, head sizes multiples of 16 up to 128), not for the SIMT
    one (slower than the unfused path in GPT-2) unless `fused_attention` is set, and none before sm_80."""
    renderer = CUDARenderer()
    assert renderer.fuses_attention(F16, 64, 64) and renderer.fuses_attention(BF16, 128, 16)
    assert not any(renderer.fuses_attention(d, e, ev) for d, e, ev in [(F32, 64, 64), (F16, 72, 72), (F16, 64, 144),
                                                                        (BF16, 8, 8)])  # fmt: skip
    renderer.mma_attention = False  # a device before sm_80
    assert not renderer.fuses_attention(F16, 64, 64)


@pytest.mark.usefixtures("on_the_cpu")
def test_the_cuda_renderer_writes_the_simt_kernel_where_the_tensor_cores_do_not_fit():
    assert "mma.sync" in _cuda_source(F16, "causal", ((2, 3), 37, 37, 64, 64))
    for dtype, head in [(F32, 64), (F16, 72)]:
        src = _cuda_source(dtype, "causal", ((2, 3), 37, 37, head, head))
        assert "mma.sync" not in src and "__shfl_xor_sync" in src


@pytest.mark.usefixtures("on_the_cpu")
def test_fused_attention_0_takes_the_ordinary_path():
    arrays = _inputs((2, 3), 9, 13, 16, 16)
    with Context(FUSED_ATTENTION=0):
        out = Tensor(arrays[0]).scaled_dot_product_attention(Tensor(arrays[1]), Tensor(arrays[2]), is_causal=True)
        assert _fused_kernels(out) == 0
    want = torch.nn.functional.scaled_dot_product_attention(*(torch.tensor(a) for a in arrays), is_causal=True)
    np.testing.assert_allclose(out.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)


# the tensor-core kernel on the GPU: odd batch and heads, lengths no multiple of a 64-key block, L != S
LENGTHS = [(1, 1), (17, 17), (64, 64), (100, 100), (257, 257), (17, 257), (257, 17)]


def _attention_node(out: Tensor) -> UOp:
    """The ATTENTION node of `out`'s graph (before it is scheduled): its kernel's own output is every row's
    outputs, then every row's logsumexp."""
    (node,) = [u for u in out.uop.toposort() if u.op is Ops.ATTENTION]
    return node


@needs_gpu
@pytest.mark.parametrize("dtype", [F16, BF16], ids=["f16", "bf16"])
@pytest.mark.parametrize("mask_kind", MASKS)
@pytest.mark.parametrize("lengths", LENGTHS, ids=str)
@pytest.mark.parametrize("head", [16, 64, 80, 128])
def test_gpu_tensor_core_kernel_outputs_and_logsumexps(dtype, mask_kind, lengths, head):
    (length, source), batch = lengths, (3, 5)
    rng = np.random.default_rng(length * 1000 + head)
    mask, causal = _mask(mask_kind, batch, length, source, rng), mask_kind == "causal"
    q, k, v = (Tensor(a, device="CUDA").cast(dtype).realize() for a in _inputs(batch, length, source, head, head))
    tmask = None if mask is None else Tensor(mask, device="CUDA")
    out = q.scaled_dot_product_attention(k, v, attn_mask=tmask, is_causal=causal)
    node = _attention_node(out)
    (item,) = [i for i in out.schedule() if i.ast.op.name == "SINK" and is_attention(i.ast)]
    assert "mma.sync" in get_program(item.ast, Device["CUDA"].renderer).src
    packed = Tensor(node).numpy()
    want_out, want_lse = attention_reference(*(t.float().numpy() for t in (q, k, v)), mask, causal, 1 / math.sqrt(head))
    rows, tolerance = want_lse.size, TOLERANCE[dtype][0]  # the weights are rounded to 16 bits for P @ v
    np.testing.assert_allclose(packed[: rows * head].reshape(want_out.shape), want_out, rtol=tolerance, atol=tolerance)
    np.testing.assert_allclose(packed[rows * head :].reshape(want_lse.shape), want_lse, rtol=1e-4, atol=1e-4)


@needs_gpu
@pytest.mark.parametrize("dtype", [F16, BF16], ids=["f16", "bf16"])
@pytest.mark.parametrize("mask_kind", MASKS)
@pytest.mark.parametrize("shape", [((3, 5), 100, 100, 64, 64), ((1, 3), 257, 17, 128, 80), ((2, 1), 17, 257, 16, 16),
                                   ((1, 1), 1, 1, 16, 16)], ids=str)  # fmt: skip
def test_gpu_tensor_core_kernel_forward_and_backward(dtype, mask_kind, shape):
    """Without the `cuda_fused` fixture: CUDA takes the tensor-core kernel by itself."""
    assert _compare(shape, mask_kind, dtype, "CUDA") == 1
    assert _compare(shape, mask_kind, dtype, "CUDA", transposed=True) == 1


@needs_gpu
@pytest.mark.parametrize("dtype", [F16, BF16], ids=["f16", "bf16"])
def test_gpu_gpt2_heads_from_one_sixteen_bit_buffer(dtype):
    """GPT-2's fp16 attention: q, k and v slices of one (batch, length, 3, heads, 64) buffer, causal."""
    rng = np.random.default_rng(5)
    qkv = Tensor(rng.standard_normal((3, 77, 3, 5, 64)).astype(np.float32), device="CUDA").cast(dtype).realize()
    q, k, v = qkv.permute(2, 0, 3, 1, 4)
    out = q.scaled_dot_product_attention(k, v, is_causal=True)
    assert _fused_kernels(out) == 1
    want, _ = attention_reference(*(t.float().numpy() for t in (q, k, v)), None, True, 1 / 8)
    np.testing.assert_allclose(out.float().numpy(), want, rtol=TOLERANCE[dtype][0], atol=TOLERANCE[dtype][0])


@needs_gpu
@pytest.mark.parametrize("mask_kind", MASKS)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_gpu_fused_attention_matches_pytorch(shape, mask_kind, cuda_fused):
    assert _compare(shape, mask_kind, F32, "CUDA") == 1


@needs_gpu
@pytest.mark.parametrize("dtype", [F16, BF16], ids=["f16", "bf16"])
@pytest.mark.parametrize("mask_kind", MASKS)
def test_gpu_sixteen_bit_inputs(dtype, mask_kind, cuda_fused):
    assert _compare(((2, 3), 37, 37, 64, 64), mask_kind, dtype, "CUDA") == 1
    assert _compare(((1, 2), 130, 77, 128, 128), mask_kind, dtype, "CUDA", transposed=True) == 1


# ---- the models take it ----


@pytest.mark.usefixtures("on_the_cpu")  # the C renderer fuses (CUDA=1 makes CUDA the default)
def test_gpt2_and_bert_attend_through_the_fused_kernel():
    from glassgrad.models.bert import Bert, BertConfig
    from glassgrad.models.gpt2 import GPT2, GPT2Config

    gpt2 = GPT2(GPT2Config(vocab_size=50, n_ctx=16, n_embd=32, n_layer=2, n_head=4))
    assert _fused_kernels(gpt2(Tensor([[1, 2, 3, 4, 5]]))) == 2
    bert = Bert(BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                           intermediate_size=64, max_position_embeddings=16))  # fmt: skip
    assert _fused_kernels(bert(Tensor([[1, 2, 3, 0]]), Tensor([[1, 1, 1, 0]]))) == 2
