"""The tensor-core matrix product for NVIDIA GPUs (sm_80 and newer): `mma.sync`, float16/bfloat16 or TF32.

codegen/tensor_cores.py recognises a kernel that sums A[m, k] * B[k, n] over k and describes it (`Matmul`); this
file writes its CUDA kernel for one `TileConfig` (renderer/cuda_tiles.py has what the tiled kernels share):

- each block of threads computes a BM x BN tile of the output (of one entry of the batch), in steps of BK along k;
- the operands' tiles reach shared memory STAGES steps ahead of the math (`cp.async`, or through registers);
- each warp computes a WM x WN part of the tile as 16 x 8 pieces with `mma.sync` (m16n8k16 for 16-bit inputs,
  m16n8k8 for TF32; float32 accumulators in registers), reading its operands from shared memory with `ldmatrix`
  (`.trans` where a 16-bit operand is stored with m or n contiguous rather than k; TF32 operands are always stored
  k-major, where ldmatrix's 8x8 16-bit matrices are 8x4 32-bit ones, just the TF32 fragments' layout, and rounded to
  TF32 on their way there, through registers: once an element, not once a fragment that reads it); the fragments
  of the next k piece load while this one's products run, and the barrier before a step's stage is reused waits under
  the last of them;
- shared memory is swizzled: the 16-byte chunks of each line are permuted (XOR with the line number), so the eight
  lines that one `ldmatrix` reads at once lie in different banks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from glassgrad.dtype import DType, dtypes
from glassgrad.renderer import cuda_tiles as tiles
from glassgrad.uop.ops import UOp

if TYPE_CHECKING:
    from glassgrad.codegen.tensor_cores import Matmul, Prologue
    from glassgrad.renderer.cstyle import CStyleRenderer

SIXTEEN_BITS = (dtypes.float16, dtypes.bfloat16)


@dataclass(frozen=True)
class TileConfig:
    """A block's output tile (bm x bn), its step along k (bk elements), each warp's part of the tile, the copy
    stages; `tf32`: float32 inputs on the tensor cores as TF32 (only where the user allows it), else 16-bit ones."""

    bm: int
    bn: int
    bk: int
    warp_m: int
    warp_n: int
    stages: int
    tf32: bool = False

    @property
    def threads(self) -> int:
        return 32 * (self.bm // self.warp_m) * (self.bn // self.warp_n)

    @property
    def size(self) -> int:
        return 4 if self.tf32 else 2

    @property
    def shared_bytes(self) -> int:
        """Shared memory of all the stages' A and B pieces."""
        return self.stages * (self.bm + self.bn) * self.bk * self.size

    def accepts(self, dtype: DType, tf32: bool) -> bool:
        return dtype == dtypes.float32 and tf32 if self.tf32 else dtype in SIXTEEN_BITS

    def __str__(self) -> str:
        kind = " tf32" if self.tf32 else ""
        return f"{self.bm}x{self.bn}x{self.bk} warp {self.warp_m}x{self.warp_n} {self.stages} stages{kind}"


# the configurations of mma.sync, in the heuristics' order of preference; BEAM times each (bench/tensor_cores.py, H200:
# 128x128 tiles of 4 warps, two blocks a multiprocessor, were the fastest 16-bit ones at n = 4096 and 8192)
TILE_CONFIGS = (
    TileConfig(128, 128, 32, 64, 64, 4),  # 4 warps of 64x64
    TileConfig(128, 256, 32, 64, 64, 3),  # 8 warps of 64x64
    TileConfig(256, 128, 32, 64, 64, 3),
    TileConfig(128, 256, 32, 64, 64, 4),
    TileConfig(128, 128, 32, 64, 32, 4),  # 8 warps of 64x32
    TileConfig(128, 128, 64, 64, 32, 3),  # 8 warps of 64x32, twice as deep a step
    TileConfig(64, 64, 32, 32, 32, 4),  # 4 warps of 32x32: small matrices
    TileConfig(256, 128, 32, 64, 64, 4),
)
TF32_CONFIGS = (  # 64-byte lines of k, 16 float32 a step (warps of 64x64 spill: the rounding takes registers)
    TileConfig(128, 128, 16, 64, 32, 4, tf32=True),
    TileConfig(128, 128, 32, 64, 32, 3, tf32=True),
    TileConfig(64, 64, 16, 32, 32, 4, tf32=True),
)

LDMATRIX_HELPERS = [  # shared memory -> mma.sync's register fragments
    "static inline void gg_ldmatrix(unsigned* r, unsigned addr) {"
    ' asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"'
    ' : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr)); }',
    "static inline void gg_ldmatrix_trans(unsigned* r, unsigned addr) {"
    ' asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"'
    ' : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr)); }',
]  # fmt: skip

