"""PyTorch's and tinygrad's names for existing ops (mixin/torch_names.py) against PyTorch: values, gradients, errors."""

import numpy as np
import pytest
import torch

from glassgrad import Tensor, dtypes
from torch_check import check_op, weighted

NON_CONTIGUOUS = ["transposed", "strided"]


@pytest.mark.parametrize("shape", [(0,), (1,), (3, 5), (2, 1, 4), (7, 0, 3)])
def test_size_matches_torch(shape):
    x, t = Tensor.empty(*shape), torch.empty(shape)
    assert x.size() == tuple(t.size())
    for d in range(-len(shape), len(shape)):
        assert x.size(d) == t.size(d)


def test_size_of_a_missing_dim_raises_index_error_as_torch():
    for ours, theirs in ((Tensor(1.0), torch.tensor(1.0)), (Tensor.empty(2, 3), torch.empty(2, 3))):
        with pytest.raises(IndexError):
            theirs.size(5 if ours.ndim else 0)
        with pytest.raises(IndexError, match="size: "):
            ours.size(5 if ours.ndim else 0)


@pytest.mark.parametrize("shape", [(), (0,), (1,), (4,), (3, 5), (0, 2), (1, 1)])
@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_t_matches_torch(shape, layout):
    check_op([shape], weighted(lambda x: x.t()), layout=layout)


def test_t_of_3d_raises_runtime_error():
    with pytest.raises(RuntimeError, match=r"t: expects a tensor with at most 2 dimensions, got shape \(2, 3, 4\)"):
        Tensor.empty(2, 3, 4).t()


@pytest.mark.parametrize("shapes", [[(3, 4), (4, 5)], [(1, 1), (1, 1)], [(0, 3), (3, 2)], [(2, 0), (0, 3)],
                                    [(5, 7), (7, 1)]])  # fmt: skip
@pytest.mark.parametrize("layout", ["contiguous", *NON_CONTIGUOUS])
def test_mm_matches_torch(shapes, layout):
    check_op(shapes, lambda a, b: a.mm(b), layout=layout, atol=1e-5)


@pytest.mark.parametrize("shapes", [[(2, 3, 4), (2, 4, 5)], [(1, 1, 1), (1, 1, 1)], [(0, 2, 3), (0, 3, 2)],
                                    [(3, 1, 5), (3, 5, 2)]])  # fmt: skip
@pytest.mark.parametrize("layout", ["contiguous", *NON_CONTIGUOUS])
def test_bmm_matches_torch(shapes, layout):
    check_op(shapes, lambda a, b: a.bmm(b), layout=layout, atol=1e-5)


@pytest.mark.parametrize("call, message", [
    (lambda a, b3, b2: a.mm(b3), "mm: mat2 must be a matrix"),
    (lambda a, b3, b2: b3.mm(a), "mm: self must be a matrix"),
    (lambda a, b3, b2: a.bmm(b2), "bmm: self must be a batch of matrices"),
    (lambda a, b3, b2: b3.bmm(b2.reshape(3, 4, 1)), r"bmm: batch sizes differ: \(2, 3, 4\) and \(3, 4, 1\)"),
])  # fmt: skip
def test_mm_and_bmm_refuse_other_ranks_as_torch(call, message):
    mats = (np.ones((3, 4), np.float32), np.ones((2, 3, 4), np.float32), np.ones((3, 4), np.float32))
    with pytest.raises(RuntimeError):
        call(*(torch.tensor(m) for m in mats))
    with pytest.raises(RuntimeError, match=message):
        call(*(Tensor(m) for m in mats))


@pytest.mark.parametrize("name", ["amax", "amin"])
@pytest.mark.parametrize(
    "shape, dim, keepdim",
    [
        ((3, 5), 1, False),
        ((3, 5), (0, 1), True),
        ((2, 1, 4), (), False),
        ((1,), 0, True),
        ((4, 0), 0, False),
        ((2, 3, 4), (-1, 0), False),
    ],
)
def test_amax_amin_match_torch(name, shape, dim, keepdim):
    # distinct values: with ties, torch spreads amax's gradient evenly over them, and so do we (one check below)
    values = np.random.default_rng(3).permutation(int(np.prod(shape))).astype(np.float32).reshape(shape)
    check_op([shape], weighted(lambda x: getattr(x, name)(dim, keepdim)), inputs=[values])


def test_amax_spreads_the_gradient_over_ties_as_torch():
    check_op([(2, 3)], lambda x: x.amax(1), inputs=[np.array([[1, 3, 3], [2, 2, 2]], np.float32)])


def test_amax_takes_tinygrad_axis():
    x = Tensor([[1, 5], [7, 2]])
    assert x.amax(axis=0).tolist() == [7, 5] and x.amin(axis=1, keepdim=True).tolist() == [[1], [2]]


@pytest.mark.parametrize(
    "shape, dim, index",
    [
        ((4, 5), 1, [0, 4, 4, 2]),
        ((4, 5), 0, [3]),
        ((4, 5), -1, []),
        ((1, 3), 0, [0, 0]),
        ((2, 0, 3), 2, [2, 1]),
        ((), 0, [0]),
    ],
)
@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_index_select_matches_torch(shape, dim, index, layout):
    def pick(x):
        i = torch.tensor(index, dtype=torch.int64) if isinstance(x, torch.Tensor) else Tensor(index, dtype=dtypes.int32)
        return x.index_select(dim, i.reshape(()) if not shape else i)

    check_op([shape], weighted(pick), layout=layout)


