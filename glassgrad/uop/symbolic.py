"""Symbolic simplification: constant folding and the algebra of index arithmetic, as one PatternMatcher.

Index math is int32 with C semantics: + and * wrap, / truncates toward zero and % takes the dividend's sign. A rule
that needs real integers (no wrap, no negative dividend) asks `bounds` first; int-only algebra never touches floats.
"""

from __future__ import annotations

import functools
import math
import operator
import weakref
from collections.abc import Callable
from typing import Any

from glassgrad.dtype import INTS, dtypes
from glassgrad.uop.alu import exec_alu, exec_bitcast, exec_cast
from glassgrad.uop.ops import GroupOp, Ops, UOp
from glassgrad.uop.rewrite import PatternMatcher, UPat, graph_rewrite

SIGNED_INTS = (dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64)
INTS_AND_BOOL = (*INTS, dtypes.bool)

# ---------------------------------------------------------------------------------------------------------------------
# bounds: the range of values a node can take


def _has_integer_values(u: UOp) -> bool:
    return u.dtype.count == 1 and u.dtype.scalar in INTS_AND_BOOL


def _limits(u: UOp) -> tuple[Any, Any]:
    if not _has_integer_values(u):
        return -math.inf, math.inf
    return dtypes.min(u.dtype), dtypes.max(u.dtype)


def _decided(always: bool, never: bool) -> tuple[bool, bool]:
    """The bounds of a bool that is always True, never True, or either."""
    return (True, True) if always else (False, False) if never else (False, True)


def _corners(f: Callable[[int, int], int], a: tuple[int, int], b: tuple[int, int]) -> tuple[int, int]:
    values = [f(x, y) for x in a for y in b]
    return min(values), max(values)


def _loop_bounds(end: tuple[int, int]) -> tuple[int, int] | None:
    """0 .. end-1; unknown for a loop that may run zero times, since folding its variable to a constant would
    let its body escape the loop and run once."""
    if end[0] < 1 and end[1] <= 1:
        return None
    return 0, end[1] - 1


def _idiv_bounds(u: UOp, x: tuple, d: tuple) -> tuple | None:
    if d[0] <= 0:
        return None
    return _corners(lambda a, b: exec_alu(Ops.IDIV, u.dtype, [a, b]), x, d)  # monotone in each argument


def _mod_bounds(u: UOp, x: tuple, d: tuple) -> tuple | None:
    if d[0] <= 0:
        return None
    if -d[0] < x[0] and x[1] < d[0]:  # |x| < d: x % d = x
        return x
    largest = d[1] - 1  # |x % d| < d, with the sign of x
    return (0 if x[0] >= 0 else max(x[0], -largest)), (0 if x[1] <= 0 else min(x[1], largest))


def _where_bounds(u: UOp, cond: tuple, a: tuple, b: tuple) -> tuple:
    if cond[0]:
        return a
    if not cond[1]:
        return b
    return min(a[0], b[0]), max(a[1], b[1])


def _cast_bounds(u: UOp, x: tuple) -> tuple | None:
    if not _has_integer_values(u.src[0]):
        return None
    if u.dtype == dtypes.bool:
        return _decided(x[0] > 0 or x[1] < 0, x[0] == x[1] == 0)
    return int(x[0]), int(x[1])


def _logic_bounds(combine: Callable[[bool, bool], bool]) -> Callable:
    def bounds_of(u: UOp, a: tuple, b: tuple) -> tuple | None:
        return (combine(a[0], b[0]), combine(a[1], b[1])) if u.dtype == dtypes.bool else None

    return bounds_of


# (lowest, highest) of each op, from the node and the bounds of its sources; None where unknown.
_bounds_rules: dict[Ops, Callable[..., tuple | None]] = {
    Ops.CONST: lambda u: (u.arg, u.arg),
    Ops.DEFINE_VAR: lambda u: (u.arg[1], u.arg[2]),  # a Variable: its range (uop/variable.py)
    Ops.BIND: lambda u, var, value: var,
    Ops.RANGE: lambda u, end, *thread: _loop_bounds(end),
    Ops.SPECIAL: lambda u: _loop_bounds((u.arg[1], u.arg[1])) if isinstance(u.arg[1], int) else None,
    Ops.ADD: lambda u, a, b: (a[0] + b[0], a[1] + b[1]),
    Ops.MUL: lambda u, a, b: _corners(operator.mul, a, b),
    Ops.NEG: lambda u, a: (-a[1], -a[0]),
    Ops.IDIV: _idiv_bounds,
    Ops.MOD: _mod_bounds,
    Ops.MAX: lambda u, a, b: (max(a[0], b[0]), max(a[1], b[1])),
    Ops.CMPLT: lambda u, a, b: _decided(a[1] < b[0], a[0] >= b[1]),
    Ops.CMPNE: lambda u, a, b: _decided(a[1] < b[0] or b[1] < a[0], a[0] == a[1] == b[0] == b[1]),
    Ops.AND: _logic_bounds(lambda a, b: a and b),
    Ops.OR: _logic_bounds(lambda a, b: a or b),
    Ops.WHERE: _where_bounds,
    Ops.CAST: _cast_bounds,
}

