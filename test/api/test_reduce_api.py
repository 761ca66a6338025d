"""Reductions, statistics, arg-reductions, cumulative ops, softmax and sorting against PyTorch, forward and backward.

Most checks multiply the output by fixed random weights before check_op sums it: the gradient of a plain sum says
little for many of these ops (a softmax sums to 1, so it is 0; sorted values sum to the input's sum, so it is 1
whatever the permutation).
"""

import numpy as np
import pytest
import torch

from glassgrad import Tensor, dtypes
from torch_check import check_op

NON_CONTIGUOUS = ["transposed", "strided"]
# torch warns when var or std has N - correction <= 0 (and answers nan or inf, as we do)
NO_DEGREES_OF_FREEDOM = pytest.mark.filterwarnings("ignore:.*degrees of freedom is <= 0:UserWarning")


def weighted(fn, pick=None):
    """fn(x) (or its element `pick` when fn returns a tuple) times fixed random weights of the output's shape."""

    def both(*xs):
        out = fn(*xs) if pick is None else fn(*xs)[pick]
        if not (out.is_floating_point() if isinstance(out, torch.Tensor) else dtypes.is_float(out.dtype)):
            return out
        w = np.random.default_rng(7).uniform(0.5, 1.5, tuple(out.shape)).astype(np.float32)
        return out * (torch.tensor(w) if isinstance(out, torch.Tensor) else Tensor(w, device=out.device))

    return both


def with_ties(shape, seed=0, nan_at=None):
    """Whole numbers in -2..2, so that equal values are common; NaN at the index `nan_at` if given."""
    values = np.random.default_rng(seed).integers(-2, 3, shape).astype(np.float32)
    if nan_at is not None:
        values[nan_at] = np.nan
    return values


# ---- softmax, log_softmax, logsumexp ----


@pytest.mark.parametrize("shape, dim", [((1,), 0), ((7,), -1), ((3, 5), 1), ((3, 5), 0), ((2, 1, 4), -1), ((), 0)],
                         ids=str)  # fmt: skip
@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_softmax_family_matches_torch(name, shape, dim):
    check_op([shape], weighted(lambda x: getattr(x, name)(dim)), low=-4, high=4, atol=1e-6)


@pytest.mark.parametrize("layout", NON_CONTIGUOUS)
@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_softmax_family_reads_non_contiguous_input(name, layout):
    check_op([(4, 6)], weighted(lambda x: getattr(x, name)(dim=1)), layout=layout, atol=1e-6)


def test_softmax_defaults_to_last_dim_and_accepts_axis():
    check_op([(3, 4)], weighted(lambda x: x.softmax(-1)), weighted(lambda x: x.softmax()), atol=1e-6)
    check_op([(3, 4)], weighted(lambda x: x.log_softmax(0)), weighted(lambda x: x.log_softmax(axis=0)), atol=1e-6)


def test_softmax_family_of_large_values_does_not_overflow():
    big = np.array([[1000, 1001, 1002], [-1000, -1e4, 0]], np.float32)
    check_op([], weighted(lambda x: x.softmax(-1)), inputs=[big], atol=1e-6)
    check_op([], weighted(lambda x: x.log_softmax(-1)), inputs=[big], atol=1e-6)


def test_softmax_with_a_dtype_casts_first():
    x = Tensor([1, 2, 3])
    assert x.softmax().dtype == dtypes.float32 and x.softmax(dtype=dtypes.float16).dtype == dtypes.float16
    np.testing.assert_allclose(x.softmax().numpy(), torch.tensor([1.0, 2, 3]).softmax(0).numpy(), rtol=1e-6)


LOGSUMEXP_CASES = [((1,), 0, False), ((7,), 0, True), ((3, 5), 1, False), ((3, 5), (0, 1), True),
                   ((2, 3, 4), (0, 2), False)]  # fmt: skip


@pytest.mark.parametrize("shape, dim, keepdim", LOGSUMEXP_CASES, ids=str)
def test_logsumexp_matches_torch(shape, dim, keepdim):
    check_op([shape], weighted(lambda x: x.logsumexp(dim, keepdim=keepdim)), low=-4, high=4, atol=1e-6)


