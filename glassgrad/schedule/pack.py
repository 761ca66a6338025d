"""Packing: a large matmul on the CPU, or one whose B is read across its rows (x @ W.T), reads its reused operand
from panels that a kernel of their own lays out (on a renderer with `packs_panels`: the scheduler asks, naming no
device).

A matmul's kernel keeps a block of outputs in registers and, for each term of the sum, loads a row of B's columns
that the block covers. B's rows lie a whole row of B apart, usually a power of two of bytes, so the rows of one
panel (K rows by the block's columns) fall into a few cache sets and evict each other: every block of rows of A reads
the panel from memory again. Copied first into panels of PANEL_BYTES-wide columns, each panel K rows deep and
contiguous (B[k, n] at P[n // W, k, n % W]), the panel is one stream that stays in L2.

The rewrite splits the matmul's column axis into (panel, column within the panel), so that both the packed operand
and the output are single views and the kernel's index math stays affine:

    sum_k x[..., m, n, k] * y[..., m, n, k]          y constant along m (a broadcast of B)
 -> sum_k x[..., m, j, w, k] * P[..., j, k, w]       n = j*W + w, P = B packed (its own kernel), output stored as is
"""

from __future__ import annotations

from glassgrad import device_info
from glassgrad.dtype import dtypes
from glassgrad.helpers import L2_BUDGET, NOOPT
from glassgrad.renderer import Renderer
from glassgrad.uop.ops import Ops, UOp, fresh_unique
from glassgrad.uop.rewrite import PatternMatcher, UPat
from glassgrad.uop.view import chain_view

PANEL_BYTES = 128  # a panel row: the two 64-byte vectors of the CPU's register block (codegen/heuristics.py)
MIN_PACKED_BYTES = L2_BUDGET  # a B up to this whose columns are contiguous fits in L2 as it lies: packing would not pay
MIN_ROWS = 64  # the rows of A that reuse each panel: fewer do not repay copying B
PACKED_DTYPES = (dtypes.float32, dtypes.float64)


def movement(op: Ops, x: UOp, arg) -> UOp:
    """A movement op on `x` (the rules here and in schedule/conv.py build their operands' views with it)."""
    return UOp(op, x.dtype, (x,), tuple(arg))


def renderer_of_device(device: str | tuple | None) -> Renderer | None:
    """The renderer of one device (None for several): the rules ask what its kernels pay for (Renderer.packs_panels,
    .buffers_windows) and whether it runs any (.runs_kernels) through device_info, so the scheduler names no device
    and imports no runtime."""
    return device_info.renderer(device) if isinstance(device, str) else None


def renderer_of(node: UOp) -> Renderer | None:
    """The renderer of the one device `node` lives on."""
    return renderer_of_device(node.device)


def view_strides(x: UOp) -> tuple[int, ...] | None:
    """The strides of a movement chain over its base when one view holds it, else None."""
    views = chain_view(x).views
    return views[0].strides if len(views) == 1 and views[0].mask is None else None


def _contiguous(x: UOp) -> UOp:
    return UOp(Ops.CONTIGUOUS, x.dtype, (x, fresh_unique()))


def _broadcast_operand(mul: UOp) -> tuple[UOp, UOp] | None:
    """(x, y) of the product where y is a broadcast of a matrix along the rows axis (-3): a matmul's B."""
    for x, y in (mul.src, mul.src[::-1]):
        if y.op is Ops.EXPAND and y.src[0].shape[-3] == 1 and y.src[0].shape[-2:] == mul.shape[-2:]:
            return x, y
    return None


def pack_operand(reduce: UOp, mul: UOp) -> UOp | None:
    """A large float matmul on the CPU, rewritten to read B from contiguous panels (see the module's docstring)."""
    shape = mul.shape
    if NOOPT or len(shape) < 3 or reduce.arg != (Ops.ADD, (len(shape) - 1,)) or reduce.dtype not in PACKED_DTYPES:
        return None
    if (operands := _broadcast_operand(mul)) is None or (renderer := renderer_of(reduce)) is None:
        return None
    if not renderer.packs_panels:
        return None
    x, y = operands
    *batch, m, n, k = shape
    width = PANEL_BYTES // reduce.dtype.itemsize
    b = y.src[0]  # (..., 1, n, k)
    if m < MIN_ROWS or n % width or n == width:
        return None
    # a small B stays as it lies where its columns lie side by side (the register block's vectors load them); a B read
    # across its rows (x @ W.T, W's rows k-contiguous) would be gathered a lane at a time: packed whatever its size
    if n * k * reduce.dtype.itemsize <= MIN_PACKED_BYTES and ((strides := view_strides(b)) is None or strides[-2] == 1):
        return None
    split = (*b.shape[:-2], n // width, width, k)
    d = len(split)
    swap = (*range(d - 3), d - 3, d - 1, d - 2)  # the panel's rows and columns trade places (and back)
    panels = _contiguous(movement(Ops.PERMUTE, movement(Ops.RESHAPE, b, split), swap))
    y2 = movement(Ops.EXPAND, movement(Ops.PERMUTE, panels, swap), (*batch, m, *split[-3:]))
    x2 = movement(Ops.RESHAPE, x, y2.shape)
    product = mul.replace(src=(x2, y2) if mul.src[1] is y else (y2, x2))
    packed = UOp(Ops.REDUCE_AXIS, reduce.dtype, (product,), (Ops.ADD, (d - 1,)))
    return movement(Ops.RESHAPE, _contiguous(packed), reduce.shape)


pack_panels = PatternMatcher([
    (UPat(Ops.REDUCE_AXIS, src=(UPat(Ops.MUL, name="mul"),), name="reduce"), pack_operand),
])  # fmt: skip


def operand_twins(roots: list[UOp], enter, matcher: PatternMatcher = pack_panels) -> dict[UOp, UOp]:
    """Every node of the roots' graphs (down to where `enter` stops) mapped to its twin in which `matcher`'s rules
    gave operands buffers of their own (large matmuls read packed panels; schedule/conv.py's windows and weights),
    each node rewritten until no rule applies; a graph with none maps each node to itself. (graph_rewrite gives the
    new root only: kernelize needs the twin of every node, to answer for the graph it was given.)"""
    twin: dict[UOp, UOp] = {}
    for node in UOp(Ops.SINK, dtypes.void, tuple(roots)).toposort(enter=enter):
        src = tuple(twin.get(s, s) for s in node.src)
        rebuilt = node if src == node.src else node.replace(src=src)
        while (new := matcher.rewrite(rebuilt)) is not None:
            rebuilt = new
        twin[node] = rebuilt
    return twin
