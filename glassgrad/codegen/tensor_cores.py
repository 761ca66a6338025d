"""Tiled contractions: a kernel that sums A[batch, m, k] * B[batch, n, k] over k becomes a tiled matrix product.

The TC action (`Opt("TC", 0, i)`: configuration i of the renderer's `tile_configs`) applies to a kernel whose one
reduction is a sum over one axis k of a product whose factors split in two: those that move along an output axis m
and not along another axis n (A), and the rest (B). A factor may be any elementwise work over the kernel's inputs
(a cast, a scale, a mask: the prologue, computed as the kernel copies its tile); what follows the sum (a bias, an
activation, a residual add, the cast to the output's dtype: the epilogue) stays the kernel's own UOps too, lowered for
one accumulator at a time. `match_matmul` says whether a kernel is one and describes it (`Matmul`): its sizes, its
batch axes, and each operand's value at (batch, row, k) with the kernel's position as variables; where an operand is
one input read as it lies in memory, how it lies (`Strided`), so that the kernel can copy it 16 bytes at a time.

The product multiplies in float16 or bfloat16 where both operands hold such values (tensor cores, float32
accumulation), else in float32: on the SIMT units (renderer/cuda_simt.py), or on the tensor cores as TF32 where the
user allows it (`glassgrad.backends.cuda.matmul.allow_tf32 = True`, or TF32=1). Any size: the tiles at the edges are
masked. The renderer writes the kernel around the operands and the epilogue (renderer/cuda_tc.py, cuda_wgmma.py on
Hopper, cuda_simt.py). The heuristics choose TC where the renderer has a configuration for the product's dtype and its
sides are not tiny; BEAM times every configuration; NOOPT=1 turns it off.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from glassgrad.codegen.linearize import linearize
from glassgrad.codegen.lowerer import Lowerer, scatter_store
from glassgrad.codegen.operand_chunks import OperandChunk, operand_chunk
from glassgrad.codegen.opt import Opt
from glassgrad.dtype import DType, dtypes
from glassgrad.helpers import TF32, prod
from glassgrad.renderer import Renderer
from glassgrad.uop.ops import Ops, UOp
from glassgrad.uop.rewrite import graph_rewrite
from glassgrad.uop.symbolic import _as_term, _sum_terms, simplify, symbolic

if TYPE_CHECKING:
    from glassgrad.renderer.cuda_tc import TileConfig

TC_DTYPES = (dtypes.float16, dtypes.bfloat16)
MULTIPLY_DTYPES = (*TC_DTYPES, dtypes.float32)
MIN_BLOCKS = 90  # the heuristics take the first tile that gives this many blocks: a wave that keeps 70% of a
# 132-multiprocessor GPU busy beats smaller, slower tiles (bench/tensor_cores.py, H200, attention's output projection,
# 4096 x 768 x 768: 96 tiles of 128x256 ran at 154 TFLOP/s, 192 of 128x128 at 118)
MIN_FILL = 0.75  # ...and whose edge tiles leave at most a quarter of the tiles' outputs unused
MIN_SIDE = 16  # products with fewer rows, columns or terms keep the ordinary kernel (a matrix-vector product reads B
# once whatever the tile; the ordinary kernel's threads share its long sums)


@dataclass(frozen=True)
class Strided:
    """An input as it lies in memory: element (batch, row, k) is at offset + batch strides + row * row_stride +
    k * k_stride (A's rows are m, B's are n)."""

    buffer: UOp  # its DEFINE_GLOBAL
    row_stride: int
    k_stride: int
    batch_strides: tuple[int, ...]
    offset: int


@dataclass(frozen=True)
class Operand:
    """One side of the product: its value at (gg_batch0, ..., gg_r, gg_k), in the product's dtype."""

    value: UOp  # lowered and simplified: SPECIAL variables for the position, LOADs of the kernel's buffers
    rows: int  # m for A, n for B
    strided: Strided | None  # where the value is one input's element as it lies in memory
    k_fast: bool  # its loads move least along k (neighbouring threads copy neighbouring k's), else along the rows


