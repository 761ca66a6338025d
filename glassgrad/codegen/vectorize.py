"""Vectorizing: the lane variable of a vector UPCAST or UNROLL becomes vector dtypes, vector loads and stores.

The lowerer writes a vector UPCAST as one variable `lane` (0 .. n-1) in the index math. Here every node whose value
depends on it becomes a vector of n lanes: a load whose address steps by one element per lane is one vector load,
any other is n scalar loads gathered into a vector (VECTORIZE); math on vectors stays one op of the vector dtype;
a reduction keeps a vector accumulator; GEP(x, i) reads lane i. Whatever does not depend on the lane stays scalar
and is broadcast where a vector needs it.
"""

from __future__ import annotations

import functools
import operator

from glassgrad.uop.ops import GroupOp, Ops, UOp
from glassgrad.uop.rewrite import PatternMatcher, UPat, graph_rewrite
from glassgrad.uop.symbolic import _as_term, _build_sum, _sum_terms, simplify


def is_lane(u: UOp) -> bool:
    return u.op is Ops.SPECIAL and isinstance(u.arg, tuple) and u.arg[0] == "lane"


def lane_step(idx: UOp, lane: UOp, depends: dict[UOp, bool]) -> int | None:
    """c where idx = base + lane * c with base independent of the lane (lane i reads element base + i * c), else
    None."""
    terms = _sum_terms(idx) or [idx]
    hits = [t for t in terms if depends[t]]
    if len(hits) != 1:
        return None
    base, step = _as_term(hits[0])
    return step if base is lane else None


def steps_by_lane(idx: UOp, lane: UOp, depends: dict[UOp, bool]) -> bool:
    """True when idx = base + lane, with base independent of the lane: lane i reads element base + i."""
    return lane_step(idx, lane, depends) == 1


def _plus(idx: UOp, k: int) -> UOp:
    """idx + k with k added to idx's constant term (idx simplified already: nothing else to fold)."""
    terms = [_as_term(t) for t in (_sum_terms(idx) or [idx])]
    const = sum(f for base, f in terms if base is None)
    return _build_sum(idx, [(base, f) for base, f in terms if base is not None] + [(None, const + k)])


