"""Code generation: kernel AST -> loops and index math -> simplified graph -> linear program -> source."""

from __future__ import annotations

from dataclasses import dataclass

from glassgrad.codegen.attention import attention_program, is_attention
from glassgrad.codegen.checks import checks_of, keep_dropped_checks, passed_checks, record_failures
from glassgrad.codegen.gather import collapse_gathers
from glassgrad.codegen.heuristics import renderer_opts
from glassgrad.codegen.linearize import linearize
from glassgrad.codegen.lowerer import check_kernel_ast, lower_kernel, scatter_store
from glassgrad.codegen.opt import THREAD_OPS, Opt, main_reduce
from glassgrad.codegen.tensor_cores import tensor_core_kernel, tensor_core_opts
from glassgrad.codegen.vectorize import vectorize
from glassgrad.helpers import NOOPT, colored, prod
from glassgrad.renderer import Renderer
from glassgrad.uop.check import Check, records_failure
from glassgrad.uop.ops import GroupOp, Ops, UOp
from glassgrad.uop.rewrite import graph_rewrite
from glassgrad.uop.symbolic import bounds, symbolic
from glassgrad.uop.variable import SymDim, kernel_vars


@dataclass(frozen=True)
class ProgramSpec:
    """Everything a device needs to run one kernel: its name, source, and counts for DEBUG output."""

    name: str
    src: str
    program: tuple[UOp, ...]
    global_size: tuple[int, ...] | None  # the work threads may split (Renderer.launch_size); None: the kernel has none
    ops: int
    mem: int
    opts: tuple[Opt, ...] = ()
    local_size: tuple[int, ...] | None = None  # threads sharing one global index (Renderer.launch_size)
    display_name: str = ""  # the name with its parts coloured by kind, for DEBUG output
    checks: tuple[Check, ...] = ()  # what the kernel checks; it then takes the error buffer after its own buffers
    vars: tuple[UOp, ...] = ()  # its Variables (DEFINE_VAR), whose values it takes after its buffers, in this order


def choose_opts(ast: UOp, renderer: Renderer | None = None) -> tuple[Opt, ...]:
    """The optimization actions a kernel gets: none with NOOPT=1, else tensor cores or the heuristics (a BEAM=N search,
    engine/beam.py, times candidates on the device and passes its choice in as `opts`)."""
    check_kernel_ast(ast, "choose_opts")
    if NOOPT:
        return ()
    if symbolic := symbolic_axes(ast):  # a symbolic loop runs whole: no action splits a size it does not know
        opts = () if renderer is None else renderer_opts(ast, renderer)
        return tuple(o for o in opts if o.axis not in symbolic)
    if tensor_cores := tensor_core_opts(ast, renderer):  # a matrix product of floats, on a renderer with tiles
        return tensor_cores
    return tuple(renderer_opts(ast, renderer))


def symbolic_axes(ast: UOp) -> set[int]:
    """The axes of a kernel whose size is symbolic (uop/variable.py): loops that run to a Variable's expression."""
    found = {a for a, s in enumerate(ast.src[0].src[1].arg.shape) if isinstance(s, SymDim)}
    reduces = (n for n in ast.toposort() if n.op is Ops.REDUCE_AXIS)
    return found | {a for r in reduces for a in r.arg[1] if isinstance(r.src[0].shape[a], SymDim)}


def symbolic_kernel(ast: UOp) -> bool:
    """Whether a kernel has a symbolic size anywhere (a loop of a view inside it, too)."""
    return any(isinstance(s, SymDim) for n in ast.toposort() if n.op is Ops.VIEW for s in n.arg.shape)


