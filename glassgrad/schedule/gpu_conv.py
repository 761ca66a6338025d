"""Convolutions on a GPU: what the scheduler gives a buffer of its own so that a convolution's inner loop only loads.

A convolution reads each input element once per output channel and window position (hundreds of times). Work fused
into that read, a bias and a ReLU after the previous convolution, say, is recomputed as often: in a weight gradient's
inner loop as many ops as multiply-adds. On a GPU such a value is computed once into a buffer (one elementwise kernel,
a read and a write of the activations), where it reads a reduction's result (a previous layer, not a fresh input).
"""

from __future__ import annotations

from glassgrad.uop.ops import GroupOp, Ops, UOp

MIN_ALU = 2  # elementwise ops a value has at least for a GPU to give it a buffer rather than recompute it


def recomputed_on_a_gpu(value: UOp, points: dict[UOp, None]) -> bool:
    """Whether `value`, read by a reduction through a broadcast, is worth a buffer on its device: a GPU's, with at
    least MIN_ALU elementwise ops over a reduction that is a realize point of its own."""
    from glassgrad.schedule.split_reduce import _has_blocks

    if not _has_blocks(value.device):
        return False
    inside = lambda n: not (n in points and n is not value or n.op in (Ops.REDUCE_AXIS, Ops.COPY, Ops.BUFFER))
    nodes = value.toposort(enter=inside)
    alu = sum(n.op in GroupOp.ALU for n in nodes if inside(n))
    return alu >= MIN_ALU and any(n.op is Ops.REDUCE_AXIS and n in points for n in nodes)
