"""Fused attention kernels as a renderer writes them whole: what the kernel computes (`AttentionSpec`, which
codegen/attention.py reads off an ATTENTION kernel's AST), the C that both dialects share, and the CPU's kernel.

For each (batch entry, query row i) the kernel runs an online softmax over the keys, a block of them at a time: the
running max m, the running sum l of exp(s - m) and the accumulator acc of exp(s - m) * v, all float32, rescaled by
exp(m_old - m_new) as m grows. It writes out = acc / l and the row's logsumexp m + log(l) (the backward's), into one
float32 buffer: every row's outputs first, then every row's logsumexp. A row whose keys are all masked gives 0 and a
logsumexp of -inf. A score is q.k * scale, plus a float mask's value; a false bool mask, a key past i when causal (the
mask tril(ones(L, S)): key j <= row i) make it -inf.
"""

from __future__ import annotations

from dataclasses import dataclass

from glassgrad.dtype import DType, dtypes
from glassgrad.helpers import prod
from glassgrad.uop.ops import Ops, UOp


@dataclass(frozen=True)
class Operand:
    """An input as it lies in memory: element (batch b, row, col) of kernel argument `buffer` (q, k and v may be
    slices of one buffer) at offset + b's batch strides + row * row_stride + col * col_stride (a matrix of the batch:
    q's (L, E), k's (S, E), v's (S, Ev), the mask's (L, S))."""

    buffer: int  # the kernel's argument (its DEFINE_GLOBAL's number; 0 is the output)
    dtype: DType
    offset: int
    batch_strides: tuple[int, ...]
    row_stride: int
    col_stride: int


@dataclass(frozen=True)
class AttentionSpec:
    """One fused attention kernel: sizes, inputs, scale and masking."""

    batch: tuple[int, ...]  # the batch dims (batch, heads, ...), each input's batch strides along them
    length: int  # L, query rows
    source_length: int  # S, keys
    head_size: int  # E, of queries and keys
    value_size: int  # Ev
    scale: float
    causal: bool
    q: Operand
    k: Operand
    v: Operand
    mask: Operand | None  # bool (False: masked out) or a float added to the scores

    @property
    def entries(self) -> int:
        return prod(self.batch)

    @property
    def rows(self) -> int:
        return self.entries * self.length


def input_dtypes(spec: AttentionSpec) -> list[DType]:
    return [x.dtype for x in (spec.q, spec.k, spec.v, spec.mask) if x is not None]


def conversions(renderer, spec: AttentionSpec, more: list[UOp] = ()) -> list[str]:
    """The renderer's helpers that the inputs' conversions to float need (bfloat16's, half's on CUDA, INFINITY), and
    those of the ops in `more`."""
    casts = [UOp(Ops.CAST, dtypes.float32, (UOp(Ops.CONST, d, (), 0),)) for d in input_dtypes(spec)]
    return renderer.prelude(casts + list(more))


def batch_offset(x: Operand, batch: tuple[int, ...], entry: str) -> str:
    """The C expression of x's offset of batch entry `entry` (row-major over `batch`)."""
    terms, inner = [str(x.offset)], 1
    for size, stride in reversed(list(zip(batch, x.batch_strides))):
        if size > 1 and stride:
            terms.append(
                f"({entry} / {inner} % {size}) * {stride}LL" if inner > 1 else f"({entry} % {size}) * {stride}LL"
            )
        inner *= size
    return " + ".join(terms)


def input_buffers(spec: AttentionSpec) -> dict[int, DType]:
    """The kernel's input arguments (numbered from 1) and their dtypes."""
    return dict(sorted((x.buffer, x.dtype) for x in (spec.q, spec.k, spec.v, spec.mask) if x is not None))


def parameters(renderer, spec: AttentionSpec) -> str:
    """The kernel's buffers in the AST's order: the output, then each input buffer once (data1, data2, ...)."""
    params = [f"float* {renderer.restrict} out"]
    params += [f"const {renderer.type_name(d)}* {renderer.restrict} data{i}" for i, d in input_buffers(spec).items()]
    return ", ".join(params)


