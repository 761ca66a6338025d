"""The live tensors, and what the nodes of their graphs stand for now.

Every Tensor is listed here while it lives. Realizing or kernelizing a graph replaces some of its nodes (by a
BUFFER, or the ASSIGN(BUFFER, KERNEL) that will fill one): `become` points every live tensor that names such a node
at what replaced it, and `current` rebuilds an older graph over the replacements.

An assign overwrites its buffer in place, so a lazy tensor that reads the buffer must be computed before the assign
runs: `readers_of_overwritten` (for a realize) and `readers_of_buffers` (for a TinyJit replay) name them, and the
caller realizes them first, so that each keeps the value it was built to have, as in eager execution. A tensor that
is the buffer itself or a view of it is no reader: it shares the buffer's storage, as a PyTorch view does.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

from glassgrad.dtype import dtypes
from glassgrad.engine.realize import _buffers
from glassgrad.uop.ops import Ops, UOp

if TYPE_CHECKING:
    from glassgrad.tensor import Tensor

# Every live Tensor, so that realizing one graph can point all tensors that share it at the result.
_all_tensors: dict[int, weakref.ref[Tensor]] = {}
# Nodes that have been kernelized or realized, and what stands for them now.
replaced: weakref.WeakKeyDictionary[UOp, UOp] = weakref.WeakKeyDictionary()


def register(t: Tensor) -> None:
    """List a new tensor among the live ones (until it is collected)."""
    _all_tensors[id(t)] = weakref.ref(t, lambda _, key=id(t): _all_tensors.pop(key, None))


def live_tensors() -> list[Tensor]:
    """Every tensor alive now."""
    return [t for ref in list(_all_tensors.values()) if (t := ref()) is not None]


def pending_assigns() -> list[Tensor]:
    """Live tensors with an assign that has not run yet."""
    return [t for ref in list(_all_tensors.values()) if (t := ref()) is not None and t.uop.op is Ops.ASSIGN]


def resolve(node: UOp) -> UOp:
    """What a node stands for now, following realized and kernelized replacements."""
    while node in replaced:
        node = replaced[node]
    return node


def current_map(root: UOp) -> dict[UOp, UOp]:
    """For every node of a graph, what stands for it now: realized or kernelized nodes are replaced, and the nodes
    above them rebuilt. Each rebuilt node is remembered, so a tensor still pointing at the old node follows it."""
    new: dict[UOp, UOp] = {}
    for node in root.toposort():
        if node not in new:
            _current_node(node, new)
    return new


def _current_node(node: UOp, new: dict[UOp, UOp]) -> None:
    """Put what stands for `node` now into `new`, whose entries cover its sources already. What replaced a node
    may itself have parts replaced since (ASSIGN(BUFFER, KERNEL)): its graph is brought up to date in the same pass,
    so a part shared by many replaced nodes is walked once."""
    if node in replaced:
        target = resolve(node)
        if target.src:
            for part in target.toposort(enter=lambda n: n not in new):
                if part not in new:
                    _current_node(part, new)
        new[node] = new[target] if target.src else target
        return
    src = tuple(new[s] for s in node.src)
    new[node] = node if src == node.src else node.replace(src=src)
    if new[node] is not node:
        replaced[node] = new[node]


def current(root: UOp) -> UOp:
    """A graph as it stands now (see current_map)."""
    return current_map(root)[root] if replaced else root


def become(mapping: dict[UOp, UOp]) -> None:
    """Point every tensor whose graph is a key of `mapping` at its value, and remember it for other graphs."""
    if not mapping:
        return
    for key, value in mapping.items():
        replaced[key] = value
    for ref in list(_all_tensors.values()):
        t = ref()
        if t is not None and t.uop in replaced:
            t._set_uop(resolve(t.uop))


_NOT_ENTERED = (Ops.BUFFER, Ops.KERNEL)


def intermediates(kernelized: dict[UOp, UOp], tensors: Sequence[Tensor]) -> set[UOp]:
    """The new buffers of a kernelize mapping that nothing will read after the run: not the realized tensors'
    own, and not reachable from any live tensor's graph (a lazy graph built on them, or one autograd keeps)."""
    roots = {t.uop.base for t in tensors}
    fresh = {node: assign.base for node, assign in kernelized.items() if assign.base.op is Ops.ASSIGN
             and assign.base not in roots and not assign.base.src[1].arg.assign}  # fmt: skip
    if len(fresh) < 2:  # sharing needs two buffers: skip the walk over every live graph
        return set()
    graphs = [u for t in live_tensors() for u in (t.uop, t._autograd_uop) if u is not None]
    # a kernel's sources are not read after the run; a stale graph reads what its nodes were replaced by since
    reached = set(UOp(Ops.SINK, dtypes.void, tuple(graphs)).toposort(enter=lambda n: n.op not in _NOT_ENTERED))
    reached |= {resolve(n).base for n in reached if n in replaced}
    return {assign.src[0] for node, assign in fresh.items() if node not in reached and assign not in reached}


