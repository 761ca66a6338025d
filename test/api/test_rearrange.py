"""Tensor.rearrange (einops patterns, mixin/rearrange.py) against the same moves written with PyTorch's reshape and
permute, forward and backward."""

import pytest
import torch

from glassgrad import Tensor
from torch_check import check_op, weighted

# pattern, sizes, input shape, the same move in PyTorch
PATTERNS = [
    ("b c h w -> b h w c", {}, (2, 3, 4, 5), lambda x: x.permute(0, 2, 3, 1)),
    ("b c h w -> b (c h) w", {}, (2, 3, 4, 5), lambda x: x.reshape(2, 12, 5)),
    ("b (h w) c -> b h w c", {"h": 2}, (3, 6, 4), lambda x: x.reshape(3, 2, 3, 4)),
    ("(b1 b2) h -> (b2 h) b1", {"b1": 2}, (6, 5), lambda x: x.reshape(2, 3, 5).permute(1, 2, 0).reshape(15, 2)),
    ("b ... w -> b w ...", {}, (2, 3, 4, 5), lambda x: x.permute(0, 3, 1, 2)),
    ("... c -> c ...", {}, (7,), lambda x: x),
    ("... -> (...)", {}, (2, 3, 4), lambda x: x.reshape(24)),
    ("b ... -> (b ...)", {}, (3,), lambda x: x),
    ("h w -> w h 1", {}, (3, 4), lambda x: x.T.reshape(4, 3, 1)),
    ("h 1 w -> (h w)", {}, (3, 1, 4), lambda x: x.reshape(12)),
    ("a b -> () a b ()", {}, (2, 3), lambda x: x.reshape(1, 2, 3, 1)),
    ("(a b) -> b a", {"a": 1}, (5,), lambda x: x.reshape(5, 1)),
    ("a (b c) -> c a b", {"c": 2}, (0, 4), lambda x: x.reshape(0, 2, 2).permute(2, 0, 1)),
    ("x -> x", {}, (1,), lambda x: x),
    ("-> 1", {}, (), lambda x: x.reshape(1)),
]


@pytest.mark.parametrize("pattern, sizes, shape, theirs", PATTERNS)
@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_rearrange_matches_reshape_and_permute(pattern, sizes, shape, theirs, layout):
    check_op([shape], weighted(theirs), weighted(lambda x: x.rearrange(pattern, **sizes)), layout=layout)


def test_rearrange_of_tinygrads_docs_example():
    assert Tensor([[1, 2], [3, 4]]).rearrange("batch channel -> (batch channel)").tolist() == [1, 2, 3, 4]
    assert Tensor.rearrange(Tensor.arange(6).reshape(2, 3), "a b -> b a").tolist() == [[0, 3], [1, 4], [2, 5]]


@pytest.mark.parametrize("pattern, sizes, shape, message", [
    ("a b c", {}, (2, 3, 4), "needs exactly one '->'"),
    ("a b -> a", {}, (2, 3), r"only on the left: \['b'\]"),
    ("a -> a b", {}, (2,), r"only on the right: \['b'\]"),
    ("a b -> a b", {}, (2, 3, 4), "names 2 dims but the tensor has 3"),
    ("(a b) -> a b", {}, (6,), r"give the sizes of all but one of \['a', 'b'\]"),
    ("(a b) -> a b", {"a": 4}, (6,), r"a dim of size 6 cannot be split as \{'a': 4, 'b': 1\}"),
    ("a b -> b a", {"a": 3}, (2, 3), "a=3 but its dim has size 2"),
    ("a a -> a", {}, (2, 2), "appears twice"),
    ("a ((b)) -> a b", {}, (2, 3), "nested parentheses"),
    ("a (b -> a b", {}, (2, 3), "is not closed"),
    ("a (b 2) -> a b 2", {}, (2, 4), "'2' .* is not an axis name"),
    ("... a -> a", {}, (2, 3), "'...' must appear once on both sides"),
    ("a b -> a b", {"z": 1}, (2, 3), r"sizes given for axes \['z'\]"),
])  # fmt: skip
def test_rearrange_errors_name_the_mistake(pattern, sizes, shape, message):
    with pytest.raises((ValueError, RuntimeError), match=message):
        Tensor.empty(*shape).rearrange(pattern, **sizes)


def test_rearrange_errors_are_runtime_errors_as_einops():
    with pytest.raises(RuntimeError):  # einops.EinopsError is a RuntimeError
        Tensor.empty(2).rearrange("a -> b")
    assert torch.empty(2).shape == (2,)
