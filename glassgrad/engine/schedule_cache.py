"""The schedule cache: a graph shaped like one kernelized before is not kernelized (nor scheduled) again. Two graphs
that differ only in which buffers they read (a training step's graph, step after step) differ only in their UNIQUE
leaves: every BUFFER, and every CONTIGUOUS that must get its own buffer, hangs on one. Renumbering
the UNIQUE leaves in the order a walk meets them gives both the same normalized graph; the walk itself, each node
written as its op, dtype, arg and sources by position (`shape_key`), is the dictionary key, so a hit builds no
normalized graph. A miss kernelizes the normalized graph, schedules its kernels and keeps both; a hit renames the
answer back: the nodes it shares with the graph become the caller's (found by their position in the walk), the
buffers kernelize made get fresh UNIQUEs, and only the nodes above those are rebuilt (the small ASSIGN/KERNEL graph,
never the kernel ASTs: those are shared, so compiled programs are found by identity).

A template also keeps its answer's realized form where no kernel assigns into an existing buffer: every ASSIGN
replaced by its BUFFER, as a realize leaves the graphs once the kernels ran. A realize renames that instead
(`realized_now`: a new UNIQUE and BUFFER per made buffer, nothing else built), the eager path of every op.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

from glassgrad.dtype import dtypes
from glassgrad.helpers import NOOPT
from glassgrad.schedule import ScheduleItem, schedule_assigns, schedule_item
from glassgrad.schedule.kernelize import kernelize
from glassgrad.schedule.symbolic_shapes import symbolic_positions
from glassgrad.uop.ops import Ops, UOp, fresh_unique

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
class Renaming:
    """How to rename nodes built over a graph's normalized twin for a graph of the same shape: `inputs` are its nodes
    that are nodes of the normalized graph (by position in the walk), `made` the UNIQUE leaves of the buffers
    kernelize made (new ones each time), `rebuilt` the nodes above either, each after its sources."""

    inputs: tuple[tuple[UOp, int], ...]
    made: tuple[UOp, ...]
    rebuilt: tuple[UOp, ...]

    def apply(self, order: list[UOp], made: dict[UOp, UOp]) -> dict[UOp, UOp]:
        """Each renamed node -> the caller's (`made`: the made leaves' new UNIQUEs, which gets any missing)."""
        new = {node: order[i] for node, i in self.inputs}
        for leaf in self.made:
            if (unique := made.get(leaf)) is None:
                unique = made[leaf] = fresh_unique()
            new[leaf] = unique
        for node in self.rebuilt:
            new[node] = UOp(node.op, node.dtype, tuple([new.get(s, s) for s in node.src]), node.arg)
        return new


@dataclass(frozen=True)
class Realized:
    """A template's answer once its kernels have run, for a realize that needs no ASSIGN/KERNEL graph in between
    (one with no assign into an existing buffer): each mapping key's and root's node standing on the buffers
    (`finals`, `roots`), the kernels (`items`) and the buffers they take (`bufs`, each once), and how to rename all
    of them (`renaming`); `unwritten`: whether a root stands on a buffer no kernel writes (Tensor.empty's, which a
    realize must still allocate). `plans` keeps the items ready to run (engine/realize.py RunPlan), by the flags they
    were compiled under."""

    finals: tuple[UOp, ...]
    roots: tuple[UOp, ...]
    items: tuple[ScheduleItem, ...]
    bufs: tuple[UOp, ...]
    renaming: Renaming
    unwritten: bool
    plans: dict[tuple, object] = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class Template:
    """A Scheduled over a graph's normalized twin (`answer`; `points` are the positions, in the graph's walk, of the
    mapping's keys), how to rename it for a graph of the same shape, and the same for its realized form where it
    has one (`realized`, None where an assign overwrites a buffer: that realize takes the ASSIGN graph's way)."""

    points: tuple[int, ...]
    answer: Scheduled
    renaming: Renaming
    realized: Realized | None
    symbolic: tuple[int, ...]  # positions of the movement ops whose sizes bind Variables (their values vary per call)


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


def shape_key(root: UOp) -> tuple:
    """A graph's walk as a hashable key (see walk_with_key)."""
    return walk_with_key((root,))[1]


def walk_with_key(roots: tuple[UOp, ...]) -> tuple[list[UOp], tuple]:
    """The graph's nodes, each after its sources (a BUFFER as a leaf: its UNIQUE is its own, and its device is in
    its part), and their shape key: each node's op, dtype, arg and sources by position, every UNIQUE alike (a walk
    meets them in the same order in graphs of the same shape, so position k is slot k), then the roots' positions.
    Graphs that differ only in their buffers give equal keys, and no normalized twin is built for it (a hit's whole
    cost is this one pass)."""
    order: list[UOp] = []
    position: dict[UOp, int] = {}  # (-1: met, not yet placed)
    parts: list = []
    for root in roots:
        if root not in position:
            _walk_from(root, order, position, parts)
    parts.append(tuple([position[r] for r in roots]))
    return order, tuple(parts)


def _walk_from(root: UOp, order: list[UOp], position: dict[UOp, int], parts: list) -> None:
    """walk_with_key's depth-first pass from one root: a leaf is placed as it is met, without a turn on the stack
    (most of an eager op's graph is leaves), its part kept on it (a buffer's recurs in every graph that reads it)."""
    if root.op is Ops.BUFFER or not root.src:
        position[root] = len(order)
        order.append(root)
        parts.append(_leaf_part(root))
        return
    stack = [(root, iter(root.src))]
    position[root] = -1
    while stack:
        node, sources = stack[-1]
        for s in sources:
            if s not in position:
                if s.op is Ops.BUFFER or not s.src:
                    position[s] = len(order)
                    order.append(s)
                    parts.append(s.__dict__.get("_part") or _leaf_part(s))
                    continue
                position[s] = -1
                stack.append((s, iter(s.src)))
                break
        else:
            stack.pop()
            position[node] = len(order)
            order.append(node)
            # _key: the dtype and arg as interning compares them (0.0 and -0.0 apart), hashed in C
            parts.append((node.op, node._key[1], node._key[3], tuple([position[s] for s in node.src])))


def _leaf_part(node: UOp) -> tuple | None:
    """A leaf's part of the key (every UNIQUE alike; a BUFFER by its dtype, size and device), kept on the node."""
    if node.op is Ops.UNIQUE:
        return None
    if node.op is Ops.BUFFER:
        part = node.__dict__["_part"] = (Ops.BUFFER, node._key[1], node.arg, node.src[1].arg)
    else:
        part = node.__dict__["_part"] = (node.op, node._key[1], node._key[3], ())
    return part


def _template(order: list[UOp], graph: tuple[UOp, ...]) -> Template:
    """Kernelize and schedule the graph's normalized twin; remember which of its nodes a hit renames, and how."""
    normalized, _ = normalize(UOp(Ops.SINK, dtypes.void, graph))
    roots = [normalized[r] for r in graph]
    mapping = kernelize(roots)
    roots = [mapping[r] if r in mapping else r.substitute(mapping) for r in roots]
    assigns = schedule_assigns(roots)
    answer = Scheduled(mapping, roots, assigns, [schedule_item(a) for a in assigns])
    where = {normalized[node]: i for i, node in enumerate(order)}
    bufs = [buf for item in answer.items for buf in item.bufs]  # a kernel kernelized earlier reads the graph's
    renaming = _renaming((*mapping.values(), *roots, *assigns, *bufs), where, order)
    realized = _realized_form(answer, where, order)
    return Template(tuple(where[point] for point in mapping), answer, renaming, realized, symbolic_positions(order))


def _realized_form(answer: Scheduled, where: dict[UOp, int], order: list[UOp]) -> Realized | None:
    """The answer with each ASSIGN(BUFFER, KERNEL) as the BUFFER it leaves once its kernel ran (as engine/lazy.py's
    realize points the graphs after a run), where no kernel overwrites an existing buffer."""
    if any(assign.src[1].arg.assign for assign in answer.assigns):
        return None
    ran = {assign: assign.src[0] for assign in answer.assigns}
    finals = tuple(ran[v] if v in ran else v.substitute(ran) for v in answer.mapping.values())
    roots = tuple(ran[r] if r in ran else r.substitute(ran) for r in answer.roots)
    bufs = tuple(dict.fromkeys(buf for item in answer.items for buf in item.bufs))
    written = {item.bufs[0] for item in answer.items}
    unwritten = any(root.base.op is Ops.BUFFER and root.base not in written for root in roots)
    return Realized(finals, roots, tuple(answer.items), bufs, _renaming((*finals, *roots, *bufs), where, order),
                    unwritten)  # fmt: skip


def _renaming(nodes: tuple[UOp, ...], where: dict[UOp, int], order: list[UOp]) -> Renaming:
    """Which of `nodes` (and the nodes under them) a hit renames, and how (see Renaming)."""
    inputs: dict[UOp, int] = {}
    made, rebuilt, renamed = [], [], set()
    result = UOp(Ops.SINK, dtypes.void, nodes)
    # (the SINK itself may be the graph's own, as when it realizes buffers only)
    for node in result.toposort(enter=lambda n: n is result or n not in where)[:-1]:
        if node in where:  # a node of the graph: the caller's own, unless no UNIQUE lies below it (then the same)
            if node is not order[where[node]]:
                inputs[node] = where[node]
                renamed.add(node)
        elif node.op is Ops.UNIQUE or any(s in renamed for s in node.src):
            (made if node.op is Ops.UNIQUE else rebuilt).append(node)
            renamed.add(node)
    return Renaming(tuple(inputs.items()), tuple(made), tuple(rebuilt))


def renamed(template: Template, order: list[UOp], made: dict[UOp, UOp] | None = None) -> Scheduled:
    """The template's answer for the graph walked in `order`: its buffers, and new ones where kernelize made some
    (`made`: the UNIQUEs a realized answer for the same graph already gave them)."""
    new = template.renaming.apply(order, {} if made is None else made)
    answer = template.answer
    mapping = {order[i]: new.get(value, value) for i, value in zip(template.points, answer.mapping.values())}
    items = [ScheduleItem(item.ast, tuple([new.get(b, b) for b in item.bufs])) for item in answer.items]
    return Scheduled(mapping, [new.get(r, r) for r in answer.roots], [new.get(a, a) for a in answer.assigns], items)


@dataclass
class RealizedNow:
    """A realized answer renamed for one graph: what its kernels run on, and what stands for each node after."""

    finals: dict[UOp, UOp]  # each node that gets a buffer -> that buffer (or a view of it)
    roots: list[UOp]
    bufs: list[UOp]  # the buffers its kernels take (the realized form's `bufs`, renamed)
    made: dict[UOp, UOp]  # the template's made UNIQUE leaves -> this graph's new ones


def realized_now(template: Template, order: list[UOp]) -> RealizedNow:
    """The template's realized form for the graph walked in `order` (the template must have one)."""
    form, made = template.realized, {}
    new = form.renaming.apply(order, made)
    finals = {order[i]: new.get(value, value) for i, value in zip(template.points, form.finals)}
    return RealizedNow(finals, [new.get(r, r) for r in form.roots], [new.get(b, b) for b in form.bufs], made)


def cached_template(roots: list[UOp]) -> tuple[Template, list[UOp]]:
    """The template for the roots' graph, from the cache when a graph of the same shape was kernelized before (else
    made and kept), and the graph's walk (its positions are what the template's answers are renamed by)."""
    order, key = walk_with_key(roots := tuple(roots))
    key = (key, NOOPT.value)  # NOOPT=1 also turns off kernelize's packing of large matmuls
    same_hash = _cache.get(digest := hash(key), [])
    if (template := _same_key(same_hash, key)) is None:
        stats["misses"] += 1
        template = _template(order, roots)
        _cache[digest] = [*same_hash, (key, template)]
        if len(_cache) > CACHE_SIZE:
            _cache.popitem(last=False)
    else:
        stats["hits"] += 1
    _cache.move_to_end(digest)
    return template, order


def _same_key(entries: list[tuple[tuple, Template]], key: tuple) -> Template | None:
    for k, template in entries:
        if k == key:
            return template
    return None


def cached_schedule(roots: list[UOp]) -> Scheduled:
    """kernelize(roots) and the schedule of their kernels, served from the cache when a graph of the same shape was
    kernelized before."""
    return renamed(*cached_template(roots))
