"""Lowering: a kernel AST (shapes and views) becomes loops and index math (RANGE, INDEX, LOAD, REDUCE, STORE)."""

from __future__ import annotations

import functools
import itertools
import operator
from collections.abc import Callable

from glassgrad.codegen.opt import MAX_BLOCK_THREADS, THREAD_OPS, Opt, block_threads, chunkable, chunked_sum, main_reduce
from glassgrad.dtype import DType, PtrDType, dtypes
from glassgrad.helpers import prod
from glassgrad.uop.ops import GroupOp, Ops, UOp
from glassgrad.uop.symbolic import bounds
from glassgrad.uop.variable import SymDim, size_expr
from glassgrad.uop.view import View

IDX = dtypes.int  # index arithmetic is int32


def make_range(axis: int, size: int, dtype=IDX, thread: UOp | None = None) -> UOp:
    """A loop variable running 0 .. size-1; a size-1 dimension needs no loop and is the constant 0.

    With `thread` (a GROUP's part of the thread index, 0 .. n-1), the n threads of a block share the loop: each runs
    the iterations thread, thread+n, ... (the renderer's job; the variable still takes every value 0 .. size-1)."""
    if size == 1 and thread is None:
        return UOp.const(dtype, 0)
    end = size_expr(size, dtype)  # a symbolic size's loop runs to its expression of the kernel's int parameters
    return UOp(Ops.RANGE, dtype, (end,) if thread is None else (end, thread), axis)


def thread_vars(opts: tuple[Opt, ...], dtype: DType = IDX) -> list[UOp | None]:
    """For each LOCAL and GROUP action, its part of the thread index within a block: SPECIAL((kind, n, stride,
    block)), the thread index divided by `stride`, modulo n. The first action's part varies fastest from thread to
    thread, so its neighbouring iterations run on neighbouring threads (a warp's loads are coalesced along it).
    None for the other actions."""
    block = block_threads(opts)
    if block > MAX_BLOCK_THREADS:
        raise ValueError(f"{[o for o in opts if o.op in THREAD_OPS]} ask for {block} threads in a block; "
                         f"a block holds at most {MAX_BLOCK_THREADS}")  # fmt: skip
    found: list[UOp | None] = []
    stride = 1
    for o in opts:
        if o.op not in THREAD_OPS:
            found.append(None)
            continue
        if o.amount < 2:
            raise ValueError(f"{o}: a block's threads split an axis in 2 or more parts")
        found.append(UOp(Ops.SPECIAL, dtype, (), arg=(o.op.lower(), o.amount, stride, block)))
        stride *= o.amount
    return found


def index_dtype(ast: UOp) -> DType:
    """int32 index math, unless some index could reach 2**31: then int64, so no index wraps.

    What bounds an index is what the kernel computes, not how big its loop nest is: a convolution's unfolded view
    can span billions of elements while every address it forms stays small (GPUs run 64-bit integer math as
    several instructions, so int64 where it is not needed slows the inner loops)."""
    for node in ast.toposort():
        if node.op is Ops.VIEW and not _fits_int32(node.arg.views) and (not node.src or _axes_of_view(node) is None):
            return dtypes.int64  # a load's or store's view (no source), or one that forms a flat index
        if node.op is Ops.STORE and scatter_store(node) and prod(node.arg[2]) >= 2**31:
            return dtypes.int64  # a scatter's addresses span its whole buffer
    return IDX


