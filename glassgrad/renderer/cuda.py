"""CUDA C: the C-style renderer's dialect for NVIDIA GPUs, compiled by NVRTC.

The outer output loop becomes the grid: each thread computes one of its iterations (`ridx0` is the thread's global
index, guarded against the loop's size) and runs the inner loops itself. A kernel with LOCAL or GROUP actions gets a
block of threads for each grid index instead: a LOCAL's threads compute neighbouring outputs, a GROUP's share a
reduction loop and combine their partial results through shared memory (codegen/opt.py; the heuristics choose them).

half and bfloat16 are stored as their 16 bits and converted to and from float with PTX's own conversions (fp8, as on the
CPU, in software: renderer/fp8.py), so a kernel needs no toolkit header; their math runs in float32, as on the CPU
(the `small_float_math` dialect).
"""

from __future__ import annotations

import math
import struct

from glassgrad.dtype import DType, dtypes
from glassgrad.helpers import TF32, prod
from glassgrad.renderer.attention import AttentionSpec
from glassgrad.renderer.cstyle import CKernelWriter, CStyleRenderer
from glassgrad.renderer.cuda_attention import THREADS, cuda_blocks, render_cuda_attention
from glassgrad.renderer.cuda_mma_attention import CONFIG as MMA_CONFIG
from glassgrad.renderer.cuda_mma_attention import (
    mma_attention_blocks,
    mma_attention_covers,
    mma_attention_fits,
    render_mma_attention,
)
from glassgrad.renderer.cuda_simt import SIMT_CONFIGS, SimtConfig, render_simt
from glassgrad.renderer.cuda_tc import TF32_CONFIGS, TILE_CONFIGS, render_matmul
from glassgrad.renderer.cuda_wgmma import WGMMA_CONFIGS, WgmmaConfig, render_wgmma
from glassgrad.uop.check import records_failure
from glassgrad.uop.ops import Ops, UOp

# NVRTC has no <math.h>: the two constants it would give, as the bits C's INFINITY and NAN have
CONSTANTS = ["#define INFINITY (__int_as_float(0x7f800000))", "#define NAN (__int_as_float(0x7fc00000))"]