def test_logsumexp_with_infinities_matches_torch():
    rows = np.array([[-np.inf, -np.inf], [np.inf, 1.0], [1000.0, 1000.0], [-np.inf, 2.0]], np.float32)
    check_op([], lambda x: x.logsumexp(1), inputs=[rows], grad=False)


def test_logsumexp_over_all_dims_when_dim_is_none():
    check_op([(3, 4)], weighted(lambda x: torch.logsumexp(x, (0, 1))), weighted(lambda x: x.logsumexp()), atol=1e-6)


@pytest.mark.parametrize("layout", NON_CONTIGUOUS)
def test_logsumexp_reads_non_contiguous_input(layout):
    check_op([(4, 6)], weighted(lambda x: x.logsumexp(0)), layout=layout, atol=1e-6)


def test_log_softmax_backward_of_plain_sum():
    check_op([(3, 5)], lambda x: x.log_softmax(1), atol=1e-6)


def test_logsumexp_keepdim_backward_of_plain_sum():
    check_op([(3, 5)], lambda x: x.logsumexp(1, keepdim=True), atol=1e-6)


# ---- sum, prod, mean ----

REDUCE_CASES = [((1,), 0, False), ((7,), None, False), ((3, 5), 1, True), ((3, 5), -2, False),
                ((2, 3, 4), (0, 2), True), ((2, 3, 4), (2, 0, 1), False), ((), None, False)]  # fmt: skip


def _torch_reduce(name, dim, keepdim):
    """torch's sum/mean/prod over `dim`: all dims when None; prod takes one dim at a time."""

    def fn(x):
        dims = tuple(range(x.ndim)) if dim is None else (dim,) if isinstance(dim, int) else dim
        if name != "prod":
            return getattr(x, name)(dim=dims, keepdim=keepdim) if dims else getattr(x, name)()
        for d in sorted((d % x.ndim for d in dims), reverse=True):
            x = x.prod(d, keepdim=keepdim)
        return x

    return fn


@pytest.mark.parametrize("shape, dim, keepdim", REDUCE_CASES, ids=str)
@pytest.mark.parametrize("name", ["sum", "mean", "prod"])
def test_sum_mean_prod_match_torch(name, shape, dim, keepdim):
    ours = lambda x: getattr(x, name)(dim, keepdim=keepdim)  # noqa: E731
    check_op([shape], weighted(_torch_reduce(name, dim, keepdim)), weighted(ours), atol=1e-6)


@pytest.mark.parametrize("layout", NON_CONTIGUOUS)
@pytest.mark.parametrize("name", ["sum", "mean", "prod"])
def test_sum_mean_prod_read_non_contiguous_input(name, layout):
    check_op([(4, 6)], weighted(lambda x: getattr(x, name)(1)), layout=layout, atol=1e-6)


@pytest.mark.parametrize("name", ["sum", "mean", "prod", "amax", "amin"])
def test_reductions_over_a_broadcast_dimension(name):
    ours = {"amax": "max", "amin": "min"}.get(name, name)
    check_op([(1, 5)], weighted(lambda x: getattr(x.expand(3, 5), name)(0)),
             weighted(lambda x: getattr(x.expand(3, 5), ours)(0)), atol=1e-6)  # fmt: skip


def test_sum_and_mean_accept_dtype_and_axis():
    check_op([(3, 4)], lambda x: x.sum(1, dtype=torch.float64), lambda x: x.sum(axis=1, dtype=dtypes.float64))
    check_op([(3, 4)], lambda x: x.mean(0, dtype=torch.float64), lambda x: x.mean(axis=0, dtype=dtypes.float64))


@pytest.mark.parametrize("zeros", [[(0, 1)], [(0, 1), (0, 3)], [(0, 1), (1, 0)], [(2, 2), (2, 1), (2, 4)]],
                         ids=["one", "two_in_a_row", "one_per_row", "three"])  # fmt: skip
