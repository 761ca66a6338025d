"""Indexing, gather and scatter, joining and splitting, padding and resizing against PyTorch, forward and backward.

Most checks multiply the output by fixed random weights before check_op sums it, so that the gradient says where
each output element came from (the gradient of a plain sum only counts how often an input was picked).
"""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from glassgrad import GlobalCounters, Tensor, dtypes
from glassgrad.engine.realize import buffer_of
from torch_check import check_op, weighted

NON_CONTIGUOUS = ["transposed", "strided"]


def ix(x, values, dtype="int"):
    """The same index values as a tensor of x's library (int64 for torch, int32 for glassgrad, or bool)."""
    if isinstance(x, torch.Tensor):
        return torch.tensor(values, dtype=torch.bool if dtype == "bool" else torch.int64)
    return Tensor(values, device=x.device, dtype=dtypes.bool if dtype == "bool" else dtypes.int32)


def tensor_index(index, x):
    """An index with every list inside it turned into an index tensor of x's library."""
    if isinstance(index, tuple):
        return tuple(tensor_index(i, x) for i in index)
    if isinstance(index, list):
        values = np.ravel(index)
        return ix(x, index, "bool" if len(values) and all(isinstance(v, (bool, np.bool_)) for v in values) else "int")
    return index


# ---- __getitem__: basic ----

BASIC_INDICES = {
    "int": (1,),
    "negative int": (-1, 2),
    "slice": (slice(1, 3),),
    "step 2": (slice(None, None, 2), slice(1, None, 3)),
    "past the end": (slice(1, 100), slice(-100, 2)),
    "None and Ellipsis": (None, Ellipsis, 1),
    "int Ellipsis None": (1, Ellipsis, None, slice(0, 4, 3)),
    "empty slice": (Ellipsis, slice(2, 2)),
}


@pytest.mark.parametrize("index", BASIC_INDICES.values(), ids=BASIC_INDICES.keys())
def test_getitem_basic_matches_torch(index):
    check_op([(3, 4, 5)], weighted(lambda x: x[index]))


@pytest.mark.parametrize("layout", NON_CONTIGUOUS)
def test_getitem_basic_reads_non_contiguous_input(layout):
    check_op([(4, 5)], weighted(lambda x: x[1:, ::2]), layout=layout)


def test_getitem_negative_steps_match_torch_flip():
    check_op([(5, 6)], weighted(lambda x: x.flip(0)[::2, 1:5].flip(1)), weighted(lambda x: x[::-2, 4:0:-1]))
    check_op([(5,)], weighted(lambda x: x.flip(0)), weighted(lambda x: x[::-1]))


def test_getitem_of_0d_and_1_size():
    check_op([()], weighted(lambda x: x[None]))
    check_op([(1,)], weighted(lambda x: x[0]))
    check_op([(1, 1)], weighted(lambda x: x[..., -1:]))


def test_python_bools_add_a_dim_of_1_or_0():
    check_op([(2, 3)], weighted(lambda x: x[True]))
    check_op([(2, 3)], lambda x: x[False], grad=False)
    check_op([(2, 3)], weighted(lambda x: x[:, True, tensor_index([2, 0], x)]))


# ---- __getitem__: advanced ----

ADVANCED_INDICES = {
    "list": ([2, 0, 2],),
    "negative wraps": (slice(None), [-1, 0, -4]),
    "two lists": ([0, 2], [1, 3]),
    "broadcast 2-d": ([[0], [2]], slice(None), [[1, 0, 4]]),
    "adjacent after a slice": (slice(None), [1, 0], [4, 4]),
    "separated by a slice go first": ([0, 1, 2], slice(1, 3), [4, 0, 1]),
    "int then slice then list (int is basic)": (1, slice(None), [0, 3]),
    "int between lists (adjacent)": ([0, 2], 1, [3, 3]),
    "None between lists go first": ([0, 1], None, [2, 3]),
    "with Ellipsis": (Ellipsis, [0, 4, 1]),
    "Python bool joins the lists": (True, [1, 2]),
    "empty list": ([],),
    "empty 2-d list": (slice(None), [[], []]),
}


@pytest.mark.parametrize("index", ADVANCED_INDICES.values(), ids=ADVANCED_INDICES.keys())
def test_getitem_advanced_matches_torch(index):
    check_op([(3, 4, 5)], weighted(lambda x: x[tensor_index(index, x)]))


@pytest.mark.parametrize("layout", NON_CONTIGUOUS)
def test_getitem_advanced_reads_non_contiguous_input(layout):
    check_op([(4, 5)], weighted(lambda x: x[tensor_index(([3, 0, 0], slice(1, None)), x)]), layout=layout)
    check_op([(4, 5)], weighted(lambda x: x[:, tensor_index([4, 0, 2], x)]), layout=layout)


def test_getitem_with_0d_and_2d_index_tensors():
    check_op([(3, 4)], weighted(lambda x: x[ix(x, 2)]))
    check_op([(3, 4)], weighted(lambda x: x[:, ix(x, [[0, 3], [3, 1]])]))


def test_getitem_with_a_lazy_index_tensor():
    check_op([(6, 2)], weighted(lambda x: x[(x[:, 0] > 0).int() * 2 + 1]))


def test_getitem_plain_list_is_an_index_tensor():
    x = Tensor(np.arange(12, dtype=np.float32).reshape(3, 4))
    assert x[[2, 0]].tolist() == [[8, 9, 10, 11], [0, 1, 2, 3]]
    assert x[(2, 0),].tolist() == [[8, 9, 10, 11], [0, 1, 2, 3]]


