"""CUDA C: the C-style renderer's dialect for NVIDIA GPUs, compiled by NVRTC.

The outer output loop becomes the grid: each thread computes one of its iterations (`ridx0` is the thread's global
index, guarded against the loop's size) and runs the inner loops itself. Where that leaves too few threads for the
work (a whole-tensor sum; a few long rows), one iteration gets a block of threads instead: they split the reduction
loops between them and combine their partial accumulators through shared memory.

half and bfloat16 are stored as their 16 bits and converted to and from float with PTX's own conversions, so a kernel
needs no toolkit header; their math runs in float32, as on the CPU (the `small_float_math` dialect).
"""

from __future__ import annotations

import math
import struct

from glassgrad.dtype import DType, dtypes
from glassgrad.helpers import prod
from glassgrad.renderer.cstyle import CKernelWriter, CStyleRenderer
from glassgrad.renderer.cuda_tc import TILE_CONFIGS, render_matmul
from glassgrad.uop.ops import Ops, UOp

# NVRTC has no <math.h>: the two constants it would give, as the bits C's INFINITY and NAN have
CONSTANTS = ["#define INFINITY (__int_as_float(0x7f800000))", "#define NAN (__int_as_float(0x7fc00000))"]

HALF_HELPERS = [
    "static inline float gg_h2f(unsigned short x) { float f;"
    ' asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(x)); return f; }',
    "static inline unsigned short gg_f2h(float f) { unsigned short x;"
    ' asm("cvt.rn.f16.f32 %0, %1;" : "=h"(x) : "f"(f)); return x; }',
    "static inline unsigned short gg_d2h(double d) { unsigned short x;"
    ' asm("cvt.rn.f16.f64 %0, %1;" : "=h"(x) : "d"(d)); return x; }',
]  # fmt: skip

BITCAST_HELPER = (
    "template <class T, class F> static inline T gg_bitcast(F x) { union { F f; T t; } u; u.f = x; return u.t; }"
)


def float_to_half_bits(value: float) -> int:
    """The 16 bits of a float16, rounded to nearest even; too large a value is infinity."""
    if math.isnan(value):
        return 0x7E00
    try:
        return struct.unpack("<H", struct.pack("<e", value))[0]
    except OverflowError:
        return 0xFC00 if value < 0 else 0x7C00


GROUP_THREADS = 256  # threads that share one iteration of the outer loop, where they do
GROUP_BELOW = 8192  # outer loops this short leave the GPU idle with one thread per iteration...
GROUP_FROM = 128  # ...and reductions at least this long are worth splitting
THREAD_ITEMS = 4  # grid indices each thread of a large loop-free kernel computes: their loads are in flight together
ITEMS_FROM = 1 << 20  # (bench/gpu_elementwise.py, H100: 0.84 of copy bandwidth with one, 1.02 with four a thread)


def grid_loops(program: list[UOp], outer_loop: UOp | None) -> list[UOp]:
    """The outer output loop and the output loops nested straight inside it: the grid's threads split them all."""
    if outer_loop is None:
        return []
    position = {u: i for i, u in enumerate(program)}
    end = {u.src[0]: i for i, u in enumerate(program) if u.op is Ops.ENDRANGE}
    loops = [outer_loop]
    while True:
        body, depth, children = program[position[loops[-1]] + 1 : end[loops[-1]]], 0, []
        for u in body:
            depth += (u.op is Ops.RANGE) - (u.op is Ops.ENDRANGE)
            if depth == 0 and u.op in (Ops.STORE, Ops.DEFINE_ACC, Ops.ASSIGN):
                return loops  # work of its own around the inner loop: that loop stays a loop
            children += [u] if u.op is Ops.RANGE and depth == 1 else []
        if len(children) != 1 or body[-1].src[0] is not children[0]:
            return loops  # one loop, and nothing after it
        if prod(size(loop) for loop in loops) * size(children[0]) >= 2**31:
            return loops  # the global index is an int
        if not any(u.op is Ops.STORE for u in program[position[children[0]] : end[children[0]]]):
            return loops  # a reduction's loop, not an output's
        loops.append(children[0])


def size(loop: UOp) -> int:
    return loop.src[0].arg


def thread_items(program: list[UOp], grid: list[UOp]) -> int:
    """How many grid indices one thread computes: THREAD_ITEMS where the kernel has no loop but the grid's (all
    elementwise) and enough indices to keep every thread busy, else 1."""
    total = prod(size(loop) for loop in grid)
    if not grid or total < ITEMS_FROM or total + THREAD_ITEMS * 1024 >= 2**31:  # the last block's indices are ints
        return 1
    return THREAD_ITEMS if sum(u.op is Ops.RANGE for u in program) == len(grid) else 1