def test_prod_gradient_is_exact_at_zeros(zeros):
    x = np.random.default_rng(3).uniform(0.5, 2, (3, 5)).astype(np.float32)
    for z in zeros:
        x[z] = 0
    check_op([], weighted(lambda t: t.prod(1)), inputs=[x], atol=1e-6)
    check_op([], weighted(_torch_reduce("prod", None, False)), weighted(lambda t: t.prod()), inputs=[x], atol=1e-6)


def test_prod_with_inf_and_nan_matches_torch():
    x = np.array([[np.inf, 0, 2], [np.nan, 1, 2], [np.inf, -1, 2]], np.float32)
    check_op([], lambda t: t.prod(1), inputs=[x], grad=False)


ACCUMULATED_DTYPES = [(np.bool_, dtypes.int32), (np.int8, dtypes.int32), (np.int32, dtypes.int32),
                      (np.uint8, dtypes.uint32)]  # fmt: skip


@pytest.mark.parametrize("dtype, expected", ACCUMULATED_DTYPES, ids=str)
def test_integer_sums_and_products_are_exact_in_32_bits(dtype, expected):
    x = np.random.default_rng(0).integers(0 if dtype in (np.bool_, np.uint8) else -3, 4, (3, 5)).astype(dtype)
    for name in ("sum", "prod", "cumsum", "cumprod"):
        ours = getattr(Tensor(x), name)(1)
        assert ours.dtype == expected, f"{name} of {dtype}"
        np.testing.assert_array_equal(ours.numpy(), getattr(torch.tensor(x), name)(1).numpy(), err_msg=name)


def test_mean_of_ints_is_float():
    assert Tensor([1, 2]).mean().dtype == dtypes.float32 and Tensor([1, 2]).mean().item() == 1.5


# ---- var, std, var_mean, std_mean ----

VAR_CASES = [((1,), 0, 0, False), ((1,), 0, 1, True), ((7,), None, 1, False), ((3, 5), 1, 0, True),
             ((3, 5), 0, 2, False), ((2, 3, 4), (0, 2), 1, True)]  # fmt: skip


@NO_DEGREES_OF_FREEDOM
@pytest.mark.parametrize("shape, dim, correction, keepdim", VAR_CASES, ids=str)
@pytest.mark.parametrize("name", ["var", "std"])
def test_var_and_std_match_torch(name, shape, dim, correction, keepdim):
    fn = lambda x: getattr(x, name)(dim=dim, correction=correction, keepdim=keepdim)  # noqa: E731
    check_op([shape], weighted(fn), atol=1e-6, grad_atol=1e-5, grad_rtol=1e-4)


def test_std_of_equal_values_has_zero_gradient_as_torch():
    check_op([], weighted(lambda x: x.std(1)), inputs=[np.array([[0.5, 0.5, 0.5], [1, 2, 3]], np.float32)])


@pytest.mark.parametrize("layout", NON_CONTIGUOUS)
@pytest.mark.parametrize("name", ["var", "std"])
def test_var_and_std_read_non_contiguous_input(name, layout):
    check_op([(4, 6)], weighted(lambda x: getattr(x, name)(0)), layout=layout, atol=1e-6, grad_atol=1e-5)


@pytest.mark.parametrize("name", ["var", "std"])
def test_var_and_std_accept_unbiased_and_axis(name):
    check_op([(3, 4)], weighted(lambda x: getattr(x, name)(1, unbiased=False)),
             weighted(lambda x: getattr(x, name)(axis=1, unbiased=False)), atol=1e-6)  # fmt: skip


@pytest.mark.parametrize("name", ["var_mean", "std_mean"])
def test_var_mean_and_std_mean_match_torch(name):
    for pick in (0, 1):
        torch_fn = lambda x: getattr(torch, name)(x, dim=1, correction=0, keepdim=True)  # noqa: E731
        ours = lambda x: getattr(x, name)(dim=1, correction=0, keepdim=True)  # noqa: E731
        check_op([(3, 5)], weighted(torch_fn, pick), weighted(ours, pick), atol=1e-6)


# ---- max and min (values only; ties share the gradient, as torch.amax) ----