@pytest.mark.parametrize("mask_shape", [(3,), (3, 4), (3, 4, 5)], ids=str)
def test_getitem_bool_mask_matches_torch(mask_shape):
    mask = np.random.default_rng(1).random(mask_shape) < 0.4
    check_op([(3, 4, 5)], weighted(lambda x: x[ix(x, mask.tolist(), "bool")]))


def test_getitem_bool_mask_mixed_with_other_indices():
    mask = [True, False, True, True]
    check_op([(3, 4, 5)], weighted(lambda x: x[1:, ix(x, mask, "bool"), ::2]))
    check_op([(3, 4, 5)], weighted(lambda x: x[ix(x, [2, 0]), :, ix(x, [False, True, False, False, True], "bool")]))


def test_getitem_all_false_mask_selects_nothing():
    check_op([(3, 4)], weighted(lambda x: x[:, ix(x, [False] * 4, "bool")]))


def test_getitem_bool_list_is_a_mask():
    x = Tensor([10, 20, 30])
    assert x[[True, False, True]].tolist() == [10, 30]


def test_getitem_advanced_is_one_kernel():
    x, idx = Tensor.rand(5, 6).realize(), Tensor([4, 0, 2]).realize()
    before = GlobalCounters.kernel_count
    x[idx, 1:].realize()
    assert GlobalCounters.kernel_count - before == 1


def test_a_gather_read_by_another_kernel_is_stored_in_the_results_order():
    """x[samples] read by a matmul (MNIST's batch read by the first convolution) gets a kernel of its own, which stores
    the picked images in the result's order, each image's elements in a row: the batch innermost (the order the
    one-hot sum was built in) made every read of the next kernel a gather."""
    images, samples = np.arange(60, dtype=np.float32).reshape(5, 3, 4), [4, 1, 1, 0]
    x, w = Tensor(images).realize(), Tensor(np.ones((12, 20), dtype=np.float32)).realize()
    out = x[Tensor(samples).realize()].reshape(4, 12) @ w
    gather = out.schedule()[0].ast
    store_view = next(n for n in gather.toposort() if n.op.name == "VIEW")
    assert store_view.arg.shape[:3] == (4, 3, 4)
    np.testing.assert_allclose(out.numpy(), images[samples].reshape(4, 12) @ np.ones((12, 20)))


@pytest.mark.parametrize(
    "index, error, words",
    [(3, IndexError, "index 3 is out of bounds for dimension 0 with size 3"),
     ((0, -5), IndexError, "index -5 is out of bounds for dimension 1 with size 4"),
     ([0, 3], IndexError, "index 3 is out of bounds for dimension 0 with size 3"),
     ((0, 0, 0), IndexError, "too many indices"),
     ((Ellipsis, 0, Ellipsis), IndexError, "single ellipsis"),
     ("a", IndexError, "not a valid index"),
     (1.5, IndexError, "not a valid index"),
     (slice(None, None, 0), ValueError, "step cannot be zero"),
     (([0, 1], [0, 1, 2]), IndexError, "cannot be broadcast"),
     ([[True, False]], IndexError, "mask has shape (1, 2)")],
    ids=["int", "negative int", "list", "too many", "two ellipses", "str", "float", "step 0", "broadcast", "mask"],
)  # fmt: skip
def test_getitem_bad_index_raises(index, error, words):
    x = Tensor(np.zeros((3, 4), np.float32))
    with pytest.raises(error, match=words.replace("(", r"\(").replace(")", r"\)")):
        x[index]


def test_getitem_with_a_float_tensor_raises():
    with pytest.raises(IndexError, match="integer or bool tensors, got dtypes.float"):
        Tensor([1.0, 2.0])[Tensor([0.0])]


# ---- __setitem__ ----


def _set_in_clone(index):
    """y = x.clone(); y[index] = v; y, as a function of (x, v) for either library (lists become index tensors)."""

    def fn(x, v):
        y = x.clone()
        y[tensor_index(index, x)] = v
        return y

    return fn


SETITEM_CASES = {
    "int": ((3, 4), (1,), (4,)),
    "slice": ((3, 4), (slice(1, 3), 2), (2,)),
    "step": ((3, 4), (slice(None, None, 2), slice(1, None, 2)), (2, 2)),
    "broadcast value": ((3, 4), (slice(0, 2),), (4,)),
    "list": ((3, 4), ([2, 0],), (2, 4)),
    "two lists": ((3, 4), ([0, 2], [3, 1]), (2,)),
    "list and slice": ((3, 4), (slice(1, None), [3, 0, 1]), (2, 3)),
    "separated lists": ((3, 5, 4), ([0, 1], slice(None), [2, 1]), (2, 5)),
    "mask with row value": ((3, 4), ([True, False, True],), (4,)),
    "mask with matching value": ((3, 4), ([False, True, True],), (2, 4)),
}


@pytest.mark.parametrize("shape, index, value_shape", SETITEM_CASES.values(), ids=SETITEM_CASES.keys())
def test_setitem_matches_torch_forward_and_backward(shape, index, value_shape):
    check_op([shape, value_shape], weighted(_set_in_clone(index)))


def test_setitem_negative_step_matches_torch_positions():
    check_op([(5, 3), (3, 3)], weighted(_set_in_clone([4, 2, 0])), weighted(_set_in_clone(slice(None, None, -2))))


def test_setitem_scalar_through_a_mask_tensor_needs_no_realize():
    data = np.arange(12, dtype=np.float32).reshape(3, 4)
    x, expected = Tensor(data).realize(), torch.tensor(data)
    before = GlobalCounters.kernel_count
    x[x > 5] = -1.0
    assert GlobalCounters.kernel_count == before  # lazy: nothing ran yet
    expected[expected > 5] = -1.0
    np.testing.assert_array_equal(x.numpy(), expected.numpy())


