"""schedule/store_shape.py: a value stored through a reshape is computed in its own shape. The rule alone (fires /
does not), then end to end: a product realized flat, or written flat into a part of a buffer, runs the kernel the
product runs alone, with the values of NumPy and PyTorch forward and backward."""

import numpy as np
import pytest
import torch

from glassgrad import Context, Tensor
from glassgrad.dtype import dtypes
from glassgrad.schedule.store_shape import store_shapes
from glassgrad.uop.ops import Ops, UOp
from glassgrad.uop.rewrite import graph_rewrite
from glassgrad.uop.view import ShapeTracker, View

rng = np.random.default_rng(0)


def rand(*shape) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


# ---- the rule alone ----


def _global(i: int, size: int) -> UOp:
    return UOp(Ops.DEFINE_GLOBAL, dtypes.float.ptr(size), (), i)


def _view(st: ShapeTracker, src: tuple[UOp, ...] = ()) -> UOp:
    return UOp(Ops.VIEW, dtypes.float if src else dtypes.void, src, st)


def _row_sums(rows: int, cols: int) -> UOp:
    """sum over k of in[r, c, k]: a REDUCE_AXIS of shape (rows, cols, 1)."""
    ld = UOp(Ops.LOAD, dtypes.float, (_global(1, rows * cols * 4), _view(ShapeTracker.from_shape((rows, cols, 4)))))
    return UOp(Ops.REDUCE_AXIS, dtypes.float, (ld,), (Ops.ADD, (2,)))


def _store(target: View, value: UOp, size: int = 100) -> UOp:
    store = UOp(Ops.STORE, dtypes.void, (_global(0, size), _view(ShapeTracker((target,))), value))
    return UOp(Ops.SINK, dtypes.void, (store,))


def _stored(sink: UOp) -> tuple[View, UOp]:
    store = graph_rewrite(sink, store_shapes).src[0]
    (view,) = store.src[1].arg.views
    return view, store.src[2]


def test_a_flat_reduction_into_part_of_a_buffer_is_stored_in_its_own_shape():
    x = _row_sums(2, 3)
    flat = _view(ShapeTracker.from_shape(x.shape).reshape((6,)), (x,))
    view, value = _stored(_store(View.create((6,), offset=7), flat))
    assert value is x  # the reduction itself, in its (2, 3, 1) axes
    assert view == View.create((2, 3, 1), (3, 1, 0), offset=7)  # the same six places: 7 + 3r + c


def test_a_split_of_the_output_axes_is_stored_in_the_reductions_shape():
    x = _row_sums(6, 1)
    split = _view(ShapeTracker.from_shape(x.shape).reshape((2, 3)), (x,))
    # every other float from 1 (out[1::2] seen as (2, 3)): strided, yet one view in the reduction's shape
    view, value = _stored(_store(View.create((2, 3), (6, 2), offset=1), split))
    assert value is x and view == View.create((6, 1, 1), (2, 0, 0), offset=1)


def test_a_permute_before_the_reshape_is_left_as_it_is():
    x = _row_sums(2, 3)
    transposed = _view(ShapeTracker.from_shape(x.shape).permute((1, 0, 2)).reshape((6,)), (x,))
    sink = _store(View.create((6,)), transposed)
    assert graph_rewrite(sink, store_shapes) is sink


def test_a_target_that_the_reshape_would_cross_is_left_as_it_is():
    x = _row_sums(3, 2)  # stored as (2, 3): rows of 3 in a buffer of rows of 5 (out[:, :3] of a (2, 5) buffer)
    seen = _view(ShapeTracker.from_shape(x.shape).reshape((2, 3)), (x,))
    sink = _store(View.create((2, 3), (5, 1)), seen)
    assert graph_rewrite(sink, store_shapes) is sink


def test_a_reshape_of_the_reduced_input_is_none_of_the_rules_business():
    """A reshape that splits the summed axis lies under the reduction: the stored value is the reduction itself."""
    ld = UOp(Ops.LOAD, dtypes.float, (_global(1, 24), _view(ShapeTracker.from_shape((24,)).reshape((2, 3, 2, 2)))))
    x = UOp(Ops.REDUCE_AXIS, dtypes.float, (ld,), (Ops.ADD, (2, 3)))
    sink = _store(View.create((2, 3, 1, 1)), x)
    assert graph_rewrite(sink, store_shapes) is sink


def test_the_first_rows_of_the_value_are_left_as_they_are():
    x = _row_sums(4, 3)
    first = _view(ShapeTracker.from_shape(x.shape).shrink(((0, 2), (0, 3), (0, 1))).reshape((6,)), (x,))
    assert first.arg.contiguous  # offset 0, row-major: contiguous, yet not all of x
    sink = _store(View.create((6,)), first)
    assert graph_rewrite(sink, store_shapes) is sink


