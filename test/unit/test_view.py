"""View and ShapeTracker against NumPy: chains of movement ops, read back element by element through to_indexed."""

import operator

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from glassgrad.dtype import dtypes
from glassgrad.helpers import prod
from glassgrad.uop.ops import Ops, UOp
from glassgrad.uop.symbolic import simplify
from glassgrad.uop.view import ShapeTracker, View

# ---- reading a tracker back: evaluate its index expression at every element at once ----


def c_idiv(a, b):
    """Integer division that truncates toward zero, as C (and the kernels) do."""
    quotient = abs(a) // abs(b)
    return np.where((a < 0) != (b < 0), -quotient, quotient)


EVALUATE = {
    Ops.ADD: operator.add,
    Ops.MUL: operator.mul,
    Ops.IDIV: c_idiv,
    Ops.MOD: lambda a, b: a - b * c_idiv(a, b),
    Ops.CMPLT: operator.lt,
    Ops.CMPNE: operator.ne,
    Ops.AND: operator.and_,
}


def index_var(dim: int, size: int) -> UOp:
    """The loop variable of one dim; the evaluator gives it that dim's index of every element."""
    return UOp(Ops.RANGE, dtypes.int, (UOp.const(dtypes.int, size),), dim)


def evaluate(root: UOp, indices: np.ndarray):
    """The value of an index expression at every element; `indices[dim]` holds each element's index along dim."""
    values = {}
    for node in root.toposort():
        if node.op is Ops.CONST:
            values[node] = node.arg
        elif node.op is Ops.RANGE:
            values[node] = indices[node.arg]
        else:
            values[node] = EVALUATE[node.op](*(values[s] for s in node.src))
    return values[root]


def realize(tracker: ShapeTracker, buffer: np.ndarray) -> np.ndarray:
    """What the tracker reads from a flat buffer: buffer[flat] where valid, else 0."""
    flat, valid = tracker.to_indexed([index_var(k, s) for k, s in enumerate(tracker.shape)])
    assert flat.dtype == dtypes.int and valid.dtype == dtypes.bool
    indices = np.indices(tracker.shape)
    flat = np.broadcast_to(evaluate(flat, indices), tracker.shape)
    valid = np.broadcast_to(evaluate(valid, indices), tracker.shape)
    assert ((flat[valid] >= 0) & (flat[valid] < buffer.size)).all(), "a valid element reads outside the buffer"
    if buffer.size == 0:
        assert not valid.any()
        return np.zeros(tracker.shape, buffer.dtype)
    return np.where(valid, buffer[np.where(valid, flat, 0)], 0)


# ---- the same movement ops in NumPy ----

NUMPY_OPS = {
    "reshape": lambda x, arg: x.reshape(arg),
    "permute": lambda x, arg: np.transpose(x, arg),
    "expand": lambda x, arg: np.broadcast_to(x, arg),
    "pad": lambda x, arg: np.pad(x, arg) if arg else x,  # np.pad refuses a 0-dim array
    "shrink": lambda x, arg: x[tuple(slice(start, end) for start, end in arg)],
    "flip": lambda x, arg: x[tuple(slice(None, None, -1) if f else slice(None) for f in arg)],
}


def addresses_by_definition(shape, strides, offset, mask) -> tuple[np.ndarray, np.ndarray]:
    """Straight from the definition of a view: the address offset + sum(i*stride) and validity of every element."""
    indices = np.indices(shape)
    address = offset + sum((i * st for i, st in zip(indices, strides, strict=True)), np.zeros(shape, int))
    valid = np.ones(shape, bool)
    for i, (lo, hi) in zip(indices, mask, strict=True) if mask is not None else ():
        valid &= (lo <= i) & (i < hi)
    return address, valid


