"""The tensor-core matrix product for NVIDIA GPUs (sm_80 and newer): the CUDA kernel of a kernel optimized with TC.

codegen/tensor_cores.py recognises a kernel that sums A[m, k] * B[k, n] over k in float16 or bfloat16 and describes it
(`Matmul`); this file writes its CUDA kernel for one `TileConfig`:

- each block of threads computes a BM x BN tile of the output (of one entry of the batch), in steps of BK along k;
- `cp.async` copies A's BM x BK and B's BK x BN pieces from global to shared memory, STAGES steps ahead of the math,
  so the copies of later steps are in flight while the tensor cores work on this one;
- each warp computes a WM x WN part of the tile as 16 x 8 pieces with `mma.sync.m16n8k16` (float32 accumulators in
  registers), reading its operands from shared memory with `ldmatrix` (`.trans` where the operand is stored with
  m or n contiguous rather than k); the fragments of the next 16 k's load while this 16's products run, and the
  barrier before a step's stage is reused waits under the last of them;
- shared memory is swizzled: the 16-byte chunks of each row are permuted (XOR with the row number), so the eight rows
  that one `ldmatrix` reads at once lie in different banks;
- the epilogue, the kernel's own ops after the sum (cast to half, a bias, relu...), is the rest of the kernel's UOps,
  rendered once per accumulator with the accumulator's row, column and batch entry as variables.

All the tensor-core and copy instructions are inline PTX, so NVRTC needs no header.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from glassgrad.dtype import dtypes
from glassgrad.renderer.cstyle import CKernelWriter, CStyleRenderer
from glassgrad.uop.ops import Ops, UOp

if TYPE_CHECKING:
    from glassgrad.codegen.tensor_cores import Matmul, Operand

CHUNK = 8  # 16-bit elements in one 16-byte copy (cp.async) and in one row of an ldmatrix 8x8 matrix
GROUP_M = 8  # blocks go through the output GROUP_M tile rows at a time, so that the panels they read stay in L2


@dataclass(frozen=True)
class TileConfig:
    """A block's output tile (bm x bn), its step along k (bk), each warp's part of the tile, and the copy stages."""

    bm: int
    bn: int
    bk: int
    warp_m: int
    warp_n: int
    stages: int

    @property
    def threads(self) -> int:
        return 32 * (self.bm // self.warp_m) * (self.bn // self.warp_n)

    @property
    def shared_bytes(self) -> int:
        """Shared memory of all the stages' A and B pieces."""
        return self.stages * (self.bm + self.bn) * self.bk * 2

    def __str__(self) -> str:
        return f"{self.bm}x{self.bn}x{self.bk} warp {self.warp_m}x{self.warp_n} {self.stages} stages"


# the configurations a TC opt names by index (Opt("TC", 0, i)), in the heuristics' order of preference; BEAM times each
# (bench/tensor_cores.py, H200: 128x128 tiles of 4 warps, two blocks a multiprocessor, were the fastest at n = 4096 and
# 8192 with a single-buffered pipeline)
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

COPY_HELPERS = [  # global -> shared memory: both tensor-core renderers
    "static inline unsigned gg_smem(const void* p) { unsigned a;"
    ' asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p)); return a; }',
    "static inline void gg_cp_async16(unsigned dst, const void* src) {"
    ' asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(dst), "l"(src)); }',
    'static inline void gg_cp_async_commit() { asm volatile("cp.async.commit_group;"); }',
    "template <int N> static inline void gg_cp_async_wait() {"
    ' asm volatile("cp.async.wait_group %0;" :: "n"(N) : "memory"); }',
]  # fmt: skip

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
    ' asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.{t}.{t}.f32 {{%0,%1,%2,%3}}, {{%4,%5,%6,%7}}, {{%8,%9}},'
    ' {{%0,%1,%2,%3}};" : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])'
    ' : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1])); }}'
)


