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


C_ROWS = 128  # query rows a task of the CPU's kernel takes at most: each block of keys, converted and transposed
# once, serves them all (MiniLM's 384 heads of 128 x 128, one thread: 64 rows a task 12.9 ms, 128 11.8 ms; the kernel
# before, 16 rows a task in 8-float vectors without fused multiply-adds, 30 ms)
CAUSAL_ROWS = 64  # ...with a causal mask, where a task's keys end at its last row: smaller tasks skip more of them
C_KEYS = 64  # keys a block
TILE_ROWS = 8  # the register tile of both products: 8 rows by two vectors (16 accumulators, of AVX-512's 32)
VECTOR_BYTES = 64  # the widest vector the tiles compute on (AVX-512; GCC splits it where the CPU has less)
LOG2E = 1.4426950408889634  # the scores are kept in base 2 (q scaled by it): exp2 of a whole vector is one call


def c_lanes(renderer) -> int:
    """Floats a vector of the CPU's kernel: the renderer's widest that fits VECTOR_BYTES and divides C_KEYS / 2."""
    return max(n for n in renderer.vector_lanes if n * 4 <= VECTOR_BYTES and C_KEYS % (2 * n) == 0)


def c_rows(spec: AttentionSpec) -> int:
    """Query rows a task takes: C_ROWS (CAUSAL_ROWS), or all of them (rounded up to whole tiles) where there are
    fewer."""
    return min(CAUSAL_ROWS if spec.causal else C_ROWS, -(-spec.length // TILE_ROWS) * TILE_ROWS)


def c_tasks(spec: AttentionSpec) -> int:
    """The CPU kernel's outer loop: a task per batch entry and block of c_rows query rows (threads split it)."""
    return spec.entries * -(-spec.length // c_rows(spec))


def _c_tile(out: str, rows: int, columns: int, depth: int, a_at: str, b_at: str, load_out: bool, lanes: int) -> str:
    """C for out[r + i][col .. col + 2 * lanes] (+)= sum over d < depth of a_at(i, d) * b_at(d, col ..) for every
    TILE_ROWS x 2 vectors tile of out (rows x columns), in registers: b's two vectors of a step serve TILE_ROWS rows,
    each by a fused multiply-add."""
    halves = ("col", f"col + {lanes}")
    init = [f"*(V*)&{out}[r + i][{c}]" if load_out else "(V){0}" for c in halves]
    store = " ".join(f"*(V*)&{out}[r + i][{c}] = t[i][{h}];" for h, c in enumerate(halves))
    return f"""for (int r = 0; r < {rows}; r += {TILE_ROWS})
        for (int col = 0; col < {columns}; col += {2 * lanes}) {{
          V t[{TILE_ROWS}][2];
#pragma GCC unroll {TILE_ROWS}
          for (int i = 0; i < {TILE_ROWS}; i++) t[i][0] = {init[0]}, t[i][1] = {init[1]};
          for (int d = 0; d < {depth}; d++) {{
            V b0 = *(V*)&{b_at.format(c=halves[0])}, b1 = *(V*)&{b_at.format(c=halves[1])};
#pragma GCC unroll {TILE_ROWS}
            for (int i = 0; i < {TILE_ROWS}; i++) {{
              V x = gg_splat({a_at}); t[i][0] = gg_fma(x, b0, t[i][0]), t[i][1] = gg_fma(x, b1, t[i][1]);
            }}
          }}
#pragma GCC unroll {TILE_ROWS}
          for (int i = 0; i < {TILE_ROWS}; i++) {{ {store} }}
        }}"""


def _c_key_mask(renderer, spec: AttentionSpec) -> tuple[str, str]:
    """C that masks a block's scores: (once a block: `keep[j]`, all bits set for a key a row may attend to, and a float
    mask's `add[j]` where the mask is the same for every row; per row r: what the rest of the mask does to s[r])."""
    m, log2e = spec.mask, renderer.render_const(LOG2E, dtypes.float32)
    shared = m is not None and m.row_stride == 0  # a padding mask over the keys (batch, 1, 1, S): one row for all
    keep, add = "j < n", ""
    if shared:
        at = f"data{m.buffer}[maskbase + (long long)(j0 + j) * {m.col_stride}LL]"
        if m.dtype == dtypes.bool:
            keep = f"j < n && {at}"
        else:
            add = f"add[j] = j < n ? {renderer.render_cast(at, m.dtype, dtypes.float32)} * {log2e} : 0.0f;"
    block = f"for (int j = 0; j < {C_KEYS}; j++) {{ keep[j] = {keep} ? -1 : 0; {add} }}"
    per_row = []
    if add:
        per_row.append(f"for (int j = 0; j < {C_KEYS}; j += L) *(V*)&s[r][j] += *(V*)&add[j];")
    if m is not None and not shared:
        masked = masked_score(renderer, spec, "s[r][j]", "row", "j0 + j", LOG2E)
        per_row.append(f"for (int j = 0; j < n; j++) {{ {masked} }}")
    elif spec.causal:
        per_row.append("for (int j = row - j0 + 1 > 0 ? row - j0 + 1 : 0; j < n; j++) s[r][j] = -INFINITY;")
    return block, " ".join(per_row)


def render_c_attention(renderer, name: str, spec: AttentionSpec) -> str:
    """The CPU's fused attention kernel: NAME(out, each input buffer, start, end) computes tasks [start, end) (and
    NAME_range, the thread pool's entry). Both products run in register tiles of the widest vectors over arrays padded
    to whole tiles (zeros); the softmax's max, exp2 and sum take a vector of scores at a time."""
    lanes = c_lanes(renderer)
    e, ev, length, source, rows = spec.head_size, spec.value_size, spec.length, spec.source_length, c_rows(spec)
    evp = -(-ev // (2 * lanes)) * 2 * lanes
    blocks = -(-length // rows)
    scale = renderer.render_const(spec.scale * LOG2E, dtypes.float32)
    buffers = 1 + len(input_buffers(spec))
    keys = f"r0 + rows < {source} ? r0 + rows : {source}" if spec.causal else str(source)
    scores = _c_tile("s", rows, C_KEYS, e, "qs[r + i][d]", "kt[d][{c}]", False, lanes)
    weighted = _c_tile("acc", rows, evp, C_KEYS, "s[r + i][d]", "vs[d][{c}]", True, lanes)
    vf, vi = dtypes.float32.vec(lanes), dtypes.int32.vec(lanes)
    v_at = load(renderer, spec.v, "v", "j0 + j", "c")
    exp2 = renderer.render_vector_alu(Ops.EXP2, vf, ["x"], (UOp(Ops.CONST, vf, (), 0),), [None])
    key_mask, row_mask = _c_key_mask(renderer, spec)
    align = lanes * 4
    body = f"""
typedef {renderer.type_name(vf)} V;
typedef {renderer.type_name(vi)} VI;
enum {{ L = {lanes} }};
static inline V gg_exp2v(V x) {{ return {exp2}; }}
static inline V gg_fma(V a, V b, V c) {{ return {renderer.type_name(vf)}_fma(a, b, c); }}
static inline V gg_splat(float x) {{ return (V){{{", ".join(["x"] * lanes)}}}; }}
static inline V gg_vmax(V a, V b) {{ VI m = a > b; return (V)(((VI)a & m) | ((VI)b & ~m)); }}
void {name}({parameters(renderer, spec)}, long long start, long long end) {{
  float qs[{rows}][{e}], m[{rows}], l[{rows}];
  float kt[{e}][{C_KEYS}] __attribute__((aligned({align}))), vs[{C_KEYS}][{evp}] __attribute__((aligned({align})));
  float s[{rows}][{C_KEYS}] __attribute__((aligned({align}))), acc[{rows}][{evp}] __attribute__((aligned({align})));
  int keep[{C_KEYS}] __attribute__((aligned({align})));
  float add[{C_KEYS}] __attribute__((aligned({align})));
  (void)add;
  for (long long task = start; task < end; task++) {{
    long long entry = task / {blocks};
    int r0 = (int)(task % {blocks}) * {rows}, rows = {length} - r0 < {rows} ? {length} - r0 : {rows};
    {" ".join(bases(spec, "entry"))}
    for (int r = 0; r < {rows}; r++) {{
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
      {key_mask}
      {scores}
      for (int r = 0; r < rows; r++) {{  /* the scores become weights exp2(s - m); the row's sums are rescaled */
        int row = r0 + r;
        (void)row;
        V none = gg_splat(-INFINITY), top = none;
        for (int j = 0; j < {C_KEYS}; j += L) {{
          VI k = *(VI*)&keep[j];
          *(V*)&s[r][j] = (V)(((VI)*(V*)&s[r][j] & k) | ((VI)none & ~k));
        }}
        {row_mask}
        for (int j = 0; j < {C_KEYS}; j += L) top = gg_vmax(top, *(V*)&s[r][j]);
        float most = top[0];
        for (int h = 1; h < L; h++) most = top[h] > most ? top[h] : most;
        float now = m[r] > most ? m[r] : most, shrink = now == -INFINITY ? 1.0f : exp2f(m[r] - now);
        V sum = gg_splat(0.0f);
        for (int j = 0; j < {C_KEYS}; j += L) {{
          V p = now == -INFINITY ? gg_splat(0.0f) : gg_exp2v(*(V*)&s[r][j] - now);
          *(V*)&s[r][j] = p;
          sum += p;
        }}
        float total = 0.0f;
        for (int h = 0; h < L; h++) total += sum[h];
        l[r] = l[r] * shrink + total;
        for (int c = 0; c < {evp}; c++) acc[r][c] *= shrink;
        m[r] = now;
      }}
      for (int r = rows; r < {rows}; r++) for (int j = 0; j < {C_KEYS}; j++) s[r][j] = 0.0f;
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
    zero = UOp(Ops.CONST, vf, (), 0)
    # the vector types, libmvec's exp2 and the fma helper
    helpers = [UOp(Ops.EXP2, vf, (zero,)), UOp(Ops.MULACC, vf, (zero, zero, zero)), UOp(Ops.CONST, vi, (), 0)]
    return "\n".join([*conversions(renderer, spec, helpers), body]) + "\n"
