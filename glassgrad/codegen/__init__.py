"""Code generation: kernel AST -> loops and index math -> simplified graph -> linear program -> source."""

from __future__ import annotations

from dataclasses import dataclass

from glassgrad.codegen.gather import collapse_gathers
from glassgrad.codegen.heuristics import hand_coded_opts
from glassgrad.codegen.linearize import linearize
from glassgrad.codegen.lowerer import lower_kernel
from glassgrad.codegen.opt import Opt
from glassgrad.helpers import NOOPT
from glassgrad.renderer import Renderer
from glassgrad.uop.ops import GroupOp, Ops, UOp
from glassgrad.uop.rewrite import graph_rewrite
from glassgrad.uop.symbolic import symbolic


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


def choose_opts(ast: UOp) -> tuple[Opt, ...]:
    """The optimization actions a kernel gets: none with NOOPT=1, else the hand-coded heuristics."""
    return () if NOOPT else tuple(hand_coded_opts(ast))


def full_rewrite_to_sink(ast: UOp, renderer: Renderer | None = None, opts: tuple[Opt, ...] | None = None) -> UOp:
    """A kernel AST lowered to loops and index math, simplified, with the renderer's dialect fixes applied."""
    opts = choose_opts(ast) if opts is None else opts
    sink = graph_rewrite(lower_kernel(ast, opts), symbolic + collapse_gathers)
    if renderer is not None and renderer.dialect is not None:
        sink = graph_rewrite(sink, renderer.dialect)
    return sink


def kernel_name(ast: UOp) -> str:
    """E_ for elementwise kernels and r_ for reductions, then the loop sizes: E_4, r_16_32."""
    shape = ast.src[0].src[1].arg.shape
    reduce_sizes = [node.src[0].shape[a] for node in ast.toposort() if node.op is Ops.REDUCE_AXIS for a in node.arg[1]]
    prefix = "r" if reduce_sizes else "E"
    sizes = [s for s in shape if s != 1] + reduce_sizes
    return f"{prefix}_" + "_".join(str(s) for s in sizes or [1])


def count_ops_and_mem(program: list[UOp]) -> tuple[int, int]:
    """Arithmetic ops on values and bytes moved, counting every op once per iteration of the loops around it.

    Index math (addresses, and the gates of padded loads) is not counted, so that GFLOP/s measures the math asked for:
    a matmul of (M, K) by (K, N) counts 2*M*N*K (less M*N where its sum is unrolled completely)."""
    indexing = {n for u in program if u.op is Ops.INDEX for s in u.src[1:] for n in s.toposort(_outside_loop_vars)}
    ops = mem = 0
    trips = 1
    stack: list[int] = []
    for u in program:
        if u.op is Ops.RANGE:
            stack.append(trips)
            trips *= u.src[0].arg
        elif u.op is Ops.ENDRANGE:
            trips = stack.pop()
        elif u.op in (Ops.LOAD, Ops.STORE):
            mem += trips * (u.dtype if u.op is Ops.LOAD else u.src[1].dtype).itemsize
        elif u.op in GroupOp.ALU and u not in indexing:
            ops += trips * u.dtype.count
    return ops, mem


def _outside_loop_vars(u: UOp) -> bool:
    return u.op is not Ops.RANGE


def outer_output_loop(program: list[UOp], output_dims: int) -> UOp | None:
    """The outermost loop over output elements: its iterations are independent, so threads can split it."""
    return next((u for u in program if u.op is Ops.RANGE and u.arg < output_dims), None)


def get_program(ast: UOp, renderer: Renderer, opts: tuple[Opt, ...] | None = None) -> ProgramSpec:
    """Lower, simplify, linearize and render one kernel."""
    opts = choose_opts(ast) if opts is None else opts
    program = linearize(full_rewrite_to_sink(ast, renderer, opts))
    name = kernel_name(ast)
    ops, mem = count_ops_and_mem(program)
    outer = outer_output_loop(program, len(ast.src[0].src[1].arg.shape))
    global_size, local_size = renderer.launch_size(program, outer)
    return ProgramSpec(name, renderer.render(name, program, outer), tuple(program), global_size, ops, mem, opts,
                       local_size)  # fmt: skip
