"""The GPU rules that serve beautiful_mnist's step besides the convolutions' blocks (codegen/heuristics.py): GROUPs
ordered by how far loads move on average (through a pooling window's x // 2), pooling kernels that keep their row on
the threads, wider blocks of a grouped weight gradient; and the CUDA allocator's reuse of freed memory.

The choices are checked everywhere (the heuristics need no GPU) and the same opts run on the CPU against NumPy; the
allocator runs where there is a GPU.
"""

import numpy as np

from glassgrad import Context, Tensor
from glassgrad.codegen.heuristics import GROUPED_REUSE, _accesses, _upcast_amount
from glassgrad.codegen.opt import main_reduce
from glassgrad.uop.ops import Ops
from helpers import gpu_opts, needs_gpu
from test_opt_actions import run

rng = np.random.default_rng(11)


def reduce_items(tensor: Tensor):
    with Context(NOOPT=1):
        items = tensor.schedule()
    return items


def test_a_reduction_through_an_upsampled_input_groups_its_contiguous_axis_first():
    """A batch norm's gradient after a 2x2 max pool reads the pool's gradient at (y // 2, x // 2): not affine, but
    half an element a step along x. The threads that share the sum take x first, not the batch (far apart)."""
    n, c, h, w = 32, 4, 20, 20
    a, b = rng.standard_normal((n, c, h, w)).astype(np.float32), rng.standard_normal((n, c, h // 2, w // 2))
    b = b.astype(np.float32)
    up = Tensor(b, device="CPU").reshape(n, c, h // 2, 1, w // 2, 1).expand(n, c, h // 2, 2, w // 2, 2)
    out = (Tensor(a, device="CPU") * up.reshape(n, c, h, w)).sum(axis=(0, 2, 3))
    ast = reduce_items(out)[-1].ast
    reduce = main_reduce(ast)
    accesses, _ = _accesses(ast)
    n_out = len(ast.src[0].src[1].arg.shape)
    loop = {r: n_out + i for i, r in enumerate(reduce.arg[1])}
    x_axis = max(reduce.arg[1])  # the innermost reduced axis: x
    spreads = sorted(acc.spread.get(loop[x_axis], 0.0) for acc in accesses if not acc.is_store)
    # the upsampled load moves under an element a step (x // 2, and (y * 20 + x) // 40 rows), the other one
    assert 0 < spreads[-2] < 1 and spreads[-1] == 1.0, spreads
    opts = gpu_opts(ast)
    groups = [o for o in opts if o.op == "GROUP"]
    assert groups and groups[0].axis == x_axis, opts


@needs_gpu
def test_a_reduction_through_an_upsampled_input_sums_right_on_the_gpu():
    n, c, h, w = 32, 4, 20, 20
    a, b = rng.standard_normal((n, c, h, w)).astype(np.float32), rng.standard_normal((n, c, h // 2, w // 2))
    b = b.astype(np.float32)
    up = Tensor(b, device="CUDA").reshape(n, c, h // 2, 1, w // 2, 1).expand(n, c, h // 2, 2, w // 2, 2)
    got = (Tensor(a, device="CUDA") * up.reshape(n, c, h, w)).sum(axis=(0, 2, 3)).numpy()
    expected = (a * np.repeat(np.repeat(b, 2, axis=2), 2, axis=3)).sum(axis=(0, 2, 3))
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-3)


def test_a_max_pool_keeps_its_output_row_on_the_threads():
    x = rng.standard_normal((4, 3, 12, 16)).astype(np.float32)
    *before, item = reduce_items((Tensor(x, device="CPU") + 0.5).relu().max_pool2d(2))
    from glassgrad.engine.realize import run_schedule

    run_schedule(before)
    opts = gpu_opts(item.ast)
    accesses, _ = _accesses(item.ast)
    shape = item.ast.src[0].src[1].arg.shape
    store = next(acc for acc in accesses if acc.is_store)
    row = max(a for a in range(len(shape)) if shape[a] > 1 and store.steps.get(a) == 1)
    assert not any(o.op == "UPCAST" and o.axis == row for o in opts), opts
    assert any(o.op == "UNROLL" for o in opts), opts  # the window is still unrolled
    expected = np.maximum(x + 0.5, 0).reshape(4, 3, 6, 2, 8, 2).max(axis=(3, 5))
    np.testing.assert_allclose(run(item, opts, threads=2).reshape(expected.shape), expected, rtol=1e-6)


def test_a_3x3_weight_gradient_blocks_up_to_grouped_reuse_output_channels():
    x = Tensor(rng.standard_normal((16, 64, 8, 8)).astype(np.float32), device="CPU")
    g = Tensor(rng.standard_normal((16, 64, 6, 6)).astype(np.float32), device="CPU")
    w = Tensor.zeros(64, 64, 3, 3, requires_grad=True, device="CPU")
    with Context(NOOPT=1):
        (x.conv2d(w) * g).sum().backward()
        items = [i for i in w.grad.schedule() if i.ast.op is Ops.SINK and main_reduce(i.ast) is not None]
    opts = gpu_opts(items[-1].ast)
    assert [o.amount for o in opts if o.op == "UPCAST"] == [3, 3, GROUPED_REUSE], opts  # kx, ky, output channels
    # 6 summed rows: 2 a thread would leave the threads 3 to share; none unrolled (8 rows: 2 a thread, 4 shared)
    assert not any(o.op == "UNROLL" for o in opts), opts


def test_upcast_amounts_take_16_lanes_only_where_asked():
    assert _upcast_amount(32, 25) == 8 and _upcast_amount(32, 25, widest=16) == 16
    assert _upcast_amount(24, 25, widest=16) == 8 and _upcast_amount(5, 25, widest=16) == 5
    assert _upcast_amount(32, 12, widest=16) == 8


@needs_gpu
def test_the_cuda_allocator_reuses_freed_memory_of_the_same_size_and_gives_it_back():
    from glassgrad.dtype import dtypes
    from glassgrad.runtime.device import Buffer, Device

    allocator = Device["CUDA"].allocator
    first = Buffer("CUDA", 777, dtypes.float32).ensure_allocated()
    handle = first.handle
    del first
    data = rng.standard_normal(777).astype(np.float32)
    second = Buffer("CUDA", 777, dtypes.float32).copyin(data.tobytes())
    assert second.handle == handle  # the freed allocation, not a new one
    assert np.array_equal(np.frombuffer(second.as_bytes(), np.float32), data)
    other = Buffer("CUDA", 778, dtypes.float32).ensure_allocated()
    assert other.handle != handle
    del other
    allocator.release_kept()
    assert not allocator.kept
