"""The fused attention kernel in CUDA C (what it computes: renderer/attention.py), on the SIMT units.

A block of THREADS threads takes one batch entry and ROWS query rows; each row has a group of GROUP lanes of one warp.
The block copies its rows of q (scaled, as float32) into shared memory once, then each block of KEYS keys and values.
Lane g of a row's group scores keys g, g + GROUP, ... of the block, the group shares the block's max and sum of
exp(s - m) by shuffles, writes its exp(s - m) to shared memory, and lane g accumulates value columns g, g + GROUP, ...
Rows (and keys) past the end are computed as masked and not stored; every thread reaches every barrier and shuffle.
Shared rows of q and k are an odd number of floats apart, so the lanes reading them hit different banks.
"""

from __future__ import annotations

from glassgrad.dtype import dtypes
from glassgrad.renderer.attention import AttentionSpec, bases, conversions, load, masked_score, parameters

GROUP = 8  # lanes a query row (within one warp: the shuffles stay in an aligned group of 8)
ROWS = 16  # query rows a block
THREADS = ROWS * GROUP
KEYS = 32  # keys a block of keys; each lane scores KEYS // GROUP of them


def cuda_blocks(spec: AttentionSpec) -> int:
    """The grid: a block per batch entry and ROWS query rows."""
    return spec.entries * -(-spec.length // ROWS)


def _odd(n: int) -> int:
    return n | 1


def render_cuda_attention(renderer, name: str, spec: AttentionSpec) -> str:
    """The kernel NAME(out, each input buffer), launched as cuda_blocks(spec) blocks of THREADS threads."""
    e, ev, length, source = spec.head_size, spec.value_size, spec.length, spec.source_length
    qs_stride, ks_stride, ps_stride = _odd(e), _odd(e), _odd(KEYS)
    blocks, per_lane = -(-length // ROWS), -(-ev // GROUP)
    evp = per_lane * GROUP  # a value row in shared memory, zeros past Ev: every lane's columns exist
    floats = ROWS * qs_stride + KEYS * ks_stride + KEYS * evp + ROWS * ps_stride
    scale = renderer.render_const(spec.scale, dtypes.float32)
    keys = f"(r0 + {ROWS} < {source} ? r0 + {ROWS} : {source})" if spec.causal else str(source)
    shuffles = lambda x, op: " ".join(  # noqa: E731
        f"{x} = {op}({x}, __shfl_xor_sync(0xffffffffu, {x}, {d}));" for d in (1, 2, 4)
    )
    body = f"""
extern "C" __device__ unsigned int gg_dynamic_shared_bytes = {floats * 4};  // read by the runtime
extern "C" __global__ void __launch_bounds__({THREADS}) {name}({parameters(renderer, spec)}) {{
  extern __shared__ __align__(16) float gg_shared[];
  float *qs = gg_shared, *ks = qs + {ROWS * qs_stride}, *vs = ks + {KEYS * ks_stride}, *ps = vs + {KEYS * evp};
  const int tid = threadIdx.x, r = tid / {GROUP}, g = tid % {GROUP};
  const long long entry = blockIdx.x / {blocks};
  const int r0 = (int)(blockIdx.x % {blocks}) * {ROWS}, row = r0 + r;
  {" ".join(bases(spec, "entry"))}
  for (int x = tid; x < {ROWS * e}; x += {THREADS}) {{
    int rr = x / {e}, c = x % {e}, at = r0 + rr < {length} ? r0 + rr : {length - 1};
    qs[rr * {qs_stride} + c] = {load(renderer, spec.q, "q", "at", "c")} * {scale};
  }}
  float m = -INFINITY, l = 0.0f, acc[{per_lane}];
#pragma unroll
  for (int i = 0; i < {per_lane}; i++) acc[i] = 0.0f;
  const int keys = {keys};
  for (int j0 = 0; j0 < keys; j0 += {KEYS}) {{
    __syncthreads();  // the last block's keys, values and weights are read; this block's q is written
    for (int x = tid; x < {KEYS * e}; x += {THREADS}) {{
      int j = x / {e}, c = x % {e};
      ks[j * {ks_stride} + c] = j0 + j < keys ? {load(renderer, spec.k, "k", "j0 + j", "c")} : 0.0f;
    }}
    for (int x = tid; x < {KEYS * evp}; x += {THREADS}) {{
      int j = x / {evp}, c = x % {evp};
      vs[j * {evp} + c] = j0 + j < keys && c < {ev} ? {load(renderer, spec.v, "v", "j0 + j", "c")} : 0.0f;
    }}
    __syncthreads();
    float s[{KEYS // GROUP}], top = -INFINITY;
#pragma unroll
    for (int t = 0; t < {KEYS // GROUP}; t++) s[t] = 0.0f;
    for (int c = 0; c < {e}; c++) {{  // each q element read once for the lane's keys
      float x = qs[r * {qs_stride} + c];
#pragma unroll
      for (int t = 0; t < {KEYS // GROUP}; t++) s[t] = fmaf(x, ks[(g + {GROUP} * t) * {ks_stride} + c], s[t]);
    }}
#pragma unroll
    for (int t = 0; t < {KEYS // GROUP}; t++) {{
      int key = j0 + g + {GROUP} * t;
      float d = s[t];
      if (key >= keys || row >= {length}) d = -INFINITY;
      else {{ {masked_score(renderer, spec, "d", "row", "key")} }}
      s[t] = d;
      top = fmaxf(top, d);
    }}
    {shuffles("top", "fmaxf")}
    float now = fmaxf(m, top), shrink = now == -INFINITY ? 1.0f : expf(m - now), sum = 0.0f;
#pragma unroll
    for (int t = 0; t < {KEYS // GROUP}; t++) {{
      float p = now == -INFINITY ? 0.0f : expf(s[t] - now);
      ps[r * {ps_stride} + g + {GROUP} * t] = p;
      sum += p;
    }}
    {shuffles("sum", "__fadd_rn")}
    l = l * shrink + sum;
    m = now;
    __syncwarp();  // the group's weights are in shared memory
#pragma unroll
    for (int i = 0; i < {per_lane}; i++) acc[i] *= shrink;
    for (int j = 0; j < {KEYS}; j++) {{  // each weight read once for the lane's value columns (zeros past Ev)
      float p = ps[r * {ps_stride} + j];
#pragma unroll
      for (int i = 0; i < {per_lane}; i++) acc[i] = fmaf(p, vs[j * {evp} + g + {GROUP} * i], acc[i]);
    }}
  }}
  if (row < {length}) {{
    long long at = entry * {length} + row;
    float inv = l > 0.0f ? 1.0f / l : 0.0f;
#pragma unroll
    for (int i = 0; i < {per_lane}; i++)
      if (g + {GROUP} * i < {ev}) out[at * {ev} + g + {GROUP} * i] = acc[i] * inv;
    if (g == 0) out[{spec.rows * ev}LL + at] = l > 0.0f ? m + logf(l) : -INFINITY;
  }}
}}"""
    return "\n".join([*conversions(renderer, spec), body]) + "\n"
