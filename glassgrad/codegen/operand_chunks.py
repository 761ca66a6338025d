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

import functools
import operator
from dataclasses import dataclass

from glassgrad.codegen.vectorize import Vectorizer, lane_step, steps_by_lane
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
    partial: bool = False  # its guard depends on the lane (a padded window's edge): `index`'s guard says every lane
    # is inside, and where it is false the renderer computes the chunk lane by lane


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


@functools.lru_cache(maxsize=512)  # asked twice a kernel: by match_matmul (which axis to copy along), by lower_operand
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
            first, partial = vectorizer.contiguous(u.src[0]), False
            if first is None and (first := _guarded_contiguous(vectorizer, u.src[0])) is not None:
                partial = True
            if first is not None:
                read[u] = name = f"gg_v{len(loads)}"
                loads.append(VectorLoad(name, first, _aligned(first.src[1], u.dtype.itemsize, lanes), partial))
    if not loads:
        return None
    values = []
    for j in range(lanes):
        lane_values = {u: UOp(Ops.SPECIAL, u.dtype, (), (f"{name}_{j}", None)) for u, name in read.items()}
        values.append(simplify(at.substitute({**lane_values, lane: lane.const_like(j)})))
    return OperandChunk(along_k, lanes, tuple(loads), tuple(values))


def _linear_in_lane(u: UOp, vectorizer: Vectorizer) -> bool:
    return not vectorizer.depends[u] or lane_step(u, vectorizer.lane, vectorizer.depends) is not None


def _monotone_in_lane(guard: UOp, vectorizer: Vectorizer) -> bool:
    """Whether the guard holds for every lane where it holds for the first and the last: an AND of comparisons of
    values linear in the lane (each true on one side of a point), such as a padded window's edges."""
    if not vectorizer.depends[guard]:
        return True
    if guard.op is Ops.AND:
        return all(_monotone_in_lane(s, vectorizer) for s in guard.src)
    return guard.op is Ops.CMPLT and all(_linear_in_lane(s, vectorizer) for s in guard.src)


def _guarded_contiguous(vectorizer: Vectorizer, index: UOp) -> UOp | None:
    """For an INDEX that lane i reads at base + i under a guard monotone in the lane, the INDEX of base guarded by
    "every lane is inside" (the guard at the first lane and at the last), else None."""
    idx, valid = index.src[1], index.src[2:]
    if not valid or not steps_by_lane(idx, vectorizer.lane, vectorizer.depends):
        return None
    if not all(_monotone_in_lane(v, vectorizer) for v in valid):
        return None
    every = [vectorizer.at_lane(v, lane) for v in valid for lane in (0, vectorizer.n - 1)]
    return index.replace(src=(index.src[0], vectorizer.at_lane_0(idx), functools.reduce(operator.and_, every)))
