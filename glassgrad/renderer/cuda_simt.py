"""The float32 matrix product on the GPU's ordinary (SIMT) units, for NVIDIA GPUs: a register-blocked tiled kernel.

What codegen/tensor_cores.py recognises as a matrix product in float32 (where TF32 is off, as by default) gets this
kernel (renderer/cuda_tiles.py has what the tiled kernels share):

- each block of threads computes a BM x BN tile of the output (of one entry of the batch), in steps of BK along k;
  its threads form a grid of (BM/TM) x (BN/TN), and each computes TM x TN outputs in registers, as TM/4 x TN/4
  pieces of 4 x 4 a grid's width apart, so that a warp's 16-byte reads of a line of shared memory are contiguous;
- both operands' tiles lie in shared memory row-major (a line per k, along m or n, padded by 16 bytes so that the
  copies that turn a k-contiguous operand around spread over the banks), STAGES steps ahead of the math;
- each k of a step: TM + TN values from shared memory as 16-byte reads, then TM x TN fused multiply-adds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from glassgrad.dtype import DType, dtypes
from glassgrad.renderer import cuda_tiles as tiles

if TYPE_CHECKING:
    from glassgrad.codegen.tensor_cores import Matmul, Prologue
    from glassgrad.renderer.cstyle import CStyleRenderer
    from glassgrad.uop.ops import UOp

PAD = 16  # bytes after each line of a stage


class PaddedLayout(tiles.TileLayout):
    """A stage as the SIMT kernel reads it: row-major lines, each PAD bytes longer than its data."""

    def __init__(self, rows: int, bk: int):
        super().__init__(rows, bk, 4, k_major=False)
        self.line_bytes = rows * 4 + PAD

    @property
    def stage_bytes(self) -> int:
        return self.bk * self.line_bytes

    def offset(self, line: str, chunk: str) -> str:
        return f"(({line})*{self.line_bytes} + ({chunk})*16)"


@dataclass(frozen=True)
class SimtConfig:
    """A block's output tile (bm x bn), its step along k (bk), each thread's block of outputs (tm x tn), the stages."""

    bm: int
    bn: int
    bk: int
    tm: int
    tn: int
    stages: int

    @property
    def threads(self) -> int:
        return (self.bm // self.tm) * (self.bn // self.tn)

    @property
    def shared_bytes(self) -> int:
        return self.stages * (PaddedLayout(self.bm, self.bk).stage_bytes + PaddedLayout(self.bn, self.bk).stage_bytes)

    @property
    def blocks_per_sm(self) -> int:
        """Two blocks a multiprocessor where a thread's outputs leave room (the launch bounds cap its registers)."""
        return 2 if self.tm * self.tn <= 64 else 1

    def accepts(self, dtype: DType, tf32: bool) -> bool:
        return dtype == dtypes.float32

    def __str__(self) -> str:
        return f"{self.bm}x{self.bn}x{self.bk} simt {self.tm}x{self.tn} a thread {self.stages} stages"


# in the heuristics' order of preference; BEAM times each (bench/contractions.py)
SIMT_CONFIGS = (
    SimtConfig(128, 128, 8, 8, 8, 2),  # 256 threads of 8x8
    SimtConfig(128, 128, 16, 8, 8, 2),
    SimtConfig(128, 128, 8, 8, 8, 3),
    SimtConfig(128, 256, 8, 8, 16, 2),  # 256 threads of 8x16: one block a multiprocessor
    SimtConfig(128, 64, 16, 8, 4, 2),
    SimtConfig(64, 64, 16, 4, 4, 2),  # small matrices
)