def test_setitem_writes_into_the_same_buffer_lazily():
    x = Tensor(np.zeros((3, 4), np.float32)).realize()
    buffer = buffer_of(x.uop.base)
    before = GlobalCounters.kernel_count
    x[1, 1:3] = 7.0
    assert GlobalCounters.kernel_count == before  # nothing ran yet
    x[[0, 2], 0] = Tensor([1.0, 2.0])
    assert buffer_of(x.realize().uop.base) is buffer  # the same memory (an assign renames the node)
    expected = np.zeros((3, 4), np.float32)
    expected[1, 1:3], expected[[0, 2], 0] = 7, [1, 2]
    np.testing.assert_array_equal(x.numpy(), expected)


def test_setitem_into_a_view_writes_the_base_tensor():
    x = Tensor(np.zeros((3, 4), np.float32)).realize()
    row = x[1]
    row[::3] = 5.0
    assert x.tolist()[1] == [5, 0, 0, 5] and row.tolist() == [5, 0, 0, 5]
    transposed = x.T
    transposed[2, [0, 2]] = Tensor([1.0, 2.0])
    assert x.numpy()[:, 2].tolist() == [1, 0, 2] and transposed.tolist()[2] == [1, 0, 2]


def test_setitem_on_an_unrealized_tensor_and_with_duplicates():
    x = Tensor.zeros(5)
    x[Tensor([1, 3, 1])] = Tensor([1.0, 2.0, 3.0])  # the last write to a place wins, as PyTorch on the CPU
    assert x.tolist() == [0, 3, 0, 2, 0]
    y = Tensor([1, 2, 3])
    y[1] = 9.7  # cast to the tensor's dtype
    assert y.tolist() == [1, 9, 3] and y.dtype == dtypes.int32


def test_setitem_leaf_that_requires_grad_raises():
    x = Tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf that requires grad"):
        x[0] = 3.0


def test_setitem_value_of_the_wrong_shape_raises():
    x = Tensor(np.zeros((3, 4), np.float32))
    with pytest.raises(ValueError, match=r"value of shape \(3,\) cannot be broadcast to the indexed shape \(2, 4\)"):
        x[:2] = Tensor([1.0, 2.0, 3.0])
    with pytest.raises(TypeError, match="value must be a tensor, a number or a nested list"):
        x[0] = "a"


# ---- gather ----


def _gather_index(shape, dim, n, seed=3):
    return np.random.default_rng(seed).integers(0, n, shape).tolist()


@pytest.mark.parametrize(
    "shape, dim, index_shape",
    [((5,), 0, (7,)), ((3, 4), 1, (3, 6)), ((3, 4), 0, (2, 3)), ((2, 3, 4), -1, (2, 1, 2)), ((1,), 0, (1,)),
     ((3, 4), 1, (3, 0)), ((3, 4), 0, (0, 4)), ((), 0, ())],
    ids=str,
)  # fmt: skip
def test_gather_matches_torch(shape, dim, index_shape):
    values = _gather_index(index_shape, dim, shape[dim] if shape else 1)
    check_op([shape], weighted(lambda x: x.gather(dim, ix(x, values).reshape(index_shape))))


@pytest.mark.parametrize("layout", NON_CONTIGUOUS)
def test_gather_reads_non_contiguous_input(layout):
    values = _gather_index((4, 3), 0, 4)
    check_op([(4, 5)], weighted(lambda x: x.gather(0, ix(x, values))), layout=layout)


def test_gather_is_one_kernel():
    x, idx = Tensor.rand(4, 5).realize(), Tensor(_gather_index((4, 3), 1, 5)).realize()
    before = GlobalCounters.kernel_count
    x.gather(1, idx).realize()
    assert GlobalCounters.kernel_count - before == 1


def test_gather_bad_arguments_raise():
    x = Tensor(np.zeros((2, 3), np.float32))
    with pytest.raises(ValueError, match="gather: index has 3 dimensions but input has 2"):
        x.gather(0, Tensor.zeros(1, 1, 1, dtype=dtypes.int32))
    with pytest.raises(ValueError, match="index can't be bigger than input in dimension 0"):
        x.gather(1, Tensor.zeros(3, 1, dtype=dtypes.int32))
    with pytest.raises(TypeError, match="gather: index must be an integer tensor, got dtypes.float"):
        x.gather(1, Tensor.zeros(2, 1))
    with pytest.raises(IndexError, match="gather: dimension 2 is out of range"):
        x.gather(2, Tensor.zeros(2, 1, dtype=dtypes.int32))


# ---- scatter and scatter_reduce ----

SCATTER_INDEX = [[1, 0, 3], [2, 3, 0]]  # per row distinct places: PyTorch's result with duplicates is unspecified


def test_scatter_src_matches_torch():
    check_op([(2, 4), (2, 3)], weighted(lambda x, s: x.scatter(1, ix(x, SCATTER_INDEX), s)))
    # src bigger than index: PyTorch's backward fails on it ("ScatterBackward0 returned an invalid gradient")
    check_op([(2, 4), (3, 5)], weighted(lambda x, s: x.scatter(1, ix(x, SCATTER_INDEX), s)), grad=False)
    check_op([(3, 2), (2, 2)], weighted(lambda x, s: x.scatter(0, ix(x, [[2, 0], [0, 1]]), s)))
    check_op([(4,), (3,)], weighted(lambda x, s: x.scatter(0, ix(x, [3, 0, 2]), s)))


