"""Checks in kernels: where a CHECK's condition fails, the kernel records the check and the bad value.

The lowerer makes each CHECK(value) of the AST CHECK(value, ok), `ok` the condition at that place (uop/check.py);
simplifying drops the checks that always pass (an int8 index into a table of 256 rows, arange's values). Before
linearizing, each remaining one gets the stores that record a failure, gated by `not ok`: the check's id into slot 0
of the error buffer and the value's bits into slot 1. The error buffer is one more buffer argument after the kernel's
own; only kernels with a check take it, so every other kernel is as it was. The linearizer emits a CHECK as its value,
with those stores beside it, inside the loops that compute it.
"""

from __future__ import annotations

from collections import Counter

from glassgrad.codegen.linearize import range_deps
from glassgrad.codegen.vectorize import is_lane
from glassgrad.dtype import dtypes
from glassgrad.uop.check import Check, bits_of, records_failure
from glassgrad.uop.ops import Ops, UOp
from glassgrad.uop.rewrite import PatternMatcher, UPat, graph_rewrite

ERROR_SLOTS = 2  # the failed check's id, then its value's bits (int64 each)


def _failure_stores(value: UOp, ok: UOp, check: Check, errors: UOp) -> list[UOp]:
    """Where `ok` is false: errors[0] = the check's id, errors[1] = the value's bits. For vectors the gate is the
    vector of lanes that failed: the store writes a failed lane's value, if any (tested at once, not lane by lane)."""
    failed = UOp(Ops.CMPNE, ok.dtype, (ok, UOp.const(ok.dtype, True)))  # not ok, lane by lane for a vector
    recorded = (UOp.const(dtypes.int64, check.id), bits_of(value))
    return [UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, errors.dtype, (errors, UOp.const(dtypes.int32, slot), failed)),
                                         stored), check) for slot, stored in enumerate(recorded)]  # fmt: skip


# CHECK(x, ...) -> x: for a copy of a value whose checks are made elsewhere
drop_checks = PatternMatcher([
    (UPat(Ops.CHECK, name="check"), lambda check: check.src[0]),
])  # fmt: skip


def without_checks(u: UOp) -> UOp:
    """`u` with its CHECKs replaced by their values."""
    return graph_rewrite(u, drop_checks)


def _with_failure_stores(errors: UOp, check: UOp, x: UOp, ok: UOp) -> UOp:
    return check.replace(src=(x, *_failure_stores(x, ok, check.arg, errors)))


# CHECK(x, True) = x: a check that always passes costs nothing
passed_checks = PatternMatcher([
    (UPat(Ops.CHECK, src=(UPat.var("x"), UPat(Ops.CONST, arg=True))), lambda x: x),
])  # fmt: skip

# CHECK(x, ok) -> CHECK(x, *stores recording a failure); what it was rewritten to has more sources, and is left alone
failure_stores = PatternMatcher([
    (UPat(Ops.CHECK, src=(UPat.var("x"), UPat.var("ok")), name="check"),
     lambda ctx, check, x, ok: _with_failure_stores(ctx, check, x, ok)),
])  # fmt: skip


def keep_dropped_checks(lowered: UOp, simplified: UOp, simplify: PatternMatcher) -> UOp:
    """`simplified`, the SINK that `simplify` made of `lowered`, with every check it dropped that may still fail.
    Algebra drops a value nothing needs (x // y * 0 is 0, x[i] % 1 is 0), its checks with it; PyTorch tests every
    divisor and index it is given. Each such check becomes a source of the SINK of its own (per vector lane), in a
    REDUCE over the loops it is inside that no store is, so the linearizer opens them; an unused value, so only its
    stores remain."""
    before = [u for u in lowered.toposort() if u.op is Ops.CHECK]
    if not before:
        return simplified
    after = {u for u in simplified.toposort() if u.op is Ops.CHECK}
    if not Counter(u.arg for u in before) - Counter(u.arg for u in after):
        return simplified  # as many of each check as before: none dropped (checks are rare; most kernels stop here)
    alone = graph_rewrite(UOp(Ops.SINK, dtypes.void, tuple(before)), simplify).src
    dropped = [c for c in dict.fromkeys(alone) if c.op is Ops.CHECK and c not in after]
    if not dropped:
        return simplified
    dropped = [lane_check for c in dropped for lane_check in _per_lane(c, simplify)]
    deps, outer = range_deps(UOp(Ops.SINK, dtypes.void, tuple(dropped))), range_deps(simplified)[simplified]
    kept = []
    for check in dropped:
        inner = sorted(deps[check] - outer, key=lambda r: r.arg)
        kept.append(UOp(Ops.REDUCE, check.dtype, (check, *inner), Ops.ADD) if inner else check)
    return simplified.replace(src=simplified.src + tuple(kept))


def _per_lane(check: UOp, simplify: PatternMatcher) -> list[UOp]:
    """A check that depends on a vector lane variable, once per lane (a SINK's own sources are scalar)."""
    lane = next((u for u in check.toposort() if is_lane(u)), None)
    if lane is None:
        return [check]
    lanes = [graph_rewrite(check.substitute({lane: lane.const_like(i)}), simplify) for i in range(lane.arg[1])]
    return [c for c in lanes if c.op is Ops.CHECK]


def record_failures(sink: UOp) -> UOp:
    """The lowered kernel with each CHECK's failure stores, into an error buffer after the kernel's own buffers."""
    nodes = sink.toposort()
    if not any(u.op is Ops.CHECK for u in nodes):
        return sink
    position = sum(u.op is Ops.DEFINE_GLOBAL for u in nodes)
    errors = UOp(Ops.DEFINE_GLOBAL, dtypes.int64.ptr(ERROR_SLOTS), (), position)
    return graph_rewrite(sink, failure_stores, ctx=errors)


def checks_of(program: list[UOp]) -> tuple[Check, ...]:
    """The checks a linear program tests, in order (empty: the kernel takes no error buffer)."""
    return tuple(dict.fromkeys(u.arg for u in program if records_failure(u)))