def shared_loops(program: list[UOp], grid: list[UOp]) -> dict[UOp, UOp]:
    """Where a block of threads shares the work of one grid index: for each reduction loop directly in the grid loops'
    body (the kernel's, with none), the loop of its nest that the threads split. That is the longest loop holding
    every accumulator the nest defines or updates, so each of them is one thread's alone or combined after the nest.
    Empty (a thread per grid index) where the grid is large, the reductions short, or a loop stores."""
    nests: dict[UOp, list[UOp]] = {}  # each loop in the body, with the loops inside it
    accumulating: dict[UOp, list[list[UOp]]] = {}  # and the loops open around each DEFINE_ACC and ASSIGN in it
    open_loops: list[UOp] = []
    for u in program:
        top = open_loops[len(grid)] if len(open_loops) > len(grid) and open_loops[: len(grid)] == grid else None
        if u.op is Ops.RANGE:
            if open_loops == grid:
                top, nests[u], accumulating[u] = u, [], []
            if top is not None:
                nests[top].append(u)
            open_loops.append(u)
        elif u.op is Ops.ENDRANGE:
            open_loops.pop()
        elif top is not None and u.op is Ops.STORE:
            return {}  # a loop that stores is an output loop, not a reduction
        elif top is not None and u.op in (Ops.DEFINE_ACC, Ops.ASSIGN):
            accumulating[top].append(list(open_loops))
    if not nests or prod(size(loop) for loop in grid) >= GROUP_BELOW:
        return {}
    plan = {top: max((loop for loop in nest if all(loop in around for around in accumulating[top])), key=size)
            for top, nest in nests.items()}  # fmt: skip
    return plan if max(size(loop) for loop in plan.values()) >= GROUP_FROM else {}


def _uses(program: list[UOp], dtype: DType) -> bool:
    return any(u.dtype == dtype or any(s.dtype == dtype for s in u.src) for u in program)


