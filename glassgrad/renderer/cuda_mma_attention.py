"""The fused attention kernel in CUDA C on the tensor cores (sm_80 and newer), for 16-bit q, k and v (what it computes:
renderer/attention.py; the SIMT kernel, renderer/cuda_attention.py, takes float32 and the head sizes this one does not).

FlashAttention-2's plan, in our own words:
- a block of WARPS warps takes one batch entry and 16 * WARPS query rows, each warp 16 of them; the block copies its
  rows of q into shared memory once and each warp keeps them in registers as mma.sync A fragments;
- the keys and values go through shared memory KEYS at a time, two stages: the next block of them is copied
  (`cp.async`, or through registers where an operand is not 16-byte aligned or not contiguous along its rows) while
  this one is used;
- each warp computes its 16 x KEYS scores S = q k^T with `mma.sync.m16n8k16` (float32 accumulators), scales them to
  base 2 (exp2 is one instruction), masks them, and runs the online softmax on its registers: each lane holds two
  rows' elements, and the 4 lanes of a quad (one row's) share the row's max by shuffles; the sum of the weights stays
  a partial sum per lane, added over the quad once at the end (every lane of a quad rescales it by the same factor);
- the weights P, rounded to the inputs' 16-bit type in registers, are the A operand of O += P v
  (mma_fragments.py `accumulators_as_a` says why the accumulators' layout is already A's), v read with
  ldmatrix.trans;
- causal: a block stops at the keys of its last row, and a warp skips the key blocks past its last row.
Shared rows are padded by 16 bytes, so ldmatrix reads them without bank conflicts (mma_fragments.py `padded_offset`).
Rows and keys past the ends are copied as zeros, their scores masked, and nothing is stored for them.
"""

from __future__ import annotations

from dataclasses import dataclass

from glassgrad.dtype import DType, dtypes
from glassgrad.renderer.attention import AttentionSpec, Operand, bases, conversions, masked_score, parameters
from glassgrad.renderer.cuda_tc import LDMATRIX_HELPERS, MMA, MMA_TYPES
from glassgrad.renderer.cuda_tiles import COPY_HELPERS
from glassgrad.renderer.mma_fragments import (
    CHUNK,
    CExpr,
    a_rows,
    accumulator_at,
    accumulators_as_a,
    b_rows,
    b_rows_transposed,
    padded_offset,
)

SIXTEEN_BITS = (dtypes.float16, dtypes.bfloat16)
MAX_SIZE = 128  # the largest head size (of q and k, and of v): q's fragments and the output's accumulators are
# registers, 4 * (E/16) + 4 * (Ev/8) of them a lane
LOG2E, LN2 = 1.4426950408889634, 0.6931471805599453

# exp2 as the one instruction (-inf gives 0)
EXP2 = (
    'static inline float gg_exp2(float x) { float y; asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x)); return y; }'
)
# two weights rounded to the 16-bit type {t}, in one register with the lower column in the low half (cvt puts its
# first source in the high half)
PACK = (
    "static inline unsigned gg_pack(float lo, float hi) {{ unsigned r;"
    ' asm("cvt.rn.{t}x2.f32 %0, %2, %1;" : "=r"(r) : "f"(lo), "f"(hi)); return r; }}'
)


@dataclass(frozen=True)
class MmaAttentionConfig:
    """A block's warps (16 query rows each) and the keys of a shared stage."""

    warps: int = 4
    keys: int = 64

    @property
    def rows(self) -> int:
        return 16 * self.warps

    @property
    def threads(self) -> int:
        return 32 * self.warps


CONFIG = MmaAttentionConfig()


def mma_attention_fits(dtype: DType, head_size: int, value_size: int) -> bool:
    """Whether the tensor-core kernel takes q, k, v of this dtype and head sizes (of q and k, of v)."""
    return dtype in SIXTEEN_BITS and all(0 < n <= MAX_SIZE and n % 16 == 0 for n in (head_size, value_size))


def mma_attention_covers(spec: AttentionSpec) -> bool:
    """Whether the tensor-core kernel computes `spec` (q, k and v of one 16-bit dtype)."""
    same = spec.q.dtype == spec.k.dtype == spec.v.dtype
    return same and mma_attention_fits(spec.q.dtype, spec.head_size, spec.value_size)


