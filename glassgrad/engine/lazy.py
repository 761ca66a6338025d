"""The lazy graphs' bookkeeping: the live tensors, what each kernelized or realized node stands for now, and the
schedule cache that kernelizes a graph shaped like one seen before by renaming a remembered answer.

Every Tensor is listed here while it lives. Realizing or kernelizing a graph replaces some of its nodes (by a
BUFFER, or the ASSIGN(BUFFER, KERNEL) that will fill one): `become` points every live tensor that names such a node
at what replaced it, and `current` rebuilds an older graph over the replacements.

An assign overwrites its buffer in place, so a lazy tensor that reads the buffer must be computed before the assign
runs: `readers_of_overwritten` (for a realize) and `readers_of_buffers` (for a TinyJit replay) name them, and the
caller realizes them first, so that each keeps the value it was built to have, as in eager execution. A tensor that
is the buffer itself or a view of it is no reader: it shares the buffer's storage, as a PyTorch view does.

The schedule cache: a graph shaped like one kernelized before is not kernelized (nor scheduled) again. Two graphs
that differ only in which buffers they read (a training step's graph, step after step) differ only in their UNIQUE
leaves: every BUFFER, and every CONTIGUOUS that must get its own buffer, hangs on one. Renumbering
the UNIQUE leaves in the order a walk meets them gives both the same normalized graph; the walk itself, each node
written as its op, dtype, arg and sources by position (`shape_key`), is the dictionary key, so a hit builds no
normalized graph. A miss kernelizes the normalized graph, schedules its kernels and keeps both; a hit renames the
answer back: the nodes it shares with the graph become the caller's (found by their position in the walk), the
buffers kernelize made get fresh UNIQUEs, and only the nodes above those are rebuilt (the small ASSIGN/KERNEL graph,
never the kernel ASTs: those are shared, so compiled programs are found by identity).
"""

from __future__ import annotations

import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from glassgrad.dtype import dtypes
from glassgrad.engine.checks import unaffected_by
from glassgrad.engine.realize import _buffers, buffer_of, run_schedule, share_buffer, timed_realize_summary
from glassgrad.engine.threads import one_thread_at_a_time
from glassgrad.helpers import NOOPT
from glassgrad.runtime.counters import GlobalCounters
from glassgrad.runtime.device import Device
from glassgrad.schedule import ScheduleItem, pack, schedule_assigns, schedule_item
from glassgrad.schedule.kernelize import kernelize
from glassgrad.uop.check import CheckFailed
from glassgrad.uop.ops import Ops, UOp, fresh_unique, new_buffer

if TYPE_CHECKING:
    from glassgrad.tensor import Tensor

pack.device_renderer = lambda device: Device[device].renderer  # what the scheduler asks of a device's kernels

# Every live Tensor, so that realizing one graph can point all tensors that share it at the result.
_all_tensors: dict[int, weakref.ref[Tensor]] = {}
# Live tensors that have stood for an ASSIGN node (pending_assigns looks at these, not at every tensor).
_assigning: dict[int, weakref.ref[Tensor]] = {}


class Replacements:
    """Nodes that have been kernelized or realized, and what stands for them now: `node in replaced`,
    `replaced[node]`, `replaced[node] = new`. The replacement is kept on the node itself, so it lives as long as the
    node does; a WeakKeyDictionary lists the nodes too, only to say whether any is alive (none: no graph needs a
    walk to be current), as its every lookup makes a weak reference (a hot path's cost)."""

    def __init__(self):
        self.live: weakref.WeakKeyDictionary[UOp, None] = weakref.WeakKeyDictionary()

    def __contains__(self, node: UOp) -> bool:
        return "_replaced" in node.__dict__

    def __getitem__(self, node: UOp) -> UOp:
        return node.__dict__["_replaced"]

    def __setitem__(self, node: UOp, new: UOp) -> None:
        node.__dict__["_replaced"] = new
        self.live[node] = None

    def __len__(self) -> int:
        return len(self.live)


replaced = Replacements()
TENSORS = "_tensors"  # the attribute of a node listing (weakly) the tensors that were pointed at it: become's index


class _TensorRef(weakref.ref):
    """A weak reference to a live tensor that remembers the tensor's id (its key in _all_tensors)."""

    __slots__ = ("key",)


def _forget(ref: _TensorRef) -> None:
    _all_tensors.pop(ref.key, None)
    _assigning.pop(ref.key, None)


def register(t: Tensor) -> None:
    """List a new tensor among the live ones (until it is collected)."""
    ref = _TensorRef(t, _forget)  # (one callback for all: no closure made per tensor)
    ref.key = id(t)
    _all_tensors[ref.key] = ref
    _track(ref, t.uop)


def track(t: Tensor) -> None:
    """Note that `t` now stands for its node (Tensor._set_uop calls this): become finds the tensors of a node
    through the node, not by looking at every live tensor."""
    _track(_all_tensors[id(t)], t.uop)


