"""Optimization actions: small, separately tested changes to a kernel's loop structure."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Opt:
    """UPCAST(axis, n): compute n neighbouring outputs along an output axis per iteration, in registers.
    UNROLL(axis, n): combine n neighbouring terms of a reduced axis per iteration of its loop."""

    op: str
    axis: int
    amount: int

    def __repr__(self) -> str:
        return f"{self.op}({self.axis}, {self.amount})"
