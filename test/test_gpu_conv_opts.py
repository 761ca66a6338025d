"""The GPU heuristics' register blocks for convolutions (codegen/heuristics.py: _window_opts, _grouped_window_opts)
and the CUDA renderer's fused multiply-add chains (codegen/linearize.py's chain_sums).

The choices and the CUDA source are checked everywhere (the CUDA renderer needs no GPU); the same opts also run on
the CPU against PyTorch; the whole convolution, forward and backward, runs on the GPU where there is one.
"""

import numpy as np
import pytest
import torch

from glassgrad import Context, Tensor
from glassgrad.codegen import get_program
from glassgrad.codegen.heuristics import GROUPED_ROWS, WINDOW_ACCUMULATORS, _accesses
from glassgrad.codegen.opt import main_reduce
from glassgrad.helpers import prod
from glassgrad.mixin import conv as nn
from glassgrad.renderer.cuda import CUDARenderer
from glassgrad.uop.ops import Ops
from helpers import gpu_opts, needs_gpu
from test_opt_actions import run

rng = np.random.default_rng(7)


def conv_item(batch: int, cin: int, cout: int, size: tuple[int, int], k: int, padding: int = 0):
    """The convolution's kernel (scheduled without the CPU's layout rules, as on a GPU), its inputs run, and torch's
    result."""
    x = rng.standard_normal((batch, cin, *size)).astype(np.float32)
    w = rng.standard_normal((cout, cin, k, k)).astype(np.float32)
    with Context(NOOPT=1):
        *before, item = Tensor(x, device="CPU").conv2d(Tensor(w, device="CPU"), padding=padding).schedule()
    from glassgrad.engine.realize import run_schedule

    run_schedule(before)
    expected = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w), padding=padding).numpy()
    return item, expected


@pytest.mark.parametrize("batch, cin, cout, size, k, padding", [
    (4, 3, 8, (20, 20), 5, 0), (2, 4, 6, (13, 11), 3, 0), (3, 2, 4, (9, 24), 5, 0), (8, 1, 32, (28, 28), 5, 0),
])  # fmt: skip
def test_a_convolution_blocks_rows_with_its_kernel_rows_unrolled_and_keeps_its_columns_on_threads(
    batch, cin, cout, size, k, padding
):
    """(Padding read through a mask guards each load, so that its steps along the window are unknown: such a
    convolution keeps the plain block; the input gradient's padding is a buffer of its own.)"""
    item, expected = conv_item(batch, cin, cout, size, k, padding)
    opts = gpu_opts(item.ast)
    shape = item.ast.src[0].src[1].arg.shape
    accesses, _ = _accesses(item.ast)
    store = next(acc for acc in accesses if acc.is_store)
    columns = max(a for a in range(len(shape)) if shape[a] > 1 and store.steps.get(a) == 1)
    upcast = {o.axis: o.amount for o in opts if o.op == "UPCAST"}
    unroll = {o.axis: o.amount for o in opts if o.op == "UNROLL"}
    assert columns not in upcast, opts  # neighbouring threads take neighbouring columns: coalesced
    assert any(main_reduce(item.ast).src[0].shape[a] == k for a in unroll), opts  # a whole kernel row unrolled
    assert 1 < prod(upcast.values()) <= WINDOW_ACCUMULATORS
    assert not any(o.op in ("LOCAL", "GROUP") for o in opts)  # many outputs: a thread each
    got = run(item, opts, threads=2).reshape(expected.shape)  # the same opts on the CPU compute the same values
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


def test_a_weight_gradient_blocks_its_whole_window_across_threads_that_share_the_sum(monkeypatch):
    monkeypatch.setattr(nn, "cache_sized_part", lambda *args: None)  # the graph a GPU gets: the batch summed whole
    x = Tensor(rng.standard_normal((16, 32, 20, 20)).astype(np.float32), device="CPU")
    g = Tensor(rng.standard_normal((16, 32, 16, 16)).astype(np.float32), device="CPU")
    w = Tensor.zeros(32, 32, 5, 5, requires_grad=True, device="CPU")  # outputs enough for blocks of 25 and more
    with Context(NOOPT=1):
        (x.conv2d(w) * g).sum().backward()
        items = [i for i in w.grad.schedule() if i.ast.op is Ops.SINK and main_reduce(i.ast) is not None]
    opts = gpu_opts(items[-1].ast)
    assert [o.amount for o in opts if o.op == "UPCAST"][:2] == [5, 5], opts  # kx and ky whole
    assert any(o.op == "GROUP" for o in opts), opts
    reduce = main_reduce(items[-1].ast)
    rows = [o for o in opts if o.op == "UNROLL"]  # the summed rows y, paired with ky: a few a thread
    assert [(reduce.src[0].shape[o.axis], o.amount) for o in rows] == ([(16, GROUPED_ROWS)] if GROUPED_ROWS > 1 else [])


