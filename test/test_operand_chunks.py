"""An operand of a tiled product read a chunk at a time (codegen/operand_chunks.py), checked without a GPU: which
loads are vector loads, and a padded window's guard that says every lane of a chunk is inside."""

import itertools

import pytest

from glassgrad import Tensor, dtypes
from glassgrad.codegen.operand_chunks import operand_chunk
from glassgrad.codegen.tensor_cores import match_matmul
from glassgrad.uop.ops import Ops, UOp
from glassgrad.uop.symbolic import simplify

BF16 = dtypes.bfloat16


def _conv_input(width: int, padding: int, stride: int = 1):
    """The im2col operand of a convolution's product (its rows the output's positions, k its window); the output's width
    a multiple of 8 keeps a chunk in one of its rows."""
    x, w = (
        Tensor.empty(2, 3, width, width, dtype=BF16, device="CPU"),
        Tensor.empty(4, 3, 3, 3, dtype=BF16, device="CPU"),
    )
    mm = match_matmul(x.conv2d(w, padding=padding, stride=stride).schedule()[-1].ast)
    return next(o for o in (mm.a, mm.b) if o.strided is None)


def _value(u: UOp, at: dict[str, int]) -> int:
    specials = {s: UOp.const(s.dtype, at[s.arg[0]]) for s in u.toposort() if s.op is Ops.SPECIAL}
    folded = simplify(u.substitute(specials))
    assert folded.op is Ops.CONST, folded
    return folded.arg


def _guard_and_index(load_index: UOp) -> tuple[UOp, UOp]:
    return load_index.src[1], load_index.src[2]


@pytest.mark.parametrize("width, padding", [(32, 1), (16, 1), (14, 2), (18, 0)])
def test_a_padded_window_is_read_along_its_rows_a_chunk_at_a_time(width, padding):
    operand = _conv_input(width, padding)
    assert not operand.k_fast  # along k a window row is 3 long: the chunk goes along the image's rows
    chunk = operand_chunk(operand.value, False, 8)
    assert chunk is not None and len(chunk.loads) == 1 and chunk.loads[0].partial == (padding > 0)


@pytest.mark.parametrize("width, padding", [(32, 1), (14, 2)])
def test_the_guard_of_a_partial_chunk_says_every_lane_is_inside(width, padding):
    operand = _conv_input(width, padding)
    chunk = operand_chunk(operand.value, False, 8)
    index, every = _guard_and_index(chunk.loads[0].index)
    element_load = next(u for u in operand.value.toposort() if u.op is Ops.LOAD)
    element_index, element_guard = element_load.src[0].src[1], element_load.src[0].src[2]
    out = width + 2 * padding - 2
    rows, ks = 2 * out * out, 27
    for q, k in itertools.product(range(0, rows // 8, 3), range(0, ks, 2)):
        lanes = [{"gg_r": q * 8 + j, "gg_k": k} for j in range(8)]
        inside = [_value(element_guard, at) for at in lanes]
        assert _value(every, {"gg_q": q, "gg_k": k}) == all(inside)
        if all(inside):  # the vector load reads each lane's element
            first = _value(index, {"gg_q": q, "gg_k": k})
            assert [_value(element_index, at) for at in lanes] == [first + j for j in range(8)]


def test_a_guard_not_monotone_in_the_lane_is_no_partial_chunk():
    # lane % 2 == 0 picks every other lane: no "first and last inside" says every lane is
    x = Tensor.empty(64, 16, dtype=BF16, device="CPU")
    picked = (Tensor.arange(16, device="CPU") % 2 == 0).reshape(1, 16)
    mm = match_matmul((picked.where(x, 0).T @ Tensor.empty(64, 32, dtype=BF16, device="CPU")).schedule()[-1].ast)
    operand = mm.a
    assert operand.strided is None
    chunk = operand_chunk(operand.value, operand.k_fast, 8)
    assert chunk is None or not any(load.partial for load in chunk.loads)
