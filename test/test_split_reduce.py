"""Two-stage reductions: on a GPU, where the split goes (everywhere) and the results and gradients (on a GPU); on the
CPU, how large a part of a batch a sum takes at a time (its results: test_conv_backward.py's weight gradients)."""

import numpy as np
import pytest
import torch

from glassgrad import Tensor
from glassgrad.codegen.tensor_cores import match_matmul
from glassgrad.dtype import dtypes
from glassgrad.mixin import split_reduce
from glassgrad.mixin.split_reduce import (
    LONG_PART,
    LONG_PARTIALS,
    MIN_PART,
    SPLIT_BELOW,
    SPLIT_FROM,
    SPLIT_PARTS,
    _is_product,
    cache_sized_part,
    split_parts,
)
from glassgrad.uop.ops import Ops
from helpers import needs_gpu


@pytest.mark.parametrize(
    "shape, axes, expected",
    [
        ((1 << 28,), (0,), (0, SPLIT_PARTS)),  # a whole sum: as many parts as blocks wanted
        ((512, 32, 20, 20), (0, 2, 3), (0, SPLIT_PARTS // 32)),  # a batchnorm's mean: cut along the batch
        ((32, 5, 5, 512, 24, 24), (3, 4, 5), (3, 16)),  # a small convolution's weight gradient: at least 16 parts
        ((7, 3 * SPLIT_FROM), (0, 1), (1, SPLIT_PARTS)),  # 7 does not give enough parts: the next axis does
        ((SPLIT_FROM - 1,), (0,), None),  # short enough for one block
        ((SPLIT_BELOW, SPLIT_FROM), (1,), None),  # enough outputs to fill the GPU
        ((65537 * 2,), (0,), None),  # no divisor gives enough parts (65537 is prime)
        ((1 << 22, 1, 1, 1 << 15), (3,), None),  # a contraction's long sum, but outputs enough to fill the GPU
        # a long contraction into a moderate number of outputs: about LONG_PARTIALS partial results
        ((256, 1, 64, 64, 32, 32, 3, 3), (0, 4, 5), (0, 64)),  # ResNet-18's 64-channel weight gradient: 113 wanted
        ((256, 1, 128, 64, 16, 16, 1, 1), (0, 4, 5), (0, 64)),  # a 1x1 shortcut's: parts of LONG_PART terms
        ((256, 1, 128, 128, 16, 16, 3, 3), (0, 4, 5), (0, 16)),  # 147456 outputs: 28 parts wanted, 16 divide 256
        ((4, 256, 1, 768, 50257), (4,), (4, 5)),  # GPT-2's head, its input's gradient: 50257 is 29 x 1733, cut unevenly
        ((1024, 1, 768, 3072), (0,), None),  # GPT-2's weight gradients: enough outputs, a short sum
        ((256, 1, 256, 256, 8, 8, 3, 3), (0, 4, 5), (0, 4)),  # 589824 outputs are 36 tiles: 7 parts wanted
        # ResNet-50's (ImageNet, batch 64; H200, its bf16 training step 288 -> 123 ms with these three split)
        ((64, 1, 1024, 256, 14, 14, 1, 1), (0, 4, 5), (0, 8)),  # a 1x1 weight gradient at 14x14: 16 tiles unsplit
        ((64, 1, 2048, 512, 7, 7, 1, 1), (0, 4, 5), None),  # 3136 terms: short enough
        ((64, 1, 64, 3, 112, 112, 7, 7), (0, 4, 5), (4, 112)),  # the stem's: no axis gives the 392 parts wanted,
        # the one that gives the most does
    ],
)
def test_where_a_reduction_is_split(shape, axes, expected):
    found = split_parts(shape, axes, contraction=len(shape) > 3)
    assert found == expected
    if found is not None:
        axis, parts = found
        even = shape[axis] % parts == 0 or not any(shape[axis] % d == 0 for d in range(2, parts + 1))  # else uneven
        assert even and np.prod([shape[a] for a in axes]) // parts >= MIN_PART
        outputs = np.prod([s for i, s in enumerate(shape) if i not in axes])
        assert outputs < SPLIT_BELOW or (np.prod([shape[a] for a in axes]) // parts >= LONG_PART and
                                         parts * outputs <= LONG_PARTIALS)  # fmt: skip


def test_off_a_gpu_a_reduction_stays_one_kernel():
    x = Tensor.empty(1 << 17, device="CPU")
    assert len(x.sum().schedule()) == 1


@needs_gpu
@pytest.mark.parametrize("op", ["sum", "max", "mean"])
def test_a_split_reduction_is_two_kernels_and_matches_numpy(op):
    data = np.random.default_rng(0).standard_normal((64, 5000), dtype=np.float32)
    t = Tensor(data, device="CUDA")
    assert len([i for i in getattr(t, op)().schedule() if i.ast.op.name == "SINK"]) == 2
    np.testing.assert_allclose(getattr(t, op)().numpy(), getattr(data, op)(), rtol=1e-5, atol=1e-4)
    channels = getattr(t.reshape(64, 2, 2500), op)(axis=(0, 2))
    np.testing.assert_allclose(channels.numpy(), getattr(data.reshape(64, 2, 2500), op)(axis=(0, 2)), rtol=1e-5)


@needs_gpu
def test_gradients_through_a_split_sum_match_numpy():
    data = np.random.default_rng(1).standard_normal((32, 4, 1024), dtype=np.float32)
    t = Tensor(data, device="CUDA", requires_grad=True)
    ((t * t).sum(axis=(0, 2)) * Tensor([1.0, 2.0, 3.0, 4.0], device="CUDA")).sum().backward()
    np.testing.assert_allclose(t.grad.numpy(), 2 * data * np.array([1, 2, 3, 4], np.float32)[None, :, None],
                               rtol=1e-6)  # fmt: skip
    m = Tensor(data, device="CUDA", requires_grad=True)
    m.max().backward()  # a max autograd differentiates stays one kernel: ties share the gradient as a whole
    expected = (data == data.max()).astype(np.float32)
    np.testing.assert_array_equal(m.grad.numpy(), expected / expected.sum())


MIB = 1 << 20


@pytest.mark.parametrize(
    "n, item_bytes, outputs, dtype, expected",
    [
        (512, 124_928, 25_600, dtypes.float32, 8),  # beautiful_mnist's second weight gradient: 8 images of 122 KB
        (512, 42_000, 36_864, dtypes.float32, 16),  # its fourth: 24 images would fit, 16 divides the batch
        (512, 2 * MIB, 16, dtypes.float32, 1),  # items bigger than the cache: one at a time
        (96, 16_000, 1_000, dtypes.float64, 48),  # the largest divisor that fits (65 images would), not a power of 2
        (64, 16_000, 100, dtypes.float32, None),  # the whole batch fits in cache: one kernel
        (512, 124_928, 25_600, dtypes.float16, None),  # 16-bit partial sums would round
        (512, 124_928, 25_600, dtypes.bfloat16, None),
        (512, 8_192, 1 << 20, dtypes.float32, None),  # partial results as large as the operands: not worth it
    ],
)
def test_how_much_of_a_batch_a_cpu_sum_takes_at_a_time(n, item_bytes, outputs, dtype, expected):
    assert cache_sized_part(n, item_bytes, outputs, dtype, "CPU") == expected
    if expected is not None:
        assert n % expected == 0 and (expected * item_bytes <= split_reduce.L2_BUDGET or expected == 1)


def test_a_sum_in_cache_sized_parts_is_for_the_cpu_only(monkeypatch):
    monkeypatch.setattr(split_reduce, "_has_blocks", lambda device: device == "CUDA")  # no GPU needed to ask
    assert cache_sized_part(512, 124_928, 25_600, dtypes.float32, "CUDA") is None
    assert cache_sized_part(512, 124_928, 25_600, dtypes.float32, ("CPU", "CPU:1")) is None  # sharded: left whole


@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.bfloat16])
@pytest.mark.parametrize("kernel, padding", [(3, 1), (1, 0)])
def test_a_long_weight_gradient_is_cut_along_the_batch_into_tiled_products(monkeypatch, dtype, kernel, padding):
    """On a GPU (asked of a CPU tensor here, as a GPU would answer), a convolution's weight gradient over a long
    batch is two kernels: parts of the batch as a batched tiled product (each part a batch of the product, its sum
    LONG_PART terms or more), then the parts summed; its values are the one-kernel sum's (PyTorch's)."""
    monkeypatch.setattr(split_reduce, "_has_blocks", lambda device: True)
    rng = np.random.default_rng(2)
    xs, ws = rng.standard_normal((128, 16, 16, 16)), rng.standard_normal((128, 16, kernel, kernel))
    gs = rng.standard_normal((128, 128, 16, 16))
    x = Tensor(xs.astype(np.float32)).cast(dtype).requires_grad_()
    w = Tensor(ws.astype(np.float32)).cast(dtype).requires_grad_()
    (x.conv2d(w, padding=padding).float() * Tensor(gs.astype(np.float32))).sum().backward()
    stages = [i.ast for i in w.grad.schedule() if i.ast.op is Ops.SINK]
    products = [mm for mm in map(match_matmul, stages) if mm is not None]
    assert len(products) == 1 and products[0].batch > 1 and products[0].k >= LONG_PART
    assert products[0].batch * products[0].k == 128 * 16 * 16  # the parts cover the batch and the positions
    # the reference in float64 from the operands the product multiplies: 16-bit x and output gradient where 16-bit
    rounded = lambda a: torch.tensor(a, dtype=torch.float32).to(torch.bfloat16 if dtype == dtypes.bfloat16 else
                                                                torch.float32).double()  # noqa: E731  # fmt: skip
    tx, tw = rounded(xs).requires_grad_(), rounded(ws).requires_grad_()
    (torch.nn.functional.conv2d(tx, tw, padding=padding) * rounded(gs)).sum().backward()
    want = tw.grad.numpy()
    np.testing.assert_allclose(w.grad.float().numpy(), want, rtol=1e-2, atol=1e-4 * np.abs(want).max())


