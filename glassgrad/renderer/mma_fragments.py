"""Where `mma.sync.m16n8k16` (16-bit inputs, float32 accumulators) and `ldmatrix` keep each matrix element: the index
arithmetic of renderer/cuda_mma_attention.py, written once for both ints (test/test_mma_fragments.py runs it on a
NumPy model of the PTX ISA's fragment tables) and C (the kernel's source, through `CExpr`).

The PTX ISA's tables, with g = lane / 4 (its groupID) and t = lane % 4 (threadID_in_group); a 32-bit register holds
two 16-bit elements, the lower-numbered one in its low half:
- A (16 x 16, row): register r holds row g + 8*(r%2), columns 2t + 8*(r/2) and the next;
- B (16 x 8, col): register r holds rows 2t + 8*r and the next, column g;
- C and D (16 x 8, float32): element i is row g + 8*(i/2), column 2t + i%2.
ldmatrix.x4 reads four 8 x 8 matrices of 16-bit elements, whose 8 rows (16 bytes each) lanes 8j .. 8j+7 name for
matrix j; lane l gets in register j row l/4, columns 2(l%4) and the next of matrix j (with .trans: column l/4, rows
2(l%4) and the next: the matrix transposed).
"""

from __future__ import annotations

CHUNK = 8  # 16-bit elements in 16 bytes: a cp.async and an ldmatrix row


class CExpr:
    """An integer C expression built with Python's operators (// and % of non-negative values are C's / and %), so
    that one index function serves the kernel's source and the tests' ints."""

    def __init__(self, text: str):
        self.text = text

    def __str__(self) -> str:
        return self.text

    def _binary(self, op: str, other, reverse: bool = False) -> CExpr:
        left, right = (other, self) if reverse else (self, other)
        return CExpr(f"({left} {op} {right})")

    def __add__(self, other):
        return self if isinstance(other, int) and other == 0 else self._binary("+", other)

    def __radd__(self, other):
        return self if isinstance(other, int) and other == 0 else self._binary("+", other, True)

    def __mul__(self, other):
        if isinstance(other, int) and other in (0, 1):
            return 0 if other == 0 else self
        return self._binary("*", other)

    def __rmul__(self, other):
        return self.__mul__(other)

    def __floordiv__(self, other):
        return self._binary("/", other)

    def __mod__(self, other):
        return self._binary("%", other)


def accumulator_at(lane, i: int):
    """(row, column) of accumulator element i (0..3) of a 16 x 8 C or D fragment."""
    return lane // 4 + 8 * (i // 2), 2 * (lane % 4) + i % 2


def accumulators_as_a(k_step) -> list[tuple]:
    """The A fragment of columns 16 k_step .. +15 of a 16-row matrix held as accumulators (one 16 x 8 tile each, tile
    n its columns 8n .. 8n+7): register r packs elements (2*(r%2), 2*(r%2) + 1) of tile 2 k_step + r/2, as
    (tile, first element). Why they line up: A's register r is row g + 8*(r%2), columns 2t + 8*(r/2) and the next;
    elements 2h and 2h+1 of a C tile are row g + 8h, columns 2t and 2t+1 of that tile, and tile 2 k_step + r/2 holds
    columns 16 k_step + 8*(r/2) + (0..7): the same two elements, the lower column first (the low half). So the
    scores' weights become the second product's A operand in registers, each lane keeping its own elements."""
    return [(2 * k_step + r // 2, 2 * (r % 2)) for r in range(4)]


def a_rows(lane, row0, k0) -> tuple:
    """(row, chunk) whose 16-byte row of a row-major (k contiguous) tile this lane names to an ldmatrix.x4 that loads
    the A fragment of rows row0 .. row0+15, columns k0 .. k0+15: matrix j = lane/8 is register j, rows 8*(j%2) +
    (0..7), columns k0 + 8*(j/2) + (0..7)."""
    matrix = lane // 8
    return row0 + lane % 8 + 8 * (matrix % 2), k0 // CHUNK + matrix // 2


def b_rows(lane, n0, k0) -> tuple:
    """(row, chunk) this lane names to an ldmatrix.x4 that loads the B fragments of two 8-column pieces (n0 .. n0+7
    and n0+8 .. n0+15), k0 .. k0+15, from a tile whose rows are B's columns (k contiguous: keys' rows for the
    scores): registers (0, 1) are the first piece's b0 and b1, (2, 3) the second's. Matrix j holds columns (rows of
    the tile) n0 + 8*(j/2) + (0..7), k's k0 + 8*(j%2) + (0..7)."""
    matrix = lane // 8
    return n0 + lane % 8 + 8 * (matrix // 2), k0 // CHUNK + matrix % 2


def b_rows_transposed(lane, k0, n0) -> tuple:
    """(row, chunk) this lane names to an ldmatrix.x4.trans that loads the same two B pieces from a tile whose rows
    are B's rows (n contiguous: values' rows): matrix j holds rows k0 + 8*(j%2) + (0..7), columns n0 + 8*(j/2) +
    (0..7), transposed on the way."""
    matrix = lane // 8
    return k0 + lane % 8 + 8 * (matrix % 2), n0 // CHUNK + matrix // 2


def padded_offset(row, chunk, chunks: int):
    """Byte offset of a 16-byte chunk in a shared tile of rows of `chunks` chunks, each row padded by one more: with an
    odd number of chunks from one row to the next, the 8 rows that one ldmatrix matrix reads (at one chunk) start
    in 8 different 16-byte groups of the 32 banks, so they are read in one pass. (chunks is even here: the head
    sizes are multiples of 16.)"""
    return (row * (chunks + 1) + chunk) * 16
