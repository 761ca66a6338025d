"""Each rule of the symbolic matcher on the smallest graph it matches, bounds, and a property test of both."""

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from glassgrad.dtype import dtypes
from glassgrad.uop.alu import exec_alu, exec_cast
from glassgrad.uop.ops import Ops, UOp
from glassgrad.uop.symbolic import bounds, simplify


def loop(end: int, axis: int = 0) -> UOp:
    """A loop variable taking the values 0 .. end-1."""
    return UOp(Ops.RANGE, dtypes.int, (UOp.const(dtypes.int, end),), axis)


def thread(size: int, name: str = "gidx0") -> UOp:
    return UOp(Ops.SPECIAL, dtypes.int, (), (name, size))


def unknown(dtype=dtypes.int, slot: int = 0) -> UOp:
    """A value the simplifier knows nothing about: a load from a buffer."""
    return UOp(Ops.LOAD, dtype, (UOp(Ops.DEFINE_GLOBAL, dtype.ptr(), (), slot),))


def const(value, dtype=dtypes.int) -> UOp:
    return UOp.const(dtype, value)


TRUE, FALSE = const(True, dtypes.bool), const(False, dtypes.bool)
i, j, k = loop(24, 0), loop(6, 1), loop(4, 2)
x, y = unknown(dtypes.int, 0), unknown(dtypes.int, 1)
f, b = unknown(dtypes.float, 2), unknown(dtypes.bool, 3)


def evaluate(u: UOp, env: dict[UOp, int]) -> dict[UOp, object]:
    """The value of every node of `u`, given the values of its loop and thread variables."""
    values: dict[UOp, object] = {}
    for node in u.toposort():
        if node in env:
            values[node] = env[node]
        elif node.op is Ops.CONST:
            values[node] = node.arg
        elif node.op is Ops.CAST:
            values[node] = exec_cast(values[node.src[0]], node.src[0].dtype, node.dtype)
        else:
            values[node] = exec_alu(node.op, node.dtype, [values[s] for s in node.src])
    return values


def assignments(*variables: UOp):
    ends = [v.src[0].arg if v.op is Ops.RANGE else v.arg[1] for v in variables]
    for values in itertools.product(*(range(e) for e in ends)):
        yield dict(zip(variables, values, strict=True))


def assert_same_values(before: UOp, after: UOp, *variables: UOp):
    for env in assignments(*variables):
        assert evaluate(before, env)[before] == evaluate(after, env)[after], f"differs at {env}"


# ---- the key uses: index math of views ----