_bounds_cache: weakref.WeakKeyDictionary[UOp, tuple] = weakref.WeakKeyDictionary()


def _node_bounds(u: UOp) -> tuple:
    limits = _limits(u)
    rule = _bounds_rules.get(u.op)
    if rule is None or not _has_integer_values(u):
        return limits
    found = rule(u, *(_bounds_cache[s] for s in u.src))
    if found is None or found[0] < limits[0] or found[1] > limits[1]:
        return limits  # unknown, or the math may wrap around: then any value of the dtype is possible
    return (bool(found[0]), bool(found[1])) if u.dtype == dtypes.bool else found


def _reads_source_bounds(u: UOp) -> bool:
    return u.op in _bounds_rules and _has_integer_values(u)


def bounds(u: UOp) -> tuple[Any, Any]:
    """(lowest, highest) value `u` can take, cached per node: exact for index math, the dtype's limits where unknown."""
    if (found := _bounds_cache.get(u)) is not None:
        return found
    stack = [u]  # sources before their users, without recursion: a long chain of adds is deeper than Python's stack
    while stack:
        node = stack[-1]
        missing = [s for s in node.src if s not in _bounds_cache] if _reads_source_bounds(node) else []
        if missing:
            stack.extend(missing)
            continue
        stack.pop()
        _bounds_cache[node] = _node_bounds(node)
    return _bounds_cache[u]


def _fits(u: UOp, *values: int) -> bool:
    """Whether every value is one that `u`'s dtype holds, so computing it did not wrap."""
    return all(dtypes.min(u.dtype) <= v <= dtypes.max(u.dtype) for v in values)


# ---------------------------------------------------------------------------------------------------------------------
# sums of terms: an int sum is a list of terms base*factor, a constant being a term with no base


# Index sums are short. A longer int sum is data arithmetic: the rules that read a whole sum leave it as it is, so
# that simplifying a chain of n adds costs n steps, not n*n.
MAX_TERMS = 64


def _sum_terms(u: UOp) -> list[UOp] | None:
    """The terms of a tree of adds, left to right; None for a sum of more than MAX_TERMS terms."""
    terms, stack, adds = [], [u], 0
    while stack:
        node = stack.pop()
        if node.op is not Ops.ADD:
            terms.append(node)
            continue
        if (adds := adds + 1) >= MAX_TERMS:
            return None
        stack.extend(reversed(node.src))
    return terms


def _as_term(u: UOp) -> tuple[UOp | None, int]:
    """u as (base, factor) with u = base*factor; a constant is (None, its value)."""
    if u.op is Ops.CONST:
        return None, u.arg
    if u.op is Ops.MUL and u.src[1].op is Ops.CONST:
        return u.src[0], u.src[1].arg
    return u, 1


def _build_sum(like: UOp, terms: list[tuple[UOp | None, int]]) -> UOp:
    """The sum of (base, factor) terms, left-nested, in the given order; 0 for no terms."""
    nodes = [like.const_like(f) if base is None else base if f == 1 else base * f for base, f in terms if f != 0]
    return functools.reduce(operator.add, nodes) if nodes else like.const_like(0)


def collect_like_terms(x: UOp) -> UOp | None:
    """a*u + ... + b*u = (a+b)*u + ...: one term per base, in order of first appearance, the constant last."""
    if (nodes := _sum_terms(x)) is None:
        return None
    terms = [_as_term(t) for t in nodes]
    factors: dict[UOp | None, int] = {}
    for base, f in terms:
        factors[base] = factors.get(base, 0) + f
    constant = factors.pop(None, 0)
    collected = [(base, f) for base, f in factors.items() if f != 0] + ([(None, constant)] if constant else [])
    return None if collected == terms else _build_sum(x, collected)


