"""Movement ops and basic indexing against NumPy's views, including random sequences of them (hypothesis)."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from glassgrad import Tensor, dtypes
from helpers import DEVICES, LAYOUTS, assert_matches, check, make_input


def _same(fn):
    """One function for both sides, where glassgrad and NumPy spell the op alike."""
    return fn, fn


# ---- each movement op ----


@pytest.mark.parametrize(
    "shape, new_shape",
    [((2, 3, 4), (-1, 4)), ((2, 3, 4), (6, 4)), ((2, 3, 4), (24,)), ((2, 3, 4), (4, -1, 2)), ((5,), (1, 5, 1)),
     ((), (1, 1)), ((1,), ()), ((0, 3), (3, 0)), ((0, 3), (-1,)), ((0, 3), (3, -1)), ((7, 1), (-1,))],
    ids=str,
)  # fmt: skip
def test_reshape(device, shape, new_shape):
    check([shape], lambda x: x.reshape(new_shape), lambda x: x.reshape(new_shape), device)


def test_reshape_takes_sizes_as_arguments_or_a_tuple(device):
    check([(2, 6)], lambda x: x.reshape(3, 4) + x.reshape((3, 4)), lambda x: 2 * x.reshape(3, 4), device)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_reshape_of_non_contiguous_input(device, layout):
    check([(3, 4)], lambda x: x.reshape(2, 6), lambda x: x.reshape(2, 6), device, layout=layout)
    check([(3, 4)], lambda x: x.reshape(-1), lambda x: x.reshape(-1), device, layout=layout)


@pytest.mark.parametrize("order", [(0, 1, 2), (2, 0, 1), (1, 2, 0), (2, 1, 0), (-1, 0, -2)], ids=str)
def test_permute(device, order):
    check([(2, 3, 4)], lambda x: x.permute(order), lambda x: np.transpose(x, order), device)


def test_permute_takes_sizes_as_arguments(device):
    check([(2, 3, 1)], lambda x: x.permute(2, 0, 1), lambda x: np.transpose(x, (2, 0, 1)), device)


def test_transpose_and_T(device):
    check([(2, 3, 4)], lambda x: x.transpose(0, 2), lambda x: np.swapaxes(x, 0, 2), device)
    check([(2, 3, 4)], lambda x: x.transpose(-1, 1), lambda x: np.swapaxes(x, -1, 1), device)
    check([(2, 3)], lambda x: x.transpose(), lambda x: x.T, device)
    for shape in [(), (5,), (2, 3), (2, 3, 4), (0, 2)]:
        check([shape], lambda x: x.T, lambda x: x.T, device)


def test_transposing_twice_is_identity(device):
    check([(3, 5)], lambda x: x.T.T + x, lambda x: 2 * x, device)


# (shape, argument of expand, NumPy's target shape): -1 keeps a dimension
EXPANDS = [
    ((3, 1), (3, 4), (3, 4)), ((1,), (5,), (5,)), ((3,), (2, 3), (2, 3)), ((1, 3, 1), (2, 3, 4), (2, 3, 4)),
    ((2, 1), (-1, 3), (2, 3)), ((0, 1), (0, 4), (0, 4)), ((1, 0), (4, 0), (4, 0)), ((1,), (0,), (0,)),
    ((), (2, 2), (2, 2)), ((2, 3), (2, 3), (2, 3)),
]  # fmt: skip


@pytest.mark.parametrize("shape, new_shape, target", EXPANDS, ids=str)
def test_expand(device, shape, new_shape, target):
    check([shape], lambda x: x.expand(new_shape), lambda x: np.broadcast_to(x, target), device)


def test_expand_takes_sizes_as_arguments(device):
    check([(2, 1)], lambda x: x.expand(2, 3), lambda x: np.broadcast_to(x, (2, 3)), device)


def test_expanded_values_are_shared(device):
    check([(1, 3)], lambda x: x.expand(4, 3) * Tensor.arange(4, device=device).reshape(4, 1),
          lambda x: x * np.arange(4).reshape(4, 1).astype(np.float32), device)  # fmt: skip


@pytest.mark.parametrize(
    "padding, numpy_padding",
    [(((1, 2), (0, 1)), ((1, 2), (0, 1))), (((0, 0), (3, 0)), ((0, 0), (3, 0))), ((None, (2, 2)), ((0, 0), (2, 2))),
     ((1, 2), ((0, 0), (1, 2))), ((1, 2, 0, 1), ((0, 1), (1, 2))), ((0, 0, 0, 0), ((0, 0), (0, 0)))],
    ids=["pairs", "before only", "None keeps a dim", "flat last dim", "flat two dims", "no padding"],
)  # fmt: skip
def test_pad(device, padding, numpy_padding):
    check([(2, 3)], lambda x: x.pad(padding), lambda x: np.pad(x, numpy_padding), device)


def test_pad_with_value(device):
    check([(2, 3)], lambda x: x.pad(((1, 0), (2, 1)), value=-7.5), lambda x: np.pad(x, ((1, 0), (2, 1)),
          constant_values=-7.5), device)  # fmt: skip
    check([(3,)], lambda x: x.pad((1, 1), value=5), lambda x: np.pad(x, (1, 1), constant_values=5), device,
          dtype=dtypes.int32)  # fmt: skip


def test_negative_padding_crops(device):
    check([(4, 5)], lambda x: x.pad(((-1, 2), (1, -2))), lambda x: np.pad(x[1:, :-2], ((0, 2), (1, 0))), device)


def test_a_padded_expression_reads_nothing_outside_its_inputs(device):
    """A pad around an expression of reshaped and pooled values (a convolution's padded output gradient): its reads
    are worked out for valid positions only, so in the padding they are skipped (the PYTHON device checks every
    address against its buffer)."""
    check([(2, 3, 4, 4), (2, 3, 2, 2)],
          lambda x, m: (x.relu() * m.reshape(2, 3, 2, 1, 2, 1).expand(2, 3, 2, 2, 2, 2).reshape(2, 3, 4, 4)).pad(
              ((0, 0), (0, 0), (3, 3), (3, 3))),
          lambda x, m: np.pad(np.maximum(x, 0) * np.repeat(np.repeat(m, 2, axis=2), 2, axis=3),
                              ((0, 0), (0, 0), (3, 3), (3, 3))), device)  # fmt: skip


def test_pad_of_empty_and_of_non_contiguous_input(device):
    check([(0, 2)], lambda x: x.pad(((1, 1), (0, 1))), lambda x: np.pad(x, ((1, 1), (0, 1))), device)
    check([(3, 2)], lambda x: x.pad(((1, 0), (0, 2))), lambda x: np.pad(x, ((1, 0), (0, 2))), device,
          layout="transposed")  # fmt: skip


@pytest.mark.parametrize(
    "arg, index",
    [(((1, 2), None, (0, 3)), np.s_[1:2, :, 0:3]), (((0, 0), (1, 2), (2, 3)), np.s_[0:0, 1:2, 2:3]),
     (((0, 2), (0, 3), (0, 4)), np.s_[:, :, :])],
    ids=["crop", "empty", "whole"],
)  # fmt: skip
def test_shrink(device, arg, index):
    check([(2, 3, 4)], lambda x: x.shrink(arg), lambda x: x[index], device)


@pytest.mark.parametrize("axes", [(0,), (1,), (-1,), (0, 2), (0, 1, 2)], ids=str)
def test_flip(device, axes):
    check([(2, 3, 4)], lambda x: x.flip(*axes), lambda x: np.flip(x, axes), device)
    check([(2, 3, 4)], lambda x: x.flip(axes), lambda x: np.flip(x, axes), device)


def test_flip_of_empty_and_single(device):
    check([(0, 3)], lambda x: x.flip(0, 1), lambda x: np.flip(x, (0, 1)), device)
    check([(3, 0)], lambda x: x.flip(0, 1), lambda x: np.flip(x, (0, 1)), device)
    check([(1,)], lambda x: x.flip(0), lambda x: np.flip(x, 0), device)


@pytest.mark.parametrize("shape", [(1, 3, 1), (3,), (1,), (), (1, 1)], ids=str)
def test_squeeze_all(device, shape):
    check([shape], lambda x: x.squeeze(), np.squeeze, device)


def test_squeeze_one_dim(device):
    check([(1, 3, 1)], lambda x: x.squeeze(0), lambda x: x.squeeze(0), device)
    check([(1, 3, 1)], lambda x: x.squeeze(-1), lambda x: x.squeeze(-1), device)
    check([(1, 3, 1)], lambda x: x.squeeze(1), lambda x: x, device)  # not size 1: unchanged, as in PyTorch


@pytest.mark.parametrize("dim", [0, 1, 2, -1, -3], ids=str)
def test_unsqueeze(device, dim):
    check([(2, 3)], lambda x: x.unsqueeze(dim), lambda x: np.expand_dims(x, dim), device)


def test_unsqueeze_of_0d(device):
    check([()], lambda x: x.unsqueeze(0), lambda x: x.reshape(1), device)


@pytest.mark.parametrize("start, end, shape", [(0, -1, (2, 3, 4)), (1, -1, (2, 3, 4)), (0, 1, (2, 3, 4)),
                                               (1, 1, (2, 3, 4)), (0, -1, (0, 3)), (0, -1, ())], ids=str)  # fmt: skip
def test_flatten(device, start, end, shape):
    def numpy_flatten(x):
        if x.ndim == 0:
            return x.reshape(1)
        e = end % x.ndim
        return x.reshape(x.shape[:start] + (-1 if x.size else 0,) + x.shape[e + 1 :])

    check([shape], lambda x: x.flatten(start, end), numpy_flatten, device)


# ---- basic indexing ----

INDEXES = {
    "int": np.s_[1],
    "negative int": np.s_[-1],
    "two ints": np.s_[1, 2],
    "all ints": np.s_[1, 0, 3],
    "slice": np.s_[1:3],
    "step 2": np.s_[::2],
    "step 3 offset": np.s_[:, 1::3],
    "reverse": np.s_[::-1],
    "reverse step 2": np.s_[::-2, :, ::-3],
    "reverse bounded": np.s_[:, 4:0:-2],
    "empty slice": np.s_[1:1],
    "empty last dim": np.s_[:, :, 2:1],
    "past the end": np.s_[1:100, -100:2],
    "None": np.s_[None],
    "None in the middle": np.s_[:, None, 1:],
    "Ellipsis": np.s_[..., 1],
    "Ellipsis and None": np.s_[..., None, ::-1],
    "int Ellipsis": np.s_[1, ..., ::2],
    "everything": np.s_[-1, None, 3:0:-1, ..., None],
    "empty tuple": (),
}


@pytest.mark.parametrize("index", INDEXES.values(), ids=INDEXES.keys())
def test_basic_indexing(device, index):
    check([(3, 5, 4)], lambda x: x[index], lambda x: x[index], device)


@pytest.mark.parametrize("layout", ["transposed", "strided", "flipped", "expanded"])
def test_indexing_of_non_contiguous_input(device, layout):
    check([(4, 5)], lambda x: x[1::2, ::-2], lambda x: x[1::2, ::-2], device, layout=layout)


def test_indexing_of_0d_and_1_element(device):
    check([()], lambda x: x[()], lambda x: x[()], device)
    check([()], lambda x: x[None], lambda x: x[None], device)
    check([(1,)], lambda x: x[0], lambda x: x[0], device)
    check([(1,)], lambda x: x[::-1], lambda x: x[::-1], device)


def test_index_out_of_range_is_an_error(device):
    x = Tensor([1, 2, 3], device=device)
    with pytest.raises(IndexError, match="index 3 is out of bounds for dimension 0 with size 3"):
        x[3]
    with pytest.raises(IndexError, match="too many indices"):
        x[0, 0]


# ---- random sequences of movement ops must give NumPy's views ----


@st.composite
def movement_op(draw, shape):
    """One movement op valid for `shape`, as (description, glassgrad fn, NumPy fn)."""
    ndim, numel = len(shape), int(np.prod(shape))
    kinds = ["reshape", "flip", "index", "expand"] + (["permute", "shrink"] if ndim else [])
    if numel <= 64 and ndim:
        kinds.append("pad")
    kind = draw(st.sampled_from(kinds))
    if kind == "reshape":
        new = draw(_reshape_target(numel))
        return f"reshape{new}", lambda x: x.reshape(new), lambda x: x.reshape(new)
    if kind == "permute":
        order = tuple(draw(st.permutations(range(ndim))))
        return f"permute{order}", lambda x: x.permute(order), lambda x: np.transpose(x, order)
    if kind == "flip":
        axes = tuple(draw(st.sets(st.integers(0, ndim - 1)))) if ndim else ()
        return f"flip{axes}", lambda x: x.flip(axes), lambda x: np.flip(x, axes) if axes else x
    if kind == "shrink":
        arg = []
        for s in shape:
            start = draw(st.integers(0, s))
            arg.append((start, draw(st.integers(start, s))))
        index = tuple(slice(a, b) for a, b in arg)
        return f"shrink{tuple(arg)}", lambda x: x.shrink(arg), lambda x: x[index]
    if kind == "pad":
        pairs = tuple((draw(st.integers(0, 2)), draw(st.integers(0, 2))) for _ in shape)
        return f"pad{pairs}", lambda x: x.pad(pairs), lambda x: np.pad(x, pairs)
    if kind == "expand":  # size-1 dims grow; a leading dim may be added (kept small: the result is read)
        new = tuple(draw(st.integers(1, 3)) if s == 1 else s for s in shape)
        new = (draw(st.integers(1, 2)),) * draw(st.integers(0, 1)) + new
        return f"expand{new}", lambda x: x.expand(new), lambda x: np.broadcast_to(x, new)
    index = draw(_basic_index(shape))
    return f"getitem{index}", lambda x: x[index], lambda x: x[index]


@st.composite
def _reshape_target(draw, numel):
    """A shape of `numel` elements (up to 4 dims), perhaps with one -1."""
    if numel == 0:
        shape = [draw(st.integers(0, 3)) for _ in range(draw(st.integers(1, 3)))]
        shape[draw(st.integers(0, len(shape) - 1))] = 0
        return tuple(shape)
    shape, rest = [], numel
    for _ in range(draw(st.integers(0, 3))):
        divisor = draw(st.sampled_from([d for d in range(1, rest + 1) if rest % d == 0]))
        shape.append(divisor)
        rest //= divisor
    shape.append(rest)
    shape = draw(st.permutations(shape))
    if draw(st.booleans()):
        shape[draw(st.integers(0, len(shape) - 1))] = -1
    return tuple(shape)


@st.composite
def _basic_index(draw, shape):
    """An index of ints, slices with any step, None and at most one Ellipsis."""
    items = []
    for size in shape:
        choice = draw(st.sampled_from(["int", "slice", "slice", "None"] if size else ["slice", "None"]))
        if choice == "int":
            items.append(draw(st.integers(-size, size - 1)))
        elif choice == "slice":
            bound = st.none() | st.integers(-size - 2, size + 2)
            step = draw(st.none() | st.integers(-3, 3).filter(bool))
            items.append(slice(draw(bound), draw(bound), step))
        else:
            items.extend([None, slice(None)])
    if items and draw(st.booleans()):
        cut = draw(st.integers(0, len(items) - 1))
        if all(isinstance(i, slice) and i == slice(None) for i in items[cut:]):
            items = items[:cut] + [Ellipsis]
    return tuple(items)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), shape=st.lists(st.integers(0, 4), min_size=0, max_size=3).map(tuple))
@pytest.mark.parametrize("device", DEVICES)
def test_random_movement_sequences_match_numpy(device, data, shape):
    array = np.arange(1, int(np.prod(shape)) + 1, dtype=np.int32).reshape(shape)  # no zeros: padding shows
    # realized flat (a copy, no kernel) and reshaped lazily: every op below is a view of that buffer
    tensor = Tensor(array.reshape(-1), device=device).realize().reshape(shape)
    for _ in range(data.draw(st.integers(1, 5), label="length")):
        description, ours, theirs = data.draw(movement_op(array.shape), label="op")
        array, tensor = theirs(array), ours(tensor)
        assert tensor.shape == array.shape, f"after {description}"
    assert_matches(tensor, array)


# ---- views crossing devices ----


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_view_moved_to_another_device_keeps_its_values(device, layout):
    array, tensor = make_input((3, 4), device, layout=layout)  # a realized buffer seen through a view
    pending = Tensor(np.ascontiguousarray(array.T), device=device).T  # a view of data not on the device yet
    for other in DEVICES:
        for ours, theirs in [(tensor, array), (pending, array), (tensor + 1, array + 1)]:
            assert_matches(ours.to(other), theirs)
            assert_matches(ours[1:, ::-1].to(other), theirs[1:, ::-1])