@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.bfloat16])
def test_a_sum_no_part_count_divides_is_cut_unevenly(monkeypatch, dtype):
    """GPT-2's head: the gradient of its input sums over a prime-ish vocabulary (here 32771, a prime). On a GPU (asked
    of a CPU tensor, as a GPU answers) the first parts * (32771 // parts) terms go in parts as a batched tiled product,
    the few left are summed beside them; 16-bit gradients are summed in float32 parts. Values and gradients as
    PyTorch's."""
    monkeypatch.setattr(split_reduce, "_has_blocks", lambda device: True)
    rng = np.random.default_rng(3)
    xs, ws, gs = rng.standard_normal((64, 48)), rng.standard_normal((32771, 48)), rng.standard_normal((64, 32771))
    x = Tensor(xs.astype(np.float32)).cast(dtype).requires_grad_()
    w = Tensor(ws.astype(np.float32)).cast(dtype).requires_grad_()
    (x.linear(w).float() * Tensor(gs.astype(np.float32))).sum().backward()
    stages = [i.ast for i in x.grad.schedule() if i.ast.op is Ops.SINK]
    products = [mm for mm in map(match_matmul, stages) if mm is not None]
    assert (
        len(products) == 1 and products[0].batch > 1 and 32771 - products[0].batch * products[0].k < products[0].batch
    )
    rounded = lambda a: torch.tensor(a, dtype=torch.float32).to(torch.bfloat16 if dtype == dtypes.bfloat16 else
                                                                torch.float32).double()  # noqa: E731  # fmt: skip
    tx, tw = rounded(xs).requires_grad_(), rounded(ws).requires_grad_()
    (torch.nn.functional.linear(tx, tw) * rounded(gs)).sum().backward()
    for ours, theirs in ((x, tx), (w, tw)):
        want = theirs.grad.numpy()
        np.testing.assert_allclose(ours.grad.float().numpy(), want, rtol=1e-2, atol=1e-2 * np.abs(want).max())


def test_a_product_under_casts_and_views_is_a_contraction():
    """A convolution's weight gradient sums a permuted (and, under autocast, cast) product: still a contraction."""
    a, b = Tensor.empty(4, 6), Tensor.empty(4, 6)
    assert _is_product((a * b).uop)
    assert _is_product((a * b).cast(dtypes.bfloat16).permute(1, 0).reshape(2, 12).uop)
    assert not _is_product((a + b).permute(1, 0).uop)