def render_simt(renderer: CStyleRenderer, name: str, mm: Matmul, config: SimtConfig, epilogue: list[UOp],
                operands: tuple[Prologue, Prologue]) -> str:  # fmt: skip
    """The CUDA source of the SIMT kernel `name` for `mm` with tiles `config`; `epilogue` and `operands` as in
    cuda_tc.render_matmul."""
    writer = tiles.epilogue_writer(renderer, name, epilogue)
    c = config
    a, b = PaddedLayout(c.bm, c.bk), PaddedLayout(c.bn, c.bk)
    held = c.tm * c.tn + c.tm + c.tn  # the accumulators and one k's values
    copies = tiles.operand_copies(renderer, mm, operands, (a, b), c.threads,
                            tiles.register_room(c.threads, c.blocks_per_sm, held))  # fmt: skip
    itype = renderer.type_name(mm.index_dtype)
    grid_n, apart_m, apart_n = c.bn // c.tn, c.bm // (c.tm // 4), c.bn // (c.tn // 4)
    ahead, stage = f"kt + {c.stages - 1}", f"(kt + {c.stages - 1})%{c.stages}"
    row = f"tile_m*{c.bm} + (i/4)*{apart_m} + ty*4 + i%4"
    col = f"tile_n*{c.bn} + (j/4)*{apart_n} + tx*4 + j%4"
    fragments = []
    for side, layout, count, apart, t in (("a", a, c.tm, apart_m, "ty"), ("b", b, c.tn, apart_n, "tx")):
        fragments += [
            "#pragma unroll",
            f"    for (int g = 0; g < {count // 4}; g++) {{",
            f"      const float4 v = *(const float4*)(s_{side} + kk*{layout.line_bytes} + (g*{apart} + {t}*4)*4);",
            f"      f{side}[g*4] = v.x; f{side}[g*4 + 1] = v.y; f{side}[g*4 + 2] = v.z; f{side}[g*4 + 3] = v.w;",
            "    }",
        ]
    body = [
        f"const int tx = threadIdx.x%{grid_n}, ty = threadIdx.x/{grid_n};",
        *tiles.tile_lines(mm, c.bm, c.bn, itype),
        *tiles.origin_lines(renderer, mm, writer, copies),
        *tiles.shared_lines(copies, ("0", str(c.stages * a.stage_bytes)), pointers=True),
        *(line for copy in copies for line in copy.declare()),
        f"float acc[{c.tm}][{c.tn}];",
        "#pragma unroll",
        f"for (int i = 0; i < {c.tm}; i++)",
        "#pragma unroll",
        f"  for (int j = 0; j < {c.tn}; j++) acc[i][j] = 0.0f;",
        f"const int steps = {-(-mm.k // c.bk)};",
        *tiles.pipeline_start(copies, c.stages),
        f"gg_cp_async_wait<{c.stages - 2}>();",
        "__syncthreads();",
        "for (int kt = 0; kt < steps; kt++) {",
        f"  if ({ahead} < steps) {{  // step kt+stages-1 into the stage step kt-1 used (register copies: loads now)",
        *("    " + line for copy in copies for line in copy.prefetch(ahead)),
        *("    " + line for copy in copies if copy.mode == "async" for line in copy.commit(ahead, stage)),
        "  }",
        "  gg_cp_async_commit();",
        f"  const unsigned char* s_a = pA + kt%{c.stages}*{a.stage_bytes};",
        f"  const unsigned char* s_b = pB + kt%{c.stages}*{b.stage_bytes};",
        "#pragma unroll",
        f"  for (int kk = 0; kk < {c.bk}; kk++) {{",
        f"    float fa[{c.tm}], fb[{c.tn}];",
        *fragments,
        "#pragma unroll",
        f"    for (int i = 0; i < {c.tm}; i++)",
        "#pragma unroll",
        f"      for (int j = 0; j < {c.tn}; j++) acc[i][j] = __fmaf_rn(fa[i], fb[j], acc[i][j]);",
        "  }",
        f"  if ({ahead} < steps) {{",
        *("    " + line for copy in copies if copy.mode != "async" for line in copy.commit(ahead, stage)),
        "  }",
        f"  gg_cp_async_wait<{c.stages - 2}>();  // step kt+1 is in, and every thread is done with step kt's stage",
        "  __syncthreads();",
        "}",
        "// the epilogue: accumulator (i, j) is row (i/4)*apart + ty*4 + i%4 of the tile, and likewise its column",
        "#pragma unroll",
        f"for (int i = 0; i < {c.tm}; i++)",
        "#pragma unroll",
        f"  for (int j = 0; j < {c.tn}; j++) {{",
        *("    " + line for line in tiles.accumulator_lines(writer, mm, itype, row, col, "acc[i][j]", c.bm, c.bn)),
        "  }",
    ]
    size = (c.threads, c.blocks_per_sm, c.shared_bytes)
    return tiles.kernel_source(renderer, writer, epilogue, operands, name, *size, [], body)