@dataclass(frozen=True)
class Matmul:
    """A kernel that is a batched matrix product C[batch, m, n] = sum_k A[batch, m, k] * B[batch, n, k]; m, n and k
    may each be several axes of the reduction's input, taken as one (row-major over them)."""

    reduce: UOp  # the REDUCE_AXIS
    dtype: DType  # the product's: float16 or bfloat16 (both operands hold such values), else float32
    batch_axes: tuple[int, ...]  # axes of the reduction's input shape
    m_axes: tuple[int, ...]  # A's own (what only A's factors read; none: one row)
    n_axes: tuple[int, ...]  # B's own
    k_axes: tuple[int, ...]  # the reduced ones
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


def _exact_product(value: UOp) -> UOp:
    """The product under casts between float32 and 16 bits (a gradient's product comes as float(half(float(g) *
    float(b)))): the tensor cores' products are exact, so the rounding in between is dropped."""
    while value.op is Ops.CAST and dtypes.float32 in (value.dtype, value.src[0].dtype) and \
            {value.dtype, value.src[0].dtype} <= set(MULTIPLY_DTYPES):  # fmt: skip
        value = value.src[0]
    return value


def _exact_value(value: UOp) -> UOp:
    """A value under casts that change nothing: float32 of 16 bits is the 16-bit value, half(float(h)) is h."""
    while (
        value.op is Ops.CAST and value.src[0].dtype in TC_DTYPES and value.dtype in (dtypes.float32, value.src[0].dtype)
    ):
        value = value.src[0]
    if value.op is Ops.CAST and value.dtype in TC_DTYPES and (inner := value.src[0]).op is Ops.CAST and \
            inner.dtype == dtypes.float32 and inner.src[0].dtype == value.dtype:  # fmt: skip
        return _exact_value(inner.src[0])
    return value


def _factors(x: UOp) -> list[UOp]:
    """The factors of a tree of multiplications of one dtype."""
    if x.op is Ops.MUL:
        return [f for s in x.src for f in (_factors(s) if s.dtype == x.dtype else [s])]
    return [x]


def _position(shape: tuple[int, ...], idx: DType) -> tuple[UOp, ...]:
    """A variable for each axis of the reduction's input (gg_ax0, gg_ax1, ...; 0 for an axis of size 1)."""
    return tuple(
        UOp(Ops.SPECIAL, idx, (), (f"gg_ax{i}", s)) if s > 1 else UOp.const(idx, 0) for i, s in enumerate(shape)
    )


def _axes_read(value: UOp) -> set[int]:
    return {int(u.arg[0][5:]) for u in value.toposort() if u.op is Ops.SPECIAL and u.arg[0].startswith("gg_ax")}


def _split(var: UOp, sizes: list[int]) -> list[UOp]:
    """Each axis's index in a row-major walk `var` over axes of these sizes."""
    indices = []
    for i, size in enumerate(sizes):
        outer = var // prod(sizes[i + 1 :]) if i + 1 < len(sizes) else var
        indices.append(outer % size if i else outer)
    return indices


def _int32_indices(ast: UOp, reduce: UOp) -> bool:
    """Whether int32 index math reaches everything: every buffer, and every view the epilogue reads through (the
    views of the sum's loads span m*n*k elements, but the kernel indexes those buffers as plain matrices)."""
    inside = set(reduce.toposort())
    epilogue = [n for n in ast.toposort() if n not in inside]
    buffers = [n.dtype.size for n in ast.toposort() if n.op is Ops.DEFINE_GLOBAL]
    views = [prod(v.shape) for n in epilogue if n.op is Ops.VIEW for v in n.arg.views]
    return max(buffers + views) < 2**31


def _load_steps(value: UOp) -> tuple[int, int] | None:
    """How far the first load of an operand's value moves per row and per k, or None (no load, or a step that
    depends on where it is)."""
    load = next((u for u in value.toposort() if u.op is Ops.LOAD), None)
    if load is None:
        return None
    index = load.src[0].src[1]
    specials = [u for u in index.toposort() if u.op is Ops.SPECIAL]
    at = lambda moved: simplify(index.substitute({u: UOp.const(u.dtype, int(u.arg[0] == moved)) for u in specials}))
    origin, row, k = at(""), at("gg_r"), at("gg_k")
    if not all(x.op is Ops.CONST for x in (origin, row, k)):
        return None
    return row.arg - origin.arg, k.arg - origin.arg