def masked_score(renderer, spec: AttentionSpec, score: str, row: str, key: str, unit: float = 1.0) -> str:
    """C statements that mask `score` of (`row`, `key`): -inf where masked out, a float mask's value (times `unit`)
    added."""
    lines = []
    if spec.causal:
        lines.append(f"if ({key} > {row}) {score} = -INFINITY;")
    if (m := spec.mask) is not None:
        at = f"data{m.buffer}[maskbase + (long long){row} * {m.row_stride}LL + (long long){key} * {m.col_stride}LL]"
        if m.dtype == dtypes.bool:
            lines.append(f"if (!{at}) {score} = -INFINITY;")
        else:
            value = renderer.render_cast(at, m.dtype, dtypes.float32)
            lines.append(f"{score} += {value};" if unit == 1.0 else f"{score} += {value} * {unit!r}f;")
    return " ".join(lines)


def load(renderer, x: Operand, name: str, row: str, col: str) -> str:
    """x's element (row, col) of the current batch entry (its base `{name}base`) as a float."""
    at = f"data{x.buffer}[{name}base + (long long)({row}) * {x.row_stride}LL + (long long)({col}) * {x.col_stride}LL]"
    return renderer.render_cast(at, x.dtype, dtypes.float32)


def bases(spec: AttentionSpec, entry: str) -> list[str]:
    """C declarations of each input's base offset for batch entry `entry`."""
    inputs = (("q", spec.q), ("k", spec.k), ("v", spec.v), ("mask", spec.mask))
    return [f"long long {n}base = {batch_offset(x, spec.batch, entry)};" for n, x in inputs if x is not None]


C_ROWS = 16  # query rows a task of the CPU's kernel takes: each block of keys, converted to float, serves them all
C_KEYS = 64  # keys a block
TILE_ROWS, TILE_COLS = 4, 16  # the register tile of both products: 4 rows by two 8-float vectors (8 accumulators)
LOG2E = 1.4426950408889634  # the scores are kept in base 2 (q scaled by it): exp2 of a whole vector is one call


