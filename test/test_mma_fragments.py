"""The tensor-core attention kernel's index arithmetic (renderer/mma_fragments.py) against a NumPy model of the PTX
ISA's tables for mma.sync.m16n8k16 (16-bit inputs, float32 accumulators) and ldmatrix: one warp's S = Q K^T and O = P V,
simulated lane by lane through shared memory laid out as the kernel lays it out, against NumPy's products; and the
C the kernel is given for each index (CExpr) against the same functions on ints."""

import itertools

import numpy as np
import pytest

from glassgrad.renderer import mma_fragments as fragments
from glassgrad.renderer.cuda_mma_attention import PACK
from glassgrad.renderer.mma_fragments import CHUNK, CExpr, padded_offset

LANES = range(32)

# ---- the PTX ISA's tables (section "Matrix Fragments for mma.m16n8k16 with floating point type"), written from its
# text: g = %laneid >> 2, t = %laneid % 4; element i of a fragment is half i % 2 of register i // 2 ----


def a_place(lane: int, i: int) -> tuple[int, int]:
    """Row and column of A's element a_i (i < 8)."""
    g, t = lane >> 2, lane % 4
    row = g if i < 2 or 4 <= i < 6 else g + 8
    return row, t * 2 + (i & 1) + (8 if i >= 4 else 0)


def b_place(lane: int, i: int) -> tuple[int, int]:
    """Row and column of B's element b_i (i < 4)."""
    g, t = lane >> 2, lane % 4
    return t * 2 + (i & 1) + (8 if i >= 2 else 0), g


def c_place(lane: int, i: int) -> tuple[int, int]:
    """Row and column of the accumulators' element c_i (i < 4)."""
    g, t = lane >> 2, lane % 4
    return (g if i < 2 else g + 8), t * 2 + (i & 1)