@pytest.mark.parametrize("shape, dim, keepdim", [((1,), 0, False), ((7,), None, False), ((3, 5), 1, True),
                                                 ((3, 5), 0, False), ((2, 3, 4), (0, 2), True), ((0, 3), 1, False),
                                                 ((), None, False)], ids=str)  # fmt: skip
@pytest.mark.parametrize("name", ["max", "min"])
def test_max_and_min_with_ties_match_torch(name, shape, dim, keepdim):
    torch_fn = lambda x: getattr(torch, "a" + name)(x, dim=() if dim is None else dim, keepdim=keepdim)  # noqa: E731
    ours = lambda x: getattr(x, name)(dim, keepdim=keepdim)  # noqa: E731
    check_op([], weighted(torch_fn), weighted(ours), inputs=[with_ties(shape)], atol=1e-6)


def test_max_and_min_of_everything_match_torch_with_ties():
    x = with_ties((4, 5))
    check_op([], weighted(lambda t: t.max()), inputs=[x])
    check_op([], weighted(lambda t: t.min()), inputs=[x])


@pytest.mark.parametrize("layout", NON_CONTIGUOUS)
@pytest.mark.parametrize("name", ["amax", "amin"])
def test_max_and_min_read_non_contiguous_input(name, layout):
    check_op([(4, 6)], weighted(lambda x: getattr(x, name)(1)), weighted(lambda x: getattr(x, name[1:])(1)),
             layout=layout)  # fmt: skip


def test_max_and_min_propagate_nan():
    check_op([], lambda x: x.amax(1), lambda x: x.max(1), inputs=[with_ties((3, 4), nan_at=(1, 2))], grad=False)
    check_op([], lambda x: x.amin(0), lambda x: x.min(0), inputs=[with_ties((3, 4), nan_at=(1, 2))], grad=False)


# ---- argmax, argmin ----


ARG_CASES = [((1,), 0, False), ((7,), None, True), ((3, 5), 1, False), ((3, 5), -2, True), ((2, 3, 4), 1, False),
             ((2, 3, 4), None, False), ((0, 3), 1, False), ((), None, False), ((), 0, True)]  # fmt: skip


@pytest.mark.parametrize("shape, dim, keepdim", ARG_CASES, ids=str)
@pytest.mark.parametrize("name", ["argmax", "argmin"])
def test_argmax_and_argmin_pick_the_first_of_ties_as_torch(name, shape, dim, keepdim):
    check_op([], lambda x: getattr(x, name)(dim, keepdim=keepdim), inputs=[with_ties(shape)])


@pytest.mark.parametrize("layout", NON_CONTIGUOUS)
@pytest.mark.parametrize("name", ["argmax", "argmin"])
def test_argmax_and_argmin_read_non_contiguous_input(name, layout):
    check_op([(4, 6)], lambda x: getattr(x, name)(dim=0), layout=layout)


@pytest.mark.parametrize("name", ["argmax", "argmin"])
def test_argmax_and_argmin_pick_nan_and_work_on_ints_and_bools(name):
    check_op([], lambda x: getattr(x, name)(1), inputs=[with_ties((3, 4), nan_at=(1, 2))])
    check_op([], lambda x: getattr(x, name)(0), inputs=[with_ties((3, 4)).astype(np.int32)])
    bools = with_ties((3, 4)) > 0  # torch has no argmax of bools: compare with the same values as ints
    check_op([], lambda x: getattr(x.int(), name)(1), lambda x: getattr(x, name)(1), inputs=[bools])


def test_argmax_is_int32():
    assert Tensor([1.0, 3.0]).argmax().dtype == dtypes.int32 and Tensor([[1, 3]]).argmin(1).dtype == dtypes.int32


# ---- any, all ----


@pytest.mark.parametrize("shape, dim", [((1,), 0), ((7,), None), ((3, 5), 1), ((2, 3, 4), (0, 2)), ((0, 3), 1),
                                        ((), None)], ids=str)  # fmt: skip