def _strided(value: UOp, batch: int) -> Strided | None:
    """The operand as one input read where it lies, plain strides along its rows, k and batch axes: a load (of the
    operand's own dtype) whose index is affine in gg_r, gg_k and gg_batch0.. and which no guard masks."""
    if value.op is not Ops.LOAD or len(value.src[0].src) != 2 or value.src[0].src[0].dtype.base != value.dtype:
        return None
    buffer, index = value.src[0].src
    strides, offset = dict.fromkeys(["gg_r", "gg_k", *(f"gg_batch{i}" for i in range(batch))], 0), 0
    for base, factor in map(_as_term, _sum_terms(index) or [index]):
        if base is None:
            offset += factor
        elif base.op is Ops.SPECIAL and base.arg[0] in strides:
            strides[base.arg[0]] += factor
        else:
            return None
    return Strided(
        buffer, strides["gg_r"], strides["gg_k"], tuple(strides[f"gg_batch{i}"] for i in range(batch)), offset
    )


def _k_fast(value: UOp, strided: Strided | None, dtype: DType) -> bool:
    """Whether the operand's loads move least along k (else along its rows): its tile is copied along that axis. Where
    both move by one element (a convolution's window: along k within a row of the kernel, along the rows within a row
    of the image), the axis along which a chunk of it is read side by side."""
    steps = (strided.row_stride, strided.k_stride) if strided is not None else _load_steps(value)
    if steps is None:
        return True
    row, k = (abs(s) for s in steps)
    if strided is None and row == k == 1:
        lanes = 16 // dtype.itemsize
        return operand_chunk(value, True, lanes) is not None or operand_chunk(value, False, lanes) is None
    return k == 1 or row != 1 and k <= row


def _sides(shape: tuple[int, ...], k_axes: tuple[int, ...], factors: list[UOp], reads: dict[UOp, set[int]]
           ) -> tuple | None:  # fmt: skip
    """(A's factors, B's factors, A's own axes, B's own axes, batch axes): B's factors read the innermost axis that
    some factors read and others don't (the output's columns, say); an axis only A's (B's) factors read is A's (B's)
    own; the rest are batch axes (what no factor reads too: the product broadcast along it)."""
    outputs = [a for a in range(len(shape)) if a not in k_axes and shape[a] > 1]
    one_sided = [a for a in outputs if 0 < sum(a in reads[f] for f in factors) < len(factors)]
    if not one_sided:
        return None
    b_factors = [f for f in factors if one_sided[-1] in reads[f]]  # a factor may come twice: a*a
    a_factors = [f for f in factors if one_sided[-1] not in reads[f]]
    only = lambda mine, others: tuple(a for a in one_sided if any(a in reads[f] for f in mine) and
                                      not any(a in reads[f] for f in others))  # fmt: skip
    m_axes, n_axes = only(a_factors, b_factors), only(b_factors, a_factors)
    return a_factors, b_factors, m_axes, n_axes, tuple(a for a in outputs if a not in m_axes + n_axes)