def _track(ref: _TensorRef, node: UOp) -> None:
    if (listed := node.__dict__.get(TENSORS)) is None:
        node.__dict__[TENSORS] = [ref]
    elif not any(r is ref for r in listed):  # (by identity: comparing weak references compares tensors, an op)
        if len(listed) >= 8:  # tensors that died or moved on: dropped, so a node many tensors pass keeps a short list
            listed[:] = [r for r in listed if (other := r()) is not None and other.uop is node]
        listed.append(ref)
    if node.op is Ops.ASSIGN:
        _assigning[ref.key] = ref


def live_tensors() -> list[Tensor]:
    """Every tensor alive now."""
    return [t for ref in list(_all_tensors.values()) if (t := ref()) is not None]


def pending_assigns() -> list[Tensor]:
    """Live tensors with an assign that has not run yet."""
    pending = []
    for key, ref in list(_assigning.items()):
        if (t := ref()) is not None and t.uop.op is Ops.ASSIGN:
            pending.append(t)
        else:  # ran (track lists it again at its next assign)
            _assigning.pop(key, None)
    return pending


def resolve(node: UOp) -> UOp:
    """What a node stands for now, following realized and kernelized replacements."""
    while (new := node.__dict__.get("_replaced")) is not None:
        node = new
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
    for key in mapping:
        for ref in key.__dict__.get(TENSORS, ()):
            if (t := ref()) is not None and t.uop is key:
                t._set_uop(resolve(key))


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
    if not pending_assigns():  # the common case: no graph walk
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


# ---- the schedule cache ----

CACHE_SIZE = 64  # graphs remembered; a program has few shapes of graph that it realizes over and over
stats = {"hits": 0, "misses": 0}


@dataclass(frozen=True)
class Scheduled:
    """kernelize's answer for some roots, and what realizing them runs."""

    mapping: dict[UOp, UOp]  # each node that becomes a buffer -> the ASSIGN(BUFFER, KERNEL) filling it (or a view)
    roots: list[UOp]  # the roots with the mapping applied
    assigns: list[UOp]  # the ASSIGN(BUFFER, KERNEL) nodes under the roots, in the order their kernels run
    items: list[ScheduleItem]  # their kernels, one item per assign


@dataclass(frozen=True)
class Template:
    """A Scheduled over a graph's normalized twin (`answer`; `points` are the positions, in the graph's walk, of the
    mapping's keys), and how to rename it for a graph of the same shape: `inputs` are its nodes that are nodes of
    the normalized graph (by position in the walk), `made` the UNIQUE leaves of the buffers kernelize made (new ones
    each time), `rebuilt` the nodes above either, each after its sources."""

    points: tuple[int, ...]
    answer: Scheduled
    inputs: dict[UOp, int]
    made: tuple[UOp, ...]
    rebuilt: tuple[UOp, ...]


# by the key's hash, computed once (hashing the key hashes every node's dtype and arg): [(key, template)]
_cache: OrderedDict[int, list[tuple[tuple, Template]]] = OrderedDict()


def _slot(k: int) -> UOp:
    return UOp(Ops.UNIQUE, dtypes.void, (), ("slot", k))


def normalize(root: UOp) -> tuple[dict[UOp, UOp], list[UOp]]:
    """Every node of the graph mapped to its normalized twin, and the UNIQUE leaves in slot order."""
    new: dict[UOp, UOp] = {}
    uniques: list[UOp] = []
    for node in root.toposort():
        if node.op is Ops.UNIQUE:
            new[node] = _slot(len(uniques))
            uniques.append(node)
            continue
        src = tuple(new[s] for s in node.src)
        new[node] = node if src == node.src else node.replace(src=src)
    return new, uniques


def shape_key(order: list[UOp]) -> tuple:
    """A graph's toposort as a hashable key: each node's op, dtype, arg and sources by position, every UNIQUE leaf
    alike (a walk meets them in the same order in graphs of the same shape, so position k is slot k). Graphs that
    differ only in their buffers give equal keys, without building their normalized twin (a hit's cost)."""
    position: dict[UOp, int] = {}
    parts: list = []
    for i, node in enumerate(order):
        position[node] = i
        # _key[3]: the arg as interning compares it (0.0 and -0.0 apart)
        parts.append(None if node.op is Ops.UNIQUE else (node.op, node.dtype, node._key[3],
                                                         tuple([position[s] for s in node.src])))  # fmt: skip
    return tuple(parts)


