"""The lazy graphs' bookkeeping: the live tensors, what each kernelized or realized node stands for now, and
realizing tensors: their schedule run, and every graph pointed at the buffers it filled.

Every Tensor is listed here while it lives. Realizing or kernelizing a graph replaces some of its nodes (by a
BUFFER, or the ASSIGN(BUFFER, KERNEL) that will fill one): `become` points every live tensor that names such a node
at what replaced it, and `current` rebuilds an older graph over the replacements.

An assign overwrites its buffer in place, so a lazy tensor that reads the buffer must be computed before the assign
runs: `readers_of_overwritten` (for a realize) and `readers_of_buffers` (for a TinyJit replay) name them, and the
caller realizes them first, so that each keeps the value it was built to have, as in eager execution. A tensor that
is the buffer itself or a view of it is no reader: it shares the buffer's storage, as a PyTorch view does.

The schedule cache (engine/schedule_cache.py) answers kernelize for a graph shaped like one seen before.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

from glassgrad.dtype import dtypes
from glassgrad.engine.checks import unaffected_by
from glassgrad.engine.realize import (
    buffer_of,
    plan_for,
    run_schedule,
    share_buffer,
    timed_realize_summary,
)
from glassgrad.engine.schedule_cache import (
    Scheduled,
    Template,
    cached_schedule,
    cached_template,
    realized_now,
    renamed,
)
from glassgrad.engine.threads import one_thread_at_a_time
from glassgrad.helpers import DEBUG, KeyedRef
from glassgrad.runtime.counters import GlobalCounters
from glassgrad.schedule.symbolic_shapes import bound_values
from glassgrad.uop.check import CheckFailed
from glassgrad.uop.multi import lower_multi
from glassgrad.uop.ops import Ops, UOp, new_buffer, several_devices

if TYPE_CHECKING:
    from glassgrad.tensor import Tensor

# Every live Tensor, so that realizing one graph can point all tensors that share it at the result.
_all_tensors: dict[int, weakref.ref[Tensor]] = {}
# Live tensors that have stood for an ASSIGN node (pending_assigns looks at these, not at every tensor).
_assigning: dict[int, weakref.ref[Tensor]] = {}


class Replacements:
    """Nodes that have been kernelized or realized, and what stands for them now: `node in replaced`,
    `replaced[node]`, `replaced[node] = new`. The replacement is kept on the node itself, so it lives as long as the
    node does; `live` lists the nodes too (by id, each until it dies), only to say whether any is alive (none: no
    graph needs a walk to be current). A plain dict and one shared callback: a WeakKeyDictionary's every set is
    Python code and a new weak reference (each realize sets two)."""

    def __init__(self):
        self.live: dict[int, KeyedRef] = {}

    def __contains__(self, node: UOp) -> bool:
        return "_replaced" in node.__dict__

    def __getitem__(self, node: UOp) -> UOp:
        return node.__dict__["_replaced"]

    def __setitem__(self, node: UOp, new: UOp) -> None:
        if "_replaced" not in (listed := node.__dict__):
            # (the reference kept in `live`, not on the node: the collector calls back none that dies with the node)
            ref = KeyedRef(node, self._dead)
            ref.key = id(node)
            self.live[ref.key] = ref
        listed["_replaced"] = new

    def _dead(self, ref: KeyedRef) -> None:
        if self.live.get(ref.key) is ref:
            del self.live[ref.key]

    def __len__(self) -> int:
        return len(self.live)


replaced = Replacements()
# the attribute of a node listing (weakly, by the tensor's id) the tensors that were pointed at it: become's index
TENSORS = "_tensors"


def _forget(ref: KeyedRef) -> None:
    _all_tensors.pop(ref.key, None)
    _assigning.pop(ref.key, None)


def register(t: Tensor) -> None:
    """List a new tensor among the live ones (until it is collected)."""
    ref = KeyedRef(t, _forget)  # (one callback for all: no closure made per tensor)
    ref.key = id(t)
    _all_tensors[ref.key] = ref
    _track(ref, t.uop)


def track(t: Tensor) -> None:
    """Note that `t` now stands for its node (Tensor._set_uop calls this): become finds the tensors of a node
    through the node, not by looking at every live tensor."""
    _track(_all_tensors[id(t)], t.uop)


def _track(ref: KeyedRef, node: UOp) -> None:
    if (listed := node.__dict__.get(TENSORS)) is None:
        node.__dict__[TENSORS] = {ref.key: ref}
    elif listed.get(ref.key) is not ref:  # (a dead tensor's entry may have this id: replaced)
        if (n := len(listed)) >= 8 and n & (n - 1) == 0:  # tensors that died or moved on: dropped, so a node many
            # tensors pass (an interned constant's) keeps a short list; at each power of two, so a node many live
            # tensors name (one op on the same inputs, its results kept) is not looked over at every new one
            listed = node.__dict__[TENSORS] = {
                key: r for key, r in listed.items() if (other := r()) is not None and other.uop is node
            }
        listed[ref.key] = ref
    if node.op is Ops.ASSIGN:
        _assigning[ref.key] = ref


def live_tensors() -> list[Tensor]:
    """Every tensor alive now."""
    return [t for ref in list(_all_tensors.values()) if (t := ref()) is not None]


def pending_assigns() -> list[Tensor]:
    """Live tensors with an assign that has not run yet."""
    if not _assigning:  # (every realize asks)
        return []
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
    return current_map(root)[root] if replaced.live else root  # (the dict itself: no call to __len__)


def become(mapping: dict[UOp, UOp]) -> None:
    """Point every tensor whose graph is a key of `mapping` at its value, and remember it for other graphs."""
    if not mapping:
        return
    for key, value in mapping.items():
        replaced[key] = value
    for key in mapping:
        for ref in list(key.__dict__.get(TENSORS, {}).values()):
            if (t := ref()) is not None and t.uop is key:
                t._set_uop(resolve(key))


_NOT_ENTERED = (Ops.BUFFER, Ops.KERNEL)
_NOTHING: frozenset[UOp] = frozenset()


def intermediates(made: dict[UOp, UOp], tensors: Sequence[Tensor]) -> set[UOp]:
    """The buffers a run makes that nothing will read after it: not the realized tensors' own, and not reachable
    from any live tensor's graph (a lazy graph built on them, or one autograd keeps). `made` maps each kernelized
    node that gets a new buffer to what holds it: the ASSIGN(BUFFER, KERNEL) filling it, or the BUFFER itself."""
    if len(made) < 2:  # sharing needs two buffers: skip the walk over every live graph
        return set()
    roots = {shard.base for t in tensors for shard in _shards(t.uop)}
    fresh = {node: holder for node, holder in made.items() if holder not in roots}
    if len(fresh) < 2:
        return set()
    graphs = [u for t in live_tensors() for u in (t.uop, t._autograd_uop) if u is not None]
    # a kernel's sources are not read after the run; a stale graph reads what its nodes were replaced by since
    reached = set(UOp(Ops.SINK, dtypes.void, tuple(graphs)).toposort(enter=lambda n: n.op not in _NOT_ENTERED))
    reached |= {resolve(n).base for n in reached if n in replaced}
    return {_buffer(holder) for node, holder in fresh.items() if node not in reached and holder not in reached}


def _buffer(holder: UOp) -> UOp:
    return holder if holder.op is Ops.BUFFER else holder.src[0]


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
        buffer = node.__dict__.get("_buffer") if node.op is Ops.BUFFER else None
        return buffer is not None and (id(buffer) in written or id(buffer._base) in written)

    return _readers(_lazy_tensors(()), overwritten, set())


def _lazy_tensors(exclude: Iterable[Tensor]) -> list[Tensor]:
    """Live tensors not backed by a buffer (or a view of one), each pointed at its graph as it stands now."""
    skip = set(map(id, exclude))
    lazy = [t for ref in list(_all_tensors.values()) if (t := ref()) is not None and id(t) not in skip
            and t.uop.op is not Ops.BUFFER and t.uop.base.op is not Ops.BUFFER]  # fmt: skip
    if lazy and replaced.live:  # a stale graph reads through nodes realized since: look at what stands for them,
        # in one walk over all the graphs (a walk per tensor is quadratic: a training step holds hundreds of them)
        now = current_map(UOp(Ops.SINK, dtypes.void, tuple(t.uop for t in lazy)))
        for t in lazy:
            t._set_uop(now[t.uop])
    return [t for t in lazy if t.uop.base.op is not Ops.BUFFER]


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


# ---- scheduling and realizing tensors ----


def realize_tensors(tensors: Sequence[Tensor]) -> None:
    """Run every kernel the tensors need (and the lazy readers of what their assigns overwrite, first); afterwards
    each is backed by a buffer."""
    start, before = time.perf_counter(), GlobalCounters.kernel_count
    if _assigning:  # (an assign may be pending: its readers are realized first)
        tensors = (*tensors, *readers_of_overwritten(tensors))
    template, order = cached_template(_current_roots(tensors))
    # the values of the Variables bound in the graph (its kernels take them), read where the template says sizes bind
    var_vals = bound_values([order[i] for i in template.symbolic]) if template.symbolic else {}
    if template.realized is not None:  # no assign: straight to the buffers, no ASSIGN/KERNEL graph in between
        _run_realized(tensors, template, order, var_vals)
    else:
        _run_scheduled(tensors, _scheduled(tensors, renamed(template, order)), var_vals)
    if DEBUG.value:
        timed_realize_summary(start, before)


@one_thread_at_a_time
def schedule_tensors(tensors: Sequence[Tensor]) -> Scheduled:
    """Kernelize the tensors' graphs, point every tensor at the result and return the schedule: kernelize's mapping
    and the kernels to run, in order (Tensor.kernelize and Tensor.schedule are this; realize runs its kernels)."""
    return _scheduled(tensors, cached_schedule(_current_roots(tensors)))


def _current_roots(tensors: Sequence[Tensor]) -> list[UOp]:
    """The tensors' graphs as they stand now (each tensor pointed at its own)."""
    for t in tensors:
        if (now := current(t.uop)) is not t.uop:
            t._set_uop(now)
        if (lowered := lower_multi(t.uop)) is not t.uop:  # ops on several devices: a graph per device
            replaced[t.uop] = lowered
            t._set_uop(lowered)
    if not several_devices["seen"]:  # (no MULTI anywhere: a shard per tensor)
        return [t.uop for t in tensors]
    return [shard for t in tensors for shard in _shards(t.uop)]