@functools.lru_cache(maxsize=512)
def match_matmul(ast: UOp) -> Matmul | None:
    """The kernel as a batched matrix product with float32 accumulation, or None."""
    if len(ast.src) != 1 or ast.src[0].op is not Ops.STORE or scatter_store(ast.src[0]):
        return None
    nodes = ast.toposort()
    if any(n.op is Ops.CHECK for n in nodes):
        return None  # the tiled kernels take no error buffer
    reduces = [n for n in nodes if n.op is Ops.REDUCE_AXIS]
    if len(reduces) != 1 or reduces[0].arg[0] is not Ops.ADD:
        return None
    reduce = reduces[0]
    if reduce.dtype not in MULTIPLY_DTYPES or not _int32_indices(ast, reduce):
        return None
    k_axes, shape, idx = tuple(sorted(reduce.arg[1])), reduce.src[0].shape, dtypes.int32
    if prod(shape) == 0 or prod(shape[a] for a in k_axes) < 2:
        return None
    at = _position(shape, idx)
    try:  # the factors of the summed value as the kernel computes it: a view over the product (a two-stage sum's
        # reshape, splitting the batch into parts) is indexed through, down to the loads
        product = simplify(Lowerer(0, idx_dtype=idx).value(_exact_product(reduce.src[0]), at))
    except NotImplementedError:
        return None
    factors = _factors(_exact_product(product))
    if len(factors) < 2 or any(f.dtype not in MULTIPLY_DTYPES for f in factors):
        return None
    if (sides := _sides(shape, k_axes, factors, {f: _axes_read(f) for f in factors})) is None:
        return None
    a_factors, b_factors, m_axes, n_axes, batch_axes = sides
    sizes = lambda axes: [shape[a] for a in axes if shape[a] > 1]  # noqa: E731
    m, n, k = prod(sizes(m_axes)), prod(sizes(n_axes)), prod(sizes(k_axes))
    row, kk = UOp(Ops.SPECIAL, idx, (), ("gg_r", 0)), UOp(Ops.SPECIAL, idx, (), ("gg_k", k))
    common = {at[x]: UOp(Ops.SPECIAL, idx, (), (f"gg_batch{i}", shape[x])) for i, x in enumerate(batch_axes)}
    common |= dict(zip([at[a] for a in k_axes if shape[a] > 1], _split(kk, sizes(k_axes))))
    values = []
    for own, other, side, rows in ((m_axes, n_axes, a_factors, m), (n_axes, m_axes, b_factors, n)):
        mine = dict(zip([at[a] for a in own], _split(row.replace(arg=("gg_r", rows)), sizes(own))))
        value = side[0]  # the factors are already the lowered values at the kernel's position
        for f in side[1:]:
            value = value * f
        value = _exact_value(
            simplify(value.substitute({**common, **mine, **{at[a]: UOp.const(idx, 0) for a in other}}))
        )
        if value.dtype not in MULTIPLY_DTYPES:
            return None
        values.append(value)
    a_value, b_value = values
    same = a_value.dtype == b_value.dtype and a_value.dtype in TC_DTYPES
    dtype = a_value.dtype if same else dtypes.float32
    a, b = (
        Operand(v, rows, st, _k_fast(v, st, dtype))
        for v, rows in ((x if x.dtype == dtype else x.cast(dtype), rows) for x, rows in ((a_value, m), (b_value, n)))
        for st in [_strided(v, len(batch_axes))]
    )
    mm = Matmul(reduce, dtype, batch_axes, m_axes, n_axes, k_axes, tuple(shape[x] for x in batch_axes), m, n, k, a, b,
                idx)  # fmt: skip
    return mm if _epilogue_sink(ast, mm) is not None else None


def fits(mm: Matmul, config: Any) -> bool:
    """The configuration multiplies the product's dtype (TF32 configurations only where the user allows TF32)."""
    return config.accepts(mm.dtype, bool(TF32))