def _template(order: list[UOp]) -> Template:
    """Kernelize and schedule the graph's normalized twin; remember which of its nodes a hit renames, and how."""
    normalized, uniques = normalize(order[-1])
    roots = list(normalized[order[-1]].src)
    mapping = kernelize(roots)
    roots = [mapping[r] if r in mapping else r.substitute(mapping) for r in roots]
    assigns = schedule_assigns(roots)
    answer = Scheduled(mapping, roots, assigns, [schedule_item(a) for a in assigns])
    where = {normalized[node]: i for i, node in enumerate(order)}
    inputs: dict[UOp, int] = {}
    made, rebuilt, renamed = [], [], set()
    bufs = [buf for item in answer.items for buf in item.bufs]  # a kernel kernelized earlier reads the graph's
    result = UOp(Ops.SINK, dtypes.void, (*mapping.values(), *roots, *assigns, *bufs))
    # (the SINK itself may be the graph's own, as when it realizes buffers only)
    for node in result.toposort(enter=lambda n: n is result or n not in where)[:-1]:
        if node in where:  # a node of the graph: the caller's own, unless no UNIQUE lies below it (then the same)
            if node is not order[where[node]]:
                inputs[node] = where[node]
                renamed.add(node)
        elif node.op is Ops.UNIQUE or any(s in renamed for s in node.src):
            (made if node.op is Ops.UNIQUE else rebuilt).append(node)
            renamed.add(node)
    return Template(tuple(where[point] for point in mapping), answer, inputs, tuple(made), tuple(rebuilt))


def _renamed(template: Template, order: list[UOp]) -> Scheduled:
    """The template's answer for the graph walked in `order`: its buffers, and new ones where kernelize made some."""
    new = {node: order[i] for node, i in template.inputs.items()}
    new |= {leaf: fresh_unique() for leaf in template.made}
    for node in template.rebuilt:
        new[node] = UOp(node.op, node.dtype, tuple([new.get(s, s) for s in node.src]), node.arg)
    answer = template.answer
    mapping = {order[i]: new.get(value, value) for i, value in zip(template.points, answer.mapping.values())}
    items = [ScheduleItem(item.ast, tuple([new.get(b, b) for b in item.bufs])) for item in answer.items]
    return Scheduled(mapping, [new.get(r, r) for r in answer.roots], [new.get(a, a) for a in answer.assigns], items)


def cached_schedule(roots: list[UOp]) -> Scheduled:
    """kernelize(roots) and the schedule of their kernels, served from the cache when a graph of the same shape was
    kernelized before."""
    order = UOp(Ops.SINK, dtypes.void, tuple(roots)).toposort()
    key = (shape_key(order), NOOPT.value)  # NOOPT=1 also turns off kernelize's packing of large matmuls
    same_hash = _cache.get(digest := hash(key), [])
    if (template := next((t for k, t in same_hash if k == key), None)) is None:
        stats["misses"] += 1
        template = _template(order)
        _cache[digest] = [*same_hash, (key, template)]
        if len(_cache) > CACHE_SIZE:
            _cache.popitem(last=False)
    else:
        stats["hits"] += 1
    _cache.move_to_end(digest)
    return _renamed(template, order)


# ---- scheduling and realizing tensors ----


def realize_tensors(tensors: Sequence[Tensor]) -> None:
    """Run every kernel the tensors need (and the lazy readers of what their assigns overwrite, first); afterwards
    each is backed by a buffer."""
    start, before = time.perf_counter(), GlobalCounters.kernel_count
    tensors = (*tensors, *readers_of_overwritten(tensors))
    scheduled = schedule_tensors(tensors)
    unused = intermediates(scheduled.mapping, tensors)
    try:
        run_schedule(scheduled.items, unused)
    except CheckFailed as error:  # what ran apart from the failure stands (an assign must not run twice); what
        kept = unaffected_by(error.check, scheduled.assigns)  # reads the failure stays to run, and raises again
        _realized(tensors, scheduled, [a for a in kept if a.src[0] not in unused])
        raise
    _realized(tensors, scheduled, scheduled.assigns)
    timed_realize_summary(start, before)


@one_thread_at_a_time
def schedule_tensors(tensors: Sequence[Tensor]) -> Scheduled:
    """Kernelize the tensors' graphs, point every tensor at the result and return the schedule: kernelize's mapping
    and the kernels to run, in order (Tensor.kernelize and Tensor.schedule are this; realize runs its kernels)."""
    for t in tensors:
        t._set_uop(t._current_uop())
    scheduled = cached_schedule([t.uop for t in tensors])
    become(scheduled.mapping)
    for t, root in zip(tensors, scheduled.roots):  # a view of a kernelized node now reads through its buffer
        t._set_uop(root)
    return scheduled


def _realized(tensors: Sequence[Tensor], scheduled: Scheduled, ran: list[UOp]) -> None:
    """Point the tensors, and every graph, at the buffers the kernels of the assigns `ran` filled."""
    realized = {n: _renamed_after_assign(n) for n in ran}
    become(realized)
    for t, root in zip(tensors, scheduled.roots):
        t._set_uop(root.substitute(realized))
        if t.uop.base.op is Ops.BUFFER:  # Tensor.empty's too: its memory exists now, or OutOfMemoryError said why
            buffer_of(t.uop.base).ensure_allocated()


def _renamed_after_assign(assigned: UOp) -> UOp:
    """The BUFFER a realized ASSIGN(BUFFER, KERNEL) leaves behind. A buffer an assign overwrote gets a new name for
    the same memory: graphs built from it later must not match results remembered from its old contents."""
    buffer = assigned.src[0]
    if not assigned.src[1].arg.assign:
        return buffer
    alias = new_buffer(buffer.device, buffer.arg, buffer.dtype)
    share_buffer(alias, buffer)
    return alias
