"""Calls tinygrad's own tests make (bench/conformance.py runs them) that glassgrad refused or answered otherwise,
each checked against PyTorch: the value where both libraries have the call, the exception class where it is an
error in PyTorch (tinygrad's class too, where it differs)."""

import math

import numpy as np
import pytest
import torch

from glassgrad import Tensor, dtypes


def _both(values, dtype=np.float32):
    """The same values as a glassgrad tensor and a torch tensor, both requiring grad where they are floats."""
    array = np.asarray(values, dtype=dtype)
    grad = np.issubdtype(dtype, np.floating)
    return Tensor(array, requires_grad=grad or None), torch.tensor(array, requires_grad=grad)


@pytest.mark.parametrize("start,end,steps", [(5, 10, 1), (-2.5, 3, 1), (5, 10, 2), (5, 10, 0), (1, 2, 7)])
def test_linspace_of_one_step_is_start(start, end, steps):
    ours, theirs = Tensor.linspace(start, end, steps), torch.linspace(start, end, steps)
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-6)


def test_div_rejects_an_unknown_rounding_mode_as_pytorch():
    with pytest.raises(RuntimeError):
        torch.tensor([5.0]).div(torch.tensor([2.0]), rounding_mode="typo")
    with pytest.raises(RuntimeError, match="rounding_mode"):
        Tensor([5.0]).div(Tensor([2.0]), rounding_mode="typo")


@pytest.mark.parametrize("positive,negative", [(True, True), (True, False), (False, True), (False, False)])
def test_isinf_picks_a_sign_as_tinygrad(positive, negative):
    values = [-math.inf, 0.0, math.inf, math.nan, 1.1, -0.0]
    theirs = (torch.isposinf if positive else torch.zeros_like)(torch.tensor(values)).bool()
    theirs = theirs | (torch.isneginf(torch.tensor(values)) if negative else theirs)
    ours = Tensor(values).isinf(detect_positive=positive, detect_negative=negative)
    assert ours.dtype == dtypes.bool and ours.tolist() == theirs.tolist()
    assert Tensor([1, 2]).isinf(detect_positive=positive).tolist() == [False, False]


@pytest.mark.parametrize("method", ["sum", "prod", "cumsum"])
def test_an_unknown_dtype_name_is_pytorchs_type_error_and_tinygrads_attribute_error(method):
    with pytest.raises(TypeError):
        getattr(torch.tensor([1.0, 2.0]), method)(dtype="")
    for expected in (TypeError, AttributeError):
        with pytest.raises(expected, match="unknown dtype"):
            getattr(Tensor([1.0, 2.0]), method)(dtype="")


@pytest.mark.parametrize("mode", ["typo", "symmetric"])
def test_an_unknown_pad_or_resize_mode_is_not_implemented_as_in_pytorch(mode):
    with pytest.raises(NotImplementedError):
        torch.nn.functional.pad(torch.ones(3, 3, 3), (3, 0), mode=mode)
    with pytest.raises(NotImplementedError, match="mode"):
        Tensor.ones(3, 3, 3).pad((3, 0), mode=mode)
    with pytest.raises(NotImplementedError, match="mode"):
        Tensor.ones(1, 1, 3).interpolate(size=(5,), mode=mode)
    with pytest.raises(ValueError):  # still glassgrad's ValueError for a bad argument
        Tensor.ones(3, 3, 3).pad((3, 0), mode=mode)


@pytest.mark.parametrize("shape,size", [((2, 3, 13), (9,)), ((2, 3, 9), (13,)), ((1, 2, 13, 10), (9, 11)),
                                        ((1, 2, 9, 11), (10, 13)), ((1, 1, 5, 2, 8), (3, 6, 4)), ((1, 1, 1), (3,)),
                                        ((1, 1, 6), (6,))], ids=str)  # fmt: skip
def test_interpolate_nearest_exact_as_pytorch(shape, size):
    x, tx = _both(np.random.default_rng(0).standard_normal(shape))
    ours, theirs = x.interpolate(size=size, mode="nearest-exact"), torch.nn.functional.interpolate(
        tx, size=size, mode="nearest-exact")  # fmt: skip
    np.testing.assert_array_equal(ours.numpy(), theirs.detach().numpy())
    ours.sum().backward(), theirs.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy())


def test_interpolate_nearest_exact_by_scale_factor_as_pytorch():
    x, tx = _both(np.arange(7.0).reshape(1, 1, 7))
    for factor in (0.5, 1.7, 3.0):
        theirs = torch.nn.functional.interpolate(tx, scale_factor=factor, mode="nearest-exact")
        np.testing.assert_array_equal(x.interpolate(scale_factor=factor, mode="nearest-exact").numpy(),
                                      theirs.detach().numpy())  # fmt: skip