def tile_count(mm: Matmul, config: Any) -> int:
    """Blocks of the kernel: one a tile of the output, the edge tiles part empty."""
    return mm.batch * -(-mm.m // config.bm) * -(-mm.n // config.bn)


def tensor_core_actions(ast: UOp, renderer: Renderer | None) -> list[Opt]:
    """Every TC action the renderer can render for this kernel: one per configuration that takes its dtype."""
    configs = getattr(renderer, "tile_configs", ())
    if not configs or (mm := match_matmul(ast)) is None:
        return []
    return [Opt("TC", 0, i) for i, config in enumerate(configs) if fits(mm, config)]


def _unaligned(operand: Operand, dtype: DType) -> bool:
    """One input as it lies in memory whose 16-byte pieces start anywhere (rows 50257 elements apart): each thread
    copies it as two aligned loads a piece, shifted together."""
    if (strided := operand.strided) is None or 1 not in (strided.k_stride, strided.row_stride):
        return False
    other = strided.row_stride if strided.k_stride == 1 else strided.k_stride
    return any(x % (16 // dtype.itemsize) for x in (other, strided.offset, *strided.batch_strides))


def unaligned_work(mm: Matmul, config: Any) -> float:
    """Unaligned 16-byte pieces a thread copies for each k, over the blocks a multiprocessor holds at once."""
    elements = sum(rows for op, rows in ((mm.a, config.bm), (mm.b, config.bn)) if _unaligned(op, mm.dtype))
    return elements * mm.dtype.itemsize / 16 / config.threads / getattr(config, "blocks_per_sm", 1)


def tensor_core_opts(ast: UOp, renderer: Renderer | None) -> tuple[Opt, ...]:
    """The heuristics' TC action: among the configurations that give MIN_BLOCKS blocks with edge tiles MIN_FILL full,
    the first (the renderer lists them in its order of preference) -- where an operand is unaligned, the one whose
    threads copy least of it, then the largest tile (bench/tensor_cores.py, H200, GPT-2's head x @ W, W's rows 50257
    apart: 256x128 tiles of 512 threads 157 TFLOP/s, 128x256 of 256 threads 87); else the one with the most blocks.
    () where TC does not apply or the product is too thin for tiles."""
    if not (found := tensor_core_actions(ast, renderer)):
        return ()
    mm, configs = match_matmul(ast), renderer.tile_configs  # type: ignore[union-attr]
    if min(mm.m, mm.n, mm.k) < MIN_SIDE:
        return ()
    blocks = {o: tile_count(mm, configs[o.amount]) for o in found}
    fill = {o: mm.batch * mm.m * mm.n / (blocks[o] * configs[o.amount].bm * configs[o.amount].bn) for o in found}
    good = [o for o in found if blocks[o] >= MIN_BLOCKS and fill[o] >= MIN_FILL]
    if not good:
        return (max(found, key=lambda o: (blocks[o], fill[o])),)
    if _unaligned(mm.a, mm.dtype) or _unaligned(mm.b, mm.dtype):
        area = lambda o: configs[o.amount].bm * configs[o.amount].bn  # noqa: E731
        return (min(good, key=lambda o: (unaligned_work(mm, configs[o.amount]), -area(o))),)
    return (good[0],)


def _epilogue_sink(ast: UOp, mm: Matmul) -> UOp | None:
    """The kernel's store with the sum replaced by the accumulator (SPECIAL gg_acc) at output position (gg_batch0,
    gg_batch1, ..., gg_row, gg_col); None where the epilogue reads the sum anywhere but at the output's own position."""
    idx = mm.index_dtype
    row, col = UOp(Ops.SPECIAL, idx, (), ("gg_row", mm.m)), UOp(Ops.SPECIAL, idx, (), ("gg_col", mm.n))
    shape = mm.reduce.src[0].shape
    at = [UOp.const(idx, 0)] * len(shape)
    for i, axis in enumerate(mm.batch_axes):  # one variable per batch axis: gg_batch0, gg_batch1, ...
        at[axis] = UOp(Ops.SPECIAL, idx, (), (f"gg_batch{i}", shape[axis]))
    for var, axes in ((row, mm.m_axes), (col, mm.n_axes)):
        axes = [a for a in axes if shape[a] > 1]
        for axis, index in zip(axes, _split(var, [shape[a] for a in axes])):
            at[axis] = index
    expected = tuple(simplify(i) for i in at)
    # the output's axes are the product's axes without k, in order (size-1 axes aside)
    store = ast.src[0]
    out_shape = store.src[1].arg.shape
    product_axes = [(s, i) for axis, (s, i) in enumerate(zip(shape, at)) if axis not in mm.k_axes and s > 1]
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
    return UOp(Ops.SINK, dtypes.void, (*_buffers(ast), UOp(Ops.STORE, dtypes.void, (target, stored))))


def _buffers(ast: UOp) -> list[UOp]:
    return sorted((n for n in ast.toposort() if n.op is Ops.DEFINE_GLOBAL), key=lambda n: n.arg)


def _program(sink: UOp, renderer: Renderer) -> tuple[list[UOp], UOp]:
    """A loop-free sink's linear program (simplified, in the renderer's dialect), and the sink as it then is."""
    sink = graph_rewrite(sink, symbolic)
    if renderer.dialect is not None:
        sink = graph_rewrite(sink, renderer.dialect)
    program = linearize(sink)
    assert not any(u.op is Ops.RANGE for u in program), "a prologue or an epilogue has no loops"
    return program, sink


def lower_epilogue(ast: UOp, mm: Matmul, renderer: Renderer) -> list[UOp]:
    """The linear program of the epilogue for one accumulator: simplified, in the renderer's dialect, no loops."""
    return _program(_epilogue_sink(ast, mm), renderer)[0]


@dataclass(frozen=True)
class Prologue:
    """An operand's value as linear programs for the renderer: at one element (`element`, the value last), and where
    its inputs are read side by side, on a chunk (`chunk`: `addresses` computes its vector loads' indices and guards,
    `lanes` each lane's value from theirs; `names` the UOps of the programs that the renderer names)."""

    element: list[UOp]
    chunk: OperandChunk | None = None
    addresses: list[UOp] = field(default_factory=list)
    lanes: list[UOp] = field(default_factory=list)
    names: dict[str, UOp] = field(default_factory=dict)  # index<i>, gate<i> (vector load i), value<j> (lane j)


def lower_operand(ast: UOp, operand: Operand, lanes: int, renderer: Renderer) -> Prologue:
    """An operand's programs; a chunk of `lanes` elements along the axis its loads move least, where one applies."""
    element, _ = _program(UOp(Ops.SINK, dtypes.void, (*_buffers(ast), operand.value)), renderer)
    chunk = None if operand.strided is not None else operand_chunk(operand.value, operand.k_fast, lanes)
    if chunk is None:
        return Prologue(element)
    ends = [x for load in chunk.loads for x in (load.index.src[1], *load.index.src[2:])]
    addresses, address_sink = _program(UOp(Ops.SINK, dtypes.void, (*_buffers(ast), *ends)), renderer)
    program, lanes_sink = _program(UOp(Ops.SINK, dtypes.void, (*_buffers(ast), *chunk.values)), renderer)
    final = iter(address_sink.src[len(_buffers(ast)) :])
    names = {}
    for i, load in enumerate(chunk.loads):
        names[f"index{i}"] = next(final)
        if len(load.index.src) > 2:
            names[f"gate{i}"] = next(final)
    names |= {f"value{j}": u for j, u in enumerate(lanes_sink.src[len(_buffers(ast)) :])}
    return Prologue(element, chunk, addresses, program, names)


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
    """The TC kernel of `ast` with configuration `opt.amount` of the renderer's."""
    mm = match_matmul(ast)
    configs = getattr(renderer, "tile_configs", ())
    if mm is None or not 0 <= opt.amount < len(configs):
        raise ValueError(f"{opt} does not apply to this kernel: it is no matrix product of floats summed over one axis "
                         f"that {type(renderer).__name__} can tile")  # fmt: skip
    config: TileConfig = configs[opt.amount]
    if not fits(mm, config):
        tf32 = config.accepts(mm.dtype, True)
        raise ValueError(
            f"{opt} does not apply to this kernel: {config} does not multiply {mm.dtype.name}"
            + (" while TF32 is off (glassgrad.backends.cuda.matmul.allow_tf32 = True)" if tf32 else "")
        )
    epilogue = lower_epilogue(ast, mm, renderer)
    lanes = 16 // mm.dtype.itemsize  # a chunk: 16 bytes of the product's dtype
    operands = (lower_operand(ast, mm.a, lanes, renderer), lower_operand(ast, mm.b, lanes, renderer))
    src = renderer.render_matmul(name, mm, config, epilogue, operands)  # type: ignore[attr-defined]
    outputs = mm.batch * mm.m * mm.n
    per_output = sum(u.dtype.itemsize for u in epilogue if u.op is Ops.LOAD) + \
        sum(u.src[1].dtype.itemsize for u in epilogue if u.op is Ops.STORE)  # fmt: skip
    inputs = mm.batch * (mm.m + mm.n) * mm.k * mm.dtype.itemsize
    return TensorCoreKernel(src, tuple(epilogue), (tile_count(mm, config),), (config.threads,), 2 * outputs * mm.k,
                            inputs + outputs * per_output)  # fmt: skip
