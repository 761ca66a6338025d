"""CUDA's tensor-core attention kernel (renderer/cuda_mma_attention.py) run whole on the CPU by test/cuda_emulator.py
(the warp-wide instructions computed from the PTX ISA's fragment tables): its outputs and logsumexps against NumPy,
over head sizes, lengths that are no multiple of a block, causal and masked scores, both 16-bit types, and inputs that
take cp.async or the copies through registers. The GPU tests (test_fused_attention.py) run it for real."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from cuda_emulator import compiler_missing, emulate
from glassgrad import Tensor, dtypes
from glassgrad.codegen import get_program
from glassgrad.codegen.attention import attention_spec, is_attention
from glassgrad.renderer.attention import Operand
from glassgrad.renderer.cuda import CUDARenderer
from helpers import attention_reference

pytestmark = [pytest.mark.skipif(compiler_missing() is not None, reason=str(compiler_missing())),
              pytest.mark.usefixtures("on_the_cpu")]  # fmt: skip

F16, BF16 = dtypes.float16, dtypes.bfloat16


def _bits(values: np.ndarray, dtype) -> tuple[np.ndarray, np.ndarray]:
    """The 16-bit patterns of `values` rounded to dtype, and those values as float64."""
    rounded = torch.tensor(values).to(torch.float16 if dtype == F16 else torch.bfloat16)
    return rounded.view(torch.int16).numpy().view(np.uint16), rounded.double().numpy()


def _tensors(layout: str, batch, length, source, head, value, dtype) -> list[Tensor]:
    """q, k, v as the kernel will read them: separate buffers, heads seen through a transpose (a model's), k
    transposed in memory (its rows strided: the copies through registers), or slices of one qkv buffer."""
    if layout == "heads":  # (batch, length, heads, size) seen as (batch, heads, length, size)
        return [Tensor.empty(batch[0], n, batch[1], e, dtype=dtype).transpose(1, 2)
                for n, e in ((length, head), (source, head), (source, value))]  # fmt: skip
    if layout == "k transposed":
        q, v = Tensor.empty(*batch, length, head, dtype=dtype), Tensor.empty(*batch, source, value, dtype=dtype)
        return [q, Tensor.empty(*batch, head, source, dtype=dtype).transpose(-1, -2), v]
    if layout == "qkv":  # GPT-2's: one (batch, length, 3, heads, size) buffer
        qkv = Tensor.empty(batch[0], length, 3, batch[1], head, dtype=dtype).permute(2, 0, 3, 1, 4)
        return [qkv[0], qkv[1], qkv[2]]
    return [Tensor.empty(*batch, n, e, dtype=dtype) for n, e in ((length, head), (source, head), (source, value))]


def _place(buffers: dict[int, np.ndarray], x: Operand, batch, values: np.ndarray) -> None:
    """Writes x's logical (*batch, rows, cols) values where the kernel reads them in its argument x.buffer."""
    rows, cols = values.shape[-2:]
    for entry in itertools.product(*(range(n) for n in batch)):
        base = x.offset + sum(i * s for i, s in zip(entry, x.batch_strides))
        at = base + np.arange(rows)[:, None] * x.row_stride + np.arange(cols)[None, :] * x.col_stride
        buffers[x.buffer][at] = values[entry]


def _run(shape, dtype, kind: str, layout: str = "plain", reverse: bool = False, seed: int = 0) -> None:
    batch, length, source, head, value = shape
    rng = np.random.default_rng(seed)
    q, k, v = _tensors(layout, batch, length, source, head, value, dtype)
    mask, causal = None, kind == "causal"
    if kind == "bool":
        mask = rng.random((length, source)) > 0.3
        mask[0] = False  # a row with every key masked
    elif kind == "float":
        mask = (rng.standard_normal((length, source)) * 2).astype(np.float32)
        mask[rng.random((length, source)) < 0.2] = -np.inf
    out = q.scaled_dot_product_attention(k, v, attn_mask=None if mask is None else Tensor(mask), is_causal=causal)
    (item,) = [i for i in out.schedule() if i.ast.op.name == "SINK" and is_attention(i.ast)]
    spec, program = attention_spec(item.ast), get_program(item.ast, CUDARenderer())
    assert "mma.sync.aligned.m16n8k16" in program.src

    values = [rng.standard_normal((*batch, n, e)) for n, e in ((length, head), (source, head), (source, value))]
    operands = [spec.q, spec.k, spec.v] + ([spec.mask] if mask is not None else [])
    sizes: dict[int, int] = {}
    for x, array in zip(operands, values + ([mask] if mask is not None else [])):
        shape, strides = (*batch, *array.shape[-2:]), (*x.batch_strides, x.row_stride, x.col_stride)
        last = x.offset + sum((n - 1) * s for n, s in zip(shape, strides) if s > 0)  # (no flipped views here)
        sizes[x.buffer] = max(sizes.get(x.buffer, 0), last + 1)
    buffers = {n: np.full(size, 0x7E00, np.uint16) for n, size in sizes.items()}  # NaN where nothing is placed
    if mask is not None:
        buffers[spec.mask.buffer] = np.zeros(sizes[spec.mask.buffer], mask.dtype)
        _place(buffers, spec.mask, (), mask)
    rounded = []
    for x, array in zip(operands[:3], values):
        bits, as_float = _bits(array, dtype)
        _place(buffers, x, batch, bits)
        rounded.append(as_float)
    packed = np.full(spec.rows * (value + 1), np.nan, np.float32)
    emulate(program.src, program.name, program.global_size[0], program.local_size[0],
            [packed, *(buffers[n] for n in sorted(buffers))], reverse)  # fmt: skip

    want_out, want_lse = attention_reference(*rounded, mask, causal, 1 / math.sqrt(head))
    tolerance = 2e-3 if dtype == F16 else 1.6e-2  # the weights are rounded to 16 bits for the second product
    got_out, got_lse = packed[: spec.rows * value].reshape(want_out.shape), packed[spec.rows * value :]
    np.testing.assert_allclose(got_out, want_out, rtol=tolerance, atol=tolerance)
    np.testing.assert_allclose(got_lse.reshape(want_lse.shape), want_lse, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kind", ["none", "causal", "bool", "float"])
@pytest.mark.parametrize("shape", [((1, 3), 100, 100, 64, 64), ((3,), 17, 130, 80, 48), ((1, 1), 1, 1, 16, 16),
                                   ((1, 1), 70, 9, 128, 128)], ids=str)  # fmt: skip
def test_emulated_kernel_matches_numpy(shape, kind):
    _run(shape, F16, kind)


@pytest.mark.parametrize("kind", ["causal", "bool"])
def test_emulated_bfloat16(kind):
    _run(((1, 2), 65, 65, 32, 32), BF16, kind)


@pytest.mark.parametrize("layout", ["heads", "k transposed", "qkv"])
def test_emulated_layouts(layout):
    _run(((1, 3), 67, 67, 64, 64), F16, "causal", layout)


@pytest.mark.parametrize("layout", ["plain", "k transposed"])
def test_the_last_warps_first(layout):
    """The block's last warps run ahead as far as the barriers let them (the first ones do elsewhere): a barrier or
    a cp.async wait too few shows as another warp's keys or values read."""
    _run(((1, 2), 150, 150, 32, 32), F16, "none", layout, reverse=True)