class Vectorizer:
    """Rewrites the nodes that depend on one lane variable into vector nodes, memoized."""

    def __init__(self, sink: UOp, lane: UOp):
        self.lane, self.n = lane, lane.arg[1]
        self.depends: dict[UOp, bool] = {}  # lane i of GEP(x, i) is one value: what reads it is scalar again
        for node in sink.toposort():
            values = node.src[:1] if node.op is Ops.CHECK else node.src  # a CHECK's value is its first source's
            self.depends[node] = node is lane or (node.op is not Ops.GEP and any(self.depends[s] for s in values))
        self.memo: dict[UOp, UOp] = {}
        self.vmemo: dict[UOp, UOp] = {}

    def at_lane(self, u: UOp, i: int) -> UOp:
        """The scalar graph of u at lane i."""
        return simplify(u.substitute({self.lane: self.lane.const_like(i)}))

    def at_lane_0(self, idx: UOp) -> UOp:
        """An address base + lane * step (`lane_step`) at lane 0: its other terms, simplified already."""
        terms = [_as_term(t) for t in _sum_terms(idx) or [idx] if not self.depends[t]]
        return _build_sum(idx, terms)

    def lane_indices(self, index: UOp) -> list[UOp]:
        """The INDEX of each lane. Where the address steps by a constant per lane and no guard changes with it, lane
        i's is lane 0's plus i * step (a simplify per lane was half of beautiful_mnist's lowering time: every store of
        a convolution's 16 output channels, a row of outputs apart)."""
        idx, valid = index.src[1], index.src[2:]
        if any(self.depends[v] for v in valid) or (step := lane_step(idx, self.lane, self.depends)) is None:
            return [self.at_lane(index, i) for i in range(self.n)]
        first = self.at_lane_0(idx)
        return [index.replace(src=(index.src[0], _plus(first, i * step), *valid)) for i in range(self.n)]

    def broadcast(self, u: UOp) -> UOp:
        """u as a vector: its own vector if it depends on the lane, else n copies of it."""
        if self.depends[u]:
            return self.vec(u)
        return UOp(Ops.VECTORIZE, u.dtype.vec(self.n), (self.scalar(u),) * self.n)

    def scalar(self, u: UOp) -> UOp:
        """A node that does not depend on the lane, with the GEPs below it reading vector lanes."""
        if u not in self.memo:
            if u.op is Ops.GEP:
                self.memo[u] = (
                    UOp(Ops.GEP, u.dtype, (self.vec(u.src[0]),), u.arg) if self.depends[u.src[0]] else u.src[0]
                )
            elif u.op is Ops.CHECK and self.depends[u.src[1]]:  # one value, tested in every lane (under a lane's guard)
                ok = self.vec(u.src[1])
                every = functools.reduce(
                    operator.and_, [UOp(Ops.GEP, ok.dtype.scalar, (ok,), i) for i in range(self.n)]
                )
                self.memo[u] = u.replace(src=(self.scalar(u.src[0]), every))
            else:
                self.memo[u] = u.replace(src=tuple(self.scalar(s) for s in u.src)) if u.src else u
        return self.memo[u]

    def gather(self, nodes: list[UOp]) -> UOp:
        return UOp(Ops.VECTORIZE, nodes[0].dtype.vec(self.n), tuple(nodes))

    def contiguous(self, index: UOp) -> UOp | None:
        """For an INDEX that lane i reads at base + i (and with a guard that no lane changes), the INDEX of base."""
        idx, valid = index.src[1], index.src[2:]
        if any(self.depends[v] for v in valid) or not steps_by_lane(idx, self.lane, self.depends):
            return None
        return index.replace(src=(index.src[0], self.at_lane_0(idx), *valid))

    def vec(self, u: UOp) -> UOp:
        if u not in self.vmemo:
            self.vmemo[u] = self._vec(u)
        return self.vmemo[u]

    def _vec(self, u: UOp) -> UOp:
        n = self.n
        if u is self.lane:
            return self.gather([u.const_like(i) for i in range(n)])
        if u.op is Ops.LOAD:
            if (base := self.contiguous(u.src[0])) is not None:
                return UOp(Ops.LOAD, u.dtype.vec(n), (base,))
            return self.gather([u.replace(src=(index,)) for index in self.lane_indices(u.src[0])])
        if u.op is Ops.REDUCE:
            return UOp(Ops.REDUCE, u.dtype.vec(n), (self.vec(u.src[0]), *u.src[1:]), u.arg)
        if u.op in GroupOp.Elementwise:
            return UOp(u.op, u.dtype.vec(n), tuple(self.broadcast(s) for s in u.src), u.arg)
        raise NotImplementedError(f"cannot vectorize {u.op}")

    def store(self, u: UOp) -> list[UOp]:
        """One vector store where lanes write neighbouring elements, else one scalar store per lane."""
        if not self.depends[u]:
            return [self.scalar(u)]
        index, value = u.src
        if (base := self.contiguous(index)) is not None:
            return [UOp(Ops.STORE, u.dtype, (base, self.broadcast(value)), u.arg)]
        value = self.broadcast(value)
        return [UOp(Ops.STORE, u.dtype, (lane_index, UOp(Ops.GEP, value.dtype.scalar, (value,), i)), u.arg)
                for i, lane_index in enumerate(self.lane_indices(index))]  # fmt: skip


# GEP(x, i) -> x where x is a scalar: lane i of a scalar is the scalar
scalar_lanes = PatternMatcher([
    (UPat(Ops.GEP, src=(UPat.var("x"),)), lambda x: x if x.dtype.count == 1 else None),
])  # fmt: skip


def vectorize(sink: UOp) -> UOp:
    """The kernel with its lane variable (if it has one) turned into vector operations."""
    nodes = sink.toposort()
    lane = next((u for u in nodes if is_lane(u)), None)
    if lane is None:  # simplifying removed every use of the lane (no rewrite, nor a VIZ entry, where no GEP is left)
        return graph_rewrite(sink, scalar_lanes) if any(u.op is Ops.GEP for u in nodes) else sink
    v = Vectorizer(sink, lane)
    stores = [new for store in sink.src for new in (v.store(store) if store.op is Ops.STORE else [v.scalar(store)])]
    return sink.replace(src=tuple(stores))