def swizzled_chunk(line: str, chunk: str, chunks_per_line: int) -> str:
    """The C expression of a 16-byte chunk's position in a swizzled shared-memory tile of `chunks_per_line` chunks a
    line: the chunk number is XORed with bits of the line number, so that 8 neighbouring lines read at one chunk (an
    ldmatrix) hit 8 different groups of banks. Short lines (64 bytes: 4 chunks) pair up into one 128-byte span."""
    if chunks_per_line >= 8:
        mix = f"(({line})%8)"
    else:
        mix = f"((({line})/{8 // chunks_per_line})%{chunks_per_line})"
    return f"(({line})*{chunks_per_line}+(({chunk})^{mix}))"


class OperandTile:
    """How one operand's tile (rows x bk: A's rows are m, B's are n) is copied to shared memory and read back.

    Stored k-contiguous (each line of shared memory one row, along k) or row-contiguous (each line one k, along the
    rows), as it lies in global memory, so every copy reads 16 contiguous bytes."""

    def __init__(self, name: str, operand: Operand, rows: int, bk: int, threads: int):
        self.name, self.operand, self.rows, self.bk, self.threads = name, operand, rows, bk, threads
        self.k_contiguous = operand.k_stride == 1
        self.line_elems = bk if self.k_contiguous else rows
        self.chunks_per_line = self.line_elems // CHUNK
        self.stage_bytes = rows * bk * 2
        self.copies = rows * bk // CHUNK // threads  # 16-byte copies per thread per step

    def global_origin(self, buffer: str, batch_offset: str, tile: str) -> str:
        """The address of this block's tile at k = 0."""
        row_step = self.operand.row_stride
        return f"{buffer} + {batch_offset} + (long long)({tile})*{self.rows * row_step}"

    def copy_lines(self) -> list[str]:
        """Statements copying step `kt` of this tile into stage `stage` (each thread its share of the chunks)."""
        ld = self.operand.row_stride if self.k_contiguous else self.operand.k_stride
        cpl = self.chunks_per_line
        if self.k_contiguous:  # line = a row, chunk = 8 k's
            source = f"g{self.name} + line*{ld} + kt*{self.bk} + chunk*{CHUNK}"
        else:  # line = a k, chunk = 8 rows
            source = f"g{self.name} + (kt*{self.bk} + line)*{ld} + chunk*{CHUNK}"
        target = f"s{self.name} + stage*{self.stage_bytes} + {self.shared_offset('line', 'chunk')}"
        return [
            "#pragma unroll",
            f"for (int i = 0; i < {self.copies}; i++) {{",
            f"  const int piece = threadIdx.x + i*{self.threads}, line = piece/{cpl}, chunk = piece%{cpl};",
            f"  gg_cp_async16({target}, {source});",
            "}",
        ]

    def shared_offset(self, line: str, chunk: str) -> str:
        """The C expression of the byte offset in a stage where 16-byte chunk `chunk` of line `line` goes."""
        return f"{swizzled_chunk(line, chunk, self.chunks_per_line)}*16"

    def fragment_address(self, stage_base: str, row0: str, k0: str) -> str:
        """The shared-memory address this lane gives ldmatrix for the 16 x 16 block at (row0, k0): matrix j = lane/8
        is rows row0 + 8*(j%2) .., k's k0 + 8*(j/2) ..; each lane names one of its 8 lines."""
        if self.k_contiguous:
            line, chunk = f"{row0} + 8*((lane/8)%2) + lane%8", f"({k0})/8 + lane/16"
        else:
            line, chunk = f"{k0} + 8*(lane/16) + lane%8", f"({row0})/8 + (lane/8)%2"
        return f"{stage_base} + {swizzled_chunk(line, chunk, self.chunks_per_line)}*16"

    @property
    def ldmatrix(self) -> str:
        return "gg_ldmatrix" if self.k_contiguous else "gg_ldmatrix_trans"


def fragment_lines(a: OperandTile, b: OperandTile, mi: int, ni: int, buf: str, stage: str, k0: str) -> list[str]:
    """Statements loading the warp's A and B fragments of the k16 piece at k0 of stage `stage` into fa[buf], fb[buf].

    B's ldmatrix reads four 8x8 matrices: n 0-7 k 0-7, n 8-15 k 0-7, n 0-7 k 8-15, n 8-15 k 8-15, the k halves of two
    n8 pieces."""
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


