"""The memory planner: buffers that live only inside one run of kernels, with lifetimes that don't overlap, share
one allocation.

A run (a schedule, or the kernels TinyJit captured) is a list of items; each writes its first buffer and reads the
rest. A buffer nothing outside the run will read (not `kept`) is needed from the item that first writes it to the
last item that reads it. Walking the items in order, a buffer whose last reader has run hands its memory to the
next such buffer of the same device and size, so peak memory follows the buffers alive at once, not all of them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from glassgrad.runtime.device import Buffer


class Item(Protocol):
    bufs: list[Buffer]


def lifetimes(items: Sequence[Item]) -> dict[int, tuple[int, int, Buffer]]:
    """For each buffer (by id): the index of the first and of the last item that uses it."""
    spans: dict[int, tuple[int, int, Buffer]] = {}
    for i, item in enumerate(items):
        for b in item.bufs:
            if b is not None:
                spans[id(b)] = (spans[id(b)][0] if id(b) in spans else i, i, b)
    return spans


def plan_memory(items: Sequence[Item], kept: Callable[[Buffer], bool], reuse_allocated: bool = False) -> int:
    """Let buffers whose lifetimes don't overlap share memory; returns the bytes no longer allocated separately.
    A buffer takes part if an item writes it before any reads it and `kept(buffer)` is false; an allocated one
    only with `reuse_allocated` (TinyJit's buffers ran once already: their contents don't matter any more)."""
    spans = lifetimes(items)
    planned = {key for key, (first, _, b) in spans.items() if items[first].bufs[0] is b
               and (reuse_allocated or not b.allocated and b._base is None) and not kept(b)}  # fmt: skip
    for key in planned:  # planned again from scratch: an earlier plan (one schedule's) covered fewer items
        spans[key][2]._base = None
    ending: dict[int, list[Buffer]] = {}
    for key in planned:
        ending.setdefault(spans[key][1], []).append(spans[key][2])
    free: dict[tuple[str, int], list[Buffer]] = {}
    saved = 0
    for i, item in enumerate(items):
        out = item.bufs[0]
        if out is not None and id(out) in planned and spans[id(out)][0] == i:
            if pool := free.get((out.device, out.nbytes)):
                out.shares(pool.pop())
                saved += out.nbytes
        for b in ending.get(i, []):
            free.setdefault((b.device, b.nbytes), []).append(b._base or b)
    return saved