def test_index_select_errors_have_torch_classes():
    x, tx = Tensor.empty(3, 4), torch.empty(3, 4)
    for index, error in (([[0, 1]], IndexError), ([0.0], RuntimeError)):
        with pytest.raises(error):
            tx.index_select(1, torch.tensor(index))
        with pytest.raises(error, match="index_select: index must be"):
            x.index_select(1, Tensor(index))
    with pytest.raises(TypeError, match="index_select: index must be an integer tensor, got list"):
        x.index_select(1, [0])


@pytest.mark.parametrize(
    "name, op",
    [("gt", torch.gt), ("lt", torch.lt), ("ge", torch.ge), ("le", torch.le), ("eq", torch.eq), ("ne", torch.ne)],
)
@pytest.mark.parametrize("shapes", [[(0,), (0,)], [(1,), (1,)], [(3, 5), (5,)], [(2, 1, 4), (3, 1)]])
def test_comparison_methods_match_torch(name, op, shapes):
    rng = np.random.default_rng(1)
    a, b = (rng.integers(-2, 3, s).astype(np.float32) for s in shapes)  # small ints: many equal pairs
    got = getattr(Tensor(a), name)(Tensor(b))
    assert got.dtype == dtypes.bool
    np.testing.assert_array_equal(got.numpy(), op(torch.tensor(a), torch.tensor(b)).numpy())
    np.testing.assert_array_equal(getattr(Tensor(a), name)(0.0).numpy(), op(torch.tensor(a), 0.0).numpy())


def test_comparisons_of_nan_are_false_as_torch():
    a = np.array([np.nan, 1.0, np.nan], np.float32)
    b = np.array([1.0, np.nan, np.nan], np.float32)
    for name in ("gt", "lt", "ge", "le"):
        expected = getattr(torch.tensor(a), name)(torch.tensor(b)).numpy()
        np.testing.assert_array_equal(getattr(Tensor(a), name)(Tensor(b)).numpy(), expected)


@pytest.mark.parametrize(
    "dtype, expected",
    [
        (dtypes.float32, True),
        (dtypes.float16, True),
        (dtypes.bfloat16, True),
        (dtypes.float64, True),
        (dtypes.int32, False),
        (dtypes.bool, False),
        (dtypes.uint8, False),
    ],
)
def test_is_floating_point(dtype, expected):
    assert Tensor.empty(2, dtype=dtype).is_floating_point() is expected


@pytest.mark.parametrize("shape", [(), (0,), (2, 3)])
def test_empty_like_keeps_shape_dtype_and_device(shape):
    x = Tensor.empty(*shape, dtype=dtypes.int16)
    e = x.empty_like()
    assert (e.shape, e.dtype, e.device) == (x.shape, dtypes.int16, x.device)
    assert e.empty_like(dtype=dtypes.float32).dtype == dtypes.float32
    assert e.uop is not x.uop and e.realize().shape == shape


@pytest.mark.parametrize("name, fill", [("new_zeros", 0), ("new_ones", 1)])
def test_new_zeros_new_ones_match_torch(name, fill):
    x, tx = Tensor.empty(2, dtype=dtypes.int16), torch.empty(2, dtype=torch.int16)
    for size in ((2, 3), ((2, 3),), ((),), (0, 4)):
        got, expected = getattr(x, name)(*size), getattr(tx, name)(*size)
        assert got.shape == tuple(expected.shape) and got.dtype == dtypes.int16
        np.testing.assert_array_equal(got.numpy(), expected.numpy())
    floats = getattr(x, name)(3, dtype=dtypes.float32, requires_grad=True)
    assert floats.dtype == dtypes.float32 and floats.requires_grad and floats.tolist() == [fill] * 3
    assert x.new_full((2,), 7).tolist() == [7, 7]


@pytest.mark.parametrize(
    "shape, dim, sizes",
    [
        ((4, 6), 1, (2, 3)),
        ((4, 6), -1, (-1, 2)),
        ((5, 12, 3), -2, (2, 2, 3)),
        ((0, 6), 1, (3, 2)),
        ((6,), 0, (1, 6, 1)),
        ((2, 1), 1, (1,)),
    ],
)
@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_unflatten_matches_torch(shape, dim, sizes, layout):
    check_op([shape], weighted(lambda x: x.unflatten(dim, sizes)), layout=layout)


def test_unflatten_of_wrong_sizes_raises_as_torch():
    with pytest.raises(RuntimeError):
        torch.empty(4, 6).unflatten(1, (4, 2))
    with pytest.raises(RuntimeError, match=r"unflatten: sizes \(4, 2\) do not multiply to 6"):
        Tensor.empty(4, 6).unflatten(1, (4, 2))


def test_replace_points_the_tensor_at_new_values():
    x = Tensor([1.0, 2.0, 3.0])
    same = x.replace(Tensor([4, 5, 6], dtype=dtypes.int32))
    assert same is x and x.dtype == dtypes.int32 and x.tolist() == [4, 5, 6]
    with pytest.raises(RuntimeError, match=r"replace: the new value has shape \(2,\) but the tensor has shape \(3,\)"):
        x.replace(Tensor([1, 2]))
    assert x.replace(Tensor([1, 2]), allow_shape_mismatch=True).shape == (2,)


def test_replace_keeps_a_parameter_a_leaf_for_backward():
    w = Tensor([1.0, -2.0], requires_grad=True)
    w.replace(w.detach() * 3)  # as tinygrad's state loading does: new values, the same parameter
    (w * w).sum().backward()
    assert w.is_leaf and w.tolist() == [3.0, -6.0] and w.grad.tolist() == [6.0, -12.0]