MMA = (
    "static inline void gg_mma(float* d, const unsigned* a, const unsigned* b) {{"
    ' asm volatile("mma.sync.aligned.{shape}.row.col.f32.{t}.{t}.f32 {{%0,%1,%2,%3}}, {{%4,%5,%6,%7}}, {{%8,%9}},'
    ' {{%0,%1,%2,%3}};" : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])'
    ' : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1])); }}'
)
MMA_TYPES = {dtypes.float16: "f16", dtypes.bfloat16: "bf16", dtypes.float32: "tf32"}


def swizzled_chunk(line: str, chunk: str, chunks_per_line: int) -> str:
    """The C expression of a 16-byte chunk's position in a swizzled shared-memory tile of `chunks_per_line` chunks a
    line: the chunk number is XORed with bits of the line number, so that 8 neighbouring lines read at one chunk (an
    ldmatrix) hit 8 different groups of banks. Short lines (64 bytes: 4 chunks) pair up into one 128-byte span."""
    if chunks_per_line >= 8:
        mix = f"(({line})%8)"
    else:
        mix = f"((({line})/{8 // chunks_per_line})%{chunks_per_line})"
    return f"(({line})*{chunks_per_line}+(({chunk})^{mix}))"


class SwizzledLayout(tiles.TileLayout):
    """An operand's stage as ldmatrix reads it: swizzled chunks, and where its lines start for a 16 x 16-byte
    block of the fragments."""

    def offset(self, line: str, chunk: str) -> str:
        return f"{swizzled_chunk(line, chunk, self.chunks_per_line)}*16"

    def fragment_address(self, stage_base: str, row0: str, k0: str) -> str:
        """The shared-memory address this lane gives ldmatrix for the 16 rows x 32 bytes of k at (row0, k0): matrix
        j = lane/8 is rows row0 + 8*(j%2) .., the k's of chunk j/2; each lane names one of its 8 lines."""
        if self.k_major:
            line, chunk = f"{row0} + 8*((lane/8)%2) + lane%8", f"({k0})/{self.chunk} + lane/16"
        else:  # 16-bit only: 8 lines of k, chunks of 8 rows
            line, chunk = f"{k0} + 8*(lane/16) + lane%8", f"({row0})/8 + (lane/8)%2"
        return f"{stage_base} + {self.offset(line, chunk)}"

    @property
    def ldmatrix(self) -> str:
        return "gg_ldmatrix" if self.k_major else "gg_ldmatrix_trans"


def k_major(mm: Matmul, which: str, forced: bool = False) -> bool:
    """Whether an operand's shared tile is k-major: as it lies in memory (its contiguous axis), else along the axis its
    loads move least; always for `forced` (TF32 fragments)."""
    operand = mm.a if which == "A" else mm.b
    strided = operand.strided
    if forced:
        return True
    if strided is not None and 1 in (strided.k_stride, strided.row_stride):
        return strided.k_stride == 1
    return operand.k_fast


def fragment_lines(a: SwizzledLayout, b: SwizzledLayout, mi: int, ni: int, buf: str, stage: str, k0: str
                   ) -> list[str]:  # fmt: skip
    """Statements loading the warp's A and B fragments of the k piece at k0 of stage `stage` into fa[buf], fb[buf].

    B's ldmatrix reads four 8x8 matrices: n 0-7 chunk 0, n 8-15 chunk 0, n 0-7 chunk 1, n 8-15 chunk 1, the k halves
    of two n8 pieces."""
    return [
        f"{{ const unsigned stage_a = sA + ({stage})*{a.stage_bytes}, stage_b = sB + ({stage})*{b.stage_bytes};",
        "#pragma unroll",
        f"  for (int i = 0; i < {mi}; i++) {a.ldmatrix}(fa[{buf}][i], {a.fragment_address('stage_a', 'warp_m + i*16', k0)});",  # noqa: E501
        "#pragma unroll",
        f"  for (int j = 0; j < {ni}; j += 2) {{",
        "    unsigned q[4];",
        f"    {b.ldmatrix}(q, {b.fragment_address('stage_b', 'warp_n + j*8', k0)});",
        f"    fb[{buf}][j][0] = q[0]; fb[{buf}][j][1] = q[2]; fb[{buf}][j+1][0] = q[1]; fb[{buf}][j+1][1] = q[3];",
        "  }",
        "}",
    ]


