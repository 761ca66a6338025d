"""The tensor-core matrix product on Hopper (sm_90a): warpgroup MMA (`wgmma.mma_async`) with operands in shared memory.

The variant of renderer/cuda_tc.py's kernel for H100/H200, whose tensor cores run at their full rate only through
wgmma (mma.sync reaches about 2/3 of it). Same work, different inner machinery:

- each block computes a BM x BN tile (of one batch entry) with BM/64 warpgroups (4 consecutive warps each), each
  warpgroup 64 rows of it across all BN columns, one `wgmma.mma_async.m64n{BN}k16` per 16 k's;
- the tensor cores read A and B straight from shared memory, through 64-bit matrix descriptors: no ldmatrix, no
  fragments in registers, only the float32 accumulators (BN/2 a thread);
- shared memory holds each operand in the layout wgmma's 128-byte swizzle expects: 128-byte lines whose 16-byte
  chunks are XORed with the line number mod 8, in 1024-byte atoms of 8 lines. An operand stored k-contiguous
  (K-major) has a line per row, BK = 64 k's; one stored row-contiguous (MN-major: a@b's B, a.T@b's A) has a line per
  k, 64 rows, and an atom column per 64 rows. f16/bf16 wgmma reads either (its transpose flags), so every layout
  copies 16 contiguous bytes at a time as it lies in global memory;
- the operands fill STAGES stages, STAGES-1 steps ahead (renderer/cuda_tiles.py: `cp.async`, or through registers,
  whose loads for a step go out before the wait for the step the math needs next); each step's products are
  issued, committed as a group, and left running while the next step's data is awaited: `wgmma.wait_group 1` lets a
  warpgroup go on with one group in flight, and the barrier after it says every warpgroup is done with the previous
  step's stage, which the next copies overwrite. `fence.proxy.async` makes the copies (ordinary writes) visible to
  the tensor cores' reads.

TF32 (float32 where the user allows it) takes the same kernel with 4-byte elements: a line holds 32 k's, one
`wgmma...m64n{BN}k8.f32.tf32.tf32` per 8, and both operands K-major (wgmma has no transpose for TF32), rounded to TF32
on their way through registers.

The epilogue is the kernel's own UOps, as in cuda_tc.py; accumulator 4j+e of a thread is the mma.sync layout of
n8 piece j: row 16*warp + lane/4 + 8*(e/2) of its warpgroup's 64, column 8j + 2*(lane%4) + e%2.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from glassgrad.dtype import DType, dtypes
from glassgrad.renderer import cuda_tiles as tiles
from glassgrad.renderer.cuda_tc import SIXTEEN_BITS, k_major

if TYPE_CHECKING:
    from glassgrad.codegen.tensor_cores import Matmul, Prologue
    from glassgrad.renderer.cstyle import CStyleRenderer
    from glassgrad.uop.ops import UOp

LINE = 128  # bytes in a line of the 128-byte swizzle: 64 16-bit elements
ATOM = 8 * LINE  # the swizzle's repeating pattern: 8 lines
SHARED_PER_SM = 228 * 1024  # an H100's shared memory a multiprocessor, of which each block reserves 1 KB itself


@dataclass(frozen=True)
class WgmmaConfig:
    """A block's output tile (bm x bn: bm/64 warpgroups of 64 rows, each across all bn columns) and its copy stages."""

    bm: int
    bn: int
    stages: int
    one_barrier: bool = False  # copies run stages-2 steps ahead, into a stage no warpgroup can still read: one barrier
    # a step, not two (stages-1 ahead, the stage the last step used, free once every warpgroup is done with it)
    tf32: bool = False  # float32 inputs on the tensor cores as TF32 (only where the user allows it), else 16-bit ones

    @property
    def size(self) -> int:
        """Bytes of an operand's element in shared memory."""
        return 4 if self.tf32 else 2

    @property
    def bk(self) -> int:
        """k's in a step: one 128-byte line of a K-major operand."""
        return LINE // self.size

    @property
    def kstep(self) -> int:
        """k's of one wgmma: 32 bytes of a K-major line (k16 for 16 bits, k8 for TF32)."""
        return 32 // self.size

    @property
    def ahead(self) -> int:
        """Steps the copies run ahead of the math."""
        return self.stages - 2 if self.one_barrier else self.stages - 1

    @property
    def threads(self) -> int:
        return 128 * (self.bm // 64)

    @property
    def shared_bytes(self) -> int:
        """The stages' A and B tiles, and up to an atom's bytes to start them at a multiple of one."""
        return self.stages * (self.bm + self.bn) * self.bk * self.size + ATOM

    @property
    def blocks_per_sm(self) -> int:
        """Blocks that fit a multiprocessor's shared memory at once (up to 2): the launch bounds promise them."""
        return max(1, min(2, SHARED_PER_SM // (self.shared_bytes + 1024)))

    def accepts(self, dtype: DType, tf32: bool) -> bool:
        return dtype == dtypes.float32 and tf32 if self.tf32 else dtype in SIXTEEN_BITS

    def __str__(self) -> str:
        barrier, kind = ", one barrier" if self.one_barrier else "", " tf32" if self.tf32 else ""
        return f"{self.bm}x{self.bn}x{self.bk} wgmma{kind} {self.bm // 64} warpgroups {self.stages} stages{barrier}"


# wgmma's configurations, in the heuristics' order of preference; on sm_90 they come before cuda_tc.py's, which stay
# for other cards (bench/tensor_cores.py, H200, 2026-11-27, float16 / bfloat16 8192: 128x256 with 4 stages and one
# barrier 660 / 674 TFLOP/s, 0.88 / 0.89 of cuBLAS, with two barriers 637 / 658; 256x128 with one barrier 635 / 644,
# the fastest for GPT-2's head x @ W whose rows start anywhere, 163; 128x128 with 3 stages, two blocks a
# multiprocessor, 583 / 572, the fastest where A's rows start anywhere (dlogits @ wte, 106); the mma.sync kernels
# 0.45-0.52 of cuBLAS)
WGMMA_CONFIGS = (
    WgmmaConfig(128, 256, 4, one_barrier=True),  # 2 warpgroups of 64x256, 192 KB: one block a multiprocessor
    WgmmaConfig(128, 128, 3),  # 2 warpgroups of 64x128, 96 KB: two blocks a multiprocessor
    WgmmaConfig(256, 128, 4, one_barrier=True),  # 4 warpgroups of 64x128
    WgmmaConfig(128, 256, 4),
    WgmmaConfig(128, 256, 3),
    WgmmaConfig(256, 128, 4),
    WgmmaConfig(128, 128, 4),
    WgmmaConfig(128, 128, 4, one_barrier=True),
    # TF32 (float32 where the user allows it): both operands K-major, rounded to TF32 on their way through registers
    # (128 x 256 spills with a prologue, and 128 x 128 at two blocks a multiprocessor: every operand is staged)
    WgmmaConfig(256, 128, 4, one_barrier=True, tf32=True),
    WgmmaConfig(128, 128, 4, one_barrier=True, tf32=True),
)

WGMMA_HELPERS = [
    'static inline void gg_wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }',
    'static inline void gg_wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }',
    "template <int N> static inline void gg_wgmma_wait() {"
    ' asm volatile("wgmma.wait_group.sync.aligned %0;" :: "n"(N) : "memory"); }',
    'static inline void gg_fence_async_shared() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }',
    "// a shared-memory matrix descriptor: start, leading and stride byte offsets (in 16-byte units), 128B swizzle",
    "static inline unsigned long long gg_desc(unsigned addr, unsigned lead, unsigned stride) {"
    " return (unsigned long long)((addr & 0x3FFFF) >> 4) | (unsigned long long)(lead >> 4) << 16"
    " | (unsigned long long)(stride >> 4) << 32 | 1ull << 62; }",
]  # fmt: skip


def wgmma_helper(n: int, dtype: str, trans_a: int, trans_b: int) -> str:
    """gg_wgmma(d, a, b): d += A B for one k piece (k16; k8 for tf32), A (64 x k) and B (k x n) given by descriptors;
    the trans flags say which operand is MN-major (16-bit types only: TF32 reads both K-major and has none). Also
    gg_wgmma_hold(d): tells the compiler that d is in use (the products write it asynchronously, so it must stay in
    place between the issue and the wait)."""
    regs = n // 2
    outs = ", ".join(f'"+f"(d[{i}])' for i in range(regs))
    acc = ", ".join(f"%{i}" for i in range(regs))
    k, trans = (8, "") if dtype == "tf32" else (16, f", {trans_a}, {trans_b}")
    return (
        "static inline void gg_wgmma(float* d, unsigned long long a, unsigned long long b) {"
        f' asm volatile("{{ .reg .pred p; setp.ne.b32 p, %{regs + 2}, 0; wgmma.mma_async.sync.aligned.m64n{n}k{k}'
        f'.f32.{dtype}.{dtype} {{{acc}}}, %{regs}, %{regs + 1}, p, 1, 1{trans}; }}"'
        f' : {outs} : "l"(a), "l"(b), "r"(1) : "memory"); }}\n'
        f'static inline void gg_wgmma_hold(float* d) {{ asm volatile("" : {outs} :: "memory"); }}'
    )


class SwizzledTile(tiles.TileLayout):
    """An operand's stage in shared memory as wgmma reads it (128-byte swizzle), and its descriptors."""

    def offset(self, line: str, chunk: str) -> str:
        """K-major: a line is a row and its 8 chunks; MN-major: a line is a k, 8 chunks of each 64 rows, one atom
        column (bk lines) per 64 rows. In both the chunk is XORed with the line mod 8 (the hardware's swizzle)."""
        return f"(({chunk})/8*{self.bk * LINE} + ({line})*{LINE} + ((({chunk})%8)^(({line})%8))*16)"

    @property
    def trans(self) -> int:
        return 0 if self.k_major else 1

    def descriptor(self, base: str, row0: str) -> str:
        """The descriptor of stage 0's piece at rows row0.. (a multiple of 64), k's 0..15. K-major: 8-row groups are
        an atom apart (the stride offset); MN-major: atom columns of 64 rows are bk lines apart (the leading offset),
        8-k groups an atom apart (the stride offset)."""
        if self.k_major:
            return f"gg_desc({base} + ({row0})*{LINE}, 16, {ATOM})"
        return f"gg_desc({base} + ({row0})/64*{self.bk * LINE}, {self.bk * LINE}, {ATOM})"

    def k_step_bytes(self) -> int:
        """How far the next wgmma's k's start: 32 bytes along a K-major line (16 k's of 16 bits, 8 of TF32), 16 lines
        down an MN-major tile (16-bit only)."""
        return 32 if self.k_major else 16 * LINE


def render_wgmma(renderer: CStyleRenderer, name: str, mm: Matmul, config: WgmmaConfig, epilogue: list[UOp],
                 operands: tuple[Prologue, Prologue]) -> str:  # fmt: skip
    """The CUDA source (sm_90a) of the wgmma kernel `name` for `mm` with tiles `config`; `epilogue` and `operands`
    as in cuda_tc.render_matmul."""
    writer = tiles.epilogue_writer(renderer, name, epilogue)
    c = config
    a = SwizzledTile(c.bm, c.bk, c.size, k_major(mm, "A", c.tf32))
    b = SwizzledTile(c.bn, c.bk, c.size, k_major(mm, "B", c.tf32))
    room = tiles.register_room(c.threads, c.blocks_per_sm, c.bn // 2)  # beside the accumulators
    copies = tiles.operand_copies(renderer, mm, operands, (a, b), c.threads, room, c.tf32)
    itype = renderer.type_name(mm.index_dtype)
    regs, stages, ahead = c.bn // 2, c.stages, f"kt + {c.ahead}"
    aligned = f"(-gg_smem(gg_shared) & {ATOM - 1})"  # the swizzle's pattern starts at a multiple of 1024 bytes
    body = [
        "const int lane = threadIdx.x%32, warp = threadIdx.x%128/32, warpgroup = threadIdx.x/128;",
        *tiles.tile_lines(mm, c.bm, c.bn, itype),
        *tiles.origin_lines(renderer, mm, writer, copies),
        *tiles.shared_lines(copies, (aligned, f"{aligned} + {stages * a.stage_bytes}")),
        f"const unsigned long long desc_a = {a.descriptor('sA', 'warpgroup*64')}, desc_b = {b.descriptor('sB', '0')};",
        *(line for copy in copies for line in copy.declare()),
        f"float acc[{regs}];",
        "#pragma unroll",
        f"for (int i = 0; i < {regs}; i++) acc[i] = 0.0f;",
        f"const int steps = {-(-mm.k // c.bk)};",
        *tiles.pipeline_start(copies, c.ahead + 1),
        "for (int kt = 0; kt < steps; kt++) {",
        f"  if ({ahead} < steps) {{  // step kt+{c.ahead}'s register copies load now, store once its stage is free",
        *("    " + line for copy in copies for line in copy.prefetch(ahead)),
        "  }",
        f"  gg_cp_async_wait<{c.ahead - 1}>();  // step kt is in (this thread's copies), visible to the tensor cores,",
        "  gg_fence_async_shared();",
        "  __syncthreads();  // and every thread's",
        "  const unsigned stage = kt%" + str(stages) + ";  // descriptors count 16-byte units from their start:",
        f"  const unsigned long long da = desc_a + stage*{a.stage_bytes // 16}, db = desc_b + stage*{b.stage_bytes // 16};",  # noqa: E501
        "  gg_wgmma_hold(acc);",
        "  gg_wgmma_fence();",
        "#pragma unroll",
        f"  for (int ks = 0; ks < {c.bk // c.kstep}; ks++)",
        f"    gg_wgmma(acc, da + ks*{a.k_step_bytes() // 16}, db + ks*{b.k_step_bytes() // 16});",
        "  gg_wgmma_commit();",
        "  gg_wgmma_wait<1>();  // this warpgroup's products of step kt-1 are done (step kt's run on)",
        "  gg_wgmma_hold(acc);",
        "  // every warpgroup's: the stage step kt-1 used takes step kt+stages-1's copies (with one barrier a step,"
        "  // step kt+stages-2's go into the one step kt-2 used, which every warpgroup was done with at the first)",
        *(["  __syncthreads();"] if not c.one_barrier else []),
        f"  if ({ahead} < steps) {{",
        *("    " + line for copy in copies for line in copy.commit(ahead, f"({ahead})%{stages}")),
        "  }",
        "  gg_cp_async_commit();",
        "}",
        "gg_wgmma_wait<0>();",
        "gg_wgmma_hold(acc);",
        "gg_cp_async_wait<0>();",
        "// the epilogue: accumulator 4j+e is row lane/4 (e < 2) or lane/4+8 of the warp's 16, columns 8j + 2*(lane%4)"
        " and the next. + 0.0f reads it into a register of its own (it is never -0: it starts at +0); where a half"
        " conversion wrote over the accumulator's own register, ptxas would serialize every wgmma (C7514)",
        "#pragma unroll",
        f"for (int j = 0; j < {c.bn // 8}; j++)",
        "#pragma unroll",
        "  for (int e = 0; e < 4; e++) {",
        *("    " + line for line in tiles.accumulator_lines(
            writer, mm, itype, f"tile_m*{c.bm} + warpgroup*64 + warp*16 + (e/2)*8 + lane/4",
            f"tile_n*{c.bn} + j*8 + (lane%4)*2 + e%2", "acc[j*4 + e] + 0.0f", c.bm, c.bn)),
        "  }",
    ]  # fmt: skip
    dtype = "tf32" if c.tf32 else "bf16" if mm.dtype == dtypes.bfloat16 else "f16"
    helpers = WGMMA_HELPERS + [wgmma_helper(c.bn, dtype, a.trans, b.trans)]
    return tiles.kernel_source(renderer, writer, epilogue, operands, name, c.threads, c.blocks_per_sm, c.shared_bytes,
                         helpers, body)  # fmt: skip