@pytest.mark.parametrize("name", ["any", "all"])
def test_any_and_all_match_torch(name, shape, dim):
    values = np.random.default_rng(1).integers(0, 3, shape).astype(np.float32)  # a third zeros
    torch_fn = lambda x: getattr(x, name)() if dim is None else getattr(x, name)(dim=dim)  # noqa: E731
    check_op([], torch_fn, lambda x: getattr(x, name)(dim), inputs=[values])
    check_op([], lambda x: getattr(x, name)(dim=dim, keepdim=True) if dim is not None else getattr(x, name)(),
             inputs=[values > 0])  # fmt: skip


def test_any_and_all_treat_nan_as_true_and_read_non_contiguous_input():
    nan_rows = np.array([[np.nan, 0], [0, 0]], np.float32)
    check_op([], lambda x: x.any(1), inputs=[nan_rows])
    check_op([], lambda x: x.all(0), inputs=[nan_rows])
    for layout in NON_CONTIGUOUS:
        check_op([(4, 6)], lambda x: (x > 0).any(1), layout=layout)
        check_op([(4, 6)], lambda x: (x > -1).all(0), layout=layout)


# ---- cumsum, cumprod, cummax, cummin ----

CUMULATIVE_CASES = [((1,), 0), ((7,), 0), ((3, 5), 1), ((3, 5), 0), ((2, 3, 4), 1), ((), 0)]


@pytest.mark.parametrize("shape, dim", CUMULATIVE_CASES, ids=str)
@pytest.mark.parametrize("name", ["cumsum", "cumprod"])
def test_cumsum_and_cumprod_match_torch(name, shape, dim):
    check_op([shape], weighted(lambda x: getattr(x, name)(dim)), atol=1e-6)


@pytest.mark.parametrize("layout", NON_CONTIGUOUS)
@pytest.mark.parametrize("name", ["cumsum", "cumprod"])
def test_cumsum_and_cumprod_read_non_contiguous_input(name, layout):
    check_op([(4, 6)], weighted(lambda x: getattr(x, name)(dim=0)), layout=layout, atol=1e-6)


def test_cumsum_and_cumprod_of_long_dims_in_blocks():
    # 200 is 4 blocks of 64; 4500 is 71 blocks, whose running totals take blocks again. Running sums of up to 4500
    # terms in [0, 1) round differently in another order of additions: hence atol 1e-4 on values up to ~2250.
    check_op([(2, 200)], weighted(lambda x: x.cumsum(1)), low=0, high=1, atol=1e-5)
    check_op([(4500,)], weighted(lambda x: x.cumsum(0)), low=0, high=1, atol=1e-4)
    check_op([(200, 2)], weighted(lambda x: x.cumprod(0)), low=0.95, high=1.05, atol=1e-6)


def test_cumprod_gradient_is_exact_at_zeros():
    x = np.random.default_rng(4).uniform(0.5, 2, (3, 6)).astype(np.float32)
    x[0, 2] = x[1, 0] = x[1, 4] = x[2, 5] = 0
    check_op([], weighted(lambda t: t.cumprod(1)), inputs=[x], atol=1e-6)
    long = np.random.default_rng(5).uniform(0.9, 1.1, (150,)).astype(np.float32)
    long[[10, 70, 71]] = 0
    check_op([], weighted(lambda t: t.cumprod(0)), inputs=[long], atol=1e-6)


def test_cumsum_accepts_dtype_and_axis():
    check_op([(3, 4)], lambda x: x.cumsum(1, dtype=torch.float64), lambda x: x.cumsum(axis=1, dtype=dtypes.float64))


@pytest.mark.parametrize("shape, dim", CUMULATIVE_CASES, ids=str)
@pytest.mark.parametrize("name", ["cummax", "cummin"])
def test_cummax_and_cummin_with_ties_match_torch(name, shape, dim):
    x = with_ties(shape)
    check_op([], weighted(lambda t: getattr(t, name)(dim), pick=0), inputs=[x], atol=1e-6)
    check_op([], lambda t: getattr(t, name)(dim)[1], inputs=[x])