def test_flat_index_viewed_as_2d_is_the_flat_index():
    assert simplify((i // 6) * 6 + i % 6) is i


def test_flat_index_viewed_as_3d_is_the_flat_index():
    assert simplify((i // 12) * 12 + ((i // 4) % 3) * 4 + i % 4) is i


def test_split_of_a_2d_index_gives_back_its_parts():
    assert simplify((k * 6 + j) // 6) is k
    assert simplify((k * 6 + j) % 6) is j


def test_division_drops_a_small_remainder():
    assert simplify((k * 3 + 2) // 3) is k


def test_mask_decided_by_the_loop_bounds():
    assert simplify(loop(8) < 10) is TRUE


# ---- constants ----


def test_fold_constants():
    assert simplify(const(3) + 4) is const(7)
    assert simplify(const(2**31 - 1) + 1) is const(-(2**31))
    assert simplify(const(7) // 0) is const(0)
    assert simplify(const(0.0, dtypes.float).alu(Ops.LOG2)) is const(-math.inf, dtypes.float)


def test_fold_cast_of_constant():
    assert simplify(const(-2.7, dtypes.float).cast(dtypes.int)) is const(-2)
    assert simplify(const(300).cast(dtypes.uint8)) is const(44, dtypes.uint8)
    assert simplify(const(0.5, dtypes.float).cast(dtypes.bool)) is TRUE


def test_fold_bitcast_of_constant():
    assert simplify(UOp(Ops.BITCAST, dtypes.int, (const(1.0, dtypes.float),))) is const(0x3F800000)


def test_fold_a_node_whose_bounds_hold_one_value():
    assert simplify(j // 6) is const(0)
    assert simplify(j.ne(-1)) is TRUE
    assert simplify(j.maximum(10)) is const(10)
    assert simplify(loop(1) * 5) is const(0)


# ---- canonical order ----


def test_constant_moves_to_the_right():
    assert simplify(const(3) + x) is x + 3
    assert simplify(const(3) * x) is x * 3
    assert simplify(TRUE.ne(b)) is b.ne(True)


def test_int_negation_becomes_a_factor_of_minus_one():
    assert simplify(-x) is x * -1


def test_double_negation_of_a_float():
    negated = -f
    assert simplify(-negated) is f


def test_cast_to_the_same_dtype_is_dropped():
    assert simplify(UOp(Ops.CAST, dtypes.int, (x,))) is x


# ---- identities ----


def test_add_zero():
    assert simplify(x + 0) is x


def test_add_zero_keeps_floats():  # -0.0 + 0.0 is 0.0, not -0.0
    assert simplify(f + 0.0) is f + 0.0


def test_mul_one():
    assert simplify(x * 1) is x
    assert simplify(f * 1.0) is f


def test_mul_zero():
    assert simplify(x * 0) is const(0)


def test_mul_zero_keeps_floats():  # inf * 0 is nan
    assert simplify(f * 0.0) is f * 0.0


def test_div_one():
    assert simplify(x // 1) is x


def test_mod_one():
    assert simplify(x % 1) is const(0)


# ---- sums and products ----


def test_constants_of_a_sum_combine():
    assert simplify((x + 1) + 2) is x + 3


def test_constant_of_a_sum_moves_last():
    assert simplify((x + 3) + y) is (x + y) + 3


def test_like_terms_combine():
    assert simplify(x + x) is x * 2
    assert simplify(x * 2 + y + x * 3) is x * 5 + y


def test_x_minus_x_is_zero():
    assert simplify(x - x) is const(0)


def test_x_minus_x_keeps_floats():  # inf - inf is nan
    assert simplify(f - f).op is Ops.ADD


def test_double_negation_of_an_int():
    negated = -x
    assert simplify(-negated) is x


def test_div_mod_pair_folds_in_any_order_of_the_sum():
    assert simplify(y + x % 4 + (x // 4) * 4) is x + y
    assert simplify((x // 4) * 12 + (x % 4) * 3) is x * 3  # (x//c)*(c*k) + (x%c)*k = x*k, for any sign of x


def test_products_of_constants_combine():
    assert simplify((x * 3) * 4) is x * 12


def test_product_distributes_over_a_sum():
    assert simplify((x + y) * 3) is x * 3 + y * 3
    assert simplify((x + 2) * 3) is x * 3 + 6


# ---- division and remainder ----


def test_nested_division():
    assert simplify((x // 2) // 3) is x // 6


def test_division_of_a_multiple():
    assert simplify((i * 6) // 3) is i * 2
    assert simplify((j * 2) // 6) is j // 3


def test_division_of_a_product_that_may_wrap_is_kept():
    assert simplify((x * 2) // 6) is (x * 2) // 6


def test_division_of_a_sum_splits_off_the_multiples():
    assert simplify((k * 8 + j) // 4) is k * 2 + j // 4


def test_division_of_a_sum_with_a_negative_part_is_kept():  # C truncates: (-1)//4 is 0, not -1
    expression = (k * 4 + j - 3) // 4
    assert simplify(expression).op is Ops.IDIV
    assert_same_values(expression, simplify(expression), k, j)


def test_division_of_a_sum_that_may_wrap_is_kept():  # j*4 + (2**31 - 4) wraps to negative once j >= 1
    expression = (j * 4 + (2**31 - 4)) // 4
    assert simplify(expression) is expression
    assert_same_values(expression, simplify(expression), j)


def test_mod_of_a_small_value():
    assert simplify(j % 8) is j
    assert simplify((-j) % 8) is j * -1  # C's % keeps the dividend's sign


def test_mod_of_a_value_below_minus_c_is_kept():  # (j - 10) % 4 is in -3..0, not j - 10
    expression = (j - 10) % 4
    assert simplify(expression).op is Ops.MOD
    assert_same_values(expression, simplify(expression), j)


def test_mod_of_a_sum_drops_the_multiples():
    assert simplify((k * 6 + j) % 6) is j
    assert simplify((i * 5 + j) % 4) is (i + j) % 4


def test_mod_of_a_sum_keeps_negative_factors():  # ((-j)//2)*(-2) >= 0, but ((-j)//2)*2 is not
    expression = (((j * -1) // 2) * -2 + 1) % 4
    assert_same_values(expression, simplify(expression), j)


def test_a_chunks_lane_leaves_division_and_remainder():  # column 8*q + lane of rows 64 wide (a chunk of 8)
    q, lane = thread(96, "q"), thread(8, "lane")
    assert simplify((q * 8 + lane) // 64) is q // 8
    assert simplify((q * 8 + lane) % 64) is (q % 8) * 8 + lane
    for expression in ((q * 8 + lane) // 64, (q * 8 + lane) % 64, (q * 8 + lane + 64) % 48):
        assert_same_values(expression, simplify(expression), q, lane)


def test_a_remainder_that_can_reach_the_multiple_stays():  # 6*i + j with j up to 5: 6 is no divisor of 64
    assert simplify((i * 6 + j) // 64).op is Ops.IDIV
    assert_same_values((i * 6 + j) // 64, simplify((i * 6 + j) // 64), i, j)
    assert_same_values((i * 4 + j) % 16, simplify((i * 4 + j) % 16), i, j)


def test_mod_of_a_product():
    assert simplify((j * 8) % 32) is (j % 4) * 8
    assert simplify((x * 8) % 32) is (x * 8) % 32  # x may be negative


def test_mod_of_an_unknown_sum_is_kept():
    assert simplify((x * 4 + y) % 4) is (x * 4 + y) % 4


# ---- comparisons ----


def test_x_lt_x_is_false():
    assert simplify(x < x) is FALSE


def test_x_ne_x_is_false():
    assert simplify(x.ne(x)) is FALSE


def test_float_self_comparisons_are_kept():  # NaN != NaN
    assert simplify(f.ne(f)) is f.ne(f)
    assert simplify(f < f) is (f < f)


def test_lt_of_a_product():
    assert simplify(i * 4 < 10) is (i < 3)  # i*4 < 10  <=>  i < ceil(10/4)
    assert simplify(i * 4 < 12) is (i < 3)


def test_lt_of_a_sum():
    assert simplify(i + -1 < 5) is (i < 6)


def test_comparisons_that_may_wrap_are_kept():  # x + 1 < 5 is true for x = 2**31 - 1, where x < 4 is not
    assert simplify(x + 1 < 5) is (x + 1 < 5)
    assert simplify(x * 4 < 5) is (x * 4 < 5)


def test_gt_of_a_sum():
    assert simplify(const(2) < i + 1) is (const(1) < i)


def test_not_not():
    assert simplify(b.logical_not().logical_not()) is b


def test_ranges_that_do_not_overlap_decide_ne_and_lt():
    assert simplify(j.ne(i + 6)) is TRUE
    assert simplify((i + 6) < j) is FALSE


# ---- where, and, or, max ----


def test_where_true():
    assert simplify(TRUE.where(x, y)) is x


def test_where_false():
    assert simplify(FALSE.where(x, y)) is y


def test_where_same_branches():
    assert simplify(b.where(f, f)) is f


def test_and_true():
    assert simplify(b & True) is b


def test_and_false():
    assert simplify(b & False) is FALSE


def test_or_false():
    assert simplify(b | False) is b


def test_or_true():
    assert simplify(b | True) is TRUE


def test_and_or_self():
    assert simplify(b & b) is b
    assert simplify(x | x) is x


def test_max_self():
    assert simplify(f.maximum(f)) is f


def test_max_decided_by_bounds():
    assert simplify(j.maximum(0)) is j
    assert simplify(const(-1).maximum(j)) is j


def test_vector_nodes_are_left_alone():
    vec = UOp(Ops.VECTORIZE, dtypes.int.vec(2), (j, k))
    expression = vec + UOp.const(dtypes.int.vec(2), (0, 0))
    assert simplify(expression) is expression


# ---- bounds ----


@pytest.mark.parametrize(
    "expression,expected",
    [
        (const(5), (5, 5)),
        (loop(8), (0, 7)),
        (thread(32), (0, 31)),
        (loop(1), (0, 0)),
        (loop(0), (-(2**31), 2**31 - 1)),  # an empty loop: its variable is never read, and must not fold away
        (j + k, (0, 8)),
        ((j - 3) * (k - 2), (-4, 6)),  # the corners: (-3)(-2), (-3)(1), (2)(-2), (2)(1)
        (-j, (-5, 0)),
        ((j - 3) // 2, (-1, 1)),
        (i // j.maximum(1), (0, 23)),
        (i % 5, (0, 4)),
        ((j - 3) % 8, (-3, 2)),
        ((i - 12) % 5, (-4, 4)),
        (j.maximum(k + 3), (3, 6)),
        (j < 3, (False, True)),
        (j < 6, (True, True)),
        (j.ne(7), (True, True)),
        ((j < 6) & (k < 9), (True, True)),
        ((j < 0) | (k < 2), (False, True)),
        ((j < 3).where(j, k + 10), (0, 13)),
        ((j < 3).cast(dtypes.int), (0, 1)),
        ((j + 1).cast(dtypes.bool), (True, True)),
        ((i * 20).cast(dtypes.int8), (-128, 127)),
        (x, (-(2**31), 2**31 - 1)),
        (x % 4, (-3, 3)),
        (i * (2**30), (-(2**31), 2**31 - 1)),  # may wrap: anything
        (f, (-math.inf, math.inf)),
    ],
)
def test_bounds(expression, expected):
    assert bounds(expression) == expected


def test_bounds_of_a_long_chain_needs_no_recursion():
    total = loop(3)
    for n in range(5000):
        total = total + loop(2, n + 1)
    assert bounds(total) == (0, 5002)


def test_simplify_of_a_long_chain_of_adds_is_linear():  # a sum of 1000 loads and constants, as data code makes
    total = x
    for n in range(1000):
        total = (total + unknown(dtypes.int, n + 10)) + 1
    simplified = simplify(total)
    assert simplified.src[1] is const(1000)


# ---- property: simplify keeps every value, and bounds contain every value ----

VARIABLES = (loop(5, 0), loop(8, 1), thread(4))
SMALL = st.integers(-6, 12) | st.sampled_from([2**30, -(2**31), 2**31 - 1, 1000])


def _binary(op):
    return lambda pair: pair[0].alu(op, pair[1])


@st.composite
def _comparison(draw, children):
    left, right = draw(children), draw(children)
    return left < right if draw(st.booleans()) else left.ne(right)


@st.composite
def _affine(draw):
    """An index-like sum: each variable times a small factor, plus a constant, in a random order."""
    terms = [v * draw(st.sampled_from([0, 1, 2, 3, 4, 8, -1])) for v in VARIABLES]
    terms.append(UOp.const(dtypes.int, draw(st.integers(-8, 8))))
    order = draw(st.permutations(terms))
    total = order[0]
    for term in order[1:]:
        total = total + term
    return total


def _extend(children):
    divisor = st.sampled_from([2, 3, 4, 8]) | st.integers(-3, 7) | st.sampled_from([2**20])
    return st.one_of(
        st.tuples(children, children).map(_binary(Ops.ADD)),
        st.tuples(children, children).map(_binary(Ops.MUL)),
        st.tuples(children, divisor).map(lambda p: p[0] // p[1]),
        st.tuples(children, divisor).map(lambda p: p[0] % p[1]),
        st.tuples(children, st.integers(1, 5)).map(lambda p: p[0] * p[1]),
        children.map(lambda e: -e),
        st.tuples(children, children).map(_binary(Ops.MAX)),
        st.tuples(_comparison(children), children, children).map(lambda p: p[0].where(p[1], p[2])),
        st.tuples(_comparison(children), _comparison(children), children, children).map(
            lambda p: (p[0] & p[1]).where(p[2], p[3])
        ),
    )


index_expressions = st.recursive(
    st.sampled_from(VARIABLES) | SMALL.map(lambda v: UOp.const(dtypes.int, v)) | _affine(), _extend, max_leaves=8
)


@settings(max_examples=300, deadline=None)
@given(index_expressions)
def test_simplify_keeps_values_and_bounds_hold_them(expression):
    simplified = simplify(expression)
    assert simplify(simplified) is simplified, "simplify is not at a fixed point"
    for env in assignments(*VARIABLES):
        before, after = evaluate(expression, env), evaluate(simplified, env)
        assert before[expression] == after[simplified], f"{env}: {expression}\nbecame\n{simplified}"
        for node, value in [*before.items(), *after.items()]:
            low, high = bounds(node)
            assert low <= value <= high, f"{env}: bounds {low, high} miss {value} of\n{node}"