@pytest.mark.filterwarnings("ignore:The reduce argument of torch.scatter")
def test_scatter_value_and_reduce_match_torch():
    check_op([(2, 4)], weighted(lambda x: x.scatter(1, ix(x, [[1, 0], [3, 3]]), 2.5)))
    check_op([(2, 4)], weighted(lambda x: x.scatter(1, ix(x, [[1], [3]]), value=-1.0)))
    for reduce in ("add", "multiply"):  # PyTorch has no derivative for scatter with reduce
        check_op([(2, 4), (2, 3)], lambda x, s, r=reduce: x.scatter(1, ix(x, [[1, 1, 3], [0, 2, 0]]), s, reduce=r),
                 grad=False)  # fmt: skip


@pytest.mark.parametrize("layout", NON_CONTIGUOUS)
def test_scatter_reads_non_contiguous_inputs(layout):
    index = [[2, 0, 1, 0], [0, 1, 2, 2], [1, 2, 0, 1]]
    check_op([(3, 4), (3, 4)], weighted(lambda x, s: x.scatter(0, ix(x, index), s)), layout=layout)


def test_scatter_with_duplicate_places_keeps_the_last():
    out = Tensor.zeros(4).scatter(0, Tensor([1, 3, 1]), Tensor([5.0, 6.0, 7.0]))
    assert out.tolist() == torch.zeros(4).scatter(0, torch.tensor([1, 3, 1]), torch.tensor([5.0, 6.0, 7.0])).tolist()


@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
def test_scatter_reduce_matches_torch(reduce, include_self):
    index = [[1, 1, 3, 0, 1], [2, 2, 2, 0, 3]]  # repeated places reduce together; place 2 of row 0 gets nothing
    check_op([(2, 4), (2, 5)], weighted(lambda x, s: x.scatter_reduce(1, ix(x, index), s, reduce,
                                                                      include_self=include_self)))  # fmt: skip


@pytest.mark.parametrize("reduce", ["amax", "amin"])
def test_scatter_reduce_ties_share_the_gradient_like_torch(reduce):
    x, s = np.array([[1.0, 2.0, 0.5]], np.float32), np.array([[1.0, 1.0, 2.0, -1.0]], np.float32)
    check_op([], lambda x, s: x.scatter_reduce(1, ix(x, [[0, 0, 1, 2]]), s, reduce), inputs=[x, s])


def test_scatter_reduce_along_dim_0_of_integers():
    x, s = np.array([[1, 2], [3, 4], [5, 6]], np.int32), np.array([[-4, 7], [-1, 2]], np.int32)
    for reduce in ("sum", "mean", "amax"):
        check_op([], lambda x, s, r=reduce: x.scatter_reduce(0, ix(x, [[0, 2], [0, 2]]), s, r, include_self=False),
                 inputs=[x, s])  # fmt: skip


def test_scatter_bad_arguments_raise():
    x = Tensor(np.zeros((2, 3), np.float32))
    with pytest.raises(ValueError, match="scatter: index has 1 dimensions but input has 2"):
        x.scatter(0, Tensor([0]), 1.0)
    bigger = r"scatter_reduce: index has shape \(2, 4\) but input has \(2, 3\); index can't be bigger than input in"
    with pytest.raises(ValueError, match=bigger + r" dimension 1 \(other than dim=0\)"):
        x.scatter_reduce(0, Tensor([[0] * 4] * 2), Tensor(np.ones((2, 4), np.float32)), "sum")
    with pytest.raises(TypeError, match="scatter: src has dtype dtypes.int but the tensor has dtypes.float"):
        x.scatter(0, Tensor([[0]]), Tensor([[1]]))
    with pytest.raises(ValueError, match="src has shape"):
        x.scatter(1, Tensor([[0, 1]]), Tensor([[1.0]]))
    with pytest.raises(ValueError, match="scatter_reduce: reduce must be one of sum, prod, mean, amax, amin"):
        x.scatter_reduce(0, Tensor([[0]]), Tensor([[1.0]]), "max")
    with pytest.raises(TypeError, match="exactly one of src"):
        x.scatter(0, Tensor([[0]]))


# ---- masked_fill and one_hot ----


def test_masked_fill_matches_torch():
    mask = (np.random.default_rng(2).random((3, 4)) < 0.5).tolist()
    check_op([(3, 4)], weighted(lambda x: x.masked_fill(ix(x, mask, "bool"), -2.5)))
    check_op([(2, 3, 4)], weighted(lambda x: x.masked_fill(ix(x, mask, "bool")[0], 0.0)))
    check_op([(4,)], weighted(lambda x: x.masked_fill(ix(x, mask, "bool"), 1.0)))  # the mask broadcasts x up
    check_op([(3, 4), ()], weighted(lambda x, v: x.masked_fill(ix(x, mask, "bool"), v)))  # value with a gradient


def test_masked_fill_needs_a_bool_mask():
    with pytest.raises(TypeError, match="masked_fill: mask must be a bool tensor, got dtypes.int"):
        Tensor([1.0, 2.0]).masked_fill(Tensor([1, 0]), 0.0)


@pytest.mark.parametrize("values, num_classes", [([3, 0, 1], 5), ([[2, 0], [1, 1]], -1), ([0], 1), ([4, 1], 6),
                                                 ([], 3)], ids=str)  # fmt: skip
def test_one_hot_matches_torch(values, num_classes):
    x = np.array(values, np.int64).reshape(np.shape(values))
    check_op([], lambda x: F.one_hot(x, num_classes), lambda x: x.one_hot(num_classes), inputs=[x])


def test_one_hot_bad_arguments_raise():
    with pytest.raises(TypeError, match="one_hot: the tensor must be an integer tensor, got dtypes.float"):
        Tensor([1.0]).one_hot(3)
    with pytest.raises(ValueError, match="cannot infer num_classes from an empty tensor"):
        Tensor.zeros(0, dtype=dtypes.int32).one_hot()


# ---- cat, stack, split, chunk ----


