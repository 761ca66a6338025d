"""Packing a large matmul's B into panels (schedule/pack.py): the rule alone, and results against NumPy and PyTorch
over awkward shapes, with one thread and with several."""

import numpy as np
import pytest
import torch

import glassgrad.engine.schedule_cache as schedule_cache
import glassgrad.schedule.pack as pack
from glassgrad import Context, Device, GlobalCounters, Tensor, device_info
from glassgrad.codegen.heuristics import hand_coded_opts
from glassgrad.codegen.opt import Opt
from glassgrad.helpers import prod
from glassgrad.uop import Ops
from helpers import split_every_cpu_kernel

rng = np.random.default_rng(0)


@pytest.fixture(autouse=True)
def small_thresholds(monkeypatch):
    """Packing from small sizes on (so that odd shapes stay cheap), on the CPU, with no schedule remembered from
    other thresholds."""
    monkeypatch.setattr(pack, "MIN_PACKED_BYTES", 1024)
    monkeypatch.setattr(pack, "MIN_ROWS", 4)
    monkeypatch.setattr(Device, "DEFAULT", "CPU")
    schedule_cache._cache.clear()
    yield
    schedule_cache._cache.clear()


def rand(*shape, dtype=np.float32):
    return (rng.standard_normal(shape) * 2).astype(dtype)


def packed_kernels(t: Tensor) -> list:
    """The matmul kernels of t that read packed panels: their reduction's input is the product with the column axis
    split in two (its elements, as the kernel may merge the batch axes, or a panel of one row with its columns)."""
    packs = pack.operand_twins([t.uop], enter=lambda n: n.op is not Ops.BUFFER)
    splits = {prod(new.src[0].src[0].src[0].shape) for node, new in packs.items() if new is not node
              and node.op is Ops.REDUCE_AXIS}  # fmt: skip
    reduces = [[u.src[0].shape for u in i.ast.toposort() if u.op is Ops.REDUCE_AXIS] for i in t.schedule()]
    return [shapes for shapes in reduces if any(prod(s) in splits for s in shapes)]


def test_the_rule_splits_the_column_axis_and_packs_b_contiguously():
    a, b = Tensor(rand(8, 40)).realize(), Tensor(rand(40, 96)).realize()
    reduce = next(u for u in (a @ b).uop.toposort() if u.op is Ops.REDUCE_AXIS)
    out = pack.pack_panels.rewrite(reduce)
    assert out.op is Ops.RESHAPE and out.shape == reduce.shape and out.src[0].op is Ops.CONTIGUOUS
    packed_reduce = out.src[0].src[0]
    assert packed_reduce.shape == (8, 3, 32, 1) and packed_reduce.arg == (Ops.ADD, (3,))
    panels = [u for u in packed_reduce.toposort() if u.op is Ops.CONTIGUOUS]
    assert [p.shape for p in panels] == [(1, 3, 40, 32)]  # [n // 32][k][n % 32]


@pytest.mark.parametrize(
    "case",
    [
        ("too few rows", lambda: (rand(3, 40), rand(40, 96))),
        ("columns not a multiple of a panel", lambda: (rand(8, 40), rand(40, 100))),
        ("one panel only", lambda: (rand(8, 40), rand(40, 32))),
        ("integers", lambda: (rand(8, 40).astype(np.int32), rand(40, 96).astype(np.int32))),
        ("float16", lambda: (rand(8, 40, dtype=np.float16), rand(40, 128, dtype=np.float16))),
    ],
    ids=lambda c: c[0],
)
def test_the_rule_leaves_other_products_alone(case):
    a, b = case[1]()
    ta, tb = Tensor(a).realize(), Tensor(b).realize()
    reduce = next(u for u in (ta @ tb).uop.toposort() if u.op is Ops.REDUCE_AXIS)
    assert pack.pack_panels.rewrite(reduce) is None


def test_the_rule_asks_the_renderer_and_names_no_device(monkeypatch):
    """A renderer that does not ask for panels gets none; the scheduler sees the device only through its renderer."""
    a, b = Tensor(rand(8, 40)).realize(), Tensor(rand(40, 96)).realize()
    reduce = next(u for u in (a @ b).uop.toposort() if u.op is Ops.REDUCE_AXIS)
    monkeypatch.setattr(type(Device["CPU"].renderer), "packs_panels", False)
    assert pack.pack_panels.rewrite(reduce) is None
    monkeypatch.setattr(type(Device["CPU"].renderer), "packs_panels", True)
    asked, renderer_of = [], device_info.renderer
    monkeypatch.setattr(device_info, "renderer", lambda device: asked.append(device) or renderer_of(device))
    assert pack.pack_panels.rewrite(reduce) is not None and set(asked) == {"CPU"}  # through device_info only


