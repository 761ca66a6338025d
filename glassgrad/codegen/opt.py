"""Optimization actions: small, separately tested changes to a kernel's loop structure."""

from __future__ import annotations

from dataclasses import dataclass

from glassgrad.uop.ops import Ops, UOp


@dataclass(frozen=True)
class Opt:
    """UPCAST(axis, n): compute n neighbouring outputs along an output axis per iteration, in registers.
    UNROLL(axis, n): combine n neighbouring terms of a reduced axis per iteration of its loop."""

    op: str
    axis: int
    amount: int
    # TC(0, i), a kernel's only action: the whole kernel as a tensor-core matrix product with the renderer's tile
    # configuration i (codegen/tensor_cores.py)

    def __repr__(self) -> str:
        return f"{self.op}({self.axis}, {self.amount})"


def main_reduce(ast: UOp) -> UOp | None:
    """The outermost REDUCE_AXIS of a kernel: the one whose loops UNROLL acts on."""
    for node in reversed(ast.src[0].src[2].toposort() if ast.src and ast.src[0].op is Ops.STORE else []):
        if node.op is Ops.REDUCE_AXIS:
            return node
    return None
