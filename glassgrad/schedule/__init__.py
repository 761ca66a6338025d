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


def create_schedule(roots: list[UOp]) -> list[ScheduleItem]:
    """The kernels under kernelized roots, each after the kernels whose outputs it reads."""
    items = []
    for node in UOp(Ops.SINK, dtypes.void, tuple(roots)).toposort():
        if node.op is Ops.KERNEL:
            bufs = tuple(s if s.op is Ops.BUFFER else s.src[0] for s in node.src)
            items.append(ScheduleItem(node.arg.ast, bufs))
    return items


__all__ = ["Kernel", "ScheduleItem", "create_schedule", "kernelize"]