def readers_of_overwritten(tensors: Sequence[Tensor]) -> list[Tensor]:
    """Live lazy tensors, other than these, that read a buffer one of these tensors' pending assigns overwrites (or
    the value of an earlier assign to it, in a chain of assigns)."""
    if not pending_assigns():  # the common case costs one pass over the live tensors, no graph walk
        return []
    graph = UOp(Ops.SINK, dtypes.void, tuple(current(t.uop) for t in tensors)).toposort()
    running = {n for n in graph if n.op is Ops.ASSIGN and n.src[1].op is not Ops.KERNEL}
    overwritten = {n.src[0].base for n in running} | {_base_buffer(n) for n in running}
    if not overwritten:
        return []
    return _readers(_lazy_tensors(tensors), lambda node: node in overwritten, running)


def readers_of_buffers(written: set[int]) -> list[Tensor]:
    """Live lazy tensors that read one of these buffers (by the id of their runtime Buffer): a TinyJit replay is
    about to overwrite them."""
    if not written:
        return []

    def overwritten(node: UOp) -> bool:
        buffer = _buffers.get(node) if node.op is Ops.BUFFER else None
        return buffer is not None and (id(buffer) in written or id(buffer._base) in written)

    return _readers(_lazy_tensors(()), overwritten, set())


def _lazy_tensors(exclude: Iterable[Tensor]) -> list[Tensor]:
    """Live tensors not backed by a buffer (or a view of one), each pointed at its graph as it stands now."""
    skip = set(map(id, exclude))
    lazy = []
    for ref in list(_all_tensors.values()):
        t = ref()
        if t is None or id(t) in skip or (u := t.uop).op is Ops.BUFFER or u.base.op is Ops.BUFFER:
            continue
        t._set_uop(current(u))  # a stale graph reads through nodes realized since: look at what stands for them
        if t.uop.base.op is not Ops.BUFFER:
            lazy.append(t)
    return lazy


def _readers(lazy: list[Tensor], overwritten: Callable[[UOp], bool], running: set[UOp]) -> list[Tensor]:
    """The tensors of `lazy` whose graphs read an overwritten node. Reading an assign that runs now reads its new
    value (it is ordered after it); an assign that runs later reads through its value, as that is computed later."""
    if not lazy:
        return []
    reads: dict[UOp, bool] = {}
    for node in UOp(Ops.SINK, dtypes.void, tuple(t.uop for t in lazy)).toposort():
        sources = () if node in running else node.src[1:] if node.op is Ops.ASSIGN else node.src
        reads[node] = overwritten(node) or any(reads[s] for s in sources)
    return [t for t in lazy if reads[t.uop]]


def _base_buffer(node: UOp) -> UOp:
    while node.op is not Ops.BUFFER and node.src:
        node = node.base if node.base is not node else node.src[0]
    return node
