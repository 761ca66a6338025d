"""Kernelize: decide which nodes of a Tensor graph become buffers and turn each into one kernel.

A node becomes a buffer ("is realized") when a user asks for it, when it is CONTIGUOUS, COPY, ASSIGN, SCATTER_ADD or
ATTENTION (whose inputs are buffers read through one strided view each), or when fusing it would repeat work: a
reduction whose result is broadcast (expanded) or read by two kernels. Everything else fuses into the kernel of the
realized node above it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from glassgrad.dtype import dtypes
from glassgrad.helpers import prod, strides_for_shape
from glassgrad.schedule.channels_last import channels_last
from glassgrad.schedule.conv import window_buffers
from glassgrad.schedule.merge_axes import merge_axes
from glassgrad.schedule.pack import operand_twins, pack_panels, renderer_of_device
from glassgrad.schedule.store_shape import store_shapes
from glassgrad.schedule.symbolic_shapes import bound_sizes, shadow_sizes, with_bound_sizes
from glassgrad.uop.ops import GroupOp, Ops, UOp, new_buffer
from glassgrad.uop.rewrite import PatternMatcher, UPat, graph_rewrite
from glassgrad.uop.view import ShapeTracker, apply_movement, chain_view

HAS_BUFFER = (
    Ops.COPY,
    Ops.CONTIGUOUS,
    Ops.ASSIGN,
    Ops.SCATTER_ADD,
    Ops.ATTENTION,
)  # nodes that always get a buffer of their own


@dataclass(frozen=True)
class Kernel:
    """The arg of a KERNEL node: the AST the kernel computes."""

    ast: UOp
    assign: bool = False  # writes into a buffer that existed before (an assign), rather than a new one

    def __repr__(self) -> str:
        return f"<Kernel {self.ast.op.name}>"


def has_buffer(node: UOp) -> bool:
    """A BUFFER, or the ASSIGN(BUFFER, KERNEL) of one that a kernel will fill: a node whose data lies in a buffer of
    its own (now, or once that kernel has run)."""
    return node.op is Ops.BUFFER or (node.op is Ops.ASSIGN and node.src[1].op is Ops.KERNEL)


def is_view_of_buffer(node: UOp) -> bool:
    return node.op in GroupOp.Movement and has_buffer(node.base) or has_buffer(node) or disk_span(node) is not None


def _is_whole_buffer(node: UOp) -> bool:
    """A node that is exactly a buffer's data in order, realized or about to be (a COPY can move it as it is)."""
    buffered = has_buffer(node.base) or node.base.op in HAS_BUFFER
    return buffered and chain_view(node).contiguous and node.size == node.base.size


def is_disk(device: str | None) -> bool:
    """Whether a device holds bytes and runs no kernels (DISK:/path, a file), as its renderer says."""
    return (renderer := renderer_of_device(device)) is not None and not renderer.runs_kernels


def disk_span(node: UOp) -> tuple[UOp, int] | None:
    """The DISK buffer under `node` and the byte where `node`'s data starts in it, when `node` is a contiguous run
    of its bytes in order (reshapes, a slice, same-size bitcasts): a COPY can read that run of the file as it is."""
    movements, below = [], node
    while below.op in GroupOp.Movement or (
        below.op is Ops.BITCAST and below.dtype.itemsize == below.src[0].dtype.itemsize
    ):
        if below.op in GroupOp.Movement:
            movements.append(below)
        below = below.src[0]
    if below.op is not Ops.BUFFER or not is_disk(below.device):
        return None
    st = ShapeTracker.from_shape(below.shape)
    for mv in reversed(movements):
        st = apply_movement(st, mv)
    view = st.views[-1]
    if len(st.views) != 1 or view.mask is not None or view.strides != strides_for_shape(view.shape):
        return None
    return below, view.offset * below.dtype.itemsize