# cvt.f32.f16 makes every NaN the canonical (positive) one; the CPU and PyTorch keep its sign, which an fp8 cast of
# the float keeps (-NaN is 0xff in fp8e4m3): the half's sign bit is put back (a no-op for every other value; a
# branch on NaN instead slowed GPT-2's fp16 forward by 13% on an H200)
HALF_HELPERS = [
    "static inline float gg_h2f(unsigned short x) { float f;"
    ' asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(x));'
    " return __int_as_float(__float_as_int(f) | ((unsigned int)(x & 0x8000u) << 16)); }",
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


# the tiled matrix products' configurations (codegen/tensor_cores.py), each group in the heuristics' order of
# preference: an sm_80 device's (mma.sync for 16 bits, TF32 where allowed, else SIMT for float32), and an sm_90 one's
# (wgmma first for 16 bits)
MATMUL_CONFIGS = TILE_CONFIGS + TF32_CONFIGS + SIMT_CONFIGS
HOPPER_CONFIGS = WGMMA_CONFIGS + MATMUL_CONFIGS

# the types CUDA's atomicAdd takes, for the dtypes a scatter adds (the Tensor adds smaller ones in these)
ATOMIC_TYPES = {dtypes.float32: "float", dtypes.float64: "double", dtypes.int32: "int", dtypes.uint32: "unsigned int",
                dtypes.int64: "unsigned long long", dtypes.uint64: "unsigned long long"}  # fmt: skip

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
            if depth == 0 and u.op in (Ops.STORE, Ops.DEFINE_ACC, Ops.ASSIGN) and not records_failure(u):
                return loops  # work of its own around the inner loop: that loop stays a loop (a check's is redone)
            children += [u] if u.op is Ops.RANGE and depth == 1 else []
        if len(children) != 1 or body[-1].src[0] is not children[0]:
            return loops  # one loop, and nothing after it
        if children[0].src[0].op is not Ops.CONST:
            return loops  # a symbolic loop (uop/variable.py): it runs to a kernel parameter, no fixed grid
        if prod(size(loop) for loop in loops) * size(children[0]) >= 2**31:
            return loops  # the global index is an int
        inner = program[position[children[0]] : end[children[0]]]
        if not any(u.op is Ops.STORE and not records_failure(u) for u in inner):
            return loops  # a reduction's loop, not an output's
        loops.append(children[0])


def size(loop: UOp) -> int:
    return loop.src[0].arg


def thread_items(program: list[UOp], grid: list[UOp]) -> int:
    """How many grid indices one thread computes: THREAD_ITEMS where the kernel has no loop but the grid's (all
    elementwise), no block of threads, and enough indices to keep every thread busy, else 1."""
    total = prod(size(loop) for loop in grid)
    if not grid or block_size(program) or total < ITEMS_FROM or total + THREAD_ITEMS * 1024 >= 2**31:
        return 1  # (the last bound: the last block's indices are ints)
    return THREAD_ITEMS if sum(u.op is Ops.RANGE for u in program) == len(grid) else 1


def block_size(program: list[UOp]) -> int | None:
    """Threads in a block, as the kernel's LOCAL and GROUP actions asked (each thread index variable records it);
    None where it has none: then each thread takes its own grid indices."""
    return next((u.arg[3] for u in program if u.op is Ops.SPECIAL and u.arg[0] in ("local", "group")), None)


def _next_power_of_two(n: int) -> int:
    return 1 << (n - 1).bit_length()


def _uses(program: list[UOp], dtype: DType) -> bool:
    return any(u.dtype == dtype or any(s.dtype == dtype for s in u.src) for u in program)


def loops_of_int_max(program: list[UOp]) -> set[UOp]:
    """The loops around an integer max (or min) accumulation. NVIDIA's ptxas (H200, driver 580.159, -O3) loses a term of
    such a loop unrolled whole: the max of the negations of 37 int32 values was the second largest (-Xptxas -O0, or
    no unrolling, gives the largest); these loops stay rolled."""
    accumulators = {u for u in program if u.op is Ops.DEFINE_ACC and dtypes.is_int(u.dtype.scalar)}
    kept, open_loops = set(), []
    for u in program:
        if u.op is Ops.RANGE:
            open_loops.append(u)
        elif u.op is Ops.ENDRANGE and open_loops:
            open_loops.pop()
        elif u.op is Ops.MAX and any(s in accumulators for s in u.src):
            kept.update(open_loops)
    return kept


class CUDARenderer(CStyleRenderer):
    """CUDA C for NVIDIA GPUs: a __global__ function whose outer output loop is the grid of threads."""

    device = "CUDA"
    kernel_prefix = 'extern "C" __global__ void'
    restrict = "__restrict__"
    split_outer_loop = True
    has_local = True  # blocks of threads: the LOCAL and GROUP actions
    atomic_adds = True  # a scatter's threads add with atomicAdd
    # its SIMT fused attention kernel (renderer/cuda_attention.py) is correct but slower inside GPT-2 than the unfused
    # path's tensor-core products (H200, fp16 forward 8 x 512: 370k against 435k tokens/s): asked for only when set;
    # the tensor-core one (renderer/cuda_mma_attention.py: 16-bit inputs, head sizes multiples of 16 up to 128) is
    # asked for where it fits, on sm_80 and newer (the device clears `mma_attention` before)
    fused_attention = False
    mma_attention = True
    # sums of products accumulate with fused multiply-adds (one instruction, one rounding, as cuBLAS does; the compiler
    # itself fuses nothing, --fmad=false), the unrolled terms of a sum one after another into the accumulator
    fuse_mulacc = True
    chain_sums = True
    outer_loop_params = ()  # the bounds come from the launch: blockIdx, blockDim, threadIdx
    type_names = {**CStyleRenderer.type_names, dtypes.bool: "bool", dtypes.float16: "unsigned short"}
    bit_floats = {**CStyleRenderer.bit_floats, dtypes.float16: ("gg_h2f", "gg_f2h")}  # PTX's own conversions
    tile_configs = MATMUL_CONFIGS  # tiled matrix products; the device clears them before sm_80 and puts wgmma's first
    # on sm_90

    def render_matmul(self, name: str, mm, config, epilogue: list[UOp], operands: tuple) -> str:
        """The tiled matrix product: warpgroup MMA for a WgmmaConfig (sm_90a), mma.sync for a TileConfig, the SIMT
        kernel for a SimtConfig."""
        kinds = {WgmmaConfig: render_wgmma, SimtConfig: render_simt}
        return kinds.get(type(config), render_matmul)(self, name, mm, config, epilogue, operands)

    def fuses_attention(self, dtype: DType, head_size: int, value_size: int) -> bool:
        return self.fused_attention or (self.mma_attention and mma_attention_fits(dtype, head_size, value_size))

    def prefers_channels_last(self, dtype: DType) -> bool:
        """Where a tensor-core tile multiplies the dtype (16 bits; float32 as TF32 where the user allows it), whose
        operands it copies 16 bytes at a time: a convolution's in chunks of channels."""
        return any(not isinstance(c, SimtConfig) and c.accepts(dtype, bool(TF32)) for c in self.tile_configs)

    def render_attention(self, name: str, spec: AttentionSpec) -> tuple[str, tuple[int, ...], tuple[int, ...]]:
        """The fused attention kernel: the tensor cores' where it covers the case, else the SIMT one."""
        if self.mma_attention and mma_attention_covers(spec):
            return render_mma_attention(self, name, spec), (mma_attention_blocks(spec),), (MMA_CONFIG.threads,)
        return render_cuda_attention(self, name, spec), (cuda_blocks(spec),), (THREADS,)

    def launch_size(self, program: list[UOp], outer_loop: UOp | None = None) -> tuple[tuple[int, ...] | None, ...]:
        """Global size: the grid loops' iterations (a thread, or a block, each); local size: a block's threads."""
        grid, block = grid_loops(program, outer_loop), block_size(program)
        threads = -(-prod(size(loop) for loop in grid) // thread_items(program, grid))
        return ((threads,) if grid else None), ((block,) if block else None)

    def render_const(self, value, dtype: DType) -> str:
        if dtype == dtypes.float16:
            return f"((unsigned short){float_to_half_bits(float(value))})"
        return super().render_const(value, dtype)

    def render_cast(self, x: str, src: DType, dst: DType) -> str:
        if dst == dtypes.float16 and src == dtypes.float64:
            return f"gg_d2h({x})"  # one rounding, not two through float32
        return super().render_cast(x, src, dst)

    def render_alu(self, op: Ops, dtype: DType, args: list[str], src: tuple[UOp, ...]) -> str:
        if op is Ops.MULACC and dtype in (dtypes.float32, dtypes.float64):  # NVRTC has no __builtin_fma
            return f"__fma{'f' if dtype == dtypes.float32 else ''}_rn({', '.join(args)})"
        return super().render_alu(op, dtype, args, src)

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
    """The C writer, plus the grid, the thread indices of a block (LOCAL, GROUP) and the combines of a GROUP's partial
    results through shared memory."""

    def __init__(self, renderer: CUDARenderer, program: list[UOp], outer_loop: UOp | None = None):
        super().__init__(renderer, program, outer_loop)
        self.grid = grid_loops(program, outer_loop)
        self.block = block_size(program)
        self.items = thread_items(program, self.grid)
        self.partials: dict[str, str] = {}  # a shared array per type, reused by every combine
        self.kept_rolled = loops_of_int_max(program)

    def write(self, name: str) -> str:
        head, _, body = super().write(name).partition("{\n")
        if self.block:  # the compiler keeps to the registers a block of this size may have, so that it launches
            head = head.replace("void ", f"void __launch_bounds__({self.block}) ", 1)
        shared = "".join(f"  __shared__ {t} {part}[{self.block}];\n" for t, part in self.partials.items())
        return f"{head}{{\n{shared}{body}"

    def dialect_handlers(self) -> dict:
        return {Ops.SPECIAL: self.special, Ops.REDUCE: self.combine}

    def add_store(self, u: UOp, address: str) -> str:
        """A scatter's store: atomicAdd, since threads may add into one place (64-bit ints as unsigned long long, whose
        sum has the same bits)."""
        dtype = u.src[1].dtype
        if dtype not in ATOMIC_TYPES:
            raise NotImplementedError(f"CUDA adds {dtype} into memory atomically in none of its types")
        atomic, pointer, value = ATOMIC_TYPES[dtype], f"&{address}", self.names[u.src[1]]
        if atomic != self.r.type_name(dtype):
            pointer, value = f"({atomic}*){pointer}", f"({atomic})({value})"
        return f"atomicAdd({pointer}, {value});"

    def special(self, u: UOp) -> None:
        """A LOCAL's or GROUP's part of the thread index: threadIdx.x / stride % n."""
        _, n, stride, block = u.arg
        index = "threadIdx.x" if stride == 1 else f"(threadIdx.x/{stride})"
        self.names[u] = index if n * stride == block else f"({index}%{n})"

    def range(self, u: UOp) -> None:
        if len(u.src) > 1:  # a loop the threads of a GROUP share: each takes every n-th iteration
            name, thread = f"ridx{u.arg}", u.src[1]
            self.names[u] = name
            self.line(f"for ({self.r.type_name(u.dtype)} {name} = {self.names[thread]}; {name} < "
                      f"{self.names[u.src[0]]}; {name} += {thread.arg[1]}) {{")  # fmt: skip
            self.depth += 1
            return
        if u not in self.grid:
            if u in self.kept_rolled:
                self.line("#pragma unroll 1")
            return super().range(u)
        name, bound, t = f"ridx{u.arg}", self.names[u.src[0]], self.r.type_name(u.dtype)
        self.names[u] = name
        # each thread (or block) has one global index: gidx, unravelled over the grid loops
        i = self.grid.index(u)
        inner = prod(size(loop) for loop in self.grid[i + 1 :])
        index = "gidx" if inner == 1 else f"(gidx/{inner})"
        index = index if i == 0 else f"({index}%{bound})"
        if i > 0:
            self.line(f"{t} {name} = {index}; {{")
        else:
            block = "blockIdx.x" if u.dtype == dtypes.int32 else f"({t})blockIdx.x"  # 2**31 threads or more: int64
            gidx = block if self.block else f"{block}*blockDim.x+threadIdx.x"
            if self.items > 1:  # a fixed count the compiler unrolls: every item's loads issue before any store
                self.line(f"for (int gitem = 0; gitem < {self.items}; gitem++) {{")
                self.depth += 1
                gidx = f"({block}*{self.items}+gitem)*blockDim.x+threadIdx.x"  # a block's items lie side by side
            total = prod(size(loop) for loop in self.grid)
            self.line(f"{t} gidx = {gidx}; {t} {name} = {index}; if (gidx < {total}) {{")
        self.depth += 1

    def endrange(self, u: UOp) -> None:
        super().endrange(u)
        if self.items > 1 and u.src[0] is self.grid[0]:  # the loop over a thread's items
            super().endrange(u)

    def combine(self, u: UOp) -> None:
        """REDUCE(partial, *threads): the partial results of a GROUP's threads, combined as a tree in shared memory
        along each thread variable in turn; every thread then reads the total of its own LOCAL position."""
        value, threads, dtype = u.src[0], u.src[1:], u.dtype
        if (part := self.partials.get(type_name := self.r.type_name(dtype))) is None:
            part = self.partials[type_name] = self.fresh("part")
        mine = f"{part}[threadIdx.x]"
        self.line(f"{mine} = {self.names[value]};")
        self.line("__syncthreads();")
        first = []  # the offset from this thread's slot to the slot of the first thread of its group
        for thread in threads:
            _, n, stride, _ = thread.arg
            other = f"{part}[threadIdx.x+step{'' if stride == 1 else f'*{stride}'}]"
            both = self.r.render_alu(u.arg, dtype, [mine, other], (value, value))
            index = self.names[thread]
            self.line(f"for (int step = {_next_power_of_two(n) // 2}; step > 0; step >>= 1) {{")
            inside = "" if n == _next_power_of_two(n) else f" && {index}+step < {n}"  # a tree over n threads
            self.line(f"  if ({index} < step{inside}) {mine} = {both};")
            self.line("  __syncthreads();")
            self.line("}")
            first.append(index if stride == 1 else f"{index}*{stride}")
        name = self.names[u] = self.fresh("red")
        whole = prod(t.arg[1] for t in threads) == threads[0].arg[3]  # no LOCAL: the block's one total is the first
        self.line(f"{type_name} {name} = {part}[{'0' if whole else 'threadIdx.x-' + '-'.join(first)}];")
        self.line("__syncthreads();")  # everyone has read the total before the array is used again