@pytest.mark.parametrize("name", ["cummax", "cummin"])
def test_cummax_and_cummin_with_nan_ints_and_layouts_match_torch(name):
    nan = with_ties((3, 6), nan_at=(1, 2))
    check_op([], weighted(lambda t: getattr(t, name)(1), pick=0), inputs=[nan])
    check_op([], lambda t: getattr(t, name)(1)[1], inputs=[nan])
    check_op([], lambda t: getattr(t, name)(0)[0], inputs=[with_ties((4, 3)).astype(np.int32)])
    for layout in NON_CONTIGUOUS:
        check_op([(4, 6)], weighted(lambda t: getattr(t, name)(0), pick=0), layout=layout)


def test_cummax_indices_are_int32():
    values, indices = Tensor([1.0, 3.0, 2.0]).cummax(0)
    assert indices.dtype == dtypes.int32 and indices.tolist() == [0, 1, 1] and values.tolist() == [1.0, 3.0, 3.0]


# ---- sort, topk ----

SORT_CASES = [((1,), 0), ((7,), -1), ((3, 5), 1), ((3, 5), 0), ((2, 3, 4), 1), ((), 0)]


@pytest.mark.parametrize("shape, dim", SORT_CASES, ids=str)
@pytest.mark.parametrize("descending", [False, True])
def test_sort_is_stable_and_matches_torch(shape, dim, descending):
    x = with_ties(shape)
    torch_fn = lambda t: t.sort(dim=dim, descending=descending, stable=True)  # noqa: E731
    ours = lambda t: t.sort(dim, descending)  # noqa: E731
    check_op([], weighted(torch_fn, pick=0), weighted(ours, pick=0), inputs=[x], atol=1e-6)
    check_op([], lambda t: torch_fn(t)[1], lambda t: ours(t)[1], inputs=[x])


@pytest.mark.parametrize("descending", [False, True])
def test_sort_puts_nan_last_and_sorts_ints_and_bools(descending):
    torch_fn = lambda t: t.sort(dim=1, descending=descending, stable=True)  # noqa: E731
    ours = lambda t: t.sort(1, descending=descending)  # noqa: E731
    for x in (with_ties((3, 6), nan_at=(1, 2)), with_ties((3, 6)).astype(np.int32), with_ties((3, 6)) > 0):
        check_op([], lambda t: torch_fn(t)[0], lambda t: ours(t)[0], inputs=[x], grad=False)
        check_op([], lambda t: torch_fn(t)[1], lambda t: ours(t)[1], inputs=[x])


@pytest.mark.parametrize("layout", NON_CONTIGUOUS)
def test_sort_reads_non_contiguous_input(layout):
    check_op([(4, 6)], weighted(lambda t: t.sort(dim=0, stable=True), pick=0), weighted(lambda t: t.sort(0), pick=0),
             layout=layout)  # fmt: skip


def test_sort_of_a_long_row():
    check_op([(1, 1000)], weighted(lambda t: t.sort(dim=1, stable=True), pick=0), weighted(lambda t: t.sort(1), pick=0))


@pytest.mark.parametrize("shape, k, dim", [((1,), 1, 0), ((7,), 3, -1), ((7,), 0, 0), ((3, 5), 5, 1),
                                           ((3, 5), 2, 0), ((2, 3, 4), 2, 1), ((), 1, 0)], ids=str)  # fmt: skip
@pytest.mark.parametrize("largest", [True, False])
def test_topk_matches_torch(shape, k, dim, largest):
    # random values have no ties, where torch's choice of indices is unspecified
    check_op([shape], weighted(lambda t: t.topk(k, dim, largest), pick=0), atol=1e-6)
    check_op([shape], lambda t: t.topk(k, dim, largest)[1])


def test_topk_reads_non_contiguous_input_and_accepts_keywords():
    for layout in NON_CONTIGUOUS:
        check_op([(4, 6)], weighted(lambda t: t.topk(k=2, dim=0, largest=False, sorted=True), pick=0), layout=layout)
    check_op([(4, 6)], lambda t: t.topk(3, dim=1).indices, lambda t: t.topk(3, axis=1).indices)


def test_sort_and_topk_indices_are_int32():
    values, indices = Tensor([3.0, 1.0, 2.0]).sort()
    assert indices.dtype == dtypes.int32 and indices.tolist() == [1, 2, 0] and values.tolist() == [1.0, 2.0, 3.0]
    assert Tensor([3.0, 1.0, 2.0]).topk(2)[1].tolist() == [0, 2]