def _scheduled(tensors: Sequence[Tensor], scheduled: Scheduled) -> Scheduled:
    """Point every graph at a schedule's kernels (the tensors at its roots)."""
    become(scheduled.mapping)
    for t, root in zip(tensors, _regrouped(tensors, scheduled.roots)):  # a view of a kernelized node now reads
        t._set_uop(root)  # through its buffer
    return scheduled


def _shards(node: UOp) -> tuple[UOp, ...]:
    """The graphs a tensor's node is made of: one per device for a tensor on several (a MULTI)."""
    return node.src if node.op is Ops.MULTI else (node,)


def _regrouped(tensors: Sequence[Tensor], roots: list[UOp]) -> list[UOp]:
    """The tensors' nodes over `roots`, the new nodes of their shards in order."""
    if not several_devices["seen"]:  # (no MULTI anywhere: each tensor's node is its root)
        return roots
    out, at = [], 0
    for t in tensors:
        shards = _shards(t.uop)
        out.append(t.uop.replace(src=tuple(roots[at : at + len(shards)])) if t.uop.op is Ops.MULTI else roots[at])
        at += len(shards)
    return out


def _allocated(tensors: Sequence[Tensor]) -> None:
    """Tensor.empty's buffers too: their memory exists now, or OutOfMemoryError said why."""
    for t in tensors:
        for shard in _shards(t.uop):
            if shard.base.op is Ops.BUFFER:
                buffer_of(shard.base).ensure_allocated()