def _copy_before_disk_view(copy: UOp) -> UOp | None:
    """COPY(view of a DISK buffer) that no run of the file's bytes holds (a strided slice) becomes the view, applied
    on the target device, of a COPY of what lies under it: DISK computes nothing, not even a strided copy."""
    if not is_disk(copy.src[0].device) or disk_span(copy.src[0]) is not None:
        return None
    views, below = [], copy.src[0]
    while below.op in GroupOp.Movement:
        views.append(below)
        below = below.src[0]
    if not views or disk_span(below) is None:
        return None  # computed on DISK: its kernel says what to do instead
    moved = copy.replace(dtype=below.dtype, src=(below, *copy.src[1:]))
    for view in reversed(views):
        moved = view.replace(src=(moved,))
    return moved


copy_disk_views = PatternMatcher([(UPat(Ops.COPY, name="copy"), _copy_before_disk_view)])


def _grows(node: UOp) -> bool:
    return node.op is Ops.EXPAND and prod(node.arg) > prod(node.src[0].shape)


def find_realize_points(roots: list[UOp]) -> list[UOp]:
    """The nodes that get their own buffer, in an order where each comes after the ones it reads."""
    points: dict[UOp, None] = {}

    def add(node: UOp) -> None:
        while node.op is Ops.DETACH:
            node = node.src[0]
        if node.op in GroupOp.Movement and node.base.op in HAS_BUFFER:
            node = node.base  # a view of a node that gets a buffer anyway is a view of that buffer
        if not is_view_of_buffer(node):
            points[node] = None

    for root in roots:
        add(root)
    for node in UOp(Ops.SINK, dtypes.void, tuple(roots)).toposort():
        if has_buffer(node):
            continue
        if node.op in HAS_BUFFER:
            add(node)
        if node.op is Ops.COPY and not _is_whole_buffer(node.src[0]) and disk_span(node.src[0]) is None:
            points[node.src[0]] = None  # a COPY moves whole buffers: a view of one (x.T) is made contiguous first
        if node.op is Ops.ASSIGN and _reads_target_elsewhere(node):
            add(node.src[1])
        if node.op is Ops.ATTENTION:  # its kernel reads each input as it lies in memory, through one strided view
            for s in node.src:
                if _strided_view(s):
                    add(s.base)
                elif s not in points:  # a copy in order (even of a buffer: a view that no strides describe)
                    points[s] = None
    # Reductions that would be recomputed when fused get their own buffer; repeat until nothing changes.
    changed = True
    while changed:
        changed = False
        readers: dict[UOp, set[UOp]] = {}
        for point in list(points):
            for reduce_node, expanded in _reductions_read_by(point, points):
                readers.setdefault(reduce_node, set()).add(point)
                if expanded and reduce_node not in points:
                    points[reduce_node], changed = None, True
        for reduce_node, users in readers.items():
            if len(users) > 1 and reduce_node not in points:
                points[reduce_node], changed = None, True
        if changed:  # values are judged once the reductions are settled: a value inside a reduction that gets a
            continue  # buffer is computed by that one kernel, not by each kernel that read the reduction before
        for point in list(points):
            for value in _costly_values_repeated(point, points):
                points[value], changed = None, True
        for value in _shared_values(points):
            points[value], changed = None, True
    order = {node: i for i, node in enumerate(UOp(Ops.SINK, dtypes.void, tuple(points)).toposort())}
    return sorted(points, key=order.__getitem__)


def _strided_view(node: UOp) -> bool:
    """Whether `node` is one strided view (no padding) of what lies under its movement ops, a buffer once realized."""
    st = chain_view(node)
    return node.base.op is not Ops.DETACH and len(st.views) == 1 and st.views[0].mask is None


def _kernel_sources(point: UOp) -> tuple[UOp, ...]:
    if point.op is Ops.ASSIGN:
        return (point.src[1],)
    if point.op in (Ops.CONTIGUOUS, Ops.SCATTER_ADD, Ops.ATTENTION):
        return point.src
    return (point,)


def _reductions_read_by(point: UOp, points: dict[UOp, None]) -> list[tuple[UOp, bool]]:
    """Every REDUCE_AXIS inside the kernel of `point`, and whether it is read through an EXPAND."""
    found: list[tuple[UOp, bool]] = []
    seen: set[tuple[UOp, bool]] = set()
    stack = [(s, False) for s in _kernel_sources(point)]
    if point.op is Ops.REDUCE_AXIS:
        stack = [(s, False) for s in point.src]
    while stack:
        node, expanded = stack.pop()
        if (node, expanded) in seen or has_buffer(node) or node.op is Ops.COPY:
            continue
        seen.add((node, expanded))
        if node in points and node is not point:
            continue
        if node.op is Ops.REDUCE_AXIS:
            found.append((node, expanded))
            if expanded:
                continue  # it becomes a point of its own: the reductions inside it are judged from there
        stack.extend((s, expanded or _grows(node)) for s in node.src)
    return found