def full_rewrite_to_sink(ast: UOp, renderer: Renderer | None = None, opts: tuple[Opt, ...] | None = None) -> UOp:
    """A kernel AST lowered to loops and index math, simplified, with the renderer's dialect fixes applied."""
    check_kernel_ast(ast, "full_rewrite_to_sink")
    opts = choose_opts(ast, renderer) if opts is None else opts
    if (thread_opts := [o for o in opts if o.op in THREAD_OPS]) and not (renderer is not None and renderer.has_local):
        where = f"{renderer.device} has none" if renderer is not None and renderer.device else "no device was given"
        raise ValueError(f"{thread_opts} need blocks of threads (a GPU's); {where}")
    if (chunks := [o for o in opts if o.op == "CHUNK"]) and renderer is not None and renderer.has_local:
        raise ValueError(f"{chunks}: a GPU's blocks would add into one output at once; CHUNK is for a CPU's loops")
    vector_lanes = renderer.vector_lanes if renderer is not None else ()
    atomics = renderer is not None and renderer.atomic_adds
    lowered, simplify = lower_kernel(ast, opts, vector_lanes, atomics), symbolic + collapse_gathers + passed_checks
    sink = keep_dropped_checks(lowered, graph_rewrite(lowered, simplify), simplify)
    if renderer is not None and renderer.dialect is not None:
        sink = graph_rewrite(sink, renderer.dialect)
    return record_failures(vectorize(sink))


# colours of a kernel name's parts, as in seed 003: output loops blue (tiles cyan), a block's LOCAL threads light blue,
# reduce loops red, a GROUP's threads green, upcast lanes yellow, unrolled lanes magenta
NAME_COLORS = {"tile": ("cyan", False), "loop": ("blue", False), "LOCAL": ("blue", True), "reduce": ("red", False),
               "GROUP": ("green", False), "UPCAST": ("yellow", False), "UNROLL": ("magenta", False)}  # fmt: skip


