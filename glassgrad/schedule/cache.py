"""The schedule cache: a graph shaped like one kernelized before is not kernelized again.

Two graphs that differ only in which buffers they read (a training step's graph, step after step) differ only in
their UNIQUE leaves: every BUFFER, and every CONTIGUOUS that must get its own buffer, hangs on one. Renumbering
the UNIQUE leaves in the order a walk meets them gives both the same normalized graph, and UOps are interned, so
that graph is a dictionary key. The cache keeps kernelize's answer for the normalized graph; a hit renames its
UNIQUE leaves back (the new buffers kernelize made get fresh ones), which touches only the small ASSIGN/KERNEL
graph of the answer, never the kernel ASTs (those are shared, so compiled programs are found by identity).
"""

from __future__ import annotations

from collections import OrderedDict

from glassgrad.dtype import dtypes
from glassgrad.helpers import NOOPT
from glassgrad.schedule.kernelize import fresh_unique, kernelize
from glassgrad.uop.ops import Ops, UOp

CACHE_SIZE = 64  # graphs remembered; a program has few shapes of graph that it realizes over and over
_cache: OrderedDict[tuple[UOp, int], dict[UOp, UOp]] = OrderedDict()
stats = {"hits": 0, "misses": 0}


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


def cached_kernelize(roots: list[UOp]) -> dict[UOp, UOp]:
    """kernelize(roots), served from the cache when a graph of the same shape was kernelized before."""
    sink = UOp(Ops.SINK, dtypes.void, tuple(roots))
    normalized, uniques = normalize(sink)
    key = (normalized[sink], NOOPT.value)  # NOOPT=1 also turns off kernelize's packing of large matmuls
    if (template := _cache.get(key)) is None:
        stats["misses"] += 1
        template = _cache[key] = kernelize(list(key[0].src))
        if len(_cache) > CACHE_SIZE:
            _cache.popitem(last=False)
    else:
        stats["hits"] += 1
        _cache.move_to_end(key)
    rename = {_slot(k): u for k, u in enumerate(uniques)}
    answer = UOp(Ops.SINK, dtypes.void, tuple(template.values()))
    for leaf in answer.toposort():
        if leaf.op is Ops.UNIQUE and leaf not in rename:  # a buffer kernelize made: a new one each time
            rename[leaf] = fresh_unique()
    back = {twin: node for node, twin in normalized.items()}
    return {back[point]: value for point, value in zip(template, answer.substitute(rename).src)}