def batch_offset(operand: Operand, batch_shape: tuple[int, ...], batch: str) -> str:
    """The C expression of the operand's element offset for batch entry `batch` (a flat index over `batch_shape`)."""
    terms, inner = [str(operand.offset)], 1
    for size, stride in reversed(list(zip(batch_shape, operand.batch_strides))):
        if stride:
            terms.append(f"(long long)(({batch}/{inner})%{size})*{stride}")
        inner *= size
    return "(" + " + ".join(terms) + ")"


def batch_indices(batch_shape: tuple[int, ...], itype: str) -> list[str]:
    """The index along each batch axis (gg_batch0, ...) of the flat batch entry gg_batch, as the epilogue reads them."""
    lines, inner = [], 1
    for i, size in reversed(list(enumerate(batch_shape))):
        lines.insert(0, f"const {itype} gg_batch{i} = (gg_batch/{inner})%{size};")
        inner *= size
    return lines


class EpilogueWriter(CKernelWriter):
    """The C writer of the epilogue; its SPECIAL variables are the kernel's own (the accumulator and its position)."""

    def alu(self, u: UOp) -> None:
        if u.op is Ops.SPECIAL:
            self.names[u] = u.arg[0]
        else:
            super().alu(u)


def epilogue_writer(renderer: CStyleRenderer, name: str, epilogue: list[UOp]) -> EpilogueWriter:
    """The epilogue written once: its lines (for one accumulator) and the kernel's parameters."""
    writer = EpilogueWriter(renderer, epilogue)
    writer.write(name)
    return writer


def tile_lines(
    mm: Matmul, bm: int, bn: int, itype: str, writer: CKernelWriter, a: OperandTile, b: OperandTile
) -> list[str]:  # noqa: E501
    """Statements choosing this block's output tile (tile_m, tile_n, gg_batch) and its operands' origins gA, gB."""
    tiles_m, tiles_n = mm.m // bm, mm.n // bn
    return [
        f"// this block's tile: blocks take the batch entries in turn, and in each the tiles {GROUP_M} rows at a time",
        f"int tile = blockIdx.x; const {itype} gg_batch = tile/{tiles_m * tiles_n}; tile %= {tiles_m * tiles_n};",
        f"const int group = tile/{GROUP_M * tiles_n}, first_m = group*{GROUP_M};",
        f"const int group_rows = min({tiles_m} - first_m, {GROUP_M}), in_group = tile%{GROUP_M * tiles_n};",
        "const int tile_m = first_m + in_group%group_rows, tile_n = in_group/group_rows;",
        *batch_indices(mm.batch_shape, itype),
        f"const unsigned short* gA = {a.global_origin(writer.names[mm.a.buffer], batch_offset(mm.a, mm.batch_shape, 'gg_batch'), 'tile_m')};",  # noqa: E501
        f"const unsigned short* gB = {b.global_origin(writer.names[mm.b.buffer], batch_offset(mm.b, mm.batch_shape, 'gg_batch'), 'tile_n')};",  # noqa: E501
    ]


def accumulator_lines(writer: CKernelWriter, itype: str, row: str, col: str, acc: str) -> list[str]:
    """The epilogue of one accumulator `acc` at output row `row`, column `col` (C expressions)."""
    return [f"const {itype} gg_row = {row};", f"const {itype} gg_col = {col};", f"const float gg_acc = {acc};",
            *writer.lines]  # fmt: skip


def kernel_source(renderer: CStyleRenderer, writer: CKernelWriter, epilogue: list[UOp], name: str, threads: int,
                  blocks_per_sm: int, shared_bytes: int, helpers: list[str], body: list[str]) -> str:  # fmt: skip
    """The whole source: the prelude, the helpers, the shared-memory size the runtime reads, the kernel."""
    kernel = [
        f'extern "C" __device__ unsigned int gg_dynamic_shared_bytes = {shared_bytes};  // read by the runtime',
        f'extern "C" __global__ void __launch_bounds__({threads}, {blocks_per_sm}) {name}({", ".join(writer.params)}) {{',  # noqa: E501
        *("  " + line for line in body),
        "}",
    ]
    return "\n".join(renderer.prelude(epilogue) + helpers + kernel) + "\n"  # type: ignore[attr-defined]