@pytest.mark.parametrize(
    "shapes, dim",
    [([(2, 3), (4, 3)], 0), ([(2, 3), (2, 1), (2, 4)], 1), ([(2, 3, 1), (2, 3, 2)], -1), ([(1,), (1,)], 0),
     ([(5,)], 0), ([(3, 0), (3, 2)], 1), ([(0, 3), (2, 3)], 0), ([(3,), (0,)], 0), ([(0, 2), (0, 1)], 1)],
    ids=str,
)  # fmt: skip
def test_cat_matches_torch(shapes, dim):
    check_op(shapes, weighted(lambda *xs: torch.cat(xs, dim)), weighted(lambda *xs: Tensor.cat(*xs, dim=dim)))


@pytest.mark.parametrize("layout", NON_CONTIGUOUS)
def test_cat_reads_non_contiguous_inputs(layout):
    check_op([(3, 2), (3, 4)], weighted(lambda x, y: torch.cat([x, y], 1)), weighted(lambda x, y: x.cat(y, dim=1)),
             layout=layout)  # fmt: skip


def test_cat_skips_1d_empty_pieces_like_torch():
    x, empty = np.random.default_rng(0).uniform(-2, 2, (2, 2)).astype(np.float32), np.zeros(0, np.float32)
    check_op([], lambda x, e: torch.cat([x, e, x], 1), lambda x, e: Tensor.cat(x, e, x, dim=1), inputs=[x, empty],
             grad=False)  # fmt: skip


def test_cat_forms_promotion_and_one_kernel():
    a, b = Tensor([[1, 2]]), Tensor([[0.5, 1.5]])
    assert Tensor.cat([a, b]).tolist() == [[1, 2], [0.5, 1.5]] and a.cat(b, axis=1).dtype == dtypes.float32
    x, y, z = (Tensor.rand(2, k).realize() for k in (1, 2, 3))
    before = GlobalCounters.kernel_count
    x.cat(y, z, dim=1).realize()
    assert GlobalCounters.kernel_count - before == 1
    assert Tensor([-0.0]).cat(Tensor([1.0])).numpy()[0].tobytes() == np.float32(-0.0).tobytes()  # values are exact


@pytest.mark.parametrize("shape, dim", [((2, 3), 0), ((2, 3), 2), ((2, 3), -1), ((4,), 1), ((), 0)], ids=str)
def test_stack_matches_torch(shape, dim):
    check_op([shape, shape, shape], weighted(lambda *xs: torch.stack(xs, dim)),
             weighted(lambda *xs: Tensor.stack(*xs, dim=dim)))  # fmt: skip


def test_cat_and_stack_bad_arguments_raise():
    with pytest.raises(ValueError, match=r"cat: tensor 1 has shape \(2, 4\) but tensor 0 has \(3, 4\); sizes must"):
        Tensor.zeros(3, 4).cat(Tensor.zeros(2, 4), dim=1)
    with pytest.raises(ValueError, match="zero-dimensional tensors cannot be concatenated"):
        Tensor(1.0).cat(Tensor(2.0))
    with pytest.raises(ValueError, match=r"stack: every tensor must have the same shape"):
        Tensor.zeros(3).stack(Tensor.zeros(2))
    with pytest.raises(TypeError, match="cat: pass the tensors as one list or one by one"):
        Tensor.cat(Tensor.zeros(3), [[1.0]])
    with pytest.raises(TypeError, match="cat: item 1 is a list, not a Tensor"):
        Tensor.cat([Tensor.zeros(3), [1.0]])


def _pieces(method, arg, dim):
    """The pieces of x.split / x.chunk, each scaled by its position and joined again, so one check sees them all."""

    def both(x):
        parts = getattr(x, method)(arg, dim)
        scaled = [p * (i + 1) for i, p in enumerate(parts)]
        return torch.cat(scaled, dim) if isinstance(x, torch.Tensor) else Tensor.cat(*scaled, dim=dim)

    return both


@pytest.mark.parametrize("arg, dim", [(2, 0), (3, 1), (7, 1), ([1, 3, 3], 1), ([0, 5], 0), (1, -1)], ids=str)
def test_split_matches_torch(arg, dim):
    shape = (5, 7)
    check_op([shape], weighted(_pieces("split", arg, dim)))
    sizes = [p.shape for p in Tensor.zeros(*shape).split(arg, dim)]
    assert sizes == [tuple(p.shape) for p in torch.zeros(shape).split(arg, dim)]


@pytest.mark.parametrize("chunks, dim, shape", [(3, 0, (7, 2)), (4, 0, (6, 2)), (2, 1, (3, 5)), (5, 1, (2, 5)),
                                                (3, 1, (2, 0))], ids=str)  # fmt: skip
def test_chunk_matches_torch(chunks, dim, shape):
    check_op([shape], weighted(_pieces("chunk", chunks, dim)))
    assert len(Tensor.zeros(*shape).chunk(chunks, dim)) == len(torch.zeros(shape).chunk(chunks, dim))


def test_split_and_chunk_bad_arguments_raise():
    with pytest.raises(ValueError, match=r"split: sizes \[1, 1\] must be non-negative and sum to 3"):
        Tensor.zeros(3).split([1, 1])
    with pytest.raises(ValueError, match="chunk: chunks must be a positive int, got 0"):
        Tensor.zeros(3).chunk(0)


# ---- repeat, repeat_interleave, roll ----


@pytest.mark.parametrize("shape, repeats", [((2, 3), (2, 1)), ((3,), (2, 2)), ((2, 1, 3), (1, 3, 2)), ((), (3,)),
                                            ((2, 3), (0, 2)), ((1,), (1,))], ids=str)  # fmt: skip
def test_repeat_matches_torch(shape, repeats):
    check_op([shape], weighted(lambda x: x.repeat(*repeats)))