@pytest.mark.parametrize("padding", [(0, 1, 0, 1), (2, 1, 2, 1), (2, 0, 2, 1), (1, 1, 1, 1)], ids=str)
@pytest.mark.parametrize("pool", ["max", "avg"])
def test_pooling_takes_tinygrads_before_and_after_padding(pool, padding):
    """tinygrad's 2 * nd padding (left, right, top, bottom): PyTorch's pooling of the input padded so (with -inf for
    max, zeros counted for avg), forward and backward."""
    x, tx = _both(np.random.default_rng(1).standard_normal((2, 2, 9, 8)))
    fill = -math.inf if pool == "max" else 0.0
    theirs = getattr(torch.nn.functional, f"{pool}_pool2d")(torch.nn.functional.pad(tx, padding, value=fill), 5)
    ours = getattr(x, f"{pool}_pool2d")(kernel_size=5, padding=padding)
    np.testing.assert_allclose(ours.numpy(), theirs.detach().numpy(), rtol=1e-5, atol=1e-7)
    ours.sum().backward(), theirs.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-7)


def test_pooling_padding_is_still_checked():
    with pytest.raises(RuntimeError):
        torch.nn.functional.max_pool2d(torch.ones(1, 1, 8, 8), 2, padding=(1, 1, 1))
    for padding in ((1, 1, 1), (3, 0, 0, 0), (-1, 0)):
        with pytest.raises(RuntimeError, match="padding"):
            Tensor.ones(1, 1, 8, 8).max_pool2d(2, padding=padding)


@pytest.mark.parametrize("padding,crop", [(-1, (1, -1, 1, -1)), ((-1, 0, -1, 0), (1, None, 1, None)),
                                          ((0, -2), (0, None, 2, -2)), ((1, -1, 0, 0), None)], ids=str)  # fmt: skip
def test_conv2d_negative_padding_crops_as_tinygrad(padding, crop):
    """A negative padding crops the input (tinygrad's); PyTorch has no negative padding, so the reference is its
    convolution of the input cropped (and padded) by hand, forward and backward."""
    x, tx = _both(np.random.default_rng(2).standard_normal((2, 2, 9, 8)))
    w, tw = _both(np.random.default_rng(3).standard_normal((3, 2, 3, 3)))
    if crop is None:  # left 1, right -1 on the width
        cropped = torch.nn.functional.pad(tx, padding)
    else:
        cropped = tx[:, :, crop[0] : crop[1], crop[2] : crop[3]]
    theirs = torch.nn.functional.conv2d(cropped, tw)
    ours = x.conv2d(w, padding=padding)
    np.testing.assert_allclose(ours.numpy(), theirs.detach().numpy(), rtol=1e-5, atol=1e-5)
    ours.sum().backward(), theirs.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("index", [[True, False, 2], [0, True], [[1, False], [True, 4]]], ids=str)
def test_bools_among_int_positions_are_0_and_1_as_pytorch(index):
    x, tx = _both(np.arange(30.0).reshape(5, 6))
    ours, theirs = x[index], tx[torch.tensor(index)]
    np.testing.assert_array_equal(ours.numpy(), theirs.detach().numpy())
    ours.sum().backward(), theirs.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), tx.grad.numpy())


def test_a_list_of_bools_only_is_still_a_mask():
    x = np.arange(30.0).reshape(5, 6)
    mask = [True, False, True, False, False]
    np.testing.assert_array_equal(Tensor(x)[mask].numpy(), torch.tensor(x)[torch.tensor(mask)].numpy())
    with pytest.raises(IndexError):
        Tensor(x)[[True, False]]


@pytest.mark.parametrize("op", ["stack", "cat"])
def test_a_list_and_more_tensors_is_an_error(op):
    a, b, c = Tensor([1, 2]), Tensor([3, 4]), Tensor([5, 6])
    with pytest.raises(TypeError):  # PyTorch reads the second argument as dim
        getattr(torch, op)((torch.tensor([1, 2]), torch.tensor([3, 4])), torch.tensor([5, 6]))
    for expected in (TypeError, ValueError):  # PyTorch's class and tinygrad's
        with pytest.raises(expected, match="one list or one by one"):
            getattr(Tensor, op)((a, b), c)
    assert getattr(Tensor, op)([a, b, c]).tolist() == getattr(torch, op)([torch.tensor(v) for v in (
        [1, 2], [3, 4], [5, 6])]).tolist()  # fmt: skip
    assert getattr(a, op)(b, c).tolist() == getattr(Tensor, op)([a, b, c]).tolist()


def test_cat_of_0d_tensors_is_pytorchs_runtime_error_and_tinygrads_index_error():
    with pytest.raises(RuntimeError):
        torch.cat([torch.tensor(3.14), torch.tensor(3.14)])
    for expected in (RuntimeError, IndexError, ValueError):
        with pytest.raises(expected, match="zero-dimensional"):
            Tensor(3.14).cat(Tensor(3.14))


@pytest.mark.parametrize("default", [dtypes.int32, dtypes.int64])
def test_max_pool_indices_are_default_int_with_pytorchs_values(default):
    x = np.random.default_rng(4).standard_normal((2, 3, 7, 7)).astype(np.float32)
    _, theirs = torch.nn.functional.max_pool2d(torch.tensor(x), (2, 2), stride=2, ceil_mode=True, return_indices=True)
    saved = dtypes.default_int
    try:
        dtypes.default_int = default
        _, ours = Tensor(x).max_pool2d((2, 2), stride=2, ceil_mode=True, return_indices=True)
        assert ours.dtype == default and ours.tolist() == theirs.tolist()
    finally:
        dtypes.default_int = saved