def render_matmul(renderer: CStyleRenderer, name: str, mm: Matmul, config: TileConfig, epilogue: list[UOp],
                  operands: tuple[Prologue, Prologue]) -> str:  # fmt: skip
    """The CUDA source of the mma.sync kernel `name` for `mm` with tiles `config`; `epilogue` is the linear program
    that turns one accumulator (SPECIAL gg_acc at gg_row, gg_col and gg_batch0, gg_batch1, ...) into stores, and
    `operands` A's and B's values at one position (renderer/cuda_tiles.py)."""
    writer = tiles.epilogue_writer(renderer, name, epilogue)
    c = config
    a = SwizzledLayout(c.bm, c.bk, c.size, k_major(mm, "A", c.tf32))
    b = SwizzledLayout(c.bn, c.bk, c.size, k_major(mm, "B", c.tf32))
    kstep = 32 // c.size  # k's of one mma: two 16-byte chunks
    warps_n, mi, ni, ksteps = c.bn // c.warp_n, c.warp_m // 16, c.warp_n // 8, c.bk // kstep
    held = mi * ni * 4 + 2 * (mi * 4 + ni * 2)  # the accumulators, and two k pieces' fragments
    room = tiles.register_room(c.threads, 1, held)
    copies = tiles.operand_copies(renderer, mm, operands, (a, b), c.threads, room, c.tf32)
    assert ksteps >= 2, "a step's copies are staged over two of its k pieces"
    itype = renderer.type_name(mm.index_dtype)
    row, col = f"tile_m*{c.bm} + warp_m + i*16 + (e/2)*8 + lane/4", f"tile_n*{c.bn} + warp_n + j*8 + (lane%4)*2 + e%2"
    store = tiles.accumulator_lines(writer, mm, itype, row, col, "acc[i][j][e]", c.bm, c.bn)
    stage = f"(kt + {c.stages - 1})%{c.stages}"
    body = [
        "const int lane = threadIdx.x%32, warp = threadIdx.x/32;",
        f"const int warp_m = (warp/{warps_n})*{c.warp_m}, warp_n = (warp%{warps_n})*{c.warp_n};",
        *tiles.tile_lines(mm, c.bm, c.bn, itype),
        *tiles.origin_lines(renderer, mm, writer, copies),
        *tiles.shared_lines(copies, ("0", str(c.stages * a.stage_bytes))),
        *(line for copy in copies for line in copy.declare()),
        f"float acc[{mi}][{ni}][4];",
        "#pragma unroll",
        f"for (int i = 0; i < {mi}; i++)",
        "#pragma unroll",
        f"  for (int j = 0; j < {ni}; j++)",
        "#pragma unroll",
        "    for (int e = 0; e < 4; e++) acc[i][j][e] = 0.0f;",
        f"const int steps = {-(-mm.k // c.bk)};",
        *tiles.pipeline_start(copies, c.stages),
        f"gg_cp_async_wait<{c.stages - 2}>();",
        "__syncthreads();",
        f"unsigned fa[2][{mi}][4], fb[2][{ni}][2];  // fragments: the k piece in the tensor cores, and the next",
        *fragment_lines(a, b, mi, ni, "0", "0", "0"),
        "for (int kt = 0; kt < steps; kt++) {",
        "#pragma unroll",
        f"  for (int ks = 0; ks < {ksteps}; ks++) {{",
        f"    if (ks == {ksteps - 1}) {{  // the next step's piece comes next: step kt+1 must be in (every thread's",
        f"      if (kt + {c.stages - 1} < steps) {{  // copies), and every warp done with the stage step kt-1 used",
        *(
            "        " + line
            for copy in copies
            if copy.mode != "async"
            for line in copy.commit(f"kt + {c.stages - 1}", stage)
        ),  # noqa: E501
        "      }",
        f"      gg_cp_async_wait<{c.stages - 2}>();",
        "      __syncthreads();",
        "    }",
        f"    const int next_stage = (ks == {ksteps - 1} ? kt + 1 : kt)%{c.stages},"
        f" next_k = (ks + 1)%{ksteps}*{kstep};",
        *("  " + line for line in fragment_lines(a, b, mi, ni, "(ks + 1)%2", "next_stage", "next_k")),
        "    if (ks == 0) {  // step kt+stages-1's copies go into the stage step kt-1 used (register ones: loads now)",
        f"      if (kt + {c.stages - 1} < steps) {{",
        *("        " + line for copy in copies for line in copy.prefetch(f"kt + {c.stages - 1}")),
        *(
            "        " + line
            for copy in copies
            if copy.mode == "async"
            for line in copy.commit(f"kt + {c.stages - 1}", stage)
        ),  # noqa: E501
        "      }",
        "      gg_cp_async_commit();",
        "    }",
        "#pragma unroll",
        f"    for (int i = 0; i < {mi}; i++)",
        "#pragma unroll",
        f"      for (int j = 0; j < {ni}; j++) gg_mma(acc[i][j], fa[ks%2][i], fb[ks%2][j]);",
        "  }",
        "}",
        "gg_cp_async_wait<0>();",
        "// the epilogue: accumulator e of piece (i, j) is row g (e < 2) or g+8 of it, columns 2t and 2t+1 (g = lane/4,"
        " t = lane%4)",
        "#pragma unroll",
        f"for (int i = 0; i < {mi}; i++)",
        "#pragma unroll",
        f"  for (int j = 0; j < {ni}; j++)",
        "#pragma unroll",
        "    for (int e = 0; e < 4; e++) {",
        *("      " + line for line in store),
        "    }",
    ]
    shape = "m16n8k8" if c.tf32 else "m16n8k16"
    helpers = LDMATRIX_HELPERS + [MMA.format(shape=shape, t=MMA_TYPES[mm.dtype])]
    return tiles.kernel_source(renderer, writer, epilogue, operands, name, c.threads, 1, c.shared_bytes, helpers, body)
