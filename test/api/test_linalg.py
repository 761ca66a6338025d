"""dot, matmul (@), einsum and linear against PyTorch, forward values and gradients (test/torch_check.py)."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from glassgrad import Device, GlobalCounters, Tensor, dtypes
from glassgrad.codegen import get_program
from torch_check import LAYOUTS, check_op

# ---- matmul and @ ----

MATMUL_SHAPES = [
    ((3, 4), (4, 5)),  # odd
    ((1, 1), (1, 1)),  # 1-size
    ((4,), (4,)),  # vector . vector -> 0-d
    ((4,), (4, 3)),  # vector @ matrix
    ((3, 4), (4,)),  # matrix @ vector
    ((2, 3, 4), (4, 5)),  # batched @ matrix
    ((5,), (2, 5, 3)),  # vector @ batched
    ((2, 3, 4), (4,)),  # batched @ vector
    ((2, 1, 3, 4), (5, 4, 2)),  # batch dims broadcast: (2, 1) with (5,)
    ((1, 7, 1), (3, 1, 6)),  # inner dimension 1, batch 1 against 3
    ((0, 4), (4, 5)),  # 0-size rows
    ((2, 0, 3), (3, 4)),
]


@pytest.mark.parametrize("shapes", MATMUL_SHAPES, ids=str)
def test_matmul_matches_torch(shapes):
    check_op(shapes, torch.matmul, lambda x, w: x.matmul(w))


@pytest.mark.parametrize("layout", LAYOUTS[1:])
@pytest.mark.parametrize("shapes", [((3, 4), (4, 5)), ((2, 3, 4), (1, 4, 5)), ((4,), (4, 3))], ids=str)
def test_matmul_of_non_contiguous_inputs(shapes, layout):
    check_op(shapes, torch.matmul, lambda x, w: x @ w, layout=layout)


def test_matmul_of_a_transposed_view():
    check_op([(5, 3), (6, 5)], lambda x, w: x.T @ w.T, lambda x, w: x.T @ w.T)


def test_matmul_of_many_products_loosens_for_float32_rounding():
    # 300 products per output: float32 sums carry about sqrt(300) more rounding than one product
    check_op([(4, 300), (300, 6)], torch.matmul, lambda x, w: x @ w, atol=1e-4, rtol=1e-4)


def test_rmatmul_takes_a_numpy_left_operand():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    w = Tensor(np.ones((3, 2), np.float32))
    np.testing.assert_allclose(Tensor.__rmatmul__(w, a).numpy(), a @ np.ones((3, 2), np.float32))


def test_matmul_of_integers_stays_integer():
    check_op([(3, 4), (4, 2)], torch.matmul, lambda x, w: x @ w, dtype=np.int32, low=-5, high=5)


def test_matmul_of_half_accumulates_in_float32():
    x, w = np.full((1, 4096), 0.1, np.float16), np.ones((4096, 1), np.float16)
    out = Tensor(x) @ Tensor(w)
    assert out.dtype == dtypes.float16
    expected = torch.tensor(x) @ torch.tensor(w)  # torch accumulates half in float32 too
    np.testing.assert_allclose(out.numpy().astype(np.float32), expected.numpy().astype(np.float32), rtol=1e-3)


def test_matmul_promotes_mixed_dtypes():
    out = Tensor([[1, 2]], dtype=dtypes.int32) @ Tensor([[0.5], [0.25]])
    assert out.dtype == dtypes.float32 and out.tolist() == [[1.0]]


def test_matmul_with_accumulation_dtype():
    out = Tensor([[100, 100]], dtype=dtypes.int8).matmul(Tensor([[1], [1]], dtype=dtypes.int8), dtype=dtypes.int32)
    assert out.dtype == dtypes.int32 and out.tolist() == [[200]]


# ---- dot ----


@pytest.mark.parametrize("shapes", [((5,), (5,)), ((1,), (1,)), ((3, 4), (4, 2))], ids=str)
def test_dot_matches_torch(shapes):
    torch_fn = torch.dot if len(shapes[0]) == 1 else torch.matmul  # 2-D dot is tinygrad's (matmul)
    check_op(shapes, torch_fn, lambda x, w: x.dot(w))


# ---- linear ----

LINEAR_CASES = [
    ((2, 3), (4, 3), (4,)),  # (N, in) with weight (out, in)
    ((3,), (4, 3), (4,)),  # unbatched
    ((2, 5, 3), (1, 3), (1,)),  # extra batch dims, one output feature
    ((1, 1), (1, 1), (1,)),
    ((0, 3), (4, 3), (4,)),  # empty batch
]


def _upstream(fn):
    """fn's output times fixed random weights, so the gradient flowing back is not all ones (see the xfail below)."""

    def weighted(*args):
        out = fn(*args)
        w = np.random.default_rng(7).uniform(0.5, 1.5, tuple(out.shape)).astype(np.float32)
        return out * (torch.tensor(w) if isinstance(out, torch.Tensor) else Tensor(w, device=out.device))

    return weighted


