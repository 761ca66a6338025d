"""Scheduling: which UOps become buffers, grouped into kernels, in the order they must run."""

from __future__ import annotations

from dataclasses import dataclass

from glassgrad.dtype import dtypes
from glassgrad.schedule.kernelize import Kernel, kernelize
from glassgrad.uop.ops import Ops, UOp


@dataclass(frozen=True)
class ScheduleItem:
    """One kernel to run: its AST and its buffers (BUFFER nodes), the output first."""

    ast: UOp
    bufs: tuple[UOp, ...]


def _buffer(node: UOp) -> UOp:
    return node if node.op is Ops.BUFFER else node.src[0]


def schedule_assigns(roots: list[UOp]) -> list[UOp]:
    """The ASSIGN(BUFFER, KERNEL) nodes under kernelized roots in the order their kernels run: each after the
    kernels whose outputs it reads, and each assign after every kernel that reads the old contents of the buffer it
    overwrites."""
    assigns = [n for n in UOp(Ops.SINK, dtypes.void, tuple(roots)).toposort()
               if n.op is Ops.ASSIGN and n.src[1].op is Ops.KERNEL]  # fmt: skip
    kernels = [a.src[1] for a in assigns]
    after: dict[UOp, set[UOp]] = {k: {s.src[1] for s in k.src if s.op is Ops.ASSIGN} for k in kernels}
    # contents of a buffer (a BUFFER as it was before this schedule, or the ASSIGN that wrote it) -> their readers
    readers: dict[UOp, list[UOp]] = {}
    for k in kernels:
        for s in k.src[1:]:
            if s.op in (Ops.BUFFER, Ops.ASSIGN):
                readers.setdefault(s, []).append(k)
    for k in kernels:
        if k.arg.assign:
            after[k] |= {r for contents in _earlier_contents(k) for r in readers.get(contents, []) if r is not k}
    order, done = [], set()
    while len(done) < len(kernels):  # Kahn's algorithm, keeping the data-dependency order where it is free
        i = next((i for i, k in enumerate(kernels) if k not in done and after[k] <= done), None)
        if i is None:
            raise RuntimeError("schedule: a kernel reads a buffer both before and after an assign to it; realize the "
                               "value read before the assign first")  # fmt: skip
        done.add(kernels[i])
        order.append(assigns[i])
    return order


def _earlier_contents(kernel: UOp) -> list[UOp]:
    """What the buffer an assign's kernel overwrites held before: the ASSIGN nodes of the earlier assigns to it in
    this schedule (a chain of assigns), and the BUFFER as it was before them."""
    contents = [kernel.src[0]]
    while contents[-1].op is Ops.ASSIGN:
        contents.append(contents[-1].src[1].src[0])
    return contents


def schedule_item(assign: UOp) -> ScheduleItem:
    """The ScheduleItem of one ASSIGN(BUFFER, KERNEL)."""
    kernel = assign.src[1]
    return ScheduleItem(kernel.arg.ast, tuple(_buffer(s) for s in kernel.src))


def create_schedule(roots: list[UOp]) -> list[ScheduleItem]:
    """The kernels under kernelized roots, in the order they must run (see schedule_assigns)."""
    return [schedule_item(a) for a in schedule_assigns(roots)]


__all__ = ["Kernel", "ScheduleItem", "create_schedule", "kernelize", "schedule_assigns", "schedule_item"]