def render_matmul(renderer: CStyleRenderer, name: str, mm: Matmul, config: TileConfig, epilogue: list[UOp]) -> str:
    """The CUDA source of the tensor-core kernel `name` for `mm` with tiles `config`; `epilogue` is the linear program
    that turns one accumulator (SPECIAL gg_acc at gg_row, gg_col and gg_batch0, gg_batch1, ...) into stores."""
    writer = epilogue_writer(renderer, name, epilogue)
    c = config
    a = OperandTile("A", mm.a, c.bm, c.bk, c.threads)
    b = OperandTile("B", mm.b, c.bn, c.bk, c.threads)
    warps_n, mi, ni, ksteps = c.bn // c.warp_n, c.warp_m // 16, c.warp_n // 8, c.bk // 16
    itype = renderer.type_name(mm.index_dtype)
    mma_type = "bf16" if mm.dtype == dtypes.bfloat16 else "f16"
    row, col = f"tile_m*{c.bm} + warp_m + i*16 + (e/2)*8 + lane/4", f"tile_n*{c.bn} + warp_n + j*8 + (lane%4)*2 + e%2"
    store = accumulator_lines(writer, itype, row, col, "acc[i][j][e]")
    body = [
        "extern __shared__ __align__(128) unsigned char gg_shared[];",
        "const int lane = threadIdx.x%32, warp = threadIdx.x/32;",
        f"const int warp_m = (warp/{warps_n})*{c.warp_m}, warp_n = (warp%{warps_n})*{c.warp_n};",
        *tile_lines(mm, c.bm, c.bn, itype, writer, a, b),
        f"const unsigned sA = gg_smem(gg_shared), sB = sA + {c.stages * a.stage_bytes};",
        f"float acc[{mi}][{ni}][4];",
        "#pragma unroll",
        f"for (int i = 0; i < {mi}; i++)",
        "#pragma unroll",
        f"  for (int j = 0; j < {ni}; j++)",
        "#pragma unroll",
        "    for (int e = 0; e < 4; e++) acc[i][j][e] = 0.0f;",
        "auto copy_step = [&](int kt, int stage) {",
        *("  " + line for line in a.copy_lines() + b.copy_lines()),
        "};",
        f"const int steps = {mm.k // c.bk};",
        f"// the first {c.stages - 1} steps' copies go out before any math; once step 0 is in, its first fragments",
        "#pragma unroll",
        f"for (int s = 0; s < {c.stages - 1}; s++) {{",
        "  if (s < steps) copy_step(s, s);",
        "  gg_cp_async_commit();",
        "}",
        f"gg_cp_async_wait<{c.stages - 2}>();",
        "__syncthreads();",
        f"unsigned fa[2][{mi}][4], fb[2][{ni}][2];  // fragments: the k16 piece in the tensor cores, and the next",
        *fragment_lines(a, b, mi, ni, "0", "0", "0"),
        "for (int kt = 0; kt < steps; kt++) {",
        "#pragma unroll",
        f"  for (int ks = 0; ks < {ksteps}; ks++) {{",
        f"    if (ks == {ksteps - 1}) {{  // the next step's piece comes next: step kt+1 must be in (every thread's",
        f"      gg_cp_async_wait<{c.stages - 2}>();  // copies), and every warp done with the stage step kt-1 used",
        "      __syncthreads();",
        "    }",
        f"    const int next_stage = (ks == {ksteps - 1} ? kt + 1 : kt)%{c.stages}, next_k = (ks + 1)%{ksteps}*16;",
        *("  " + line for line in fragment_lines(a, b, mi, ni, "(ks + 1)%2", "next_stage", "next_k")),
        "    if (ks == 0) {  // step kt+stages-1's copies go into the stage step kt-1 used",
        f"      if (kt + {c.stages - 1} < steps) copy_step(kt + {c.stages - 1}, (kt + {c.stages - 1})%{c.stages});",
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
    helpers = COPY_HELPERS + LDMATRIX_HELPERS + [MMA.format(t=mma_type)]
    return kernel_source(renderer, writer, epilogue, name, c.threads, 1, c.shared_bytes, helpers, body)