COSTLY = frozenset({Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT})
MIN_REPEATS = 16  # a value recomputed this many times (with the math below) costs more than its own buffer
MIN_ALU = 2  # elementwise ops over a reduction's result that are worth a buffer when recomputed MIN_REPEATS times


def _costly_values_repeated(point: UOp, points: dict[UOp, None]) -> list[UOp]:
    """Values that the kernel of `point` would recompute for each element of a broadcast into a reduction, where
    that costs more than a buffer (`_worth_a_buffer`): a GELU before a matmul (once per output column), attention's
    softmax before its matmul, a bias and ReLU after one convolution read by the next (once per output channel and
    window position; in a weight gradient's inner loop as many ops as multiply-adds)."""
    found: list[UOp] = []
    seen: set[tuple[UOp, bool]] = set()
    stack = [(s, point.op is Ops.REDUCE_AXIS) for s in (point.src if point.op is Ops.REDUCE_AXIS else
                                                         _kernel_sources(point))]  # fmt: skip
    while stack:
        node, in_reduce = stack.pop()
        if (
            (node, in_reduce) in seen
            or has_buffer(node)
            or node.op is Ops.COPY
            or (node in points and node is not point)
        ):
            continue
        seen.add((node, in_reduce))
        if in_reduce and node.op is Ops.EXPAND and prod(node.arg) >= MIN_REPEATS * prod(node.src[0].shape):
            value = _narrowest(node.src[0].base)
            if value not in points and value.base.op in GroupOp.Elementwise and _worth_a_buffer(value, points):
                found.append(value)
        stack.extend((s, in_reduce or node.op is Ops.REDUCE_AXIS) for s in node.src)
    return found


MIN_READERS = 3  # kernels that would each recompute a value worth a buffer before it gets one...
MIN_SHARED_SIZE = 1 << 16  # ...of this many elements at least: a smaller one costs a kernel more than its math


def _computes(root: UOp, points: dict[UOp, None], reductions: bool = True) -> Callable[[UOp], bool]:
    """Whether the kernel of `root` computes a node itself: not a buffer, another point or a copy (and, without
    `reductions`, not a reduction either)."""
    stops = (Ops.COPY,) if reductions else (Ops.COPY, Ops.REDUCE_AXIS)
    return lambda n: not (has_buffer(n) or n in points and n is not root or n.op in stops)


def _computed_part(point: UOp, points: dict[UOp, None]) -> list[UOp]:
    """The nodes the kernel of `point` computes itself."""
    inside = _computes(point, points)
    return [n for n in UOp(Ops.SINK, dtypes.void, _kernel_sources(point)).toposort(enter=inside) if inside(n)]


def _shared_values(points: dict[UOp, None]) -> list[UOp]:
    """Elementwise values worth a buffer (`_worth_a_buffer`) that MIN_READERS kernels or more would each compute:
    a ReLU and batchnorm after a convolution, read by the batchnorm's sums, the pooling and their gradients. The
    outermost of them only, one a pass: the values inside it are judged again once it is a point."""
    readers: dict[UOp, set[UOp]] = {}
    read_by: dict[UOp, set[UOp]] = {}  # node -> the nodes computed from it, in any kernel
    for point in points:
        for node in _computed_part(point, points):
            for s in node.src:
                read_by.setdefault(s, set()).add(node)
            if node.op in GroupOp.ALU and node is not point:
                readers.setdefault(node, set()).add(point)
    chosen: list[UOp] = []
    covered: set[UOp] = set()
    shared = [n for n, kernels in readers.items()
              if len(kernels) >= MIN_READERS and n.op in GroupOp.Elementwise and n.size >= MIN_SHARED_SIZE]  # fmt: skip
    order = {n: i for i, n in enumerate(UOp(Ops.SINK, dtypes.void, tuple(shared)).toposort())} if shared else {}
    for node in sorted(shared, key=lambda n: -order[n]):  # users before their sources
        narrow = _narrowest(node)
        if node in covered or narrow in points or not _worth_a_buffer(narrow, points):
            continue
        node = _in_the_order_read(node, read_by) if narrow is node else narrow
        chosen.append(node)
        covered.update(_computed_part(node, {**points, node: None}))
    return chosen


