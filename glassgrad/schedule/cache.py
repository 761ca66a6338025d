"""The schedule cache: a graph shaped like one kernelized before is not kernelized (nor scheduled) again.

Two graphs that differ only in which buffers they read (a training step's graph, step after step) differ only in
their UNIQUE leaves: every BUFFER, and every CONTIGUOUS that must get its own buffer, hangs on one. Renumbering
the UNIQUE leaves in the order a walk meets them gives both the same normalized graph; the walk itself, each node
written as its op, dtype, arg and sources by position (`shape_key`), is the dictionary key, so a hit builds no
normalized graph. A miss kernelizes the normalized graph, schedules its kernels and keeps both; a hit renames the
answer back: the nodes it shares with the graph become the caller's (found by their position in the walk), the
buffers kernelize made get fresh UNIQUEs, and only the nodes above those are rebuilt (the small ASSIGN/KERNEL graph,
never the kernel ASTs: those are shared, so compiled programs are found by identity).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from glassgrad.dtype import dtypes
from glassgrad.helpers import NOOPT
from glassgrad.schedule import ScheduleItem, schedule_assigns, schedule_item
from glassgrad.schedule.kernelize import kernelize
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


_cache: OrderedDict[tuple, Template] = OrderedDict()


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
    if (template := _cache.get(key)) is None:
        stats["misses"] += 1
        template = _cache[key] = _template(order)
        if len(_cache) > CACHE_SIZE:
            _cache.popitem(last=False)
    else:
        stats["hits"] += 1
        _cache.move_to_end(key)
    return _renamed(template, order)


def cached_kernelize(roots: list[UOp]) -> dict[UOp, UOp]:
    """kernelize(roots), served from the cache when a graph of the same shape was kernelized before."""
    return cached_schedule(roots).mapping