def check_chain(tracker: ShapeTracker, expected: np.ndarray, buffer: np.ndarray, ops) -> ShapeTracker:
    """Apply `ops` [(name, arg), ...] to the tracker and to NumPy's `expected`, comparing values after every op."""
    np.testing.assert_array_equal(realize(tracker, buffer), expected, err_msg=f"at the start: {tracker}")
    for name, arg in ops:
        expected, tracker = NUMPY_OPS[name](expected, arg), getattr(tracker, name)(arg)
        assert tracker.shape == expected.shape, f"after {name}{arg}"
        np.testing.assert_array_equal(realize(tracker, buffer), expected, err_msg=f"after {name}{arg}: {tracker}")
    return tracker


def check_chain_from_shape(shape, ops) -> ShapeTracker:
    buffer = np.arange(1, prod(shape) + 1)  # from 1, so that padding (0) differs from every element
    return check_chain(ShapeTracker.from_shape(shape), buffer.reshape(shape), buffer, ops)


# ---- named cases: each once broke, or shows how many views a chain needs ----

# fmt: off
NAMED_CHAINS = [
    # (what it checks, start shape, ops, number of views at the end)
    ("contiguous_reshapes", (2, 3, 4), [("reshape", (6, 4)), ("reshape", (4, 3, 2)), ("reshape", (24,))], 1),
    ("split_dim_of_permuted_view", (4, 6), [("permute", (1, 0)), ("reshape", (2, 3, 4))], 1),
    ("merge_dims_of_permuted_view", (2, 3), [("permute", (1, 0)), ("reshape", (6,))], 2),
    ("reshape_back_after_pushed_view", (2, 3), [("permute", (1, 0)), ("reshape", (6,)), ("reshape", (3, 2))], 1),
    ("shrink_after_pushed_view", (2, 3), [("permute", (1, 0)), ("reshape", (6,)), ("shrink", ((2, 4),))], 1),
    ("permute_merge_of_odd_sizes", (3, 5, 7), [("permute", (2, 0, 1)), ("reshape", (7, 15))], 1),
    ("permute_reshape_of_odd_sizes", (5, 7), [("permute", (1, 0)), ("reshape", (5, 7))], 2),
    ("size_one_dims_on_padded_view", (3, 4), [("pad", ((1, 1), (0, 2))), ("reshape", (1, 5, 1, 6, 1))], 1),
    ("drop_size_one_dims_of_padded_view", (1, 3, 1), [("pad", ((0, 0), (1, 1), (0, 0))), ("reshape", (5,))], 1),
    ("flatten_after_padding_rows", (4, 3), [("pad", ((1, 2), (0, 0))), ("reshape", (21,))], 1),
    ("split_padding_into_whole_rows", (4,), [("pad", ((4, 0),)), ("reshape", (2, 4))], 1),
    ("flatten_after_padding_columns", (2, 3), [("pad", ((0, 0), (1, 1))), ("reshape", (10,))], 2),
    ("reshape_after_pad_then_back", (2, 3), [("pad", ((0, 0), (1, 1))), ("reshape", (10,)), ("reshape", (2, 5))], 1),
    ("pad_after_expand", (1, 3), [("expand", (4, 3)), ("pad", ((1, 1), (2, 0)))], 1),
    ("split_expanded_dim", (1, 5), [("expand", (6, 5)), ("reshape", (2, 3, 5))], 1),
    ("flatten_shrunk_rows", (4, 6), [("shrink", ((1, 3), (0, 6))), ("reshape", (12,))], 1),
    ("flatten_shrunk_columns", (4, 6), [("shrink", ((0, 4), (1, 3))), ("reshape", (8,))], 2),
    ("split_flipped_dim", (4, 6), [("flip", (True, False)), ("reshape", (2, 2, 6))], 1),
    ("flatten_fully_flipped", (4, 6), [("flip", (True, True)), ("reshape", (24,))], 1),
    ("pad_shrink_flip_reshape", (3, 4), [("pad", ((2, 0), (0, 0))), ("shrink", ((1, 5), (0, 4))),
                                         ("flip", (True, True)), ("reshape", (16,))], 1),
    ("zero_size_reshape_and_pad", (0, 3), [("reshape", (3, 0)), ("pad", ((1, 0), (0, 0)))], 1),
    ("padding_a_zero_size_dim", (0,), [("pad", ((1, 2),)), ("reshape", (3, 1)), ("expand", (3, 4))], 1),
    ("zero_size_permute_reshape", (2, 0, 3), [("permute", (2, 0, 1)), ("reshape", (0,)), ("reshape", (5, 0))], 1),
    ("size_one_dims", (1,), [("reshape", ()), ("reshape", (1, 1, 1)), ("expand", (1, 4, 1))], 1),
    ("scalar_expanded", (), [("reshape", (1,)), ("expand", (5,)), ("flip", (True,))], 1),
    ("all_padding_to_scalar", (2,), [("pad", ((0, 1),)), ("shrink", ((2, 3),)), ("reshape", ())], 2),
    ("expand_then_merge", (3, 1), [("expand", (3, 4)), ("reshape", (12,))], 2),
    ("split_padding_inside_one_row", (2,), [("pad", ((2, 4),)), ("reshape", (2, 4))], 1),
    ("merge_a_dim_valid_at_one_index", (2, 3), [("pad", ((1, 0), (0, 0))), ("shrink", ((1, 2), (0, 3))),
                                                ("pad", ((2, 1), (0, 0))), ("reshape", (12,))], 1),
    ("window_of_pushed_padded_view", (2, 3), [("pad", ((0, 0), (1, 1))), ("reshape", (10,)),
                                              ("shrink", ((5, 10),))], 1),
    ("window_of_flipped_pushed_padded_view", (2, 3), [("pad", ((0, 0), (2, 1))), ("reshape", (12,)),
                                                      ("flip", (True,)), ("shrink", ((0, 6),))], 1),
]
# fmt: on


