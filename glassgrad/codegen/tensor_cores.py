"""Tensor cores: a kernel that sums A[m, k] * B[k, n] over k in float16 or bfloat16 becomes a tiled matrix product.

The TC action (`Opt("TC", 0, i)`: tile configuration i of the renderer's `tile_configs`) applies to a kernel whose one
reduction is a sum over one axis k of the product of two 16-bit float inputs (maybe through casts that change no
value), accumulated in float32, whose inputs lie in memory as plain strided matrices (16-byte aligned, k or the other
axis contiguous), and whose sizes the tile divides. `match_matmul` says whether a kernel is one and
describes it (`Matmul`); everything after the sum (the cast to half, a bias, an activation: the epilogue) stays the
kernel's own UOps, lowered by `lower_epilogue` for one accumulator at a time. The renderer writes the kernel around it
(renderer/cuda_tc.py; renderer/cuda_wgmma.py on Hopper). The heuristics choose TC where the renderer has tensor cores
and the shapes allow; BEAM times every configuration that fits; NOOPT=1 turns it off, and every other kernel keeps
the ordinary path.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from glassgrad.codegen.linearize import linearize
from glassgrad.codegen.lowerer import Lowerer
from glassgrad.codegen.opt import Opt
from glassgrad.dtype import DType, dtypes
from glassgrad.helpers import prod
from glassgrad.renderer import Renderer
from glassgrad.uop.ops import Ops, UOp
from glassgrad.uop.rewrite import graph_rewrite
from glassgrad.uop.symbolic import simplify, symbolic
from glassgrad.uop.view import View

if TYPE_CHECKING:
    from glassgrad.renderer.cuda_tc import TileConfig
    from glassgrad.renderer.cuda_wgmma import WgmmaConfig

TC_DTYPES = (dtypes.float16, dtypes.bfloat16)
ALIGN = 8  # elements of 16 bits in the 16 bytes that one copy moves: strides and offsets must be multiples of it
MIN_BLOCKS = 100  # the heuristics take the first tile that gives this many blocks: about one a multiprocessor


@dataclass(frozen=True)
class Operand:
    """One input of the product, as it lies in memory: element (batch, row, k) is at
    offset + batch strides + row * row_stride + k * k_stride (A's rows are m, B's are n)."""

    buffer: UOp  # its DEFINE_GLOBAL
    row_stride: int
    k_stride: int
    batch_strides: tuple[int, ...]
    offset: int


@dataclass(frozen=True)
class Matmul:
    """A kernel that is a batched matrix product C[batch, m, n] = sum_k A[batch, m, k] * B[batch, k, n]."""

    reduce: UOp  # the REDUCE_AXIS
    dtype: DType  # of A and B: float16 or bfloat16
    batch_axes: tuple[int, ...]  # axes of the reduction's input shape
    m_axis: int
    n_axis: int
    k_axis: int
    batch_shape: tuple[int, ...]
    m: int
    n: int
    k: int
    a: Operand
    b: Operand
    index_dtype: DType  # int32: match_matmul refuses kernels whose buffers or output views need more

    @property
    def batch(self) -> int:
        return prod(self.batch_shape)


def _strided_input(x: UOp) -> tuple[UOp, View] | None:
    """The buffer and single strided view (no padding) through which `x` reads a 16-bit float input: LOAD(buf, VIEW),
    a VIEW of a contiguous LOAD, and either through casts that change no value (to float32, which the tensor cores
    multiply in exactly, and back: a gradient flowing into a half matmul comes as half(float(g)))."""
    if x.op is Ops.CAST and x.dtype == dtypes.float32 and x.src[0].dtype in TC_DTYPES:
        return _strided_input(x.src[0])
    if x.op is Ops.CAST and x.dtype in TC_DTYPES and x.src[0].dtype == dtypes.float32:
        found = _strided_input(x.src[0])
        return found if found is not None and found[0].dtype.base == x.dtype else None
    if x.op is Ops.VIEW and x.src and (inner := _strided_input(x.src[0])) is not None:
        buf, view = inner
        if view.contiguous and view.offset == 0 and view.shape == x.src[0].shape:
            return (buf, x.arg.views[0]) if len(x.arg.views) == 1 and x.arg.views[0].mask is None else None
        return None
    if x.op is Ops.LOAD and x.dtype in TC_DTYPES and len(x.src[1].arg.views) == 1:
        view = x.src[1].arg.views[0]
        return (x.src[0], view) if view.mask is None else None
    return None


def _product_inputs(value: UOp) -> tuple[tuple[UOp, View], tuple[UOp, View]] | None:
    """The two 16-bit float inputs whose product `value` is: a*b, float(a)*float(b), and either through casts between
    float32 and 16 bits (a gradient's product comes as float(half(float(g) * float(b))))."""
    while value.op is Ops.CAST and dtypes.float32 in (value.dtype, value.src[0].dtype) and \
            {value.dtype, value.src[0].dtype} <= {dtypes.float32, *TC_DTYPES}:  # fmt: skip
        value = value.src[0]
    if value.op is not Ops.MUL:
        return None
    found = [_strided_input(s) for s in value.src]
    if found[0] is None or found[1] is None or found[0][0].dtype.base != found[1][0].dtype.base:
        return None
    return found[0], found[1]


def _operand(buf: UOp, view: View, row_axis: int, k_axis: int, batch_axes: tuple[int, ...]) -> Operand | None:
    """The input as an Operand, where its copies can move 16 aligned bytes at a time."""
    row, k = view.strides[row_axis], view.strides[k_axis]
    if not (k == 1 and row % ALIGN == 0 or row == 1 and k % ALIGN == 0):
        return None  # one of k and the rows contiguous, the other 16-byte aligned
    batch = tuple(view.strides[a] for a in batch_axes)
    if view.offset % ALIGN or any(s % ALIGN for s in batch):
        return None
    return Operand(buf, row, k, batch, view.offset)


def _int32_indices(ast: UOp, reduce: UOp) -> bool:
    """Whether int32 index math reaches everything: every buffer, and every view the epilogue reads through (the
    views of the sum's loads span m*n*k elements, but the kernel indexes those buffers as plain matrices)."""
    inside = set(reduce.toposort())
    epilogue = [n for n in ast.toposort() if n not in inside]
    buffers = [n.dtype.size for n in ast.toposort() if n.op is Ops.DEFINE_GLOBAL]
    views = [prod(v.shape) for n in epilogue if n.op is Ops.VIEW for v in n.arg.views]
    return max(buffers + views) < 2**31


def match_matmul(ast: UOp) -> Matmul | None:
    """The kernel as a batched matrix product of 16-bit floats with float32 accumulation, or None."""
    if len(ast.src) != 1 or ast.src[0].op is not Ops.STORE:
        return None
    nodes = ast.toposort()
    if any(n.op is Ops.CHECK for n in nodes):
        return None  # the tensor-core kernels take no error buffer
    reduces = [n for n in nodes if n.op is Ops.REDUCE_AXIS]
    if len(reduces) != 1 or reduces[0].arg[0] is not Ops.ADD or len(reduces[0].arg[1]) != 1:
        return None
    reduce = reduces[0]
    if reduce.dtype not in (dtypes.float32, *TC_DTYPES) or (inputs := _product_inputs(reduce.src[0])) is None:
        return None
    if not _int32_indices(ast, reduce):
        return None
    (k_axis,), shape = reduce.arg[1], reduce.src[0].shape
    strides = [view.strides for _, view in inputs]
    only = [[a for a in range(len(shape)) if a != k_axis and shape[a] > 1 and strides[i][a] != 0 == strides[1 - i][a]]
            for i in (0, 1)]  # fmt: skip
    if not only[0] or not only[1]:
        return None  # an axis along which only one input moves for each: A's m and B's n (the innermost such)
    a_axis, b_axis = only[0][-1], only[1][-1]  # any others are batch axes along which the other input is broadcast
    if a_axis > b_axis:  # A is the operand whose own axis comes first, so that n is the output's inner axis
        inputs, (a_axis, b_axis) = (inputs[1], inputs[0]), (b_axis, a_axis)
    batch_axes = tuple(a for a in range(len(shape)) if a not in (a_axis, b_axis, k_axis) and shape[a] > 1)
    a, b = _operand(*inputs[0], a_axis, k_axis, batch_axes), _operand(*inputs[1], b_axis, k_axis, batch_axes)
    if a is None or b is None:
        return None
    batch_shape = tuple(shape[x] for x in batch_axes)
    mm = Matmul(reduce, inputs[0][0].dtype.base, batch_axes, a_axis, b_axis, k_axis, batch_shape, shape[a_axis],
                shape[b_axis], shape[k_axis], a, b, dtypes.int32)  # fmt: skip
    return mm if _epilogue_sink(ast, mm) is not None else None


def fits(mm: Matmul, config: TileConfig | WgmmaConfig) -> bool:
    """The tile divides the product's m, n and k, and each thread copies whole 16-byte pieces of every step."""
    pieces = (config.bm + config.bn) * config.bk // ALIGN
    return (mm.m % config.bm == 0 and mm.n % config.bn == 0 and mm.k % config.bk == 0
            and config.bm * config.bk // ALIGN % config.threads == 0 and pieces % config.threads == 0
            and config.bn * config.bk // ALIGN % config.threads == 0)  # fmt: skip


def tensor_core_actions(ast: UOp, renderer: Renderer | None) -> list[Opt]:
    """Every TC action the renderer can render for this kernel: one per tile configuration that fits."""
    configs = getattr(renderer, "tile_configs", ())
    if not configs or (mm := match_matmul(ast)) is None:
        return []
    return [Opt("TC", 0, i) for i, config in enumerate(configs) if fits(mm, config)]


def tensor_core_opts(ast: UOp, renderer: Renderer | None) -> tuple[Opt, ...]:
    """The heuristics' TC action: the first configuration (the renderer lists them in its order of preference) that
    gives MIN_BLOCKS blocks, else the one with the most blocks; () where TC does not apply."""
    if not (found := tensor_core_actions(ast, renderer)):
        return ()
    mm, configs = match_matmul(ast), renderer.tile_configs  # type: ignore[union-attr]
    blocks = {o: mm.batch * (mm.m // configs[o.amount].bm) * (mm.n // configs[o.amount].bn) for o in found}
    return (next((o for o in found if blocks[o] >= MIN_BLOCKS), max(found, key=lambda o: blocks[o])),)


def _epilogue_sink(ast: UOp, mm: Matmul) -> UOp | None:
    """The kernel's store with the sum replaced by the accumulator (SPECIAL gg_acc) at output position (gg_batch0,
    gg_batch1, ..., gg_row, gg_col); None where the epilogue reads the sum anywhere but at the output's own position."""
    idx = mm.index_dtype
    row, col = UOp(Ops.SPECIAL, idx, (), ("gg_row", mm.m)), UOp(Ops.SPECIAL, idx, (), ("gg_col", mm.n))
    shape = mm.reduce.src[0].shape
    at = [UOp.const(idx, 0)] * len(shape)
    for i, axis in enumerate(mm.batch_axes):  # one variable per batch axis: gg_batch0, gg_batch1, ...
        at[axis] = UOp(Ops.SPECIAL, idx, (), (f"gg_batch{i}", shape[axis]))
    at[mm.m_axis], at[mm.n_axis] = row, col
    expected = tuple(simplify(i) for i in at)
    # the output's axes are the product's axes without k, in order (size-1 axes aside)
    store = ast.src[0]
    out_shape = store.src[1].arg.shape
    product_axes = [(s, i) for axis, (s, i) in enumerate(zip(shape, at)) if axis != mm.k_axis and s > 1]
    if [s for s in out_shape if s > 1] != [s for s, _ in product_axes]:
        return None
    position = iter(i for _, i in product_axes)
    out_idxs = tuple(next(position) if s > 1 else UOp.const(idx, 0) for s in out_shape)

    class EpilogueLowerer(Lowerer):
        def _lower_reduce(self, node: UOp, idxs: tuple[UOp, ...]) -> UOp:
            if tuple(simplify(i) for i in idxs) != expected:
                raise LookupError("the sum is read away from its output position")
            acc = UOp(Ops.SPECIAL, dtypes.float32, (), ("gg_acc", None))
            return acc if node.dtype == dtypes.float32 else acc.cast(node.dtype)

    buf, view, value = store.src
    try:
        stored = EpilogueLowerer(0, idx_dtype=idx).value(value, out_idxs)
    except LookupError:
        return None
    index, valid = view.arg.to_indexed(list(out_idxs))
    gated = not (valid.op is Ops.CONST and valid.arg is True)
    target = UOp(Ops.INDEX, buf.dtype, (buf, index, valid) if gated else (buf, index))
    buffers = sorted((n for n in ast.toposort() if n.op is Ops.DEFINE_GLOBAL), key=lambda n: n.arg)
    return UOp(Ops.SINK, dtypes.void, (*buffers, UOp(Ops.STORE, dtypes.void, (target, stored))))


def lower_epilogue(ast: UOp, mm: Matmul, renderer: Renderer) -> list[UOp]:
    """The linear program of the epilogue for one accumulator: simplified, in the renderer's dialect, no loops."""
    sink = graph_rewrite(_epilogue_sink(ast, mm), symbolic)
    if renderer.dialect is not None:
        sink = graph_rewrite(sink, renderer.dialect)
    program = linearize(sink)
    assert not any(u.op is Ops.RANGE for u in program), "an epilogue has no loops"
    return program


@dataclass(frozen=True)
class TensorCoreKernel:
    """A rendered TC kernel: its source, its epilogue's program, its launch (blocks, threads) and its counts."""

    src: str
    program: tuple[UOp, ...]
    global_size: tuple[int, ...]
    local_size: tuple[int, ...]
    ops: int  # 2*m*n*k per batch entry, as the ordinary path counts a matmul
    mem: int  # each input read once, each output written once


def tensor_core_kernel(ast: UOp, renderer: Renderer, opt: Opt, name: str) -> TensorCoreKernel:
    """The TC kernel of `ast` with tile configuration `opt.amount` of the renderer's."""
    mm = match_matmul(ast)
    configs = getattr(renderer, "tile_configs", ())
    if mm is None or not 0 <= opt.amount < len(configs) or not fits(mm, configs[opt.amount]):
        raise ValueError(f"{opt} does not apply to this kernel: tensor cores need a float16 or bfloat16 matrix product "
                         "whose sizes the tile divides")  # fmt: skip
    config = configs[opt.amount]
    epilogue = lower_epilogue(ast, mm, renderer)
    src = renderer.render_matmul(name, mm, config, epilogue)  # type: ignore[attr-defined]
    outputs = mm.batch * mm.m * mm.n
    per_output = sum(u.dtype.itemsize for u in epilogue if u.op is Ops.LOAD) + \
        sum(u.src[1].dtype.itemsize for u in epilogue if u.op is Ops.STORE)  # fmt: skip
    blocks = mm.batch * (mm.m // config.bm) * (mm.n // config.bn)
    inputs = mm.batch * (mm.m + mm.n) * mm.k * mm.dtype.itemsize
    return TensorCoreKernel(src, tuple(epilogue), (blocks,), (config.threads,), 2 * outputs * mm.k,
                            inputs + outputs * per_output)  # fmt: skip
