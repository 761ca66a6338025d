"""uop/operators.py: one set of Python operators builds a UOp and the UPat that matches it."""

import operator

import pytest

from glassgrad.dtype import dtypes
from glassgrad.uop import Ops
from glassgrad.uop.ops import UOp
from glassgrad.uop.rewrite import UPat

BINARY = [
    (operator.add, Ops.ADD), (operator.mul, Ops.MUL), (operator.floordiv, Ops.IDIV), (operator.mod, Ops.MOD),
    (operator.and_, Ops.AND), (operator.or_, Ops.OR), (operator.xor, Ops.XOR), (operator.lt, Ops.CMPLT),
    (lambda a, b: a.maximum(b), Ops.MAX), (lambda a, b: a.ne(b), Ops.CMPNE),
]  # fmt: skip


@pytest.mark.parametrize("fn, op", BINARY, ids=[op.name for _, op in BINARY])
def test_an_operator_builds_the_node_its_pattern_matches(fn, op):
    x = UOp(Ops.SPECIAL, dtypes.int, (), ("x", 8))
    node = fn(x, 3)
    assert node.op is op and node.src == (x, x.const_like(3))
    pattern = fn(UPat.var("x"), 3)
    assert pattern.match(node, {}) == [{"x": x}]
    assert pattern.match(fn(x, 4), {}) == []  # the constant is part of the pattern


@pytest.mark.parametrize("fn, op", [(operator.add, Ops.ADD), (operator.mul, Ops.MUL), (operator.gt, Ops.CMPLT)])
def test_reversed_operators_put_the_constant_first(fn, op):
    x = UOp(Ops.SPECIAL, dtypes.int, (), ("x", 8))
    node = fn(3, x)  # 3 + x, 3 * x, 3 > x (x < 3 is CMPLT(x, 3); 3 > x is the same node)
    expected = (x, x.const_like(3)) if fn is operator.gt else (x.const_like(3), x)
    assert node.op is op and node.src == expected
    assert fn(3, UPat.var("x")).match(node, {}) == [{"x": x}]