@pytest.mark.parametrize("repeats, dim", [(2, 1), (3, None), ([1, 0, 2], 1), ([2], 0)], ids=str)
def test_repeat_interleave_matches_torch(repeats, dim):
    def fn(x):
        r = repeats if isinstance(repeats, int) else ix(x, repeats)
        return x.repeat_interleave(r, dim)

    check_op([(2, 3)], weighted(fn))


@pytest.mark.parametrize("shifts, dims, shape", [(1, 0, (4, 3)), (-5, 1, (4, 3)), ((1, 2), (0, 1), (4, 3)),
                                                 (3, None, (4, 3)), (7, 0, (7,)), (2, 1, (3, 0))], ids=str)  # fmt: skip
def test_roll_matches_torch(shifts, dims, shape):
    check_op([shape], weighted(lambda x: x.roll(shifts, dims)))


@pytest.mark.parametrize("layout", NON_CONTIGUOUS)
def test_repeat_and_roll_read_non_contiguous_input(layout):
    check_op([(3, 4)], weighted(lambda x: x.roll(-1, 1).repeat(2, 1)), layout=layout)


def test_repeat_family_bad_arguments_raise():
    with pytest.raises(ValueError, match=r"repeat: 1 repeats for a tensor of 2 dims"):
        Tensor.zeros(2, 3).repeat(2)
    with pytest.raises(ValueError, match=r"repeat_interleave: repeats must be 3 non-negative ints"):
        Tensor.zeros(3).repeat_interleave(Tensor([1, 2]))
    with pytest.raises(ValueError, match="roll: shifts"):
        Tensor.zeros(3, 3).roll((1, 2), 0)


# ---- unfold, meshgrid, triu, tril, diagonal ----


@pytest.mark.parametrize("shape, dim, size, step", [((7,), 0, 3, 1), ((7,), 0, 2, 3), ((3, 8), 1, 4, 2),
                                                    ((5, 2), 0, 5, 1), ((5, 2), -2, 1, 1), ((4, 3), 1, 2, 2),
                                                    ((2, 0), 1, 0, 1)], ids=str)  # fmt: skip
def test_unfold_matches_torch(shape, dim, size, step):
    check_op([shape], weighted(lambda x: x.unfold(dim, size, step)))


def test_unfold_reads_non_contiguous_input_and_is_a_view():
    check_op([(4, 6)], weighted(lambda x: x.unfold(1, 3, 1)), layout="transposed")
    x = Tensor.rand(10).realize()
    windows = x.unfold(0, 4, 2)
    assert windows.uop.base is x.uop.base  # movement ops over the same buffer


def test_unfold_bad_arguments_raise():
    with pytest.raises(ValueError, match="unfold: size 5 must be between 0 and 3"):
        Tensor.zeros(3).unfold(0, 5, 1)
    with pytest.raises(ValueError, match="unfold: step must be a positive int"):
        Tensor.zeros(3).unfold(0, 1, 0)


@pytest.mark.parametrize("indexing", ["ij", "xy"])
@pytest.mark.parametrize("shapes", [[(3,), (2,)], [(2,), (1,), (4,)], [(3,)], [(), (2,)]], ids=str)
def test_meshgrid_matches_torch(shapes, indexing):
    for k in range(len(shapes)):
        check_op(shapes, weighted(lambda *xs, k=k: torch.meshgrid(*xs, indexing=indexing)[k]),
                 weighted(lambda *xs, k=k: Tensor.meshgrid(*xs, indexing=indexing)[k]))  # fmt: skip


def test_meshgrid_bad_arguments_raise():
    with pytest.raises(ValueError, match="meshgrid: indexing must be 'ij' or 'xy'"):
        Tensor.zeros(2).meshgrid(Tensor.zeros(3), indexing="ji")
    with pytest.raises(ValueError, match=r"meshgrid: tensor 1 has shape \(2, 2\)"):
        Tensor.zeros(2).meshgrid(Tensor.zeros(2, 2))


@pytest.mark.parametrize("diagonal", [0, 1, -2, 5])
@pytest.mark.parametrize("name", ["triu", "tril"])
def test_triangles_match_torch(name, diagonal):
    check_op([(2, 4, 5)], weighted(lambda x: getattr(x, name)(diagonal)))


@pytest.mark.parametrize("name", ["triu", "tril"])
def test_triangles_of_odd_and_non_contiguous_inputs(name):
    check_op([(1, 1)], weighted(lambda x: getattr(x, name)()))
    check_op([(3, 0)], weighted(lambda x: getattr(x, name)()))
    check_op([(4, 3)], weighted(lambda x: getattr(x, name)(-1)), layout="strided")
    with pytest.raises(ValueError, match=rf"{name}: the tensor has shape \(3,\); it needs at least 2 dimensions"):
        getattr(Tensor.zeros(3), name)()


@pytest.mark.parametrize("shape, offset, dim1, dim2", [((4, 4), 0, 0, 1), ((3, 5), 2, 0, 1), ((5, 3), -1, 0, 1),
                                                       ((2, 3, 4), 1, 2, 0), ((2, 3, 4), -1, -1, 1),
                                                       ((3, 3), 4, 0, 1), ((1, 1), 0, 1, 0)], ids=str)  # fmt: skip
def test_diagonal_matches_torch(shape, offset, dim1, dim2):
    check_op([shape], weighted(lambda x: x.diagonal(offset, dim1, dim2)))


def test_diagonal_reads_non_contiguous_input_and_raises_on_equal_dims():
    check_op([(4, 5)], weighted(lambda x: x.diagonal(1)), layout="transposed")
    with pytest.raises(ValueError, match="diagonal: dim1 and dim2 are both dimension 1"):
        Tensor.zeros(2, 2).diagonal(0, 1, -1)