class CUDARenderer(CStyleRenderer):
    """CUDA C for NVIDIA GPUs: a __global__ function whose outer output loop is the grid of threads."""

    device = "CUDA"
    kernel_prefix = 'extern "C" __global__ void'
    restrict = "__restrict__"
    split_outer_loop = True
    outer_loop_params = ()  # the bounds come from the launch: blockIdx, blockDim, threadIdx
    type_names = {**CStyleRenderer.type_names, dtypes.bool: "bool", dtypes.float16: "unsigned short"}
    tile_configs = TILE_CONFIGS  # tensor-core matrix products (renderer/cuda_tc.py); the device clears it before sm_80
    render_matmul = render_matmul

    def launch_size(self, program: list[UOp], outer_loop: UOp | None = None) -> tuple[tuple[int, ...] | None, ...]:
        """Global size: the grid loops' iterations (a thread, or a block, each); local size: a block's threads."""
        grid = grid_loops(program, outer_loop)
        local = (GROUP_THREADS,) if shared_loops(program, grid) else None
        threads = -(-prod(size(loop) for loop in grid) // thread_items(program, grid))
        return ((threads,) if grid else None), local

    def render_const(self, value, dtype: DType) -> str:
        if dtype == dtypes.float16:
            return f"((unsigned short){float_to_half_bits(float(value))})"
        return super().render_const(value, dtype)

    def render_cast(self, x: str, src: DType, dst: DType) -> str:
        if src == dtypes.float16:  # through float32, which holds every half exactly
            x, src = f"gg_h2f({x})", dtypes.float32
            if dst == dtypes.float32:
                return x
        if dst == dtypes.float16:
            if src == dtypes.float64:
                return f"gg_d2h({x})"  # one rounding, not two through float32
            return f"gg_f2h({'gg_bf2f' if src == dtypes.bfloat16 else '(float)'}({x}))"
        return super().render_cast(x, src, dst)

    def render_bitcast(self, x: str, src: DType, dst: DType) -> str:
        return f"gg_bitcast<{self.type_name(dst)}>({x})"

    def render(self, name: str, program: list[UOp], outer_loop: UOp | None = None) -> str:
        writer = CUDAKernelWriter(self, program, outer_loop)
        return "\n".join(self.prelude(program) + [writer.write(name)]) + "\n"

    def prelude(self, program: list[UOp]) -> list[str]:
        lines = CONSTANTS + (HALF_HELPERS if _uses(program, dtypes.float16) else [])
        lines += [line for line in super().prelude(program) if not line.startswith("#include")]
        return lines + ([BITCAST_HELPER] if any(u.op is Ops.BITCAST for u in program) else [])


class CUDAKernelWriter(CKernelWriter):
    """The C writer, plus blocks of threads that share the reduction loops of one outer iteration."""

    def __init__(self, renderer: CUDARenderer, program: list[UOp], outer_loop: UOp | None = None):
        super().__init__(renderer, program, outer_loop)
        self.grid = grid_loops(program, outer_loop)
        self.plan = shared_loops(program, self.grid)
        self.items = thread_items(program, self.grid)
        self.split = set(self.plan.values())
        self.updates: dict[UOp, dict[UOp, UOp]] = {top: {} for top in self.plan}  # accumulators combined after each
        self.partials: dict[str, str] = {}  # a shared array per type, reused by every combine
        position = {u: i for i, u in enumerate(program)}
        open_loops: list[UOp] = []
        for u in program:
            if u.op is Ops.RANGE:
                open_loops.append(u)
            elif u.op is Ops.ENDRANGE:
                open_loops.pop()
            elif u.op is Ops.ASSIGN and (top := next((r for r in open_loops if r in self.plan), None)):
                if position[u.src[0]] < position[top]:  # an accumulator from before the nest: partial in each thread
                    self.updates[top][u.src[0]] = u

    def range(self, u: UOp) -> None:
        if u not in self.split and u not in self.grid:
            return super().range(u)
        name, bound = f"ridx{u.arg}", self.names[u.src[0]]
        self.names[u] = name
        if u in self.grid:  # each thread (or block) has one global index: gidx, unravelled over the grid loops
            i = self.grid.index(u)
            inner = prod(size(loop) for loop in self.grid[i + 1 :])
            index = "gidx" if inner == 1 else f"(gidx/{inner})"
            index = index if i == 0 else f"({index}%{bound})"
            if i > 0:
                self.line(f"int {name} = {index}; {{")
            else:
                gidx = "blockIdx.x" if self.plan else "blockIdx.x*blockDim.x+threadIdx.x"
                if self.items > 1:  # a fixed count the compiler unrolls: every item's loads issue before any store
                    self.line(f"for (int gitem = 0; gitem < {self.items}; gitem++) {{")
                    self.depth += 1
                    gidx = f"(blockIdx.x*{self.items}+gitem)*blockDim.x+threadIdx.x"  # a block's items lie side by side
                total = prod(size(loop) for loop in self.grid)
                self.line(f"int gidx = {gidx}; int {name} = {index}; if (gidx < {total}) {{")
        else:  # the block's threads take turns
            self.line(f"for (int {name} = threadIdx.x; {name} < {bound}; {name} += blockDim.x) {{")
        self.depth += 1

    def endrange(self, u: UOp) -> None:
        super().endrange(u)
        if self.items > 1 and u.src[0] is self.grid[0]:  # the loop over a thread's items
            super().endrange(u)
        for assign in self.updates.get(u.src[0], {}).values():
            self.combine(assign)

    def combine(self, assign: UOp) -> None:
        """Every thread's partial accumulator, reduced as a tree in shared memory; each thread reads the total."""
        acc, dtype, op = self.names[assign.src[0]], assign.dtype, assign.src[1].op
        op = Ops.ADD if op is Ops.MULACC else op  # partial sums of products add up
        if (part := self.partials.get(type_name := self.r.type_name(dtype))) is None:
            part = self.partials[type_name] = self.fresh("part")
            self.line(f"__shared__ {type_name} {part}[{GROUP_THREADS}];")
        both = self.r.render_alu(op, dtype, [f"{part}[threadIdx.x]", f"{part}[threadIdx.x+step]"], assign.src[1].src)
        self.line(f"{part}[threadIdx.x] = {acc};")
        self.line("__syncthreads();")
        self.line("for (int step = blockDim.x/2; step > 0; step >>= 1) {")
        self.line(f"  if (threadIdx.x < step) {part}[threadIdx.x] = {both};")
        self.line("  __syncthreads();")
        self.line("}")
        self.line(f"{acc} = {part}[0];")
        self.line("__syncthreads();")  # everyone has read the total before the array is used again

    def store(self, u: UOp) -> None:
        if not self.plan:
            return super().store(u)
        self.line("if (threadIdx.x == 0) {")  # every thread holds the same values: one writes them
        self.depth += 1
        super().store(u)
        self.depth -= 1
        self.line("}")