# ---- empty tensors: 0-size dims reduced, kept, sorted ----

EMPTY_CASES = {
    "softmax (0,) -1": ((0,), lambda x: x.softmax(-1), None),
    "softmax (3, 0) -1": ((3, 0), lambda x: x.softmax(-1), None),
    "softmax (0, 3) 0": ((0, 3), lambda x: x.softmax(0), None),
    "log_softmax (3, 0) -1": ((3, 0), lambda x: x.log_softmax(-1), None),
    "log_softmax (0, 3) 0": ((0, 3), lambda x: x.log_softmax(0), None),
    "logsumexp (0,) 0": ((0,), lambda x: x.logsumexp(0), None),  # -inf over an empty dim
    "logsumexp (3, 0) 1": ((3, 0), lambda x: x.logsumexp(1), None),
    "logsumexp (0, 3) 0": ((0, 3), lambda x: x.logsumexp(0), None),
    "logsumexp (3, 0) 0": ((3, 0), lambda x: x.logsumexp(0), None),
    "sum (0,)": ((0,), lambda x: x.sum(), None),
    "sum (2, 0, 3) 1": ((2, 0, 3), lambda x: x.sum(1), None),
    "sum (2, 0, 3) 2": ((2, 0, 3), lambda x: x.sum(2), None),
    "mean (0,)": ((0,), lambda x: x.mean(), None),  # nan over an empty dim
    "mean (2, 0, 3) 1": ((2, 0, 3), lambda x: x.mean(1), None),
    "prod (0,)": ((0,), lambda x: x.prod(), None),  # 1 over an empty dim
    "prod (2, 0, 3) 1": ((2, 0, 3), lambda x: x.prod(1), None),
    "var (0,)": ((0,), lambda x: x.var(), None),
    "std (3, 0) 1": ((3, 0), lambda x: x.std(1), None),
    "var (3, 0) 0": ((3, 0), lambda x: x.var(0), None),
    "amax (0, 3) 1": ((0, 3), lambda x: x.amax(1), lambda x: x.max(1)),
    "argmax (0, 3) 1": ((0, 3), lambda x: x.argmax(1), None),
    "any (0,)": ((0,), lambda x: x.any(), None),  # False over an empty dim
    "any (2, 0) 1": ((2, 0), lambda x: x.any(1), None),
    "all (0,)": ((0,), lambda x: x.all(), None),  # True over an empty dim
    "all (2, 0) 1": ((2, 0), lambda x: x.all(1), None),
    "cumsum (0,) 0": ((0,), lambda x: x.cumsum(0), None),
    "cumsum (2, 0) 1": ((2, 0), lambda x: x.cumsum(1), None),
    "cumprod (2, 0) 0": ((2, 0), lambda x: x.cumprod(0), None),
    "cummax (2, 0) 1": ((2, 0), lambda x: x.cummax(1)[0], None),
    "cummin indices (0, 2) 0": ((0, 2), lambda x: x.cummin(0)[1], None),
    "sort (0,) 0": ((0,), lambda x: x.sort(dim=0, stable=True)[0], lambda x: x.sort(0)[0]),
    "sort (3, 0) 1": ((3, 0), lambda x: x.sort(dim=1, stable=True)[0], lambda x: x.sort(1)[0]),
    "sort indices (0, 3) 1": ((0, 3), lambda x: x.sort(dim=1, stable=True)[1], lambda x: x.sort(1)[1]),
    "topk (3, 0) 1": ((3, 0), lambda x: x.topk(0, 1)[0], None),
}


@NO_DEGREES_OF_FREEDOM
@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
@pytest.mark.parametrize("case", EMPTY_CASES)
def test_empty_tensors_match_torch(case, device):
    shape, torch_fn, ours = EMPTY_CASES[case]
    check_op([shape], weighted(torch_fn), weighted(ours or torch_fn), device=device)


# ---- the PYTHON device runs the same kernels ----


