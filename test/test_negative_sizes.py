"""A negative size (other than one -1 to infer, or -1s that expand keeps) is an error everywhere a shape is taken,
a RuntimeError as PyTorch raises (and a ValueError, as glassgrad's other shape errors), naming the op and the size."""

import pytest
import torch

from glassgrad import Tensor
from glassgrad.shape import ShapeError

# (what we call, what torch calls, words the message must hold)
BAD_SHAPES = {
    "reshape": (lambda: Tensor.ones(6).reshape(-2, -3), lambda: torch.ones(6).reshape(-2, -3), "size -2 at index 0"),
    "reshape_one_bad": (lambda: Tensor.ones(6).reshape(-3, -2), lambda: torch.ones(6).reshape(-3, -2), "size -3"),
    "reshape_two_minus_ones": (
        lambda: Tensor.ones(6).reshape(-1, -1),
        lambda: torch.ones(6).reshape(-1, -1),
        "only one dimension can be -1",
    ),  # fmt: skip
    "reshape_minus_one_and_bad": (
        lambda: Tensor.ones(6).reshape(-1, -6),
        lambda: torch.ones(6).reshape(-1, -6),
        "size -6",
    ),  # fmt: skip
    "reshape_count": (lambda: Tensor.ones(6).reshape(4), lambda: torch.ones(6).reshape(4), "element count"),
    "view": (lambda: Tensor.ones(6).view(-2, -3), lambda: torch.ones(6).view(-2, -3), "size -2 at index 0"),
    "view_list": (lambda: Tensor.ones(6).view([3, -2]), lambda: torch.ones(6).view([3, -2]), "size -2 at index 1"),
    "expand": (lambda: Tensor.ones(1).expand(-2), lambda: torch.ones(1).expand(-2), "size -2 at index 0"),
    "expand_new_dim_minus_one": (
        lambda: Tensor.ones(2).expand(-1, 2),
        lambda: torch.ones(2).expand(-1, 2),
        "new leading dimension",
    ),  # fmt: skip
    "zeros": (lambda: Tensor.zeros(-2), lambda: torch.zeros(-2), "size -2"),
    "ones": (lambda: Tensor.ones(3, -1), lambda: torch.ones(3, -1), "size -1 at index 1"),
    "full": (lambda: Tensor.full((-2,), 1.0), lambda: torch.full((-2,), 1.0), "size -2"),
    "empty": (lambda: Tensor.empty(2, -1), lambda: torch.empty(2, -1), "size -1"),
    "eye": (lambda: Tensor.eye(-2), lambda: torch.eye(-2), "size -2"),
    "rand": (lambda: Tensor.rand(-1), lambda: torch.rand(-1), "size -1"),
    "randn": (lambda: Tensor.randn(2, -3), lambda: torch.randn(2, -3), "size -3"),
    "randint": (lambda: Tensor.randint(0, 3, (-2,)), lambda: torch.randint(0, 3, (-2,)), "size -2"),
    "uniform": (lambda: Tensor.uniform(-4), lambda: torch.empty(-4).uniform_(), "size -4"),
    "pad_crops_too_much": (
        lambda: Tensor.ones(3).pad((-2, -2)),
        lambda: torch.nn.functional.pad(torch.ones(3), (-2, -2)),
        "crops more",
    ),  # fmt: skip
    "shrink_backwards": (
        lambda: Tensor.ones(3).shrink(((2, 1),)),
        lambda: torch.ones(3).narrow(0, 2, -1),
        "outside a dimension",
    ),  # fmt: skip
    "repeat": (lambda: Tensor.ones(3).repeat(-1), lambda: torch.ones(3).repeat(-1), "non-negative"),
}


@pytest.mark.parametrize("name", list(BAD_SHAPES))
def test_a_negative_size_is_torchs_error(name):
    ours, theirs, words = BAD_SHAPES[name]
    with pytest.raises(RuntimeError):
        theirs()
    with pytest.raises(RuntimeError, match=words) as raised:
        ours()
    assert isinstance(raised.value, ShapeError) and isinstance(raised.value, ValueError)
    op = {"view": "reshape"}.get(name.split("_")[0], name.split("_")[0])  # view is reshape
    assert str(raised.value).startswith(op), str(raised.value)


# the -1s that are allowed keep working, with torch's result shapes
GOOD_SHAPES = {
    "reshape_infers": (lambda m: m.ones(6).reshape(-1, 3), lambda m: m.ones(6).reshape(-1, 3)),
    "reshape_infers_zero": (lambda m: m.ones(0, 3).reshape(-1, 3), lambda m: m.ones(0, 3).reshape(-1, 3)),
    "expand_keeps": (lambda m: m.ones(2, 1).expand(-1, 4), lambda m: m.ones(2, 1).expand(-1, 4)),
    "expand_keeps_all": (lambda m: m.ones(2, 1).expand(-1, -1), lambda m: m.ones(2, 1).expand(-1, -1)),
    "expand_new_dim": (lambda m: m.ones(2, 1).expand(3, -1, 5), lambda m: m.ones(2, 1).expand(3, -1, 5)),
    "permute_negative_dims": (lambda m: m.ones(2, 3).permute(-1, 0), lambda m: m.ones(2, 3).permute(-1, 0)),
    "flip_negative_dim": (lambda m: m.ones(2, 3).flip(-1), lambda m: m.ones(2, 3).flip(-1)),
    "pad_crops": (lambda m: m.ones(3).pad((-1, -1)), lambda m: torch.nn.functional.pad(m.ones(3), (-1, -1))),
    "zeros_empty": (lambda m: m.zeros(0, 2), lambda m: m.zeros(0, 2)),
}


@pytest.mark.parametrize("name", list(GOOD_SHAPES))
def test_allowed_minus_ones_keep_working(name):
    ours, theirs = GOOD_SHAPES[name]
    assert ours(Tensor).shape == tuple(theirs(torch).shape)


def test_a_float_size_is_still_a_value_error():
    with pytest.raises(ValueError, match=r"ones: sizes must be non-negative integers, got \(2\.5,\): float 2\.5"):
        Tensor.ones(2.5)