def _run_scheduled(tensors: Sequence[Tensor], scheduled: Scheduled, var_vals: dict[UOp, int]) -> None:
    """Run a schedule the graphs point at, then point them at the buffers its kernels filled."""
    unused = intermediates({node: assign.base for node, assign in scheduled.mapping.items() if assign.base.op is
                            Ops.ASSIGN and not assign.base.src[1].arg.assign}, tensors)  # fmt: skip
    try:
        run_schedule(scheduled.items, unused, var_vals)
    except CheckFailed as error:
        _failed(tensors, scheduled, error, unused)
        raise
    _realized(tensors, scheduled, scheduled.assigns)


def _failed(tensors: Sequence[Tensor], scheduled: Scheduled, error: CheckFailed, unused: set[UOp]) -> None:
    """What ran apart from the failure stands (an assign must not run twice); what reads the failure stays to run
    (and raises again)."""
    kept = unaffected_by(error.check, scheduled.assigns)
    _realized(tensors, scheduled, [a for a in kept if a.src[0] not in unused])


def _run_realized(tensors: Sequence[Tensor], template: Template, order: list[UOp], var_vals: dict[UOp, int]) -> None:
    """Realize from a template's realized form: the tensors point at their new buffers, the kernels fill them, then
    every other graph is pointed there too. Where the run raises, the graphs are left as the ASSIGN graph's way
    leaves them (the ASSIGN graph on the same buffers, built now: nothing saw the state in between)."""
    now = realized_now(template, order)
    for t, root in zip(tensors, _regrouped(tensors, now.roots)):
        t._set_uop(root)
    unused: set[UOp] = _NOTHING
    if len(now.finals) > 1:  # (one buffer shares with none: an eager op's realize skips this)
        made = set(now.made.values())
        unused = intermediates({node: final.base for node, final in now.finals.items() if final.base.op is Ops.BUFFER
                                and final.base.src[0] in made}, tensors)  # fmt: skip
    try:
        form = template.realized
        plan_for(form.plans, form.items, form.bufs).run(now.bufs, unused, var_vals)
    except BaseException as error:
        scheduled = _scheduled(tensors, renamed(template, order, now.made))
        if isinstance(error, CheckFailed):
            _failed(tensors, scheduled, error, unused)
        raise
    become(now.finals)
    if template.realized.unwritten:  # (what the kernels wrote is allocated)
        _allocated(tensors)


def _realized(tensors: Sequence[Tensor], scheduled: Scheduled, ran: list[UOp]) -> None:
    """Point the tensors, and every graph, at the buffers the kernels of the assigns `ran` filled."""
    realized = {n: _renamed_after_assign(n) for n in ran}
    become(realized)
    for t, root in zip(tensors, _regrouped(tensors, scheduled.roots)):
        t._set_uop(realized[root] if root in realized else root.substitute(realized))
    _allocated(tensors)


def _renamed_after_assign(assigned: UOp) -> UOp:
    """The BUFFER a realized ASSIGN(BUFFER, KERNEL) leaves behind. A buffer an assign overwrote gets a new name for
    the same memory: graphs built from it later must not match results remembered from its old contents."""
    buffer = assigned.src[0]
    if not assigned.src[1].arg.assign:
        return buffer
    alias = new_buffer(buffer.device, buffer.arg, buffer.dtype)
    share_buffer(alias, buffer)
    return alias