@pytest.mark.parametrize(
    "torch_fn, ours",
    [
        (lambda x: x.softmax(-1), None),
        (lambda x: x.log_softmax(0), None),
        (lambda x: x.logsumexp(1), None),
        (lambda x: x.prod(1), None),
        (lambda x: x.std(1), None),
        (lambda x: torch.amax(x, 0), lambda x: x.max(0)),
        (lambda x: x.cumsum(1), None),
        (lambda x: x.cumprod(0), None),
        (lambda x: x.cummax(1)[0], None),
        (lambda x: x.sort(dim=1, stable=True)[0], lambda x: x.sort(1)[0]),
        (lambda x: x.topk(2, 1)[0], None),
    ],
    ids=["softmax", "log_softmax", "logsumexp", "prod", "std", "max", "cumsum", "cumprod", "cummax", "sort", "topk"],
)
def test_on_python_device(torch_fn, ours):
    x = np.array([[0.0, 2.0, -1.0], [1.5, 1.5, 0.5]], np.float32)  # a zero and a tie
    check_op([], weighted(torch_fn), weighted(ours or torch_fn), inputs=[x], device="PYTHON", atol=1e-6)


def test_indices_on_python_device():
    x = np.array([[0.0, 2.0, -1.0], [3.0, 3.0, 0.5]], np.float32)
    check_op([], lambda t: t.argmax(1), inputs=[x], device="PYTHON")
    check_op([], lambda t: t.cummax(1)[1], inputs=[x], device="PYTHON")
    check_op([], lambda t: t.sort(dim=1, stable=True)[1], lambda t: t.sort(1)[1], inputs=[x], device="PYTHON")


# ---- bad input ----


@pytest.mark.parametrize("name", ["sum", "prod", "mean", "var", "std", "var_mean", "std_mean", "max", "min", "any",
                                  "all", "logsumexp", "argmax", "argmin", "softmax", "log_softmax", "cumsum",
                                  "cumprod", "cummax", "cummin", "sort", "topk"])  # fmt: skip
def test_errors_name_the_op_and_the_bad_dim(name):
    x = Tensor.ones(2, 3)
    call = (lambda **kw: x.topk(1, **kw)) if name == "topk" else (lambda **kw: getattr(x, name)(**kw))
    with pytest.raises(IndexError, match=rf"{name}: dimension 2 is out of range for a tensor of shape \(2, 3\)"):
        call(dim=2)
    with pytest.raises(TypeError, match=f"{name}: got both axis=0 and dim=1"):
        call(axis=0, dim=1)


@pytest.mark.parametrize("name", ["softmax", "log_softmax", "argmax", "argmin", "cumsum", "cumprod", "cummax", "sort"])
def test_ops_along_one_dim_reject_several(name):
    with pytest.raises(TypeError, match=f"{name}: dim must be a single int, got \\(0, 1\\)"):
        getattr(Tensor.ones(2, 3), name)((0, 1))


def test_reductions_reject_a_repeated_or_non_int_dim():
    with pytest.raises(ValueError, match="sum: dim .* names a dimension more than once"):
        Tensor.ones(2, 3).sum((1, -1))
    with pytest.raises(TypeError, match="mean: dims must be ints, got 1.5"):
        Tensor.ones(2, 3).mean(1.5)


@pytest.mark.parametrize("name", ["max", "min", "argmax", "argmin"])
def test_reductions_without_identity_reject_an_empty_dim(name):
    with pytest.raises(ValueError, match=rf"{name}: cannot reduce dimension 1 of size 0 in a tensor of shape \(2, 0\)"):
        getattr(Tensor.ones(2, 0), name)(1)
    with pytest.raises(ValueError, match=f"{name}: cannot reduce dimension 0 of size 0"):
        getattr(Tensor.ones(0), name)()


def test_topk_rejects_a_bad_k():
    with pytest.raises(ValueError, match=r"topk: k must be an int from 0 to 3 \(the size of dimension 1 of \(2, 3\)\)"):
        Tensor.ones(2, 3).topk(4, 1)
    with pytest.raises(ValueError, match="topk: k must be an int .* got -1"):
        Tensor.ones(2, 3).topk(-1)