def mma(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """D = A B + C for one warp: a (32, 4 registers, 2 halves) float16, b (32, 2, 2), c and D (32, 4) float32."""
    big_a, big_b, big_c = np.zeros((16, 16)), np.zeros((16, 8)), np.zeros((16, 8))
    for lane in LANES:
        for i in range(8):
            big_a[a_place(lane, i)] = a[lane, i // 2, i % 2]
        for i in range(4):
            big_b[b_place(lane, i)] = b[lane, i // 2, i % 2]
            big_c[c_place(lane, i)] = c[lane, i]
    d = big_a @ big_b + big_c
    return np.array([[d[c_place(lane, i)] for i in range(4)] for lane in LANES])


def ldmatrix_x4(shared: np.ndarray, addresses: list[int], trans: bool) -> np.ndarray:
    """ldmatrix.sync.aligned.m8n8.x4(.trans).b16: lanes 8j .. 8j+7 give the byte addresses of matrix j's 8 rows (16
    bytes each); lane l's register j holds row l / 4, columns 2(l % 4) and the next, of matrix j (transposed with
    .trans). Returns (32, 4, 2) 16-bit values."""
    out = np.zeros((32, 4, 2), shared.dtype)
    for j in range(4):
        rows = []
        for address in addresses[8 * j : 8 * j + 8]:
            assert address % 16 == 0, "ldmatrix rows are 16-byte aligned"
            rows.append(shared[address // 2 : address // 2 + 8])
        matrix = np.array(rows).T if trans else np.array(rows)
        for lane in LANES:
            out[lane, j] = matrix[lane // 4, 2 * (lane % 4) : 2 * (lane % 4) + 2]
    return out


# ---- one warp of the kernel ----


def _shared_tile(matrix: np.ndarray) -> np.ndarray:
    """A (rows, width) float16 matrix laid out as the kernel's copies lay it: padded_offset of (row, chunk)."""
    rows, width = matrix.shape
    chunks = width // CHUNK
    tile = np.full((padded_offset(rows, 0, chunks) // 2,), np.nan, np.float16)
    for row, chunk in itertools.product(range(rows), range(chunks)):
        at = padded_offset(row, chunk, chunks) // 2
        tile[at : at + CHUNK] = matrix[row, chunk * CHUNK : (chunk + 1) * CHUNK]
    return tile


def _addresses(rows_of, first: int, second: int, chunks: int) -> list[int]:
    """The byte address each lane gives ldmatrix, by the kernel's index function `rows_of` (row, chunk)."""
    return [padded_offset(*rows_of(lane, first, second), chunks) for lane in LANES]


def _scores(q_tile, k_tile, warp: int, head: int, keys: int) -> list[np.ndarray]:
    """The warp's accumulators of S = Q K^T, as the kernel's score_lines compute them (keys / 8 tiles of (32, 4))."""
    chunks = head // CHUNK
    qf = [ldmatrix_x4(q_tile, _addresses(fragments.a_rows, warp * 16, 16 * kk, chunks), False)
          for kk in range(head // 16)]  # fmt: skip
    s = [np.zeros((32, 4)) for _ in range(keys // 8)]
    for kk, p in itertools.product(range(head // 16), range(keys // 16)):
        b = ldmatrix_x4(k_tile, _addresses(fragments.b_rows, 16 * p, 16 * kk, chunks), False)
        s[2 * p] = mma(qf[kk], b[:, 0:2], s[2 * p])
        s[2 * p + 1] = mma(qf[kk], b[:, 2:4], s[2 * p + 1])
    return s


def _weighted(p_tiles, v_tile, value: int, keys: int) -> list[np.ndarray]:
    """The warp's accumulators of O = P V from P's accumulators, as the kernel's value_lines compute them."""
    o = [np.zeros((32, 4)) for _ in range(value // 8)]
    for kk in range(keys // 16):
        a = np.zeros((32, 4, 2), np.float16)
        for r, (tile, e) in enumerate(fragments.accumulators_as_a(kk)):
            a[:, r, 0], a[:, r, 1] = p_tiles[tile][:, e], p_tiles[tile][:, e + 1]  # the low half: element e
        for p in range(value // 16):
            b = ldmatrix_x4(v_tile, _addresses(fragments.b_rows_transposed, 16 * kk, 16 * p, value // CHUNK), True)
            o[2 * p] = mma(a, b[:, 0:2], o[2 * p])
            o[2 * p + 1] = mma(a, b[:, 2:4], o[2 * p + 1])
    return o


def _gathered(tiles: list[np.ndarray]) -> np.ndarray:
    """The (16, 8 * len(tiles)) matrix that accumulator tiles hold, by accumulator_at."""
    out = np.full((16, 8 * len(tiles)), np.nan)
    for n, tile in enumerate(tiles):
        for lane, i in itertools.product(LANES, range(4)):
            row, col = fragments.accumulator_at(lane, i)
            out[row, 8 * n + col] = tile[lane, i]
    return out


@pytest.mark.parametrize("head, value", [(16, 16), (64, 64), (80, 48), (128, 128)])
@pytest.mark.parametrize("warp", [0, 3])
def test_one_warps_products_through_the_fragments_match_numpy(head, value, warp):
    rng = np.random.default_rng(head + warp)
    rows, keys = 64, 64
    q, k = rng.standard_normal((rows, head)).astype(np.float16), rng.standard_normal((keys, head)).astype(np.float16)
    v = rng.standard_normal((keys, value)).astype(np.float16)
    s = _scores(_shared_tile(q), _shared_tile(k), warp, head, keys)
    want = q[16 * warp : 16 * warp + 16].astype(np.float64) @ k.T.astype(np.float64)
    np.testing.assert_allclose(_gathered(s), want, rtol=1e-12, atol=1e-9)
    weights = [np.exp(tile / 8).astype(np.float16).astype(np.float64) for tile in s]  # values 16 bits hold exactly
    o = _weighted(weights, _shared_tile(v), value, keys)
    want = _gathered(weights) @ v.astype(np.float64)
    np.testing.assert_allclose(_gathered(o), want, rtol=1e-12, atol=1e-9)


def test_the_padded_rows_of_one_ldmatrix_matrix_hit_distinct_banks():
    """The 8 rows one ldmatrix matrix reads start in 8 different 16-byte groups of the 32 banks, for every head size."""
    for chunks in range(2, 17, 2):
        groups = {padded_offset(row, 3 % chunks, chunks) // 16 % 8 for row in range(5, 13)}
        assert len(groups) == 8, chunks


def _as_python(expr: CExpr, values: dict[str, int]) -> int:
    """A rendered index's value: C's / of non-negative ints is Python's //."""
    return eval(str(expr).replace("/", "//"), {}, values)


@pytest.mark.parametrize("function, arguments", [
    (fragments.a_rows, ("warp", "kk")), (fragments.b_rows, ("p", "kk")), (fragments.b_rows_transposed, ("kk", "p")),
])  # fmt: skip
def test_the_rendered_c_computes_what_the_functions_do(function, arguments):
    """The kernel's C expressions (CExpr, with C's / and %) give the ints the simulation used, for every lane."""
    first, second = arguments
    exprs = function(CExpr("lane"), CExpr(first) * 16, 16 * CExpr(second))
    offset = padded_offset(*exprs, 8)
    for lane, x, y in itertools.product(LANES, range(4), range(4)):
        env = {"lane": lane, first: x, second: y}
        assert tuple(_as_python(e, env) for e in exprs) == function(lane, 16 * x, 16 * y)
        assert _as_python(offset, env) == padded_offset(*function(lane, 16 * x, 16 * y), 8)
    for lane, i in itertools.product(LANES, range(4)):
        row, col = fragments.accumulator_at(CExpr("lane"), CExpr("i"))
        assert tuple(_as_python(e, {"lane": lane, "i": i}) for e in (row, col)) == fragments.accumulator_at(lane, i)


def test_a_weight_pair_keeps_the_lower_column_in_the_low_half():
    """cvt.rn.f16x2.f32 d, a, b puts a in the upper half of d (PTX ISA, cvt): the pack passes the higher column
    first, so the lower column is the low half, as the A fragment's element order asks."""
    helper = PACK.format(t="f16")
    assert 'cvt.rn.f16x2.f32 %0, %2, %1;" : "=r"(r) : "f"(lo), "f"(hi)' in helper