def fold_div_mod_pairs(x: UOp) -> UOp | None:
    """(y//c)*(c*k) + (y%c)*k = y*k, anywhere in a sum: C defines % so that y == (y/c)*c + y%c."""
    if (nodes := _sum_terms(x)) is None:
        return None
    terms = [_as_term(t) for t in nodes]
    if not any(base is not None and base.op is Ops.IDIV for base, _ in terms):
        return None
    for i, (base, k) in enumerate(terms):
        if base is None or base.op is not Ops.MOD or base.src[1].op is not Ops.CONST or base.src[1].arg <= 0:
            continue
        y, c = base.src[0], base.src[1].arg
        partner = (simplify(y // c), c * k)  # the quotient as this simplifier writes it, e.g. (z//a)//c as z//(a*c)
        if partner in terms:
            j = terms.index(partner)
            rest = [t for n, t in enumerate(terms) if n not in (i, j)]
            return _build_sum(x, [(y, k), *rest])
    return None


def _nonnegative_terms(x: UOp) -> list[tuple[UOp | None, int]] | None:
    """The terms of a signed int sum if each is >= 0 and the sum cannot wrap, so C's / and % are floor's."""
    if x.dtype.scalar not in SIGNED_INTS or (terms := _sum_terms(x)) is None:
        return None
    lows, highs = zip(*map(bounds, terms), strict=True)
    if min(lows) < 0 or not _fits(x, sum(highs)):
        return None
    return [_as_term(t) for t in terms]


def divide_sum(x: UOp, c: UOp) -> UOp | None:
    """(q*c + r) // c = q + r//c when q*c >= 0 and r >= 0: the terms whose factor c divides leave the division."""
    if c.arg <= 0 or (terms := _nonnegative_terms(x)) is None:
        return None
    quotient = [(base, f // c.arg) for base, f in terms if f % c.arg == 0]
    remainder = [(base, f) for base, f in terms if f % c.arg != 0]
    if not quotient:
        return None
    if not remainder:
        return _build_sum(x, quotient)
    return _build_sum(x, quotient) + _build_sum(x, remainder) // c


def reduce_sum_mod(x: UOp, c: UOp) -> UOp | None:
    """(a*u + r) % c = ((a % c)*u + r) % c for u >= 0, a > 0 and every term >= 0; a term of factor k*c drops out."""
    if c.arg <= 0 or (terms := _nonnegative_terms(x)) is None:
        return None
    reduced = [(base, f % c.arg) if f > 0 else (base, f) for base, f in terms]
    if reduced == terms:
        return None
    return _build_sum(x, reduced) % c


def _small_remainder(x: UOp, c: UOp) -> tuple[list, list] | None:
    """x's terms as (multiples of g, the rest) for the largest g dividing c (1 < g < c) whose multiples leave a rest
    in 0 .. g-1, every term >= 0: a chunk's position 8*q plus a lane 0..7 over a 64-wide row."""
    if c.arg <= 1 or (terms := _nonnegative_terms(x)) is None:
        return None
    highs = [bounds(t)[1] for t in _sum_terms(x)]
    for g in (d for d in range(c.arg - 1, 1, -1) if c.arg % d == 0):
        big = [t for t in terms if t[1] % g == 0]
        if big and len(big) < len(terms) and sum(h for t, h in zip(terms, highs) if t[1] % g) < g:
            return big, [t for t in terms if t[1] % g]
    return None


def divide_small_remainder(x: UOp, c: UOp) -> UOp | None:
    """(g*u + r) // c = (g*u) // c when g divides c and 0 <= r < g."""
    return None if (found := _small_remainder(x, c)) is None else _build_sum(x, found[0]) // c


def mod_small_remainder(x: UOp, c: UOp) -> UOp | None:
    """(g*u + r) % c = (g*u) % c + r when g divides c and 0 <= r < g."""
    return None if (found := _small_remainder(x, c)) is None else _build_sum(x, found[0]) % c + _build_sum(x, found[1])


def mod_of_product(x: UOp, c1: UOp, c2: UOp) -> UOp | None:
    """(x*k) % (n*k) = (x % n)*k for x >= 0 where x*k cannot wrap."""
    low, high = bounds(x)
    if c1.arg <= 0 or c2.arg % c1.arg or low < 0 or not _fits(x, high * c1.arg):
        return None
    return (x % (c2.arg // c1.arg)) * c1.arg


# ---------------------------------------------------------------------------------------------------------------------
# the rules that need a look at bounds or at constants


def fold_constants(x: UOp) -> UOp:
    """op(c1, c2, ...) = its value, computed as the kernel would compute it."""
    return x.const_like(exec_alu(x.op, x.dtype, [s.arg for s in x.src]))


def fold_known_value(x: UOp) -> UOp | None:
    """A node whose bounds hold one value is that value (as x//8 = 0 when 0 <= x < 8, or x < 10 when x < 8)."""
    low, high = bounds(x)
    return x.const_like(low) if low == high else None


def mod_of_small(x: UOp, c: UOp) -> UOp | None:
    low, high = bounds(x)
    return x if c.arg > 0 and -c.arg < low and high < c.arg else None


def nested_div(x: UOp, a: UOp, b: UOp) -> UOp | None:
    if a.arg <= 0 or b.arg <= 0 or not _fits(x, a.arg * b.arg):
        return None
    return x // (a.arg * b.arg)


def div_of_product(x: UOp, c1: UOp, c2: UOp) -> UOp | None:
    low, high = bounds(x)
    if c2.arg <= 0 or not _fits(x, low * c1.arg, high * c1.arg):
        return None
    if c1.arg % c2.arg == 0:
        return x * (c1.arg // c2.arg)
    if c1.arg > 0 and c2.arg % c1.arg == 0:
        return x // (c2.arg // c1.arg)
    return None


def lt_of_product(x: UOp, c: UOp, d: UOp) -> UOp | None:
    low, high = bounds(x)
    if c.arg <= 0 or not _fits(x, low * c.arg, high * c.arg):
        return None
    return x < -(-d.arg // c.arg)  # ceil(d / c)


def lt_of_sum(x: UOp, c: UOp, d: UOp) -> UOp | None:
    low, high = bounds(x)
    if not _fits(x, low + c.arg, high + c.arg, d.arg - c.arg):
        return None
    return x < d.arg - c.arg


def gt_of_sum(x: UOp, c: UOp, d: UOp) -> UOp | None:
    low, high = bounds(x)
    if not _fits(x, low + c.arg, high + c.arg, d.arg - c.arg):
        return None
    return x.const_like(d.arg - c.arg) < x


def max_by_bounds(x: UOp, y: UOp) -> UOp | None:
    return x if bounds(x)[0] >= bounds(y)[1] else None


def constant_last(x: UOp, c: UOp, y: UOp) -> UOp | None:
    return (x + y) + c if y.op is not Ops.CONST else None


def constant_to_the_right(x: UOp, c: UOp, y: UOp) -> UOp | None:
    return x.replace(src=(y, c)) if y.op is not Ops.CONST else None


def _scalars_only(rule: Callable[..., UOp | None]) -> Callable[..., UOp | None]:
    """Rules here reason about one lane; vector nodes (with tuple constants) are left to the devectorizer."""

    @functools.wraps(rule)
    def guarded(**nodes: UOp) -> UOp | None:
        return rule(**nodes) if all(n.dtype.count == 1 for n in nodes.values()) else None

    return guarded


x_int = UPat.var("x", INTS)
x_bool = UPat.var("x", dtypes.bool)
c, c1, c2, d = UPat.cvar("c"), UPat.cvar("c1"), UPat.cvar("c2"), UPat.cvar("d")
FALSE = UOp.const(dtypes.bool, False)

_rules: list[tuple[UPat, Callable[..., UOp | None]]] = [
    # ---- constants ----
    (UPat(GroupOp.ALU, src=UPat(Ops.CONST), name="x"), fold_constants),  # op(c1, c2) = its value
    (c.cast(name="x"), lambda c, x: x.const_like(exec_cast(c.arg, c.dtype, x.dtype))),  # cast(c) = its value
    (UPat(Ops.BITCAST, src=(c,), name="x"), lambda c, x: x.const_like(exec_bitcast(c.arg, c.dtype, x.dtype))),
    (UPat(GroupOp.ALU | {Ops.CAST}, INTS_AND_BOOL, name="x"), fold_known_value),  # min(x) == max(x) = v: x = v
    # ---- canonical order: constants on the right, int negation as a factor ----
    (UPat(GroupOp.Commutative, src=(c, UPat.var("y")), name="x"), constant_to_the_right),  # c + y = y + c
    (UPat(Ops.NEG, src=(x_int,)), lambda x: x * -1),  # -x = x*(-1), so sums see it as a term
    (UPat(Ops.NEG, src=(UPat(Ops.NEG, src=(UPat.var("x"),)),)), lambda x: x),  # -(-x) = x
    (UPat.var("x").cast(name="y"), lambda x, y: x if x.dtype == y.dtype else None),  # cast of x to x's dtype = x
    # ---- identities ----
    (x_int + 0, lambda x: x),  # x + 0 = x  (not for floats: -0.0 + 0.0 = 0.0)
    (UPat.var("x") * 1, lambda x: x),  # x * 1 = x
    (x_int * 0, lambda x: x.const_like(0)),  # x * 0 = 0  (not for floats: 0 * inf = nan)
    (x_int // 1, lambda x: x),  # x // 1 = x
    (x_int % 1, lambda x: x.const_like(0)),  # x % 1 = 0
    # ---- sums and products of ints (a ring: true even when they wrap) ----
    ((x_int + c1) + c2, lambda x, c1, c2: x + (c1.arg + c2.arg)),  # (x + c1) + c2 = x + (c1 + c2)
    ((x_int + c) + UPat.var("y"), constant_last),  # (x + c) + y = (x + y) + c
    (UPat(Ops.ADD, INTS, name="x"), collect_like_terms),  # a*u + v + b*u = (a+b)*u + v
    (UPat(Ops.ADD, INTS, name="x"), fold_div_mod_pairs),  # (y//c)*c + y%c = y
    ((x_int * c1) * c2, lambda x, c1, c2: x * (c1.arg * c2.arg)),  # (x*c1)*c2 = x*(c1*c2)
    ((x_int + UPat.var("y")) * c, lambda x, y, c: x * c + y * c),  # (x + y)*c = x*c + y*c
    # ---- division and remainder by a constant ----
    ((x_int // UPat.cvar("a")) // UPat.cvar("b"), nested_div),  # (x//a)//b = x//(a*b)  (a, b > 0)
    ((x_int * c1) // c2, div_of_product),  # (x*k*c)//c = x*k,  (x*c)//(k*c) = x//k  (no wrap)
    (x_int // c, divide_sum),  # (q*c + r)//c = q + r//c  (q, r >= 0)
    (x_int // c, divide_small_remainder),  # (g*u + r)//c = (g*u)//c  (g divides c, 0 <= r < g)
    (x_int % c, mod_of_small),  # x % c = x  when |x| < c
    (x_int % c, reduce_sum_mod),  # (q*c + r) % c = r % c  (q, r >= 0)
    (x_int % c, mod_small_remainder),  # (g*u + r) % c = (g*u) % c + r  (g divides c, 0 <= r < g)
    ((x_int * c1) % c2, mod_of_product),  # (x*k) % (n*k) = (x % n)*k  (x >= 0, no wrap)
    # ---- comparisons ----
    (x_int < UPat.var("x"), lambda x: FALSE),  # x < x = False  (not for floats: NaN)
    (x_int.ne(UPat.var("x")), lambda x: FALSE),  # x != x = False  (not for floats: NaN)
    ((x_int * c) < d, lt_of_product),  # x*c < d  <=>  x < ceil(d/c)  (c > 0)
    ((x_int + c) < d, lt_of_sum),  # x + c < d  <=>  x < d - c
    (d < (x_int + c), gt_of_sum),  # d < x + c  <=>  d - c < x
    (x_bool.ne(True).ne(True), lambda x: x),  # not (not x) = x
    # ---- where, and, or, max ----
    (UPat.const(dtypes.bool, True).where(UPat.var("a"), UPat.var("b")), lambda a, b: a),  # where(True, a, b) = a
    (UPat.const(dtypes.bool, False).where(UPat.var("a"), UPat.var("b")), lambda a, b: b),  # where(False, a, b) = b
    (UPat.var().where(UPat.var("a"), UPat.var("a")), lambda a: a),  # where(c, a, a) = a
    (x_bool & True, lambda x: x),  # x and True = x
    (x_bool & False, lambda x: x.const_like(False)),  # x and False = False
    (x_bool | False, lambda x: x),  # x or False = x
    (x_bool | True, lambda x: x.const_like(True)),  # x or True = True
    (UPat.var("x", INTS_AND_BOOL) & UPat.var("x"), lambda x: x),  # x & x = x
    (UPat.var("x", INTS_AND_BOOL) | UPat.var("x"), lambda x: x),  # x | x = x
    (UPat.var("x").maximum(UPat.var("x")), lambda x: x),  # max(x, x) = x
    (x_int.maximum(UPat.var("y")), max_by_bounds),  # max(x, y) = x  when min(x) >= max(y)
]

symbolic = PatternMatcher([(pattern, _scalars_only(rule)) for pattern, rule in _rules])


def simplify(u: UOp) -> UOp:
    """`u` with constants folded and index arithmetic simplified."""
    return graph_rewrite(u, symbolic)