def _in_the_order_read(value: UOp, read_by: dict[UOp, set[UOp]]) -> UOp:
    """`value`, or the reshaped and permuted view of it through which every kernel reads it (`read_by`: the nodes
    computed from each node): stored in that order, its readers read it contiguously (a 2x2 max-pool's gradient,
    computed window by window, is read row by row)."""
    node = value
    while len(users := read_by.get(node, ())) == 1 and (user := next(iter(users))).op in (Ops.RESHAPE, Ops.PERMUTE):
        node = user
    while node is not value and node.op is Ops.RESHAPE:  # a reshape of a contiguous buffer is a view of it anyway
        node = node.src[0]
    return node


REORDERING = (Ops.RESHAPE, Ops.PERMUTE)  # views that keep every element once: a narrow value under them is no larger


def _narrowest(value: UOp) -> UOp:
    """What to store for `value`: where it is a float widened by casts (a 16-bit gradient that its reader takes as
    float32), the narrow value: half the bytes, widened again as it loads, and a matmul that reads it multiplies
    16-bit operands (on the tensor cores) rather than float32 ones. Through reshapes and permutes only: under a
    broadcast or a pad the narrow value would be stored larger than the cast it stands for."""
    while (
        value.op is Ops.CAST
        and dtypes.is_float(value.dtype)
        and dtypes.is_float((narrow := value.src[0]).dtype)
        and narrow.dtype.itemsize < value.dtype.itemsize
        and (narrow.op in GroupOp.Elementwise or narrow.op in REORDERING)
    ):
        value = narrow
    return value


def _worth_a_buffer(value: UOp, points: dict[UOp, None]) -> bool:
    """Whether `value`, recomputed MIN_REPEATS times or more, costs more than a buffer: the part of its graph that a
    kernel would compute (down to buffers, points and reductions) has transcendental math, or MIN_ALU elementwise
    ops over a reduction that is a realize point (a previous layer's result, not a fresh input: recomputing `x * 2 + 1`
    of an input inside a matmul is cheaper than a round trip through memory)."""
    computed = _computes(value, points, reductions=False)
    nodes = value.toposort(enter=computed)
    if any(n.op in COSTLY for n in nodes if computed(n)):
        return True
    alu = sum(n.op in GroupOp.ALU for n in nodes if computed(n))
    return alu >= MIN_ALU and any(n.op is Ops.REDUCE_AXIS and n in points for n in nodes)


def _reads_target_elsewhere(assign: UOp) -> bool:
    """An assign whose value reads its own target through another view must compute the value first."""
    target = assign.src[0]
    for node in assign.src[1].toposort():
        if any(s.base is target.base and s is not target for s in node.src if s.op is not Ops.DEVICE):
            if node.op not in GroupOp.Movement:
                return True
    return False


# ---- building one kernel's AST ----


def _load(ctx: dict[UOp, int], node: UOp) -> UOp:
    """A realized input becomes a LOAD from the next DEFINE_GLOBAL, seen through a contiguous view."""
    buffer = node if node.op is Ops.BUFFER else node.src[0]
    ctx.setdefault(node, len(ctx) + 1)
    glob = UOp(Ops.DEFINE_GLOBAL, buffer.dtype.ptr(buffer.arg), (), ctx[node])
    view = UOp(Ops.VIEW, dtypes.void, (), ShapeTracker.from_shape((buffer.arg,)))
    return UOp(Ops.LOAD, buffer.dtype, (glob, view))


def _view_of(x: UOp, mv: UOp) -> UOp:
    return UOp(Ops.VIEW, x.dtype, (x,), apply_movement(ShapeTracker.from_shape(x.shape), mv))