@pytest.mark.parametrize("shapes", LINEAR_CASES, ids=str)
def test_linear_matches_torch(shapes):
    check_op(shapes, _upstream(F.linear), _upstream(lambda x, w, b: x.linear(w, b)))


@pytest.mark.parametrize("layout", LAYOUTS[1:])
def test_linear_of_non_contiguous_inputs(layout):
    check_op([(2, 5, 3), (4, 3), (4,)], _upstream(F.linear), _upstream(lambda x, w, b: x.linear(w, b)), layout=layout)


def test_linear_without_bias():
    check_op([(2, 3), (4, 3)], F.linear, lambda x, w: x.linear(w))


def test_linear_bias_gradient_of_a_plain_sum():
    check_op([(2, 3), (4, 3), (4,)], F.linear, lambda x, w, b: x.linear(w, b))


# ---- einsum ----

EINSUM_CASES = [
    ("ij,jk->ik", [(3, 4), (4, 5)]),  # matmul
    ("ij,jk", [(3, 4), (4, 5)]),  # implicit output: letters used once, sorted
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),  # batched
    ("i,i->", [(4,), (4,)]),  # dot
    ("i,j->ij", [(3,), (4,)]),  # outer product
    ("ij->ji", [(2, 3)]),  # transpose
    ("ij->", [(2, 3)]),  # sum of all
    ("ii->i", [(3, 3)]),  # diagonal
    ("ii", [(4, 4)]),  # trace
    ("iij->j", [(3, 3, 2)]),
    ("iji->j", [(3, 2, 3)]),  # repeated index that is not adjacent
    ("ijk,jil->kl", [(2, 3, 4), (3, 2, 5)]),  # contraction over two indices, permuted
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]),  # a chain, contracted pairwise
    ("bA", [(2, 3)]),  # implicit output orders upper case before lower case
    ("...ij,...jk", [(2, 1, 3, 4), (5, 4, 2)]),  # ellipsis with broadcast batch dims
    ("...i->i", [(2, 3)]),  # ellipsis summed away
    ("i...->...", [(2, 3, 1)]),
    ("ij,jk->ik", [(3, 1), (4, 5)]),  # size 1 broadcasts against 4, as in torch
    ("ij -> j", [(1, 1)]),  # spaces
    ("ij,jk->ik", [(0, 3), (3, 2)]),  # 0-size
]


@pytest.mark.parametrize("formula, shapes", EINSUM_CASES, ids=str)
def test_einsum_matches_torch(formula, shapes):
    check_op(shapes, lambda *xs: torch.einsum(formula, *xs), lambda *xs: Tensor.einsum(formula, *xs))