def test_a_sum_of_products_that_is_no_matmul_and_a_conv_are_left_alone():
    x, y = Tensor(rand(8, 96, 40)).realize(), Tensor(rand(8, 96, 40)).realize()
    assert not packed_kernels((x * y).sum(-1))
    img, w = Tensor(rand(2, 8, 16, 16)).realize(), Tensor(rand(64, 8, 3, 3)).realize()
    assert not packed_kernels(img.conv2d(w, padding=1))


def test_noopt_and_other_devices_do_not_pack():
    a, b = rand(16, 40), rand(40, 96)
    with Context(NOOPT=1):
        assert not packed_kernels(Tensor(a).realize() @ Tensor(b).realize())
    on_python = Tensor(a, device="PYTHON").realize() @ Tensor(b, device="PYTHON").realize()
    assert not packed_kernels(on_python)
    np.testing.assert_allclose(on_python.numpy(), a @ b, rtol=1e-4, atol=1e-4)


def test_a_packed_matmul_is_a_packing_kernel_and_the_matmul():
    a, b = Tensor(rand(16, 40)).realize(), Tensor(rand(40, 96)).realize()
    GlobalCounters.reset()
    (a @ b).realize()
    assert GlobalCounters.kernel_count == 2


MATMULS = {
    "square": (lambda: [rand(64, 64), rand(64, 64)], lambda a, b: a @ b),
    "odd_rows_and_depth": (lambda: [rand(13, 7), rand(7, 160)], lambda a, b: a @ b),
    "one_deep": (lambda: [rand(9, 1), rand(1, 320)], lambda a, b: a @ b),
    "transposed_b": (lambda: [rand(20, 48), rand(96, 48)], lambda a, b: a @ b.T),
    "transposed_a": (lambda: [rand(48, 20), rand(48, 64)], lambda a, b: a.T @ b),
    "batched": (lambda: [rand(3, 10, 24), rand(3, 24, 64)], lambda a, b: a @ b),
    "broadcast_batch": (lambda: [rand(2, 3, 8, 24), rand(24, 96)], lambda a, b: a @ b),
    "float64": (lambda: [rand(8, 30).astype(np.float64), rand(30, 48).astype(np.float64)], lambda a, b: a @ b),
    "fused_before_and_after": (lambda: [rand(16, 40), rand(40, 64), rand(64)],
                               lambda a, b, c: relu(exp(a * 0.25) @ (b + 1) + c)),
}  # fmt: skip


def relu(x):
    return np.maximum(x, 0) if isinstance(x, np.ndarray) else x.relu()


def exp(x):
    return np.exp(x) if isinstance(x, np.ndarray) else x.exp()


def run_with_threads(make, threads: int, monkeypatch) -> np.ndarray:
    split_every_cpu_kernel(monkeypatch, threads)
    return make().numpy()


@pytest.mark.parametrize("name", sorted(MATMULS))
def test_packed_matmuls_match_numpy_with_one_thread_and_with_three(name, monkeypatch):
    make_arrays, fn = MATMULS[name]
    arrays = make_arrays()
    tensors = [Tensor(x).realize() for x in arrays]
    assert packed_kernels(fn(*tensors)), "the rule did not apply"
    expected = fn(*arrays)
    one = run_with_threads(lambda: fn(*tensors), 1, monkeypatch)
    tol = 1e-12 if arrays[0].dtype == np.float64 else 1e-4
    np.testing.assert_allclose(one, expected, rtol=tol, atol=tol * 10)
    assert np.array_equal(one, run_with_threads(lambda: fn(*tensors), 3, monkeypatch))