def _axes_of_view(node: UOp) -> tuple[tuple[tuple[int, int], ...], ...] | None:
    """For a VIEW over an expression that permutes, expands, splits and crops its dims to a prefix (a reshape that
    cuts a dim in parts, as a two-stage sum cuts its batch or the first parts of its vocabulary): for each of the
    expression's dims, the view's dims that index it, each with its weight. Such a view needs no flat index (whose
    divisions the simplifier cannot undo), however large it is."""
    src = node.src[0]
    if src.op is Ops.CONST or len(node.arg.views) != 1:
        return None
    view = node.arg.views[0]
    if view.mask is not None or view.offset != 0:
        return None
    moving = [(j, s, st) for j, (s, st) in enumerate(zip(view.shape, view.strides, strict=True)) if st != 0 and s > 1]
    axes, stride, used = [], 1, 0
    for size in reversed(src.shape):
        parts = sorted(
            ((j, st // stride), s) for j, s, st in moving if st % stride == 0 and stride <= st < stride * size
        )
        weight = 1
        for (_, w), s in sorted(parts, key=lambda p: p[0][1]):
            if w != weight:  # the parts must tile the dim exactly, innermost first
                return None
            weight *= s
        if weight > size:  # the parts read a prefix of the dim (a cut's first part), or all of it
            return None
        axes.append(tuple(p for p, _ in parts))
        used, stride = used + len(parts), stride * size
    return tuple(reversed(axes)) if used == len(moving) else None


def _fits_int32(views) -> bool:
    """Whether every index a stack of views forms stays below 2**31: each dim, the flat positions that views below
    the last are read at, and the last view's farthest address (offset plus each dim's reach)."""
    limit = 2**31
    if any(s >= limit for v in views for s in v.shape) or any(prod(v.shape) >= limit for v in views[:-1]):
        return False
    top = views[-1]
    reach = abs(top.offset) + sum((s - 1) * abs(st) for s, st in zip(top.shape, top.strides, strict=True))
    return reach < limit  # the stored views' reach bounds the flat output index the loops are unravelled from


class Lowerer:
    """Computes the value of each AST node at given index expressions, memoized per (node, indices).

    `unroll` maps a reduced axis to a number of lanes: that loop then runs size/lanes times and each
    iteration combines `lanes` values, which the C compiler can keep in registers and vectorize.
    """

    def __init__(self, first_free_axis: int, unroll: dict[int, int] | None = None, unrolled: UOp | None = None,
                 idx_dtype: DType = IDX, vector_unroll: int | None = None,
                 group: dict[int, UOp] | None = None, chunks: dict[int, tuple[UOp, int]] | None = None):  # fmt: skip
        self.next_axis, self.idx_dtype = first_free_axis, idx_dtype
        self.unroll, self.unrolled = unroll or {}, unrolled  # UNROLL and GROUP act on the loops of one REDUCE_AXIS
        self.group = group or {}  # a reduced axis -> the thread variable of the GROUP that shares its loop
        self.vector_unroll = vector_unroll  # the reduced axis whose unrolled lanes are vector lanes, if any
        self.chunks = chunks or {}  # a reduced axis a CHUNK splits -> (the chunks' loop, iterations a chunk)
        self.memo: dict[tuple[UOp, tuple[UOp, ...]], UOp] = {}
        self.reduce_ranges: dict[UOp, dict[int, UOp]] = {}

    def value(self, node: UOp, idxs: tuple[UOp, ...]) -> UOp:
        key = (node, idxs)
        if key not in self.memo:
            self.memo[key] = self._lower(node, idxs)
        return self.memo[key]

    def _lower(self, node: UOp, idxs: tuple[UOp, ...]) -> UOp:
        if node.op in (
            Ops.CONST,
            Ops.DEFINE_VAR,
        ):  # (a Variable: a padded symbolic dim's end, schedule/symbolic_shapes.py)
            return node
        if node.op is Ops.ARANGE:
            return idxs[0].cast(node.dtype)
        if node.op is Ops.LOAD:
            buf, view = node.src
            return load(buf, *view.arg.to_indexed(list(idxs)))
        if node.op is Ops.VIEW:
            return self._lower_view(node, idxs)
        if node.op is Ops.REDUCE_AXIS:
            return self._lower_reduce(node, idxs)
        if node.op is Ops.CHECK:  # the value, and the condition on it (which simplifying may find always true)
            value = self.value(node.src[0], idxs)
            return UOp(Ops.CHECK, value.dtype, (value, node.arg.holds(value)), node.arg)
        if node.op in GroupOp.Elementwise:
            return node.replace(src=tuple(self.value(s, idxs) for s in node.src))
        raise NotImplementedError(f"cannot lower {node.op} inside a kernel")

    def _lower_view(self, node: UOp, idxs: tuple[UOp, ...]) -> UOp:
        """A view over an expression: index the expression through the view; outside its mask it is 0."""
        src, axes = node.src[0], _axes_of_view(node)
        if axes is not None:  # a permute/expand/split: index the expression directly, no flat index in between
            return self.value(src, tuple(self._weighted(idxs, parts) for parts in axes))
        inner_idxs, valid = node.arg.indices_in(list(idxs), src.shape)  # right where the view is valid
        if src.op is Ops.CONST:
            return src if _is_true(valid) else valid.where(src, src.const_like(0))
        inner = self.value(src, tuple(inner_idxs))
        if _is_true(valid):
            return inner
        return valid.where(guard_loads(inner, valid, _may_read_outside), inner.const_like(0))

    def _weighted(self, idxs: tuple[UOp, ...], parts: tuple[tuple[int, int], ...]) -> UOp:
        """sum(idxs[j] * weight) over the parts, 0 for none."""
        terms = [idxs[j] if w == 1 else idxs[j] * w for j, w in parts]
        return functools.reduce(lambda a, b: a + b, terms) if terms else UOp.const(self.idx_dtype, 0)

    def _unroll(self, node: UOp, axis: int) -> int:
        return self.unroll.get(axis, 1) if node is self.unrolled else 1

    def _chunk_length(self, node: UOp, axis: int) -> int:
        """The iterations of a reduced axis's loop: a CHUNK's length, or the whole axis."""
        return self.chunks[axis][1] if node is self.unrolled and axis in self.chunks else node.src[0].shape[axis]

    def _ranges_of(self, node: UOp) -> dict[int, UOp]:
        """One loop per reduced axis of a REDUCE_AXIS node, shared by every place the node is lowered, so that
        reductions evaluated at several output positions (upcast lanes) run in one loop."""
        if node not in self.reduce_ranges:
            ranges = {}
            for axis in node.arg[1]:
                size = self._chunk_length(node, axis)
                if isinstance(size, SymDim) and (self._unroll(node, axis) > 1 or self.group.get(axis) is not None):
                    raise ValueError(f"reduced axis {axis} has the symbolic size {size!r}; no action splits it")
                if size % self._unroll(node, axis):
                    raise ValueError(
                        f"UNROLL({axis}, {self._unroll(node, axis)}) does not divide the reduced axis of {size}"
                    )
                thread = self.group.get(axis) if node is self.unrolled else None
                if thread is not None and size // self._unroll(node, axis) < 2:
                    raise ValueError(f"GROUP({axis}, {thread.arg[1]}) needs a loop of 2 or more iterations to share; "
                                     f"reduced axis {axis} has {size // self._unroll(node, axis)} left")  # fmt: skip
                size = size if isinstance(size, SymDim) else size // self._unroll(node, axis)
                ranges[axis] = make_range(self.next_axis, size, self.idx_dtype, thread)
                self.next_axis += 1
            self.reduce_ranges[node] = ranges
        return self.reduce_ranges[node]

    def _lower_reduce(self, node: UOp, idxs: tuple[UOp, ...]) -> UOp:
        """A reduction opens a loop for each reduced axis and accumulates over it (unrolled lanes combined first).

        Vector lanes of an UNROLL accumulate side by side, each into its own lane, and are combined after the loop."""
        op, axes = node.arg
        src = node.src[0]
        if prod(src.shape[a] for a in axes) == 0:
            return UOp.const(node.dtype, reduce_identity(op, node.dtype))
        ranges = self._ranges_of(node)
        vector_axis = self.vector_unroll if node is self.unrolled and self.vector_unroll in axes else None
        lane = lane_var(self._unroll(node, vector_axis), self.idx_dtype) if vector_axis is not None else None
        lanes = []
        for combo in itertools.product(*(range(1 if a == vector_axis else self._unroll(node, a)) for a in axes)):
            inner = list(idxs)
            for axis, k in zip(axes, combo):
                amount = self._unroll(node, axis)
                offset = lane if axis == vector_axis else k
                inner[axis] = ranges[axis] * amount + offset if amount > 1 else ranges[axis]
                if node is self.unrolled and axis in self.chunks:  # the chunk's first term, plus the step within it
                    chunk, length = self.chunks[axis]
                    inner[axis] = chunk * length + inner[axis]
            lanes.append(self.value(src, tuple(inner)))
        value = combine_tree(op, lanes)
        loops = [r for r in ranges.values() if r.op is Ops.RANGE]
        if loops:
            value = UOp(Ops.REDUCE, value.dtype, (value, *loops), arg=op)
        if threads := [self.group[a] for a in axes if a in self.group and node is self.unrolled]:
            value = UOp(Ops.REDUCE, value.dtype, (value, *threads), arg=op)  # the threads' partial results combined
        if lane is None:
            return value
        return combine_tree(op, [UOp(Ops.GEP, value.dtype, (value,), arg=i) for i in range(lane.arg[1])])


def combine_tree(op: Ops, values: list[UOp]) -> UOp:
    """values[0] op values[1] op ... as a balanced tree, so the terms can be computed side by side."""
    while len(values) > 1:
        pairs = [values[i].alu(op, values[i + 1]) for i in range(0, len(values) - 1, 2)]
        values = pairs + ([values[-1]] if len(values) % 2 else [])
    return values[0]


def reduce_identity(op: Ops, dtype) -> object:
    """The starting value of an accumulator: 0 for sums, 1 for products, the dtype's minimum for max."""
    if op is Ops.ADD:
        return 0
    if op is Ops.MUL:
        return 1
    return dtypes.min(dtype.scalar)


def _is_true(u: UOp) -> bool:
    return u.op is Ops.CONST and u.arg is True


def guard_loads(value: UOp, valid: UOp, which: Callable[[UOp], bool]) -> UOp:
    """`value` with `valid` added to the guard of its loads for which `which(load)` holds: where `valid` is false they
    read no memory, since their addresses were worked out for valid positions only and may point anywhere else. Its
    checks (CHECK(x, ok)) pass there too: they would test values that stand for nothing (a load that read no memory
    gives 0, which no divisor may be)."""
    mapping: dict[UOp, UOp] = {}
    for node in value.toposort():
        src = tuple(mapping.get(s, s) for s in node.src)
        if node.op is Ops.INDEX and which(node):
            guard = valid if len(src) < 3 else (src[2] & valid)
            mapping[node] = node.replace(src=(src[0], src[1], guard))
        elif node.op is Ops.CHECK:
            mapping[node] = node.replace(src=(src[0], src[1] | valid.logical_not()))
        elif src != node.src:
            mapping[node] = node.replace(src=src)
    return mapping.get(value, value)


def _may_read_outside(index: UOp) -> bool:
    """Whether a load's address may fall outside its buffer somewhere in the loops' ranges."""
    if not isinstance(index.src[0].dtype, PtrDType):
        return False
    low, high = bounds(index.src[1])
    return low < 0 or high >= index.src[0].dtype.size


def load(buf: UOp, idx: UOp, valid: UOp) -> UOp:
    """A load from buf[idx]; where `valid` is false it reads 0 without touching memory."""
    base = buf.dtype.base
    index = UOp(Ops.INDEX, buf.dtype, (buf, idx) if _is_true(valid) else (buf, idx, valid))
    return UOp(Ops.LOAD, base, (index,))


def lane_var(amount: int, dtype: DType = IDX) -> UOp:
    """The lanes of a vector UPCAST or UNROLL: one variable 0 .. amount-1, which the vectorizer makes vector lanes."""
    return UOp(Ops.SPECIAL, dtype, (), arg=("lane", amount))


def vector_opt(opts: tuple[Opt, ...], vector_lanes: tuple[int, ...]) -> Opt | None:
    """The action rendered as vector lanes: the first UPCAST or UNROLL whose amount the renderer's vectors hold."""
    return next((o for o in opts if o.op in ("UPCAST", "UNROLL") and o.amount in vector_lanes), None)


class OutputLoops:
    """The loops and lanes of the output axes after UPCAST and TILE split them.

    Each axis starts as one loop of stride 1. UPCAST(a, n) takes its innermost n steps as lanes (the loop keeps
    size/n, stride*n). TILE(a, n) keeps n iterations in the axis's loop and moves the rest into an outer loop that
    runs before every other output loop: threads split it, and each tile's inputs stay in cache. A CHUNK's loop over
    the chunks of a reduced axis (`chunks`: axis -> how many) comes just inside the first loop threads split."""

    def __init__(self, shape: tuple[int, ...], opts: tuple[Opt, ...], vector: Opt | None, idx_dtype: DType,
                 threads: list[UOp | None] | None = None, sequential: int | None = None,
                 chunks: dict[int, int] | None = None):  # fmt: skip
        self.main = [(size, 1) for size in shape]
        tiles: list[tuple[int, int, int]] = []  # (axis, size, stride)
        self.lanes: list[tuple[int, int, int, Opt]] = []  # (axis, amount, stride, opt)
        self.locals: list[tuple[int, UOp, int]] = []  # (axis, thread variable, stride)
        for o, thread in zip(opts, threads or [None] * len(opts)):
            if o.op not in ("UPCAST", "TILE", "LOCAL"):
                continue
            if not 0 <= o.axis < len(shape):
                raise ValueError(f"{o}: the output has no axis {o.axis} (it has {len(shape)})")
            size, stride = self.main[o.axis]
            if isinstance(size, SymDim):
                raise ValueError(f"{o}: output axis {o.axis} has the symbolic size {size!r}; no action splits it")
            if o.amount < 1 or size % o.amount:
                raise ValueError(f"{o} does not divide output axis {o.axis}, whose loop has {size} iterations left")
            if o.op == "LOCAL":  # like an UPCAST, but its outputs go to neighbouring threads instead of lanes
                self.locals.append((o.axis, thread, stride))
                self.main[o.axis] = (size // o.amount, stride * o.amount)
            elif o.op == "UPCAST":
                self.lanes.append((o.axis, o.amount, stride, o))
                self.main[o.axis] = (size // o.amount, stride * o.amount)
            else:
                tiles.append((o.axis, size // o.amount, stride * o.amount))
                self.main[o.axis] = (o.amount, stride)
        loops = tiles + [(axis, size, stride) for axis, (size, stride) in enumerate(self.main)]
        if sequential is not None:  # innermost, and not an output loop: no thread splits it (outer_output_loop)
            if any(axis == sequential for axis, _, _ in tiles):
                raise ValueError(f"TILE({sequential}, ...): the scatter's axis {sequential} runs in one loop here")
            loops.sort(key=lambda loop: loop[0] == sequential)  # (a stable sort: the others keep their order)
        chunks = chunks or {}
        at = _chunks_at(loops, chunks)
        args = [*range(at), *range(at + len(chunks), len(loops) + len(chunks))]  # the chunks' loops take at, at+1, ..
        self.ranges = [
            (axis, make_range(arg, size, idx_dtype), stride) for arg, (axis, size, stride) in zip(args, loops)
        ]
        self.chunk_loops = {axis: make_range(at + j, n, idx_dtype) for j, (axis, n) in enumerate(chunks.items())}
        self.vector = vector
        self.vector_lane = lane_var(vector.amount, idx_dtype) if vector is not None and vector.op == "UPCAST" else None
        self.n_ranges = len(loops) + len(self.chunk_loops)
        self.n_loops = self.n_ranges - (sequential is not None)  # the loops whose iterations write apart

    def indices(self) -> list[tuple[UOp, ...]]:
        """The output index of each axis, once per combination of scalar lanes (the vector lane stays a variable)."""
        base: list[list[UOp]] = [[] for _ in self.main]
        for axis, r, stride in self.ranges:
            base[axis].append(r * stride if stride != 1 else r)
        for axis, thread, stride in self.locals:
            base[axis].append(thread * stride if stride != 1 else thread)
        scalar = []
        for axis, amount, stride, o in self.lanes:
            if o is self.vector:
                base[axis].append(self.vector_lane * stride if stride != 1 else self.vector_lane)
            else:
                scalar.append((axis, amount, stride))
        result = []
        for combo in itertools.product(*(range(amount) for _, amount, _ in scalar)):
            terms = [list(t) for t in base]
            for (axis, _, stride), lane in zip(scalar, combo):
                terms[axis].append(terms[axis][0].const_like(lane * stride))
            result.append(tuple(functools.reduce(operator.add, t) for t in terms))
        return result


def _chunks_at(loops: list[tuple[int, int, int]], chunks: dict[int, int]) -> int:
    """Where CHUNK loops go among the output loops: just inside the first that has iterations (threads split that
    one; each thread's outputs then take every chunk in turn, and no two threads add into one output)."""
    if not chunks:
        return len(loops)
    first = next((i for i, (_, size, _) in enumerate(loops) if size > 1), None)
    if first is None:
        raise ValueError(f"CHUNK of reduced axes {sorted(chunks)}: the kernel has no output loop for threads to split")
    return first + 1


def _chunked_axes(ast: UOp, opts: tuple[Opt, ...]) -> dict[int, int]:
    """Each reduced axis a CHUNK splits into more than one chunk, with the chunk's length."""
    found: dict[int, int] = {}
    for o in (o for o in opts if o.op == "CHUNK"):
        if not chunkable(ast):
            raise ValueError(f"{o}: only a kernel that stores a sum as it is, into a buffer it does not read, takes "
                             "CHUNK (its chunks add into it)")  # fmt: skip
        reduce = main_reduce(ast)
        if o.axis not in reduce.arg[1] or o.axis in found:
            raise ValueError(f"{o}: axis {o.axis} is not a reduced axis of the kernel's sum, or is chunked already")
        size = reduce.src[0].shape[o.axis]
        if isinstance(size, SymDim) or o.amount < 1 or size % o.amount:
            raise ValueError(f"{o} does not divide reduced axis {o.axis} of size {size!r} into chunks")
        if o.amount < size:
            found[o.axis] = o.amount
    return found


def check_kernel_ast(ast: object, caller: str) -> None:
    """Raise a TypeError or ValueError naming what `caller` got where it needs a kernel AST: a SINK of STOREs."""
    expected = "a kernel AST, SINK(STORE(DEFINE_GLOBAL, VIEW, value), ...), as a schedule item of a kernel holds"
    if not isinstance(ast, UOp):
        raise TypeError(f"{caller}: expected {expected}; got a {type(ast).__name__}")
    if ast.op is not Ops.SINK or not ast.src or any(s.op is not Ops.STORE for s in ast.src):
        got = ast.op.name if ast.op is not Ops.SINK else f"SINK of {', '.join(s.op.name for s in ast.src) or 'nothing'}"
        why = " (a COPY between devices is a schedule item that moves bytes: no kernel to generate)"
        raise ValueError(f"{caller}: expected {expected}; got {got}{why if ast.op is Ops.COPY else ''}")


def lower_kernel(ast: UOp, opts: tuple[Opt, ...] = (), vector_lanes: tuple[int, ...] = (), atomics: bool = False
                 ) -> UOp:  # fmt: skip
    """SINK(STORE(buffer, VIEW, value)...) -> SINK of stores into INDEXed buffers inside RANGE loops.

    UPCAST opts split an output axis into a loop and lanes: each lane gets its own store (and accumulator). The
    first UPCAST or UNROLL whose amount is in `vector_lanes` becomes a lane variable instead, which the vectorizer
    turns into vector operations. The SINK's arg records how many output loops there are (loops whose iterations
    write apart, which threads may split). A scatter's store (`scatter_store`) adds into its buffer; its axis, along
    which elements may add into one place, is one of those loops only with `atomics` (the renderer adds atomically),
    else an inner loop of its own."""
    check_kernel_ast(ast, "lower_kernel")
    # every buffer stays a kernel argument, even one no value needs (an empty input, an empty output)
    stores: list[UOp] = sorted((n for n in ast.toposort() if n.op is Ops.DEFINE_GLOBAL), key=lambda n: n.arg)
    shape = ast.src[0].src[1].arg.shape
    if prod(shape) == 0:  # nothing to compute: an empty output
        return UOp(Ops.SINK, dtypes.void, tuple(stores), arg=0)
    idx_dtype = index_dtype(ast)
    vector = vector_opt(opts, vector_lanes)
    threads = thread_vars(opts, idx_dtype)
    sequential = next((s.arg[1] for s in ast.src if scatter_store(s)), None) if not atomics else None
    chunked = _chunked_axes(ast, opts)  # reduced axis -> a chunk's length
    counts = {a: main_reduce(ast).src[0].shape[a] // n for a, n in chunked.items()}
    loops = OutputLoops(shape, opts, vector, idx_dtype, threads, sequential, counts)
    unroll = {o.axis: o.amount for o in opts if o.op == "UNROLL"}
    group = _grouped_axes(ast, opts, threads)
    vector_unroll = vector.axis if vector is not None and vector.op == "UNROLL" else None
    chunks = {a: (loops.chunk_loops[a], n) for a, n in chunked.items()}
    lowerer = Lowerer(loops.n_ranges, unroll, main_reduce(ast), idx_dtype, vector_unroll, group, chunks)
    for idxs in loops.indices():
        for store in ast.src:
            buf, view, value = store.src[:3]
            idx, valid = _scatter_address(store, idxs, lowerer) if scatter_store(store) else view.arg.to_indexed(idxs)
            for thread in group.values():  # after the combine every thread of a group holds the result: one stores
                valid = thread < 1 if _is_true(valid) else valid & (thread < 1)
            index = UOp(Ops.INDEX, buf.dtype, (buf, idx) if _is_true(valid) else (buf, idx, valid))
            added = Ops.ADD if scatter_store(store) else None  # a STORE whose arg is ADD adds into the buffer
            if chunks:  # every chunk but the first adds to what the chunks before it stored; the first, the term
                summed, once = chunked_sum(ast)  # added once, if any
                later = functools.reduce(operator.or_, [r > 0 for r, _ in chunks.values()])
                before = load(buf, idx, later if _is_true(valid) else valid & later)
                before = before if once is None else later.where(before, lowerer.value(once, idxs))
                result = before + lowerer.value(summed, idxs)
            else:
                result = lowerer.value(value, idxs)
            stores.append(UOp(Ops.STORE, dtypes.void, (index, result), added))
    return UOp(Ops.SINK, dtypes.void, tuple(stores), arg=loops.n_loops)


def scatter_store(store: UOp) -> bool:
    """A kernel AST's STORE(buffer, VIEW, value, index) with arg (ADD, axis, the buffer's shape): for each element of
    the view's shape it adds the value into the buffer at that element's position with `index` along `axis`."""
    return len(store.src) == 4


def _scatter_address(store: UOp, idxs: tuple[UOp, ...], lowerer: Lowerer) -> tuple[UOp, UOp]:
    """The address a scatter's store adds into at `idxs`, and where it may: an index outside the axis writes nowhere
    (its CHECK reports it)."""
    _, axis, shape = store.arg
    at = lowerer.value(store.src[3], idxs)
    value = at.src[0] if at.op is Ops.CHECK else at  # the test its check makes too, one node for both
    inside = UOp.const(dtypes.bool, True)  # in the index's own dtype (a cast could wrap it inside), where it can fail:
    if shape[axis] <= dtypes.max(value.dtype):  # bounds no value of the dtype reaches are left out
        inside = value < shape[axis]
    if dtypes.min(value.dtype) < 0:
        inside = inside & (value < 0).logical_not()
    where = list(idxs)
    where[axis] = at.cast(lowerer.idx_dtype)
    return View.create(shape).to_indexed(where)[0], inside


def _grouped_axes(ast: UOp, opts: tuple[Opt, ...], threads: list[UOp | None]) -> dict[int, UOp]:
    """Each reduced axis of the main reduction that a GROUP shares, with its thread variable."""
    reduce, group = main_reduce(ast), {}
    for o, thread in zip(opts, threads):
        if o.op != "GROUP":
            continue
        if reduce is None or o.axis not in reduce.arg[1]:
            raise ValueError(f"{o}: axis {o.axis} is not a reduced axis of the kernel's reduction")
        if o.axis in group:
            raise ValueError(f"{o}: reduced axis {o.axis} is already shared by a GROUP")
        group[o.axis] = thread
    return group