def name_parts(ast: UOp, opts: tuple[Opt, ...] = ()) -> list[tuple[int, str]]:
    """The sizes a kernel's name lists, each with its kind: loops first (TILE's and CHUNK's outer loops first of all),
    then a block's LOCAL threads, reduce loops (each thread's share), a GROUP's threads, then lanes."""
    shape = list(ast.src[0].src[1].arg.shape)
    tiles, lanes, local = [], [], []
    for o in opts:
        if o.op in ("UPCAST", "LOCAL"):
            shape[o.axis] //= o.amount
            (lanes if o.op == "UPCAST" else local).append((o.amount, o.op))
        elif o.op == "TILE":
            tiles.append((shape[o.axis] // o.amount, "tile"))
            shape[o.axis] = o.amount
    main = main_reduce(ast)
    unroll = {o.axis: o.amount for o in opts if o.op == "UNROLL"}
    group = {o.axis: o.amount for o in opts if o.op == "GROUP"}
    chunk = {o.axis: o.amount for o in opts if o.op == "CHUNK"}
    if main is not None:  # a CHUNK's loop is an outer one too
        tiles += [(main.src[0].shape[a] // n, "tile") for a, n in chunk.items()]
    reduces = []
    for node in ast.toposort():
        if node.op is Ops.REDUCE_AXIS:
            for a in node.arg[1]:
                amount, threads = (unroll.get(a, 1), group.get(a, 1)) if node is main else (1, 1)
                size = chunk[a] if node is main and a in chunk else node.src[0].shape[a]
                reduces.append((size if isinstance(size, SymDim) else -(-size // amount // threads), "reduce"))
    lanes += [(o.amount, "UNROLL") for o in opts if o.op == "UNROLL"]
    parts = (
        tiles + [(s, "loop") for s in shape] + local + reduces + [(o.amount, "GROUP") for o in opts if o.op == "GROUP"]
    )
    return [(s, kind) for s, kind in parts if s != 1] + lanes


def kernel_name(ast: UOp, opts: tuple[Opt, ...] = (), color: bool = False) -> str:
    """E_ for elementwise kernels, r_ for reductions and S_ for scatters (scatter_store), then the loop sizes and lanes:
    E_4, r_16_32, r_64_8_512_16_4, S_1024_64.

    With color, each size is coloured by kind (NAME_COLORS); the plain name is the C function's."""
    parts = name_parts(ast, opts)
    prefix = "r" if any(node.op is Ops.REDUCE_AXIS for node in ast.toposort()) else "E"
    prefix = "S" if any(scatter_store(s) for s in ast.src) else prefix
    sizes = [colored(str(s), *NAME_COLORS[kind]) if color else str(s) for s, kind in parts] or ["1"]
    return f"{prefix}_" + "_".join(sizes)


def count_ops_and_mem(program: list[UOp]) -> tuple[int, int]:
    """Arithmetic ops on values and bytes moved, counting every op once per iteration of the loops around it.

    Index math (addresses, and the gates of padded loads) is not counted, so that GFLOP/s measures the math asked for:
    a matmul of (M, K) by (K, N) counts 2*M*N*K (less M*N where its sum is unrolled completely)."""
    indexing = {n for u in program if u.op is Ops.INDEX for s in u.src[1:] for n in s.toposort(_outside_loop_vars)}
    ops = mem = 0
    trips = prod(u.arg[1] for u in program if u.op is Ops.SPECIAL and u.arg[0] == "local")  # a LOCAL's threads
    stack: list[int] = []
    for u in program:
        if u.op is Ops.RANGE:
            stack.append(trips)
            trips *= bounds(u.src[0])[1]  # a symbolic loop: counted at its largest
        elif u.op is Ops.ENDRANGE:
            trips = stack.pop()
        elif u.op is Ops.LOAD or u.op is Ops.STORE and not records_failure(u):
            mem += trips * (u.dtype if u.op is Ops.LOAD else u.src[1].dtype).itemsize
            if u.op is Ops.STORE and u.arg is Ops.ADD:  # adds into memory: reads it too, and adds
                mem, ops = mem + trips * u.src[1].dtype.itemsize, ops + trips * u.src[1].dtype.count
        elif u.op in GroupOp.ALU and u not in indexing:
            ops += trips * u.dtype.count * (2 if u.op is Ops.MULACC else 1)  # a fused multiply-add is two
    return ops, mem


def _outside_loop_vars(u: UOp) -> bool:
    return u.op is not Ops.RANGE


def outer_output_loop(program: list[UOp], output_loops: int) -> UOp | None:
    """The outermost loop over output elements: its iterations are independent, so threads can split it."""
    loop = next((u for u in program if u.op is Ops.RANGE and u.arg < output_loops), None)
    return loop if loop is not None and loop.src[0].op is Ops.CONST else None  # (a symbolic loop: no fixed split)


def get_program(ast: UOp, renderer: Renderer, opts: tuple[Opt, ...] | None = None) -> ProgramSpec:
    """Lower, simplify, linearize and render one kernel."""
    check_kernel_ast(ast, "get_program")
    if is_attention(ast):  # the renderer writes it whole: no loops to lower, no optimizations
        name, src, global_size, local_size, ops, mem = attention_program(ast, renderer)
        return ProgramSpec(name, src, (), global_size, ops, mem, (), local_size, name)
    opts = choose_opts(ast, renderer) if opts is None else opts
    if opts and opts[0].op == "TC":  # the tensor-core kernel: the renderer writes the loops, the epilogue is lowered
        name = kernel_name(ast, opts)
        tc = tensor_core_kernel(ast, renderer, opts[0], name)
        return ProgramSpec(name, tc.src, tc.program, tc.global_size, tc.ops, tc.mem, opts, tc.local_size,
                           kernel_name(ast, opts, color=True))  # fmt: skip
    sink = full_rewrite_to_sink(ast, renderer, opts)  # checks the opts first: a bad one is named before naming
    program = linearize(sink, renderer.chain_sums)
    name = kernel_name(ast, opts)
    ops, mem = count_ops_and_mem(program)
    outer = outer_output_loop(program, sink.arg or 0)
    global_size, local_size = renderer.launch_size(program, outer)
    return ProgramSpec(name, renderer.render(name, program, outer), tuple(program), global_size, ops, mem, opts,
                       local_size, kernel_name(ast, opts, color=True), checks_of(program),
                       tuple(kernel_vars(program)))  # fmt: skip