@pytest.mark.parametrize("layout", LAYOUTS[1:])
@pytest.mark.parametrize("formula, shapes", [("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]), ("ii->i", [(3, 3)])], ids=str)
def test_einsum_of_non_contiguous_inputs(formula, shapes, layout):
    check_op(shapes, lambda *xs: torch.einsum(formula, *xs), lambda *xs: Tensor.einsum(formula, *xs), layout=layout)


def test_einsum_takes_operands_as_a_list():
    check_op([(2, 3), (3, 2)], lambda x, y: torch.einsum("ij,jk", [x, y]), lambda x, y: Tensor.einsum("ij,jk", [x, y]))


def test_einsum_contracts_a_chain_pairwise():
    # 'ij,jk,kl->il' as one product would be (i, j, k, l) large; pairwise it never exceeds three indices
    a, b, c = (Tensor.rand(8, 8).realize() for _ in range(3))
    GlobalCounters.reset()
    (a @ b).realize()
    one_matmul = GlobalCounters.global_ops
    GlobalCounters.reset()
    Tensor.einsum("ij,jk,kl->il", a, b, c).realize()
    assert GlobalCounters.kernel_count == 2 and GlobalCounters.global_ops == 2 * one_matmul


# ---- fusion and generated code ----


def _sources(t: Tensor) -> list[str]:
    return [get_program(item.ast, Device["CPU"].renderer).src for item in t.schedule() if item.ast.op.name == "SINK"]


def test_matmul_is_one_kernel_with_plain_strides():
    x, w = Tensor.rand(5, 3).realize(), Tensor.rand(2, 3, 4).realize()
    (src,) = _sources(x @ w)
    assert "/" not in src and "%" not in src
    GlobalCounters.reset()
    (x @ w).realize()
    assert GlobalCounters.kernel_count == 1


def test_matmul_forward_and_backward_take_three_kernels():
    x, w = Tensor.rand(4, 3, requires_grad=True).realize(), Tensor.rand(3, 5, requires_grad=True).realize()
    out = x @ w
    out.backward(Tensor.rand(4, 5).realize())
    GlobalCounters.reset()
    out.realize(x.grad, w.grad)
    assert GlobalCounters.kernel_count == 3


# ---- the PYTHON device ----


@pytest.mark.parametrize("shapes", [((2, 3), (3, 2)), ((3,), (2, 3, 1))], ids=str)
def test_matmul_on_python_device(shapes):
    check_op(shapes, torch.matmul, lambda x, w: x @ w, device="PYTHON")


# ---- an empty inner dimension: on the PYTHON device, since on CPU the kernel crashes (the xfail test below) ----


@pytest.mark.parametrize("shapes", [((3, 0), (0, 2)), ((0,), (0,)), ((2, 1, 0), (0, 2))], ids=str)
def test_matmul_over_an_empty_inner_dimension_is_zeros(shapes):
    check_op(shapes, torch.matmul, lambda x, w: x @ w, device="PYTHON")


def test_einsum_and_linear_on_python_device():
    formula = "ii,ij->j"
    check_op([(2, 2), (2, 3)], lambda *xs: torch.einsum(formula, *xs), lambda *xs: Tensor.einsum(formula, *xs),
             device="PYTHON")  # fmt: skip
    check_op([(2, 3), (2, 3), (2,)], _upstream(F.linear), _upstream(lambda x, w, b: x.linear(w, b)), device="PYTHON")


# ---- errors ----


@pytest.mark.parametrize("a, b, message", [
    ((2, 3), (4, 5), r"matmul: inner dimensions differ: \(2, 3\) @ \(4, 5\) \(3 != 4\)"),
    ((3,), (4,), r"matmul: inner dimensions differ: \(3,\) @ \(4,\)"),
    ((), (3,), r"matmul: both arguments need at least 1 dimension, got shapes \(\) and \(3,\)"),
    ((2, 2, 3), (3, 3, 4), r"matmul: batch dimensions of \(2, 2, 3\) and \(3, 3, 4\) cannot broadcast: "
                           r"dimension -3 has sizes 2 and 3"),
    ((2, 5, 1, 3), (4, 5, 3, 2), r"matmul: batch dimensions of \(2, 5, 1, 3\) and \(4, 5, 3, 2\) cannot "
                                 r"broadcast: dimension -4 has sizes 2 and 4"),
])  # fmt: skip
def test_matmul_rejects_bad_shapes(a, b, message):
    with pytest.raises(ValueError, match=message):
        Tensor.ones(*a) @ Tensor.ones(*b)


def test_matmul_rejects_bools_scalars_and_other_devices():
    with pytest.raises(TypeError, match="matmul: bool tensors are not supported"):
        Tensor([[True]]) @ Tensor([[True]])
    with pytest.raises(TypeError, match="matmul: needs tensors of at least 1 dimension, got a Python int"):
        Tensor.ones(2, 2).matmul(3)
    with pytest.raises(ValueError, match="matmul: tensors are on different devices: CPU and PYTHON"):
        Tensor.ones(2, 2, device="CPU") @ Tensor.ones(2, 2, device="PYTHON")


@pytest.mark.parametrize("x, w, b, message", [
    ((2, 3), (4, 5), None, r"linear: input has 3 features \(last dim of \(2, 3\)\) but weight \(4, 5\) expects 5"),
    ((2, 3), (2, 4, 3), None, r"linear: weight must be \(out_features, in_features\), or \(in_features,\) to scale"),
    ((2, 3), (4,), None, r"linear: input has 3 features \(last dim of \(2, 3\)\) but weight \(4,\) expects 4"),
    ((), (4, 3), None, "linear: the input needs at least 1 dimension"),
    ((2, 3), (4, 3), (3,), r"linear: bias of shape \(3,\) cannot broadcast to the output shape \(2, 4\)"),
])  # fmt: skip
def test_linear_rejects_bad_shapes(x, w, b, message):
    with pytest.raises(ValueError, match=message):
        Tensor.ones(*x).linear(Tensor.ones(*w), None if b is None else Tensor.ones(*b))


@pytest.mark.parametrize("formula, shapes, message", [
    ("ij,jk->ik", [(2, 3), (4, 5)], "einsum: subscript 'j' has size 3 in operand 0 but 4 in operand 1"),
    ("ij->ik", [(2, 3)], "einsum: output subscript 'k' does not appear in any input"),
    ("ij->ii", [(2, 2)], "einsum: output subscript 'i' appears more than once"),
    ("ijk", [(2, 3)], "einsum: operand 0 has 2 dimensions but subscripts 'ijk' name 3"),
    ("ij,jk", [(2, 3)], "einsum: 'ij,jk' names 2 operands but 1 tensors were given"),
    ("i1", [(2, 3)], "einsum: subscript '1' in 'i1' is not a letter"),
    ("ii", [(2, 3)], "einsum: subscript 'i' is repeated in an operand but its sizes differ"),
    ("....i", [(2, 3)], "malformed or repeated '...'"),
    ("...ijk", [(2, 3)], "einsum: operand 0 has 2 dimensions, fewer than the 3 letters"),
])  # fmt: skip
def test_einsum_rejects_bad_formulas(formula, shapes, message):
    with pytest.raises(ValueError, match=message):
        Tensor.einsum(formula, *(Tensor.ones(*s) for s in shapes))


def test_a_sum_over_an_empty_axis_takes_every_buffer_it_is_passed():
    x = Tensor(np.zeros((3, 0), np.float32)).realize()
    (item,) = [i for i in (x @ Tensor(np.zeros((0, 5), np.float32)).realize()).schedule() if i.ast.op.name == "SINK"]
    program = get_program(item.ast, Device["CPU"].renderer).program
    assert sum(u.op.name == "DEFINE_GLOBAL" for u in program) == len(item.bufs)