def test_other_kernels_keep_the_plain_register_block():
    a = Tensor(rng.standard_normal((64, 96)).astype(np.float32), device="CPU")
    b = Tensor(rng.standard_normal((96, 80)).astype(np.float32), device="CPU")
    ast = (a @ b).schedule()[-1].ast
    assert not any(o.op == "UNROLL" and o.amount == 96 for o in gpu_opts(ast))
    from glassgrad.codegen.heuristics import _window_opts

    assert _window_opts(ast, _accesses(ast)[0]) is None  # a matmul has no window


def test_cuda_sums_of_products_chain_fused_multiply_adds_into_the_accumulator():
    item, _ = conv_item(2, 3, 4, (12, 12), 3)
    opts = gpu_opts(item.ast)
    src = get_program(item.ast, CUDARenderer(), tuple(opts)).src
    # each unrolled term goes into the accumulator: fma(a, b, fma(c, d, acc)), no tree of adds first
    update = next(line for line in src.splitlines() if line.strip().startswith("acc0 = "))
    assert update.count("__fmaf_rn(") == 3 and update.rstrip().endswith("acc0)));")


@needs_gpu
@pytest.mark.parametrize("batch, cin, cout, size, k, padding", [
    (5, 3, 8, (20, 20), 5, 0), (4, 6, 10, (13, 11), 3, 1), (16, 1, 32, (28, 28), 5, 0), (3, 8, 8, (7, 9), 5, 2),
])  # fmt: skip
def test_convolution_forward_and_gradients_on_the_gpu_match_torch(batch, cin, cout, size, k, padding):
    rng = np.random.default_rng(batch * 1000 + size[0])
    x = rng.standard_normal((batch, cin, *size)).astype(np.float32)
    w = rng.standard_normal((cout, cin, k, k)).astype(np.float32)
    tx, tw = Tensor(x, device="CUDA", requires_grad=True), Tensor(w, device="CUDA", requires_grad=True)
    out = tx.conv2d(tw, padding=padding).relu()
    g = rng.standard_normal(out.shape).astype(np.float32)
    (out * Tensor(g, device="CUDA")).sum().backward()
    rx, rw = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    rout = torch.nn.functional.conv2d(rx, rw, padding=padding).relu()
    # the ReLU's side as glassgrad's forward decided it (an output within rounding of 0 may fall either way)
    kept = torch.from_numpy(out.numpy() > 0)
    (torch.nn.functional.conv2d(rx, rw, padding=padding) * kept * torch.from_numpy(g)).sum().backward()
    np.testing.assert_allclose(out.numpy(), rout.detach().numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(tx.grad.numpy(), rx.grad.numpy(), rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(tw.grad.numpy(), rw.grad.numpy(), rtol=1e-4, atol=1e-3)


def _two_convolutions(size: int, device: str = "CPU"):
    rng = np.random.default_rng(size)  # the same inputs whatever ran before (see the test above)
    x = rng.standard_normal((4, 1, size, size)).astype(np.float32)
    w1, b1 = rng.standard_normal((8, 1, 5, 5)).astype(np.float32), rng.standard_normal(8).astype(np.float32)
    w2 = rng.standard_normal((8, 8, 5, 5)).astype(np.float32)
    tw1, tb1, tw2 = (Tensor(a, requires_grad=True, device=device) for a in (w1, b1, w2))
    Tensor(x, device=device).conv2d(tw1, tb1).relu().conv2d(tw2).relu().sum().backward()
    rw1, rb1, rw2 = (torch.tensor(a, requires_grad=True) for a in (w1, b1, w2))
    first = torch.nn.functional.conv2d(torch.from_numpy(x), rw1, rb1).relu()
    torch.nn.functional.conv2d(first, rw2).relu().sum().backward()
    return (tw1.grad, tb1.grad, tw2.grad), (rw1.grad, rb1.grad, rw2.grad)


def test_a_convolution_reads_the_previous_bias_and_relu_from_a_buffer_on_a_gpu_as_on_the_cpu(monkeypatch):
    import glassgrad.mixin.split_reduce as split_reduce

    def relu_kernels(grads) -> int:
        with Context(NOOPT=1):
            items = grads[0].schedule(*grads[1:])
        kernels = [i for i in items if i.ast.op is Ops.SINK and main_reduce(i.ast) is None]
        return sum(any(n.op is Ops.WHERE for n in i.ast.toposort()) for i in kernels)

    cpu = relu_kernels(_two_convolutions(17)[0])  # (another size: the scheduler remembers graphs of one shape)
    monkeypatch.setattr(split_reduce, "_has_blocks", lambda device: True)  # the scheduler's view of a GPU
    got, expected = _two_convolutions(16)
    assert relu_kernels(got) == cpu >= 1  # the first convolution's bias and ReLU, computed once into a buffer
    Tensor.realize(*got)
    for item, want in zip(got, expected):
        np.testing.assert_allclose(item.numpy(), want.numpy(), rtol=1e-4, atol=1e-3)


@needs_gpu
def test_two_convolutions_with_bias_and_relu_train_on_the_gpu_as_in_torch():
    got, expected = _two_convolutions(20, "CUDA")
    for item, want in zip(got, expected):
        np.testing.assert_allclose(item.numpy(), want.numpy(), rtol=1e-4, atol=1e-3)