def c_tasks(spec: AttentionSpec) -> int:
    """The CPU kernel's outer loop: a task per batch entry and block of C_ROWS query rows (threads split it)."""
    return spec.entries * -(-spec.length // C_ROWS)


def _c_tile(out: str, columns: int, depth: int, a_at: str, b_at: str, load_out: bool) -> str:
    """C for out[r + i][col .. col + 16] (+)= sum over d < depth of a_at(i, d) * b_at(d, col .. col + 16) for every
    4 x 16 tile of out (C_ROWS x columns), each tile in 8 vector registers: b's two vectors of a step serve 4 rows."""
    halves = ("col", "col + 8")
    init = [f"*(V8*)&{out}[r + i][{c}]" if load_out else "(V8){0}" for c in halves]
    store = " ".join(f"*(V8*)&{out}[r + i][{c}] = t[i][{h}];" for h, c in enumerate(halves))
    return f"""for (int r = 0; r < {C_ROWS}; r += {TILE_ROWS})
        for (int col = 0; col < {columns}; col += {TILE_COLS}) {{
          V8 t[{TILE_ROWS}][2];
#pragma GCC unroll {TILE_ROWS}
          for (int i = 0; i < {TILE_ROWS}; i++) t[i][0] = {init[0]}, t[i][1] = {init[1]};
          for (int d = 0; d < {depth}; d++) {{
            V8 b0 = *(V8*)&{b_at.format(c=halves[0])}, b1 = *(V8*)&{b_at.format(c=halves[1])};
#pragma GCC unroll {TILE_ROWS}
            for (int i = 0; i < {TILE_ROWS}; i++) {{ float x = {a_at}; t[i][0] += x * b0, t[i][1] += x * b1; }}
          }}
#pragma GCC unroll {TILE_ROWS}
          for (int i = 0; i < {TILE_ROWS}; i++) {{ {store} }}
        }}"""


def render_c_attention(renderer, name: str, spec: AttentionSpec) -> str:
    """The CPU's fused attention kernel: NAME(out, each input buffer, start, end) computes tasks [start, end) (and
    NAME_range, the thread pool's entry). Both products run in 4 x 16 register tiles of 8-float vectors over arrays
    padded to whole tiles (zeros); exp2 takes 8 scores at a time."""
    e, ev, length, source = spec.head_size, spec.value_size, spec.length, spec.source_length
    evp = -(-ev // TILE_COLS) * TILE_COLS
    blocks = -(-length // C_ROWS)
    scale = renderer.render_const(spec.scale * LOG2E, dtypes.float32)
    buffers = 1 + len(input_buffers(spec))
    keys = f"r0 + rows < {source} ? r0 + rows : {source}" if spec.causal else str(source)
    scores = _c_tile("s", C_KEYS, e, "qs[r + i][d]", "kt[d][{c}]", False)
    weighted = _c_tile("acc", evp, C_KEYS, "s[r + i][d]", "vs[d][{c}]", True)
    v8, v_at = dtypes.float32.vec(8), load(renderer, spec.v, "v", "j0 + j", "c")
    exp2 = renderer.render_vector_alu(Ops.EXP2, v8, ["x"], (UOp(Ops.CONST, v8, (), 0),), [None])
    body = f"""
typedef {renderer.type_name(v8)} V8;
static inline V8 gg_exp2_8(V8 x) {{ return {exp2}; }}
void {name}({parameters(renderer, spec)}, long long start, long long end) {{
  float qs[{C_ROWS}][{e}], m[{C_ROWS}], l[{C_ROWS}];
  float kt[{e}][{C_KEYS}] __attribute__((aligned(32))), vs[{C_KEYS}][{evp}] __attribute__((aligned(32)));
  float s[{C_ROWS}][{C_KEYS}] __attribute__((aligned(32))), acc[{C_ROWS}][{evp}] __attribute__((aligned(32)));
  for (long long task = start; task < end; task++) {{
    long long entry = task / {blocks};
    int r0 = (int)(task % {blocks}) * {C_ROWS}, rows = {length} - r0 < {C_ROWS} ? {length} - r0 : {C_ROWS};
    {" ".join(bases(spec, "entry"))}
    for (int r = 0; r < {C_ROWS}; r++) {{
      for (int c = 0; c < {e}; c++) qs[r][c] = r < rows ? {load(renderer, spec.q, "q", "r0 + r", "c")} * {scale} : 0.0f;
      for (int c = 0; c < {evp}; c++) acc[r][c] = 0.0f;
      m[r] = -INFINITY, l[r] = 0.0f;
    }}
    int keys = {keys};
    for (int j0 = 0; j0 < keys; j0 += {C_KEYS}) {{
      int n = keys - j0 < {C_KEYS} ? keys - j0 : {C_KEYS};
      for (int j = 0; j < {C_KEYS}; j++) {{
        for (int c = 0; c < {e}; c++) kt[c][j] = j < n ? {load(renderer, spec.k, "k", "j0 + j", "c")} : 0.0f;
        for (int c = 0; c < {evp}; c++) vs[j][c] = j < n && c < {ev} ? {v_at} : 0.0f;
      }}
      {scores}
      for (int r = 0; r < rows; r++) {{  /* the scores become weights exp2(s - m); the row's sums are rescaled */
        float top = -INFINITY;
        for (int j = 0; j < {C_KEYS}; j++) {{
          int row = r0 + r, key = j0 + j;
          if (j >= n) s[r][j] = -INFINITY;
          else {{ {masked_score(renderer, spec, "s[r][j]", "row", "key", LOG2E)} }}
          top = s[r][j] > top ? s[r][j] : top;
        }}
        float now = m[r] > top ? m[r] : top, shrink = now == -INFINITY ? 1.0f : exp2f(m[r] - now);
        l[r] *= shrink;
        for (int j = 0; j < {C_KEYS}; j += 8) {{
          V8 p = now == -INFINITY ? (V8){{0}} : gg_exp2_8(*(V8*)&s[r][j] - now);
          *(V8*)&s[r][j] = p;
          for (int h = 0; h < 8; h++) l[r] += p[h];
        }}
        for (int c = 0; c < {evp}; c++) acc[r][c] *= shrink;
        m[r] = now;
      }}
      for (int r = rows; r < {C_ROWS}; r++) for (int j = 0; j < {C_KEYS}; j++) s[r][j] = 0.0f;
      {weighted}
    }}
    for (int r = 0; r < rows; r++) {{
      long long row = entry * {length} + r0 + r;
      float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
      for (int c = 0; c < {ev}; c++) out[row * {ev} + c] = acc[r][c] * inv;
      out[{spec.rows * ev}LL + row] = l[r] > 0.0f ? (m[r] + log2f(l[r])) * {1 / LOG2E!r}f : -INFINITY;
    }}
  }}
}}
void {name}_range(void** args, long long start, long long end) {{
  {name}({", ".join(f"args[{i}]" for i in range(buffers))}, start, end);
}}"""
    vector = UOp(Ops.EXP2, v8, (UOp(Ops.CONST, v8, (), 0),))  # the vector type, and libmvec's exp2 where linked
    return "\n".join([*conversions(renderer, spec, [vector]), body]) + "\n"