def test_a_padded_view_of_the_value_is_left_as_it_is():
    x = _row_sums(2, 3)
    padded = _view(ShapeTracker.from_shape(x.shape).pad(((0, 1), (0, 0), (0, 0))).reshape((9,)), (x,))
    sink = _store(View.create((9,)), padded)
    assert graph_rewrite(sink, store_shapes) is sink


# ---- end to end: kernel names and values ----


def _kernel_names(out: str) -> list[str]:
    return [line.split()[3] for line in out.splitlines() if line.startswith("*** ")]


def _flat_into_a_part(value: Tensor) -> Tensor:
    out = Tensor.empty(value.numel() + 137)  # no kernel of its own: only the part written is read back
    out[100 : 100 + value.numel()].assign(value.reshape(-1))
    return out.realize()[100 : 100 + value.numel()]


WRITES = {
    "reshape": lambda v: v.reshape(-1).realize(),
    "flatten_contiguous": lambda v: v.flatten().contiguous().realize(),
    "into_a_part": _flat_into_a_part,
}


def _conv_weight_gradient(x: Tensor, g: Tensor) -> Tensor:
    """sum over (N, H, W) of g[n, o] * x[n, c]: a 1x1 convolution's weight gradient, (O, C)."""
    n, c, h, w = x.shape
    o = g.shape[1]
    return (g.reshape(n, o, 1, h * w) * x.reshape(n, 1, c, h * w)).sum((0, 3))


PRODUCTS = {
    "aT_b": (lambda a, b: a.T @ b, [(256, 64), (256, 96)]),
    "odd": (lambda a, b: a.T @ b, [(33, 7), (33, 13)]),
    "bmm": (lambda a, b: a @ b, [(3, 17, 9), (3, 9, 11)]),
    "conv_weight_gradient": (_conv_weight_gradient, [(4, 6, 5, 5), (4, 8, 5, 5)]),
}


@pytest.mark.parametrize("write", WRITES)
@pytest.mark.parametrize("product", PRODUCTS)
def test_a_product_written_flat_runs_the_kernel_it_runs_alone(product, write, capsys, on_the_cpu):
    fn, shapes = PRODUCTS[product]
    arrays = [rand(*s) for s in shapes]
    a, b = (Tensor(x).realize() for x in arrays)
    expected = fn(*(torch.from_numpy(x) for x in arrays)).numpy()
    capsys.readouterr()
    with Context(DEBUG=2):
        alone = fn(a, b).realize()
        flat = WRITES[write](fn(a, b))
    names = _kernel_names(capsys.readouterr().out)
    assert len(names) == 2 and names[1] == names[0], names
    np.testing.assert_allclose(alone.numpy(), expected, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(flat.numpy(), expected.reshape(-1), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("shapes", [[(7, 5), (7, 3)], [(1, 1), (1, 4)], [(9, 1), (9, 1)], [(0, 3), (0, 2)]])
def test_a_flat_product_forward_and_backward(shapes, device):
    arrays = [rand(*s) for s in shapes]
    weights = rand(shapes[0][1] * shapes[1][1])
    a, b = (Tensor(x, requires_grad=True) for x in arrays)
    ta, tb = (torch.tensor(x, requires_grad=True) for x in arrays)
    ((a.T @ b).reshape(-1) * Tensor(weights)).sum().backward()
    ((ta.T @ tb).reshape(-1) * torch.from_numpy(weights)).sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), ta.grad.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(b.grad.numpy(), tb.grad.numpy(), rtol=1e-5, atol=1e-5)


def test_a_convolutions_weight_gradient_written_into_a_part_of_a_buffer(device):
    x, w = rand(2, 3, 7, 6), rand(5, 3, 3, 2)
    tx, tw = torch.tensor(x), torch.tensor(w, requires_grad=True)
    torch.nn.functional.conv2d(tx, tw, padding=1).square().sum().backward()
    gw = Tensor(w, requires_grad=True)
    Tensor(x).conv2d(gw, padding=1).square().sum().backward()
    got = _flat_into_a_part(gw.grad)
    np.testing.assert_allclose(got.numpy(), tw.grad.numpy().reshape(-1), rtol=1e-4, atol=1e-3)


def test_a_product_into_a_strided_part_of_a_buffer(device):
    """out[:, :6] of an (8, 10) buffer takes a (4, 12) product as (8, 6): the rows cross the gaps, so the kernel
    keeps the stored view's axes, and writes only the part."""
    a, b = rand(5, 4), rand(5, 12)
    out = Tensor(np.full((8, 10), -1, np.float32)).contiguous().realize()
    out[:, :6].assign((Tensor(a).T @ Tensor(b)).reshape(8, 6))
    expected = np.full((8, 10), -1, np.float32)
    expected[:, :6] = (a.T @ b).reshape(8, 6)
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5, atol=1e-5)