# ---- pad ----


# The lowerer gives a REDUCE_AXIS node one set of loops wherever it is evaluated; when the same node is summed at
# the top level and also inside another reduction, its accumulator is declared inside the other loop and used
# outside it: gcc fails ("'acc2' undeclared"). The backward of a replicate pad of two dims sums the same column
# sums both ways. Minimal repro, not in this area:
#   row_sums = Tensor(np.arange(15, dtype=np.float32).reshape(5, 3)).sum(1)
#   (row_sums[2:].sum(0, keepdim=True).pad(((1, 0),)) + row_sums[:2]).numpy()

PAD_CASES = [((2, 3, 5), (2, 1)), ((1, 2, 4, 3), (1, 2, 0, 2)), ((2, 3, 5), (0, 0)), ((1, 2, 4, 3), (-1, 2, 1, -1)),
             ((1, 1, 3), (-1, 2))]  # fmt: skip


@pytest.mark.parametrize("mode", ["constant", "reflect", "replicate", "circular"])
@pytest.mark.parametrize("shape, pad", PAD_CASES, ids=str)
def test_pad_matches_torch(mode, shape, pad):
    check_op([shape], weighted(lambda x: F.pad(x, pad, mode=mode)), weighted(lambda x: x.pad(pad, mode=mode)))


def test_pad_constant_value_and_pairs_form():
    check_op([(2, 3)], weighted(lambda x: F.pad(x, (1, 1, 0, 2), value=-3.5)),
             weighted(lambda x: x.pad(((0, 2), (1, 1)), value=-3.5)))  # fmt: skip
    check_op([(2, 3)], weighted(lambda x: F.pad(x, (2, 0), mode="reflect")),
             weighted(lambda x: x.pad((None, (2, 0)), mode="reflect")))  # fmt: skip
    check_op([(3, 0)], weighted(lambda x: F.pad(x, (1, 2))), weighted(lambda x: x.pad(pad=(1, 2))))


@pytest.mark.parametrize("layout", NON_CONTIGUOUS)
def test_pad_reads_non_contiguous_input(layout):
    check_op([(3, 4)], weighted(lambda x: F.pad(x[None], (2, 1, 1, 2), mode="reflect")[0]),
             weighted(lambda x: x.pad((2, 1, 1, 2), mode="reflect")), layout=layout)  # fmt: skip


def test_pad_reflect_is_one_kernel():
    x = Tensor.rand(3, 5).realize()
    before = GlobalCounters.kernel_count
    x.pad((2, 2, 1, 1), mode="reflect").realize()
    assert GlobalCounters.kernel_count - before == 1


@pytest.mark.parametrize(
    "pad, mode, kwargs, words",
    [((3, 0), "reflect", {}, r"reflect padding \(3, 0\) of dimension 1 must be less than its size 3"),
     ((0, 4), "circular", {}, r"circular padding \(0, 4\) of dimension 1 must be at most its size 3"),
     ((1,), "constant", {}, "a flat padding needs an even length of at most 4"),
     ((1, 1), "wrap", {}, "pad: mode must be one of constant, reflect, replicate, circular"),
     ((1, 1), "reflect", {"value": 2.0}, "mode 'reflect' takes no value"),
     (((1, 1),), "constant", {}, r"need one \(before, after\) pair per dimension")],
    ids=["reflect too far", "circular too far", "odd length", "unknown mode", "value with reflect", "pairs"],
)  # fmt: skip
def test_pad_bad_arguments_raise(pad, mode, kwargs, words):
    with pytest.raises(ValueError, match=words):
        Tensor.zeros(2, 3).pad(pad, mode=mode, **kwargs)


# ---- interpolate ----


@pytest.mark.parametrize("size", [2, 5, 7, 8, 12])
def test_interpolate_nearest_1d_matches_torch(size):
    check_op([(2, 3, 4)], weighted(lambda x: F.interpolate(x, size=size)), weighted(lambda x: x.interpolate(size)))


@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("size", [1, 3, 7, 10])
def test_interpolate_linear_matches_torch(size, align_corners):
    check_op([(1, 2, 5)], weighted(lambda x: F.interpolate(x, size=size, mode="linear", align_corners=align_corners)),
             weighted(lambda x: x.interpolate(size, mode="linear", align_corners=align_corners)))  # fmt: skip


@pytest.mark.parametrize("mode, kwargs", [("nearest", {"size": (5, 3)}), ("nearest", {"scale_factor": 1.5}),
                                          ("nearest", {"scale_factor": 0.7}), ("bilinear", {"size": (6, 7)}),
                                          ("bilinear", {"size": (2, 3), "align_corners": True}),
                                          ("bilinear", {"scale_factor": (1.7, 0.6)})], ids=str)  # fmt: skip
def test_interpolate_2d_matches_torch(mode, kwargs):
    check_op([(1, 2, 3, 4)], weighted(lambda x: F.interpolate(x, mode=mode, **kwargs)),
             weighted(lambda x: x.interpolate(mode=mode, **kwargs)))  # fmt: skip


def test_interpolate_reads_non_contiguous_input():
    check_op([(1, 2, 3, 4)], weighted(lambda x: F.interpolate(x, size=(5, 2), mode="bilinear")),
             weighted(lambda x: x.interpolate((5, 2), mode="bilinear")), layout="transposed")  # fmt: skip


def test_interpolate_nearest_by_a_whole_factor_is_a_view():
    x = Tensor.rand(1, 1, 3, 4).realize()
    assert x.interpolate(scale_factor=2).uop.base is x.uop.base