def mma_attention_blocks(spec: AttentionSpec, config: MmaAttentionConfig = CONFIG) -> int:
    """The grid: a block per batch entry and config.rows query rows."""
    return spec.entries * -(-spec.length // config.rows)


def _aligned(x: Operand) -> bool:
    """Whether each row's 16-byte chunks lie in memory as the shared tile wants them (cp.async copies them): the row
    contiguous and every row, of every batch entry, starting 16 bytes aligned (the buffer itself is)."""
    return x.col_stride == 1 and all(s % CHUNK == 0 for s in (x.offset, x.row_stride, *x.batch_strides))


def copy_lines(x: Operand, name: str, width: int, rows: int, first: str, limit: int, tile: str, threads: int
               ) -> list[str]:  # fmt: skip
    """Statements (every thread's) copying rows first .. first+rows-1 of x's (limit, width) matrix of this batch entry
    into the padded shared tile at byte `tile` of gg_shared; rows from `limit` on are zeros."""
    chunks = width // CHUNK
    at = f"data{x.buffer} + {name}base + (long long)(at < {limit} ? at : 0) * {x.row_stride}LL"
    head = [
        f"for (int x = tid; x < {rows * chunks}; x += {threads}) {{",
        f"  const int line = x / {chunks}, chunk = x % {chunks}, at = {first} + line;",
        f"  const unsigned place = {tile} + {padded_offset(CExpr('line'), CExpr('chunk'), chunks)};",
    ]
    if _aligned(x):  # 16 bytes, or none read and 16 zeros written (a row past the end)
        return [*head, f"  gg_cp_async16(shared + place, {at} + chunk * {CHUNK}, at < {limit} ? 16 : 0);", "}"]
    pairs = ", ".join(f"(unsigned)p[{2 * i * x.col_stride}LL] | (unsigned)p[{(2 * i + 1) * x.col_stride}LL] << 16"
                      for i in range(CHUNK // 2))  # fmt: skip
    return [
        *head,
        "  uint4 v = make_uint4(0u, 0u, 0u, 0u);",
        f"  if (at < {limit}) {{ const unsigned short* p = {at} + (long long)(chunk * {CHUNK}) * {x.col_stride}LL;",
        f"    v = make_uint4({pairs}); }}",
        "  *(uint4*)(gg_shared + place) = v;",
        "}",
    ]


def _unrolled(header: str, body: list[str]) -> list[str]:
    return ["#pragma unroll", f"for ({header}) {{", *("  " + line for line in body), "}"]


def score_lines(spec: AttentionSpec, c: MmaAttentionConfig) -> list[str]:
    """s = q k^T of the warp's 16 rows and the stage's keys (float32 accumulators, a 16 x 8 tile each 8 keys)."""
    lane, kk, p = CExpr("lane"), CExpr("kk"), CExpr("p")
    k_at = padded_offset(*b_rows(lane, 16 * p, 16 * kk), spec.head_size // CHUNK)
    return [
        f"float s[{c.keys // 8}][4];",
        *_unrolled(f"int n = 0; n < {c.keys // 8}; n++", ["s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;"]),
        *_unrolled(
            f"int kk = 0; kk < {spec.head_size // 16}; kk++",
            _unrolled(
                f"int p = 0; p < {c.keys // 16}; p++",
                [
                    "unsigned b[4];  // keys 16p .. 16p+15: two B fragments",
                    f"gg_ldmatrix(b, stage_k + {k_at});",
                    "gg_mma(s[2*p], qf[kk], b);",
                    "gg_mma(s[2*p + 1], qf[kk], b + 2);",
                ],
            ),
        ),  # fmt: skip
    ]


def mask_lines(renderer, spec: AttentionSpec, c: MmaAttentionConfig) -> list[str]:
    """The scores in base 2 (times scale * log2(e)), -inf where masked; the masks are tested only in a block of keys
    that needs them (the last one, the rows' end, the diagonal, or a mask operand)."""
    lane, n, i = CExpr("lane"), CExpr("n"), CExpr("i")
    row, col = accumulator_at(lane, i)
    tests = [f"j0 + {c.keys} > {spec.source_length}", f"row0 + 16 > {spec.length}"]
    tests += [f"j0 + {c.keys - 1} > row0"] if spec.causal else []
    edge = "true" if spec.mask is not None else " || ".join(tests)
    scale = renderer.render_const(spec.scale * LOG2E, dtypes.float32)
    return [
        f"const bool edge = {edge};",
        *_unrolled(
            f"int n = 0; n < {c.keys // 8}; n++",
            _unrolled(
                "int i = 0; i < 4; i++",
                [
                    f"float x = s[n][i] * {scale};",
                    "if (edge) {",
                    f"  const int row = row0 + {row}, key = j0 + {8 * n + col};",
                    f"  if (key >= {spec.source_length} || row >= {spec.length}) x = -INFINITY;",
                    f"  else {{ {masked_score(renderer, spec, 'x', 'row', 'key', LOG2E)} }}",
                    "}",
                    "s[n][i] = x;",
                ],
            ),
        ),  # fmt: skip
    ]


def softmax_lines(spec: AttentionSpec, c: MmaAttentionConfig) -> list[str]:
    """The online softmax of the warp's scores: element i of a tile is row half i/2 (g or g+8); the quad's lanes share
    the rows' max; the weights exp2(s - max) replace the scores, the sums and the outputs are rescaled."""
    shuffle = "__shfl_xor_sync(0xffffffffu, top[h], {})"
    return [
        "float top[2] = {m[0], m[1]}, base[2];",
        *_unrolled(
            f"int n = 0; n < {c.keys // 8}; n++",
            _unrolled("int i = 0; i < 4; i++", ["top[i/2] = fmaxf(top[i/2], s[n][i]);"]),
        ),  # fmt: skip
        *_unrolled(
            "int h = 0; h < 2; h++",
            [
                f"top[h] = fmaxf(top[h], {shuffle.format(1)});",
                f"top[h] = fmaxf(top[h], {shuffle.format(2)});",
                "base[h] = top[h] == -INFINITY ? 0.0f : top[h];  // every key so far masked: weights 0, not nan",
                "const float shrink = gg_exp2(m[h] - base[h]);",
                "m[h] = top[h], l[h] *= shrink;",
                *_unrolled(
                    f"int n = 0; n < {spec.value_size // 8}; n++", ["o[n][2*h] *= shrink, o[n][2*h + 1] *= shrink;"]
                ),
            ],
        ),  # fmt: skip
        *_unrolled(
            f"int n = 0; n < {c.keys // 8}; n++",
            _unrolled(
                "int i = 0; i < 4; i++",
                [
                    "s[n][i] = gg_exp2(s[n][i] - base[i/2]);",
                    "l[i/2] += s[n][i];",
                ],
            ),
        ),  # fmt: skip
    ]


def value_lines(spec: AttentionSpec, c: MmaAttentionConfig) -> list[str]:
    """o += P v: the weights, rounded to 16 bits, as A fragments straight from the accumulators."""
    lane, kk, p = CExpr("lane"), CExpr("kk"), CExpr("p")
    weights = ", ".join(f"gg_pack(s[{t}][{e}], s[{t}][{e + 1}])" for t, e in accumulators_as_a(kk))
    v_at = padded_offset(*b_rows_transposed(lane, 16 * kk, 16 * p), spec.value_size // CHUNK)
    return _unrolled(f"int kk = 0; kk < {c.keys // 16}; kk++", [
        f"const unsigned a[4] = {{{weights}}};",
        *_unrolled(f"int p = 0; p < {spec.value_size // 16}; p++", [
            "unsigned b[4];  // value columns 16p .. 16p+15: two B fragments",
            f"gg_ldmatrix_trans(b, stage_v + {v_at});",
            "gg_mma(o[2*p], a, b);",
            "gg_mma(o[2*p + 1], a, b + 2);",
        ]),
    ])  # fmt: skip


def store_lines(spec: AttentionSpec) -> list[str]:
    """Each row's outputs o / l and logsumexp (natural log: (max + log2(l)) * ln 2) once the quad's sums are added."""
    lane, h = CExpr("lane"), CExpr("h")
    row, col = accumulator_at(lane, 2 * h)
    ev, length = spec.value_size, spec.length
    return _unrolled("int h = 0; h < 2; h++", [
        "l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);",
        "l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);",
        f"const int row = row0 + {row};",
        f"if (row < {length}) {{",
        f"  const long long at = entry * {length} + row;",
        "  const float inv = l[h] > 0.0f ? 1.0f / l[h] : 0.0f;",
        *("  " + line for line in _unrolled(f"int n = 0; n < {ev // 8}; n++", [
            f"*(float2*)&out[at * {ev} + 8*n + {col}] = make_float2(o[n][2*h] * inv, o[n][2*h + 1] * inv);"])),
        f"  if (lane % 4 == 0) out[{spec.rows * ev}LL + at] = l[h] > 0.0f ? (m[h] + log2f(l[h])) * {LN2!r}f"
        " : -INFINITY;",
        "}",
    ])  # fmt: skip


def render_mma_attention(renderer, name: str, spec: AttentionSpec, c: MmaAttentionConfig = CONFIG) -> str:
    """The kernel NAME(out, each input buffer), launched as mma_attention_blocks(spec) blocks of c.threads threads."""
    e, ev, length, source = spec.head_size, spec.value_size, spec.length, spec.source_length
    q_bytes, k_bytes, v_bytes = (rows * (n // CHUNK + 1) * 16 for rows, n in ((c.rows, e), (c.keys, e), (c.keys, ev)))
    blocks = -(-length // c.rows)
    keys = f"(r0 + {c.rows} < {source} ? r0 + {c.rows} : {source})" if spec.causal else str(source)
    order = f"{blocks - 1} - (int)(blockIdx.x / {spec.entries})" if spec.causal else f"blockIdx.x / {spec.entries}"
    lane = CExpr("lane")
    q_at = padded_offset(*a_rows(lane, CExpr("warp") * 16, 16 * CExpr("kk")), e // CHUNK)
    stage = f"{q_bytes} + (t % 2) * {k_bytes + v_bytes}"

    def tile_copies(j0: str, at: str) -> list[str]:
        return [*copy_lines(spec.k, "k", e, c.keys, j0, source, at, c.threads),
                *copy_lines(spec.v, "v", ev, c.keys, j0, source, f"{at} + {k_bytes}", c.threads)]  # fmt: skip

    body = [
        "extern __shared__ __align__(128) unsigned char gg_shared[];",
        "const unsigned shared = gg_smem(gg_shared);",
        "const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;",
        f"const long long entry = blockIdx.x % {spec.entries};  // neighbouring blocks: other heads, same rows",
        f"const int r0 = ({order}) * {c.rows}, row0 = r0 + warp * 16;  // causal: the longest rows first",
        *bases(spec, "entry"),
        f"const int keys = {keys}, tiles = (keys + {c.keys - 1}) / {c.keys};",
        *copy_lines(spec.q, "q", e, c.rows, "r0", length, "0", c.threads),
        "gg_cp_async_commit();",
        *tile_copies("0", str(q_bytes)),
        "gg_cp_async_commit();",
        "gg_cp_async_wait<1>();  // q is in",
        "__syncthreads();",
        f"unsigned qf[{e // 16}][4];",
        *_unrolled(f"int kk = 0; kk < {e // 16}; kk++", [f"gg_ldmatrix(qf[kk], shared + {q_at});"]),
        f"float o[{ev // 8}][4], m[2] = {{-INFINITY, -INFINITY}}, l[2] = {{0.0f, 0.0f}};",
        *_unrolled(f"int n = 0; n < {ev // 8}; n++", ["o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;"]),
        "for (int t = 0; t < tiles; t++) {",
        f"  const int j0 = t * {c.keys};",
        "  if (t + 1 < tiles) {  // the next keys and values into the other stage, which every warp is done with",
        *("    " + line for line in tile_copies(f"j0 + {c.keys}", f"{q_bytes} + ((t + 1) % 2) * {k_bytes + v_bytes}")),
        "  }",
        "  gg_cp_async_commit();",
        "  gg_cp_async_wait<1>();  // this stage is in (this thread's copies; the barrier: everyone's)",
        "  __syncthreads();",
        f"  if (row0 < {length}{' && j0 <= row0 + 15' if spec.causal else ''}) {{  // rows with a key here",
        f"    const unsigned stage_k = shared + {stage}, stage_v = stage_k + {k_bytes};",
        *(
            "    " + line
            for part in (
                score_lines(spec, c),
                mask_lines(renderer, spec, c),
                softmax_lines(spec, c),
                value_lines(spec, c),
            )
            for line in part
        ),  # fmt: skip
        "  }",
        "  __syncthreads();  // every warp is done with this stage before it is copied into again",
        "}",
        *store_lines(spec),
    ]
    shared_bytes = q_bytes + 2 * (k_bytes + v_bytes)
    kernel = [
        f'extern "C" __device__ unsigned int gg_dynamic_shared_bytes = {shared_bytes};  // read by the runtime',
        # (a minimum of 2 blocks a multiprocessor still lets a thread have 255 registers; without one, ptxas held a
        # case (head sizes 80 and 48, causal) to 128 and spilled)
        f'extern "C" __global__ void __launch_bounds__({c.threads}, 2) {name}({parameters(renderer, spec)}) {{',
        *("  " + line for line in body),
        "}",
    ]
    t = MMA_TYPES[spec.q.dtype]
    helpers = COPY_HELPERS + LDMATRIX_HELPERS + [MMA.format(shape="m16n8k16", t=t), EXP2, PACK.format(t=t)]
    return "\n".join([*conversions(renderer, spec), *helpers, *kernel]) + "\n"