def test_gradients_through_a_packed_matmul_match_pytorch():
    a, b = rand(16, 40), rand(40, 96)
    ga, gb = Tensor(a, requires_grad=True), Tensor(b, requires_grad=True)
    ta, tb = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    ((ga @ gb).relu() * 0.5).sum().backward()
    ((ta @ tb).relu() * 0.5).sum().backward()
    np.testing.assert_allclose(ga.grad.numpy(), ta.grad.numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(gb.grad.numpy(), tb.grad.numpy(), rtol=1e-4, atol=1e-4)


def test_a_tensor_holding_the_product_and_one_built_on_it_read_its_buffer():
    a, b = rand(16, 40), rand(40, 96)
    c = Tensor(a).realize() @ Tensor(b).realize()
    d = c * 2
    c.realize()
    GlobalCounters.reset()
    np.testing.assert_allclose(d.numpy(), a @ b * 2, rtol=1e-4, atol=1e-4)
    assert GlobalCounters.kernel_count == 1  # only the doubling: the product is not computed again


def test_the_real_thresholds_pack_a_large_matmul_and_tile_its_panels(monkeypatch):
    monkeypatch.undo()
    monkeypatch.setattr(Device, "DEFAULT", "CPU")
    schedule_cache._cache.clear()
    a, b = rand(64, 512), rand(512, 640)  # B: 1.25 MiB, 20 panels of 64 KiB
    c = Tensor(a).realize() @ Tensor(b).realize()
    assert len(packed_kernels(c)) == 1
    matmul = c.schedule()[-1]
    opts = hand_coded_opts(matmul.ast, Device["CPU"].renderer.vector_lanes)
    # a register block of 8 rows x 2 vectors; tiles of 2 panels (4 would fit L2 but make an odd 5 tiles)
    assert opts == [Opt("UPCAST", 2, 16), Opt("UPCAST", 2, 2), Opt("UPCAST", 0, 8), Opt("TILE", 1, 2)]
    np.testing.assert_allclose(c.numpy(), a @ b, rtol=1e-4, atol=1e-3)
    small = Tensor(a[:, :256]).realize() @ Tensor(b[:256]).realize()  # B: 0.53 MiB, in L2 as it lies
    assert not packed_kernels(small)


def test_threads_get_an_even_number_of_panel_tiles(monkeypatch):
    """24 panels of 96 KiB: 8 a tile would fit L2 but make 3 tiles, one thread's share twice the other's; 4 make 6."""
    monkeypatch.undo()
    monkeypatch.setattr(Device, "DEFAULT", "CPU")
    schedule_cache._cache.clear()
    a, b = rand(64, 768), rand(768, 768)
    c = Tensor(a).realize() @ Tensor(b).realize()
    opts = hand_coded_opts(c.schedule()[-1].ast, Device["CPU"].renderer.vector_lanes)
    assert opts[-1] == Opt("TILE", 1, 4)
    np.testing.assert_allclose(c.numpy(), a @ b, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("columns", [256, 96, 32, 33])
def test_the_real_thresholds_pack_a_small_b_read_across_its_rows(monkeypatch, columns):
    """x @ W.T with W (columns, 256): 256 KiB at most, under the size threshold, but W's rows lie along the sum, so
    its columns are a row apart: packed (where it makes two panels or more), and equal to NumPy's, with W as it lies
    and forward and backward against PyTorch; the same B transposed (its columns side by side) stays as it lies."""
    monkeypatch.undo()
    monkeypatch.setattr(Device, "DEFAULT", "CPU")
    schedule_cache._cache.clear()
    x, w = rand(128, 256), rand(columns, 256)
    out = Tensor(x).realize() @ Tensor(w).realize().T
    assert len(packed_kernels(out)) == (columns % 32 == 0 and columns > 32)
    np.testing.assert_allclose(out.numpy(), x @ w.T, rtol=1e-4, atol=1e-3)
    assert not packed_kernels(Tensor(x).realize() @ Tensor(np.ascontiguousarray(w.T)).realize())
    tx, tw = Tensor(x, requires_grad=True), Tensor(w, requires_grad=True)
    (tx @ tw.T).square().sum().backward()
    px, pw = torch.from_numpy(x).requires_grad_(), torch.from_numpy(w).requires_grad_()
    (px @ pw.T).square().sum().backward()
    np.testing.assert_allclose(tx.grad.numpy(), px.grad.numpy(), rtol=1e-4, atol=1e-2)
    np.testing.assert_allclose(tw.grad.numpy(), pw.grad.numpy(), rtol=1e-4, atol=1e-2)