def test_interpolate_bad_arguments_raise():
    x = Tensor.zeros(1, 1, 4)
    with pytest.raises(ValueError, match="interpolate: pass exactly one of size and scale_factor"):
        x.interpolate()
    with pytest.raises(ValueError, match="align_corners can only be set with mode 'linear', 'bilinear' or 'trilinear'"):
        x.interpolate(3, align_corners=True)
    with pytest.raises(ValueError, match=r"interpolate: mode 'bilinear' resizes 2 dims, got 1 for shape \(1, 1, 4\)"):
        x.interpolate(3, mode="bilinear")
    with pytest.raises(ValueError, match="interpolate: mode must be one of nearest, nearest-exact, linear, bilinear"):
        x.interpolate(3, mode="bicubic")


# ---- more layouts and sizes ----


@pytest.mark.parametrize("layout", NON_CONTIGUOUS)
def test_more_ops_read_non_contiguous_inputs(layout):
    mask = (np.random.default_rng(4).random((4, 3)) < 0.5).tolist()
    check_op([(4, 3)], weighted(lambda x: x.masked_fill(ix(x, mask, "bool"), 2.0)), layout=layout)
    check_op([(4, 3), (1, 3)], weighted(lambda x, s: x.scatter_reduce(0, ix(x, [[3, 0, 0]]), s, "mean")),
             layout=layout)  # fmt: skip
    check_op([(4, 3), (4, 3)], weighted(lambda x, y: torch.stack([x, y], 1)), weighted(lambda x, y: x.stack(y, dim=1)),
             layout=layout)  # fmt: skip
    check_op([(4, 3)], weighted(_pieces("split", [1, 2], 1)), layout=layout)
    check_op([(4, 3)], weighted(lambda x: x.repeat_interleave(2, 0)), layout=layout)
    check_op([(3,), (4,)], weighted(lambda x, y: torch.meshgrid(x, y, indexing="xy")[0]),
             weighted(lambda x, y: x.meshgrid(y, indexing="xy")[0]), layout=layout)  # fmt: skip


def test_more_ops_of_size_0_and_1():
    check_op([(3, 0)], weighted(lambda x: x.masked_fill(ix(x, [[]] * 3, "bool").reshape(3, 0), 1.0)))
    # an empty index scatters nothing: the result is self, and the empty src gets no .grad (PyTorch: an empty one)
    check_op([(2, 3), (2, 0)], lambda x, s: x.scatter(1, ix(x, [[], []]).reshape(2, 0), s), grad=False)
    check_op([(2, 3), (2, 0)], lambda x, s: x.scatter_reduce(1, ix(x, [[], []]).reshape(2, 0), s, "amax"), grad=False)
    check_op([(3, 0), (3, 0)], weighted(lambda *xs: torch.stack(xs, 0)), weighted(lambda *xs: Tensor.stack(*xs)))
    check_op([(3,), (0,)], weighted(lambda x, y: torch.meshgrid(x, y, indexing="ij")[0]),
             weighted(lambda x, y: x.meshgrid(y)[0]))  # fmt: skip
    check_op([(2, 3)], weighted(lambda x: x.repeat_interleave(ix(x, [0, 0, 0]), 1)))
    check_op([(1, 1)], weighted(lambda x: x.scatter_reduce(0, ix(x, [[0]]), x * 3, "amax", include_self=False)))
    check_op([(1,)], weighted(lambda x: x.roll(5).repeat(3)))


def test_out_of_range_positions_in_a_lazy_index_raise_when_computed():
    x = Tensor([1.0, 2.0, 3.0])
    lazy = Tensor([0, 5]) * 1  # values known only once computed: the kernel checks them (test_device_checks.py)
    with pytest.raises(IndexError, match="index: index 5 is out of bounds for dimension 0 with size 3"):
        x[lazy].tolist()
    with pytest.raises(RuntimeError, match="gather: index 5 is out of bounds for dimension 0 with size 3"):
        x.gather(0, lazy).tolist()
    y = x.clone()
    y[lazy] = 9.0
    with pytest.raises(IndexError, match="index 5 is out of bounds"):
        y.tolist()
    assert x.tolist() == [1.0, 2.0, 3.0]


# ---- the PYTHON device ----


def test_indexing_ops_on_the_python_device():
    check_op([(3, 4)], weighted(lambda x: x[tensor_index(([2, 0], slice(1, None, 2)), x)]), device="PYTHON")
    check_op([(3, 4)], weighted(lambda x: x.gather(1, ix(x, [[1], [3], [0]]))), device="PYTHON")
    check_op([(2, 3), (2, 2)], weighted(lambda x, y: Tensor.cat(x, y, dim=1) if isinstance(x, Tensor) else
                                        torch.cat([x, y], 1)), device="PYTHON")  # fmt: skip
    check_op([(2, 3)], weighted(lambda x: F.pad(x[None], (2, 1), mode="reflect")[0]),
             weighted(lambda x: x.pad((2, 1), mode="reflect")), device="PYTHON")  # fmt: skip
    check_op([(2, 3), (2, 3)], weighted(lambda x, s: x.scatter_reduce(1, ix(x, [[2, 0, 2], [1, 1, 0]]), s, "amax")),
             device="PYTHON")  # fmt: skip
    check_op([(2, 3), (2,)], weighted(_set_in_clone((slice(None), [2, 0]))), device="PYTHON")
    check_op([(1, 1, 3)], weighted(lambda x: F.interpolate(x, size=5, mode="linear")),
             weighted(lambda x: x.interpolate(5, mode="linear")), device="PYTHON")  # fmt: skip


def test_setitem_on_the_python_device():
    x = Tensor([[1.0, 2.0], [3.0, 4.0]], device="PYTHON")
    x[:, 1] = 0.0
    x[Tensor([1], device="PYTHON"), 0] = 9.0
    assert x.tolist() == [[1, 0], [9, 0]]