def _move_view(v: UOp, mv: UOp) -> UOp:
    return v.replace(arg=apply_movement(v.arg, mv))


def _move_load(ld: UOp, mv: UOp) -> UOp:
    glob, view = ld.src
    return ld.replace(src=(glob, _move_view(view, mv)))


# Movement ops collapse into the ShapeTracker of a VIEW; views on loads and constants need no VIEW node.
fold_movement = PatternMatcher([
    (UPat(GroupOp.Movement, src=(UPat(Ops.LOAD, name="ld"),), name="mv"), _move_load),
    (UPat(GroupOp.Movement, src=(UPat(Ops.VIEW, src=(UPat(),), name="v"),), name="mv"), _move_view),
    (UPat(GroupOp.Movement, src=(UPat(),), name="mv"), lambda mv: _view_of(mv.src[0], mv)),
    # a view that changes nothing is no view
    (UPat(Ops.VIEW, src=(UPat(name="x"),), name="v"),
     lambda v, x: x if v.arg.contiguous and v.arg.shape == x.shape else None),
])  # fmt: skip


def _to_ast(value: UOp, inputs: dict[UOp, int]) -> UOp:
    """The value graph of a kernel with realized inputs as LOADs and Tensor-level nodes made kernel-level."""
    done: dict[UOp, UOp] = {}
    for node in value.toposort(enter=lambda n: not has_buffer(n)):
        if has_buffer(node):
            done[node] = _load(inputs, node)
        elif node.op is Ops.CONST:
            done[node] = UOp.const(node.dtype, node.arg)
        elif node.op is Ops.ARANGE:
            done[node] = UOp(Ops.ARANGE, node.dtype, (), node.arg)
        elif node.op in (Ops.DETACH, Ops.CONTIGUOUS):
            done[node] = done[node.src[0]]
        elif node.op is not Ops.DEVICE:
            done[node] = node.replace(src=tuple(done[s] for s in node.src))
    return graph_rewrite(done[value], fold_movement)


def _kernel(out: UOp, sources: list[UOp], ast: UOp, assign: bool = False) -> UOp:
    """ASSIGN(buffer, KERNEL(out, *sources)); `out` may be the ASSIGN that last wrote the buffer (an ordering)."""
    kernel = UOp(Ops.KERNEL, dtypes.void, (out, *sources), Kernel(ast, assign))
    return UOp(Ops.ASSIGN, out.dtype, (out if out.op is Ops.BUFFER else out.src[0], kernel))


def build_kernel(point: UOp) -> UOp:
    """The ASSIGN(BUFFER, KERNEL) that computes `point`, whose realized inputs are BUFFER or ASSIGN nodes."""
    if point.op is Ops.COPY:
        out = new_buffer(point.device, point.size, point.dtype)
        # the AST names only the target device and the byte where the data starts in the source (not 0 for a part
        # of a file): the COPY node itself would keep its whole graph alive
        source, start = disk_span(point.src[0]) or (point.src[0].base, 0)
        return _kernel(out, [source], UOp(Ops.COPY, point.dtype, (), (point.device, start)))
    if point.op is Ops.SCATTER_ADD:
        return _scatter_kernel(point)
    if point.op is Ops.ATTENTION:
        return _attention_kernel(point)
    if point.op is Ops.ASSIGN:
        target, value = point.src
        out, store_st = target.base, chain_view(target)
    else:
        value = point.src[0] if point.op is Ops.CONTIGUOUS else point
        out, store_st = new_buffer(point.device, point.size, point.dtype), ShapeTracker.from_shape(value.shape)
    inputs: dict[UOp, int] = {}
    ast_value = _to_ast(value, inputs)
    store = UOp(
        Ops.STORE, dtypes.void, (_output(out if out.op is Ops.BUFFER else out.src[0]), _view(store_st), ast_value)
    )
    ast = merge_axes(graph_rewrite(UOp(Ops.SINK, dtypes.void, (store,)), store_shapes))
    return _kernel(out, list(inputs), ast, assign=point.op is Ops.ASSIGN)


