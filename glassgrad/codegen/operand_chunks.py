"""An operand of a tiled matrix product on a chunk of neighbouring elements: its loads as vector loads, then each
lane's math.

A tiled kernel copies each step's tile of an operand into shared memory 16 bytes at a time where it can. An operand
that is one input as it lies in memory is copied as it is; one computed by a prologue (a scale, a cast, a mask, a
view no single stride describes, such as attention's heads transposed back into rows) is computed element by element,
unless its value on a chunk of `lanes` neighbouring elements (16 bytes of the product's dtype, along k or along its
rows) reads each of its inputs' elements side by side: then each such input is one vector load of the chunk (two
aligned 16-byte loads shifted together where its address may not be aligned), and each lane's value is computed from
the loaded lanes. `operand_chunk` finds that form; the renderer writes it (renderer/cuda_tiles.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from glassgrad.codegen.vectorize import Vectorizer
from glassgrad.dtype import dtypes
from glassgrad.uop.ops import Ops, UOp
from glassgrad.uop.symbolic import _as_term, _sum_terms, simplify

VECTOR_DTYPES = (dtypes.float16, dtypes.bfloat16, dtypes.float32)  # inputs whose lanes the renderer unpacks


@dataclass(frozen=True)
class VectorLoad:
    """One input's elements for every lane: `index` (an INDEX, maybe gated) is lane 0's; lane j reads the next j."""

    name: str  # lane j's value is SPECIAL f"{name}_{j}" in the lanes' values
    index: UOp
    aligned: bool  # its address is a multiple of 16 bytes (or of its size, where smaller)


@dataclass(frozen=True)
class OperandChunk:
    """An operand's value on `lanes` neighbouring elements along k (`along_k`) or its rows, the first at gg_q*lanes."""

    along_k: bool
    lanes: int
    loads: tuple[VectorLoad, ...]
    values: tuple[UOp, ...]  # each lane's value


def _aligned(index: UOp, itemsize: int, lanes: int) -> bool:
    """Whether every term of the index is a multiple of the elements in 16 bytes (or in the whole chunk, if less)."""
    unit = min(16, lanes * itemsize) // itemsize
    return all(factor % unit == 0 for _, factor in map(_as_term, _sum_terms(index) or [index]))


def operand_chunk(value: UOp, along_k: bool, lanes: int) -> OperandChunk | None:
    """The operand's value (at SPECIALs gg_r, gg_k) on a chunk, or None where no input is read side by side."""
    axis = "gg_k" if along_k else "gg_r"
    var = next((u for u in value.toposort() if u.op is Ops.SPECIAL and u.arg[0] == axis), None)
    if var is None:
        return None
    q = UOp(Ops.SPECIAL, var.dtype, (), ("gg_q", -(-var.arg[1] // lanes)))
    lane = UOp(Ops.SPECIAL, var.dtype, (), ("lane", lanes))
    at = simplify(value.substitute({var: q * lanes + lane}))
    vectorizer = Vectorizer(UOp(Ops.SINK, dtypes.void, (at,)), lane)
    loads: list[VectorLoad] = []
    read: dict[UOp, str] = {}
    for u in at.toposort():
        if u.op is Ops.LOAD and vectorizer.depends[u] and u.dtype in VECTOR_DTYPES:
            if (first := vectorizer.contiguous(u.src[0])) is not None:
                read[u] = name = f"gg_v{len(loads)}"
                loads.append(VectorLoad(name, first, _aligned(first.src[1], u.dtype.itemsize, lanes)))
    if not loads:
        return None
    values = []
    for j in range(lanes):
        lane_values = {u: UOp(Ops.SPECIAL, u.dtype, (), (f"{name}_{j}", None)) for u, name in read.items()}
        values.append(simplify(at.substitute({**lane_values, lane: lane.const_like(j)})))
    return OperandChunk(along_k, lanes, tuple(loads), tuple(values))
