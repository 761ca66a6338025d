"""Linearizing: a lowered kernel graph becomes a flat program, with loops opened and closed in order."""

from __future__ import annotations

from glassgrad.codegen.lowerer import reduce_identity
from glassgrad.dtype import dtypes
from glassgrad.uop.ops import Ops, UOp


def range_deps(sink: UOp) -> dict[UOp, frozenset[UOp]]:
    """For every node, the loop variables its value depends on (a REDUCE no longer depends on its own loops)."""
    deps: dict[UOp, frozenset[UOp]] = {}
    for node in sink.toposort():
        if node.op is Ops.RANGE:
            deps[node] = frozenset([node])
            continue
        inner = frozenset().union(*(deps[s] for s in node.src))
        deps[node] = inner - frozenset(node.src[1:]) if node.op is Ops.REDUCE else inner
    return deps


class Linearizer:
    """Emits each node once, after its sources, inside exactly the loops it depends on."""

    def __init__(self, sink: UOp, chain_sums: bool = False):
        self.chain_sums = chain_sums
        self.deps = range_deps(sink)
        # (a REDUCE over a GROUP's thread variables combines the threads' partial results: the renderer's job)
        self.reduces = [node for node in sink.toposort() if node.op is Ops.REDUCE and node.src[1].op is Ops.RANGE]
        self.program: list[UOp] = []
        self.emitted: dict[UOp, UOp] = {}
        self.open: set[UOp] = set()
        self.accumulators = 0

    def emit(self, node: UOp) -> UOp:
        if node in self.emitted:
            return self.emitted[node]
        if node.op is Ops.REDUCE and node.src[1].op is Ops.RANGE:
            result = self._emit_reduce(node)
        elif node.op is Ops.CHECK:  # its value, with the stores that record a failure (codegen/checks.py) beside it
            for store in node.src[1:]:
                self.emit(store)
            result = self.emit(node.src[0])
        else:
            result = node.replace(src=tuple(self.emit(s) for s in node.src))
            self.program.append(result)
        self.emitted[node] = result
        return result

    def _open_loops(self, ranges: list[UOp]) -> None:
        for r in ranges:
            for s in r.src:  # its size, and the thread variable of a loop that a block's threads share
                self.emit(s)
            self.program.append(r)
            self.emitted[r] = r
            self.open.add(r)

    def _close_loops(self, ranges: list[UOp]) -> None:
        for r in reversed(ranges):
            self.program.append(UOp(Ops.ENDRANGE, dtypes.void, (r,)))
            self.open.discard(r)
        # values computed inside a loop end with it: a later loop over the same range computes its own
        closed = frozenset(ranges)
        for node in [n for n in self.emitted if self.deps.get(n, frozenset()) & closed]:
            del self.emitted[node]

    def _emit_ready(self, root: UOp) -> None:
        """Emit every node under `root` that needs no loop beyond the open ones (loop-invariant code first)."""
        for node in root.toposort():
            if node not in self.emitted and node.op is not Ops.RANGE and self.deps[node] <= self.open:
                self.emit(node)

    def _emit_reduce(self, node: UOp) -> UOp:
        """acc = identity; for (ranges) { acc = acc op value }; users then read acc.

        Every other reduction over the same loops and inside the same outer loops joins it with its own accumulator."""
        ranges = list(node.src[1:])
        # siblings join only if they need exactly the same outer loops: one needing fewer would be recomputed in a
        # loop it does not depend on, and its accumulator would be out of scope where the outer code reads it
        group = [r for r in self.reduces if r.src[1:] == node.src[1:] and r not in self.emitted
                 and self.deps[r] == self.deps[node]]  # fmt: skip
        for member in group:
            self._emit_ready(member.src[0])
        accs = []
        for member in group:
            init = self.emit(member.const_like(reduce_identity(member.arg, member.dtype)))
            accs.append(UOp(Ops.DEFINE_ACC, member.dtype, (init,), arg=self.accumulators))
            self.accumulators += 1
            self.program.append(accs[-1])
        self._open_loops(ranges)
        for member, acc in zip(group, accs):
            update = self._update(member, acc)
            self.program += [update, UOp(Ops.ASSIGN, member.dtype, (acc, update))]
        self._close_loops(ranges)
        for member, acc in zip(group, accs):
            self.emitted[member] = acc
        return self.emitted[node]

    def _update(self, member: UOp, acc: UOp) -> UOp:
        """acc op value; a float sum of products accumulates with MULACC, which a renderer may fuse (as BLAS does).

        With `chain_sums`, a float sum's value that is itself a sum (the unrolled terms of its loop, added as a tree)
        goes into the accumulator term by term: each product is one multiply-add, where the tree took a multiply and
        an add (a GPU, with many accumulators a thread, has no use for the tree's shorter chain)."""
        value = member.src[0]
        floats = member.arg is Ops.ADD and member.dtype.scalar in (dtypes.float32, dtypes.float64)
        terms = _sum_leaves(value) if floats and self.chain_sums else [value]
        for i, term in enumerate(terms):
            if i:  # the caller appends the last update
                self.program.append(acc)
            if floats and term.op is Ops.MUL:
                acc = UOp(Ops.MULACC, member.dtype, (self.emit(term.src[0]), self.emit(term.src[1]), acc))
            else:
                acc = acc.alu(member.arg, self.emit(term))
        return acc


def _sum_leaves(value: UOp) -> list[UOp]:
    """The terms of a tree of ADDs, left to right."""
    return [t for s in value.src for t in _sum_leaves(s)] if value.op is Ops.ADD else [value]


def linearize(sink: UOp, chain_sums: bool = False) -> list[UOp]:
    """The program for a lowered SINK: buffer definitions, then the output loops around the stores (`chain_sums`: see
    Linearizer._update)."""
    lin = Linearizer(sink, chain_sums)
    # every buffer argument, in argument order: the caller passes buffers by position
    for node in sorted((n for n in sink.toposort() if n.op is Ops.DEFINE_GLOBAL), key=lambda n: n.arg):
        lin.emit(node)
    out_ranges = sorted({r for r in lin.deps[sink]}, key=lambda r: r.arg)
    lin._open_loops(out_ranges)
    for store in sink.src:
        lin._emit_ready(store)
        lin.emit(store)
    lin._close_loops(out_ranges)
    return lin.program