def _scatter_kernel(point: UOp) -> UOp:
    """SCATTER_ADD(base, index, src) as two kernels into one new buffer: the first stores base, the second (ordered
    after it: its first source is the first's ASSIGN) adds each element of src at the place index gives. The second's
    AST is SINK(STORE(out, VIEW(src's shape), src, index)), its arg (ADD, axis, the output's shape): it loops over src,
    and the lowerer works out each address (codegen/lowerer.py)."""
    base, index, src = point.src
    out = new_buffer(point.device, point.size, point.dtype)
    inputs: dict[UOp, int] = {}
    stored = UOp(
        Ops.STORE, dtypes.void, (_output(out), _view(ShapeTracker.from_shape(base.shape)), _to_ast(base, inputs))
    )
    first = _kernel(out, list(inputs), merge_axes(UOp(Ops.SINK, dtypes.void, (stored,))))
    inputs = {}
    value, at = _to_ast(src, inputs), _to_ast(index, inputs)
    added = UOp(Ops.STORE, dtypes.void, (_output(out), _view(ShapeTracker.from_shape(src.shape)), value, at),
                (Ops.ADD, point.arg, base.shape))  # fmt: skip
    return _kernel(first, list(inputs), UOp(Ops.SINK, dtypes.void, (added,)))


def _attention_kernel(point: UOp) -> UOp:
    """ATTENTION(q, k, v[, mask]) as one kernel whose AST is SINK(STORE(out, VIEW, ATTENTION(LOAD(q), ...))): each
    input a buffer through one strided view; the renderer writes the kernel (codegen/attention.py)."""
    out = new_buffer(point.device, point.size, point.dtype)
    inputs: dict[UOp, int] = {}
    value = point.replace(src=tuple(_to_ast(s, inputs) for s in point.src))
    store = UOp(Ops.STORE, dtypes.void, (_output(out), _view(ShapeTracker.from_shape(point.shape)), value))
    return _kernel(out, list(inputs), UOp(Ops.SINK, dtypes.void, (store,)))


def _output(buffer: UOp) -> UOp:
    return UOp(Ops.DEFINE_GLOBAL, buffer.dtype.ptr(buffer.arg), (), 0)


def _view(st: ShapeTracker) -> UOp:
    return UOp(Ops.VIEW, dtypes.void, (), st)


def kernelize(roots: list[UOp]) -> dict[UOp, UOp]:
    """Map each node that becomes a buffer to the ASSIGN(BUFFER, KERNEL) that fills it (reshaped to its shape)."""
    matcher = shadow_sizes + pack_panels + channels_last + window_buffers + copy_disk_views
    twin = operand_twins(roots, enter=lambda n: not has_buffer(n), matcher=matcher)
    if any(new is not node for node, new in twin.items()):
        sizes = bound_sizes(twin)  # symbolic sizes were laid out at their largest: the tensors get theirs back
        # operands got buffers of their own (packed panels, padded windows), a copy moved below a view: kernelize
        # that graph, and answer for the nodes of the one given
        replaced = kernelize_graph([twin[r] for r in roots])
        answer = {node: replaced[new] for node, new in twin.items() if new in replaced}
        answer |= {node: new.substitute(replaced) for node, new in twin.items() if node.op is Ops.REDUCE_AXIS
                   and new.op in (Ops.RESHAPE, Ops.PERMUTE) and new.src[0] in replaced}  # fmt: skip
        answer |= {node: new.substitute(replaced) for node, new in twin.items()
                   if node.op is Ops.COPY and new.op is not Ops.COPY and new.base in replaced}  # fmt: skip
        return {node: with_bound_sizes(new, sizes) for node, new in answer.items()}
    return kernelize_graph(roots)


def kernelize_graph(roots: list[UOp]) -> dict[UOp, UOp]:
    """kernelize's work on a graph as it is."""
    replaced: dict[UOp, UOp] = {}
    for point in find_realize_points(roots):
        point_now = point.substitute(replaced) if replaced else point
        assign = build_kernel(point_now)
        if point.op is Ops.ASSIGN:
            target = point_now.src[0]
            replaced[point] = target.substitute({target.base: assign})
        elif point.shape == assign.shape:
            replaced[point] = assign
        else:
            replaced[point] = UOp(Ops.RESHAPE, assign.dtype, (assign,), point.shape)
    return replaced
