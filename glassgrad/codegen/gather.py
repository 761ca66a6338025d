"""A sum over a one-hot mask is an indexed load.

Gathering, embedding lookups and advanced indexing are written with primitive ops as
`sum_r where(r == e, v(r), 0)`: compare every position r with the wanted index e and keep the match.
As written that reads all n positions; this rule turns it into the one load `v(e)`, guarded by 0 <= e < n.
"""

from __future__ import annotations

from glassgrad.codegen.checks import without_checks
from glassgrad.codegen.linearize import range_deps
from glassgrad.codegen.lowerer import guard_loads
from glassgrad.dtype import dtypes
from glassgrad.uop.ops import Ops, UOp
from glassgrad.uop.rewrite import PatternMatcher, UPat, graph_rewrite


def _index_compared_with(cond: UOp, r: UOp) -> UOp | None:
    """For cond = (a == b) with one side the loop variable r (maybe cast), the other side as an int32 index."""
    if cond.op is not Ops.CMPNE or cond.src[1].op is not Ops.CONST or cond.src[1].arg is not True:
        return None
    ne = cond.src[0]
    if ne.op is not Ops.CMPNE:
        return None
    for a, b in (ne.src, ne.src[::-1]):
        if b is r or (b.op is Ops.CAST and b.src[0] is r):
            if r in range_deps(a)[a]:
                return None
            return a if a.dtype == dtypes.int32 else a.cast(dtypes.int32)
    return None


def _one_hot_condition(cond: UOp, r: UOp) -> tuple[UOp, UOp | None] | None:
    """For cond = (r == e) & c & ..., with no c depending on r: e (as _index_compared_with gives it) and the other
    conditions together (None where there are none): a cross-entropy's target compare, masked by ignore_index."""
    if cond.op is not Ops.AND:
        return None if (e := _index_compared_with(cond, r)) is None else (e, None)
    for a, b in (cond.src, cond.src[::-1]):
        if (found := _one_hot_condition(a, r)) is not None and r not in range_deps(b)[b]:
            return found[0], b if found[1] is None else found[1] & b
    return None


def collapse_one_hot_sum(red: UOp) -> UOp | None:
    """sum_r where(r == e & c, v(r), 0)  ->  where(0 <= e < n & c, v(e), 0), for conditions c that r does not change;
    over one of the sum's loops where it has several (a loss summed over the rows and the classes of a batch), and
    through casts and through sums of such selects (the rows an UNROLL puts side by side)."""
    if red.arg is not Ops.ADD:
        return None
    for r in red.src[1:]:
        if len(r.src) == 1 and (value := _collapsed(red.src[0], r)) is not None:  # not a loop threads share
            rest = tuple(s for s in red.src[1:] if s is not r)
            return red.replace(src=(value, *rest)) if rest else value
    return None


def _collapsed(x: UOp, r: UOp) -> UOp | None:
    """The sum of x over loop r as one value, where x is a one-hot select on r (maybe cast: a sum of small ints widened
    first, labels[samples] of uint8), or a sum of such; else None."""
    if x.op is Ops.ADD:
        parts = [_collapsed(s, r) for s in x.src]
        return None if None in parts else parts[0] + parts[1]
    cast = x if x.op is Ops.CAST else None
    where = x.src[0] if cast is not None else x
    if where.op is not Ops.WHERE or where.src[2].op is not Ops.CONST or where.src[2].arg != 0:
        return None
    cond, v, zero = where.src
    if cast is not None:  # the cast goes onto the value (a cast of 0 is 0)
        v, zero = cast.replace(src=(v,)), cast.const_like(0)
    if (found := _one_hot_condition(cond, r)) is None:
        return None
    e, also = found
    n = r.src[0].arg
    deps = range_deps(v)
    changed = {node for node in deps if node.op is Ops.INDEX and r in deps[node]}
    picked = guard_loads(v, in_range(e, n), changed.__contains__).substitute({r: e})  # no out-of-range read
    # e's checks (CHECK nodes) are made beside the guard of the loads at e (for vector lanes: lane by lane, where that
    # guard is tested anyway), and the select reads e unchecked; where no load reads at e, the select checks it
    kept = in_range(without_checks(e) if changed else e, n)
    return (kept if also is None else kept & also).where(picked, zero)


def in_range(e: UOp, n: int) -> UOp:
    """0 <= e < n."""
    return (e < n) & (e < 0).logical_not()


collapse_gathers = PatternMatcher([(UPat(Ops.REDUCE, name="red"), collapse_one_hot_sum)])


def fold_gathers(sink: UOp) -> tuple[UOp, frozenset[int]]:
    """A lowered kernel with this rule applied, and the loops (RANGE args) it folded into loads: no loop is left to
    split, unroll or chunk there (the heuristics ask this, so that they treat a gather as the load it becomes)."""
    folded = graph_rewrite(sink, collapse_gathers)
    return folded, frozenset(_loops(sink) - _loops(folded))


def _loops(sink: UOp) -> set[int]:
    return {u.arg for u in sink.toposort() if u.op is Ops.RANGE}
