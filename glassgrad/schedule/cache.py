"""The schedule cache: a graph shaped like one kernelized before is not kernelized again.

Two graphs that differ only in which buffers they read (a training step's graph, step after step) differ only in
their UNIQUE leaves: every BUFFER, and every CONTIGUOUS that must get its own buffer, hangs on one. Renumbering
the UNIQUE leaves in the order a walk meets them gives both the same normalized graph; the walk itself, each node
written as its op, dtype, arg and sources by position (`shape_key`), is the dictionary key, so a hit builds no
normalized graph. A miss kernelizes the normalized graph and keeps the answer; a hit renames its UNIQUE leaves back
(the new buffers kernelize made get fresh ones), which touches only the small ASSIGN/KERNEL graph of the answer,
never the kernel ASTs (those are shared, so compiled programs are found by identity).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from glassgrad.dtype import dtypes
from glassgrad.helpers import NOOPT
from glassgrad.schedule.kernelize import fresh_unique, kernelize
from glassgrad.uop.ops import Ops, UOp

CACHE_SIZE = 64  # graphs remembered; a program has few shapes of graph that it realizes over and over
stats = {"hits": 0, "misses": 0}


@dataclass(frozen=True)
class Template:
    """kernelize's answer for one shape of graph: `points` are the positions (in the graph's toposort) of the nodes
    it answered for, `answer` a SINK of its values over slot UNIQUEs, `order` that SINK's toposort, and `made` the
    UNIQUE leaves of the buffers kernelize made (a new one each time)."""

    points: tuple[int, ...]
    answer: UOp
    order: tuple[UOp, ...]
    made: frozenset[UOp]


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
    """kernelize the graph's normalized twin; remember where its answers hang in the walk."""
    normalized, uniques = normalize(order[-1])
    answers = kernelize(list(normalized[order[-1]].src))
    where = {normalized[node]: i for i, node in enumerate(order)}
    answer = UOp(Ops.SINK, dtypes.void, tuple(answers.values()))
    slots = {normalized[u] for u in uniques}
    made = frozenset(u for u in answer.toposort() if u.op is Ops.UNIQUE and u not in slots)
    return Template(tuple(where[point] for point in answers), answer, tuple(answer.toposort()), made)


def cached_kernelize(roots: list[UOp]) -> dict[UOp, UOp]:
    """kernelize(roots), served from the cache when a graph of the same shape was kernelized before."""
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
    rename = {_slot(k): u for k, u in enumerate(u for u in order if u.op is Ops.UNIQUE)}
    rename |= {leaf: fresh_unique() for leaf in template.made}
    new: dict[UOp, UOp] = {}
    for node in template.order:  # the answer renamed: the caller's buffers for the slots, new ones for `made`
        if (renamed := rename.get(node)) is None:
            src = tuple([new[s] for s in node.src])
            renamed = node if src == node.src else UOp(node.op, node.dtype, src, node.arg)
        new[node] = renamed
    return {order[i]: value for i, value in zip(template.points, new[template.answer].src)}