@pytest.mark.parametrize("shape, ops, n_views", [c[1:] for c in NAMED_CHAINS], ids=[c[0] for c in NAMED_CHAINS])
def test_named_chain_matches_numpy(shape, ops, n_views):
    tracker = check_chain_from_shape(shape, ops)
    assert len(tracker.views) == n_views, tracker


# ---- random chains ----


def prime_factors(n: int) -> list[int]:
    factors, p = [], 2
    while n > 1:
        while n % p == 0:
            factors, n = factors + [p], n // p
        p += 1
    return factors


@st.composite
def shapes_of_size(draw, size: int) -> tuple[int, ...]:
    """Any shape with `size` elements, size-1 dims included."""
    if size == 0:
        dims = draw(st.lists(st.integers(0, 3), max_size=3))
        dims.insert(draw(st.integers(0, len(dims))), 0)
        return tuple(dims)
    factors = draw(st.permutations(prime_factors(size) + [1] * draw(st.integers(0, 2))))
    dims = []
    for factor in factors:
        if dims and draw(st.booleans()):
            dims[-1] *= factor
        else:
            dims.append(factor)
    return tuple(dims)


@st.composite
def reshape_args(draw, shape: tuple[int, ...]) -> tuple[int, ...]:
    """New shapes that split or merge a dim, add or drop 1s, or refactor the size freely."""
    dims = list(shape)
    kind = draw(st.sampled_from(["merge", "split", "insert_one", "drop_ones", "any"]))
    if kind == "merge" and len(dims) >= 2:
        k = draw(st.integers(0, len(dims) - 2))
        dims[k : k + 2] = [dims[k] * dims[k + 1]]
    elif kind == "split" and dims:
        k = draw(st.integers(0, len(dims) - 1))
        if dims[k] == 0:
            other = draw(st.integers(0, 3))
            dims[k : k + 1] = draw(st.sampled_from([[0, other], [other, 0]]))
        else:
            d = draw(st.sampled_from([d for d in range(1, dims[k] + 1) if dims[k] % d == 0]))
            dims[k : k + 1] = [d, dims[k] // d]
    elif kind == "insert_one":
        dims.insert(draw(st.integers(0, len(dims))), 1)
    elif kind == "drop_ones":
        dims = [s for s in dims if s != 1]
    else:
        dims = list(draw(shapes_of_size(prod(shape))))
    return tuple(dims)


@st.composite
def windows(draw, size: int) -> tuple[int, int]:
    """A (start, end) with 0 <= start <= end <= size."""
    start = draw(st.integers(0, size))
    return start, draw(st.integers(start, size))


def shrink_args(shape):
    return st.tuples(*[windows(s) for s in shape])


@st.composite
def movement_ops(draw, shape: tuple[int, ...], with_pad: bool = True) -> tuple[str, tuple]:
    """One movement op (name, arg) that applies to `shape`; ops that grow it only while it is small."""
    small = prod(shape) <= 200
    names = ["reshape", "permute", "shrink", "flip"]
    names += ["pad"] * (with_pad and small) + ["expand"] * (1 in shape and small)
    name = draw(st.sampled_from(names))
    if name == "reshape":
        return name, draw(reshape_args(shape))
    if name == "permute":
        return name, tuple(draw(st.permutations(range(len(shape)))))
    if name == "shrink":
        return name, draw(shrink_args(shape))
    if name == "flip":
        return name, tuple(draw(st.booleans()) for _ in shape)
    if name == "pad":
        return name, tuple((draw(st.integers(0, 2)), draw(st.integers(0, 2))) for _ in shape)
    return name, tuple(draw(st.integers(0, 4)) if s == 1 else s for s in shape)


start_shapes = st.lists(st.integers(0, 5), max_size=4).map(tuple)


@settings(max_examples=400, deadline=None)
@given(data=st.data(), shape=start_shapes)
def test_random_movement_chain_matches_numpy(data, shape):
    ops, current = [], np.empty(shape)
    for _ in range(data.draw(st.integers(1, 7), label="length")):
        op = data.draw(movement_ops(current.shape), label="op")
        ops.append(op)
        current = NUMPY_OPS[op[0]](current, op[1])
    check_chain_from_shape(shape, ops)


@st.composite
def view_parts(draw):
    """Shape, strides and mask of an arbitrary view: negative and zero strides, any windows of valid elements."""
    shape = draw(st.lists(st.integers(0, 4), max_size=3).map(tuple))
    strides = draw(st.tuples(*[st.integers(-4, 4)] * len(shape)))
    mask = draw(st.none() | shrink_args(shape))
    return shape, strides, mask


@settings(max_examples=400, deadline=None)
@given(data=st.data(), parts=view_parts())
def test_random_view_then_random_chain_matches_numpy(data, parts):
    """Start from any view (View.create keeps what it reads), then move it around."""
    shape, strides, mask = parts
    address, valid = addresses_by_definition(shape, strides, 0, mask)
    low, high = (int(address[valid].min()), int(address[valid].max())) if valid.any() else (0, 0)
    buffer = np.arange(1, high - low + 2)  # from 1, so that padding (0) differs from every element
    expected = np.where(valid, buffer[np.where(valid, address - low, 0)], 0)
    ops, current = [], expected
    for _ in range(data.draw(st.integers(0, 5), label="length")):
        op = data.draw(movement_ops(current.shape), label="op")
        ops.append(op)
        current = NUMPY_OPS[op[0]](current, op[1])
    check_chain(ShapeTracker((View.create(shape, strides, -low, mask),)), expected, buffer, ops)


@settings(max_examples=200, deadline=None)
@given(data=st.data(), shape=start_shapes)
def test_one_view_whenever_numpy_reshapes_without_copy(data, shape):
    """Without padding, a reshape that NumPy does as a view (no copy) stays one view here too."""
    buffer = np.arange(1, prod(shape) + 1)
    expected, tracker = buffer.reshape(shape), ShapeTracker.from_shape(shape)
    for _ in range(data.draw(st.integers(1, 6), label="length")):
        name, arg = data.draw(movement_ops(expected.shape, with_pad=False), label="op")
        if name == "reshape":
            try:
                expected = np.reshape(expected, arg, copy=False)
            except ValueError:  # NumPy would copy; so may we
                continue
        else:
            expected = NUMPY_OPS[name](expected, arg)
        tracker = getattr(tracker, name)(arg)
        assert len(tracker.views) == 1, f"{name}{arg} gave {tracker}"
        np.testing.assert_array_equal(realize(tracker, buffer), expected)


# ---- canonical form: one view of the same elements, one object ----


def test_create_zeroes_strides_of_size_one_dims():
    assert View.create((1, 3), (5, 1)).strides == (0, 1)


def test_create_drops_a_mask_that_covers_everything():
    assert View.create((2, 3), mask=((0, 2), (-1, 4))).mask is None


def test_create_gives_one_form_to_views_that_are_all_padding():
    expected = View((2, 3), (0, 0), 0, ((0, 0), (0, 0)))
    assert View.create((2, 3), (3, 1), 7, ((0, 2), (1, 1))) == expected
    assert View.create((2, 3), (3, 1), 7, ((2, 1), (0, 3))) == expected


def test_create_folds_a_dim_valid_at_one_index_into_the_offset():
    view = View.create((4, 3), (3, 1), 10, ((1, 2), (0, 3)))
    assert (view.strides, view.offset) == ((0, 1), 13)


def test_zero_size_views_are_contiguous():
    assert View.create((2, 0), (7, 3), 5, ((1, 2), (0, 0))) == View.create((2, 0))
    assert View.create((2, 0)).contiguous


def test_contiguous_flag():
    assert View.create((2, 3)).contiguous
    assert not View.create((2, 3), offset=1).contiguous
    assert not View.create((2, 3)).permute((1, 0)).contiguous
    assert not View.create((3,)).pad(((1, 0),)).contiguous


def test_equal_trackers_built_two_ways_are_equal_and_hash_equal():
    plain = ShapeTracker.from_shape((2, 3))
    round_trip = plain.permute((1, 0)).permute((1, 0))
    pad_and_back = plain.pad(((1, 1), (0, 2))).shrink(((1, 3), (0, 3)))
    assert round_trip == plain == pad_and_back and round_trip.contiguous
    assert len({plain: 1, round_trip: 2, pad_and_back: 3}) == 1


def test_tracker_properties():
    tracker = ShapeTracker.from_shape((2, 3, 4))
    assert (tracker.shape, tracker.size, tracker.contiguous) == ((2, 3, 4), 24, True)
    assert not tracker.permute((0, 2, 1)).contiguous


# ---- the index expressions themselves: exact, with no pointless nodes ----

i0, i1, i2 = (index_var(dim, 8) for dim in range(3))
TRUE = UOp.const(dtypes.bool, True)


def test_contiguous_index_is_row_major_sum():
    flat, valid = View.create((3, 4)).to_indexed([i0, i1])
    assert flat is i0 * 4 + i1 and valid is TRUE


def test_size_one_and_expanded_dims_leave_no_term():
    flat, _ = View.create((1, 3)).expand((5, 3)).reshape((5, 1, 3)).to_indexed([i0, i1, i2])
    assert flat is i2


def test_offset_is_added_once():
    flat, _ = View.create((4, 6)).shrink(((1, 3), (2, 6))).to_indexed([i0, i1])
    assert flat is i0 * 6 + i1 + 8


def test_broadcast_scalar_index_is_its_offset():
    flat, valid = View.create((), offset=5).reshape((1,)).expand((3,)).to_indexed([i0])
    assert flat is UOp.const(dtypes.int, 5) and valid is TRUE


def test_pad_checks_only_the_padded_sides():
    _, after_only = View.create((3,)).pad(((0, 2),)).to_indexed([i0])
    _, before_only = View.create((3,)).pad(((2, 0),)).to_indexed([i0])
    _, both = View.create((3, 3)).pad(((1, 1), (0, 0))).to_indexed([i0, i1])
    assert after_only is (i0 < 3)
    assert before_only is (i0 > 1)
    assert both is ((i0 > 0) & (i0 < 4))


def test_all_padding_is_never_valid():
    _, valid = View.create((3,)).pad(((0, 2),)).shrink(((3, 5),)).to_indexed([i0])
    assert valid is UOp.const(dtypes.bool, False)


def test_stacked_views_unravel_the_flat_index():
    tracker = ShapeTracker.from_shape((2, 3)).permute((1, 0)).reshape((6,))
    flat, valid = tracker.to_indexed([i0])
    assert len(tracker.views) == 2 and valid is TRUE
    assert flat is i0 // 2 + (i0 % 2) * 3  # the element at (i0 // 2, i0 % 2) of the transposed (3, 2) view


# ---- real strides ----


def test_real_strides_of_one_view():
    tracker = ShapeTracker.from_shape((2, 3, 1))
    assert tracker.real_strides() == (3, 1, 0)
    assert tracker.permute((1, 2, 0)).expand((3, 5, 2)).real_strides() == (1, 0, 3)
    assert tracker.flip((True, False, False)).real_strides() == (-3, 1, 0)


def test_real_strides_are_unknown_on_padded_dims():
    assert ShapeTracker.from_shape((2, 3)).pad(((0, 0), (1, 0))).real_strides() == (3, None)


def test_real_strides_through_stacked_views_know_only_broadcast_dims():
    tracker = ShapeTracker.from_shape((2, 3)).permute((1, 0)).reshape((6, 1)).expand((6, 4))
    assert len(tracker.views) == 2
    assert tracker.real_strides() == (None, 0)


# ---- impossible requests ----


@pytest.mark.parametrize(
    "op, arg",
    [
        ("reshape", (4, 2)),
        ("reshape", (-1, 6)),
        ("permute", (0, 0)),
        ("permute", (1,)),
        ("expand", (4, 3)),
        ("expand", (2, 3, 1)),
        ("pad", ((0, 0), (-1, 0))),
        ("pad", ((1, 1),)),
        ("shrink", ((0, 3), (0, 3))),
        ("shrink", ((1, 0), (0, 3))),
        ("flip", (True,)),
    ],
)
def test_impossible_request_raises_value_error(op, arg):
    with pytest.raises(ValueError, match=op):
        getattr(ShapeTracker.from_shape((2, 3)), op)(arg)


# ---- indices worked out where a padding view is valid ----


def test_a_padded_position_unravels_into_the_tensor_below_without_dividing():
    """A PAD of 4 around a (2, 3, 20, 20) value, read through a view of the padded shape: at valid positions the
    flat index n*1200 + c*400 + y*20 + x - 84 unravels to (n, c, y - 4, x - 4), found knowing 4 <= y, x < 24 rather
    than by dividing and taking remainders at every element."""
    tracker = ShapeTracker.from_shape((2, 3, 20, 20)).pad(((0, 0), (0, 0), (4, 4), (4, 4)))
    idxs = [index_var(k, s) for k, s in enumerate(tracker.shape)]
    inner, valid = tracker.indices_in(idxs, (2, 3, 20, 20))
    inner = [simplify(i) for i in inner]
    assert not any(n.op in (Ops.IDIV, Ops.MOD) for i in inner for n in i.toposort())
    indices = np.indices(tracker.shape)
    ok = np.broadcast_to(evaluate(valid, indices), tracker.shape)
    expected = [indices[0], indices[1], indices[2] - 4, indices[3] - 4]
    for got, want in zip(inner, expected):
        assert np.array_equal(np.broadcast_to(evaluate(got, indices), tracker.shape)[ok], want[ok])


def test_unpadded_trackers_unravel_as_before():
    tracker = ShapeTracker.from_shape((6, 4)).reshape((2, 3, 4)).permute((1, 0, 2))
    idxs = [index_var(k, s) for k, s in enumerate(tracker.shape)]
    (flat,), valid = tracker.indices_in(idxs, None)
    assert (flat, valid) == tracker.to_indexed(idxs) and valid.arg is True
