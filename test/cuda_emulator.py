"""Runs a rendered CUDA kernel on the CPU, for tests on a machine without a GPU: the kernel's C++ compiled by g++ with
the CUDA names it uses defined here, each CUDA thread a fiber (ucontext) of one OS thread, run in turn.

What the emulation means: the warp-wide instructions the kernels use (`mma.sync.m16n8k16` of 16-bit inputs,
`ldmatrix.x4` (.trans), `__shfl_xor_sync`) are computed from every lane's operands, laid out as the PTX ISA's tables
say (written here from the ISA's text, independently of renderer/mma_fragments.py), once all 32 lanes reach them;
`__syncthreads` waits for the block; `cp.async` copies at once. A kernel that puts an element in the wrong register,
reads shared memory a barrier too early only in the hardware's timing, or depends on ptxas is not caught here: the
GPU tests are the reference. Helpers written in inline PTX (one line each in the renderer's preludes) are replaced.
"""

from __future__ import annotations

import ctypes
import hashlib
import pathlib
import re
import shutil
import subprocess
import tempfile

import numpy as np

SHIM = r"""
#include <cmath>
#include <cstring>
#include <cstdint>
#include <ucontext.h>
#include <utility>
#include <vector>
#undef INFINITY
#undef NAN
#define __global__
#define __device__
#define __launch_bounds__(...)
#define __align__(n)
#define __restrict__ __restrict

struct uint4 { unsigned x, y, z, w; };
struct uint2 { unsigned x, y; };
struct float2 { float x, y; };
static inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }
static inline float2 make_float2(float x, float y) { return {x, y}; }
static inline float __int_as_float(int x) { float f; memcpy(&f, &x, 4); return f; }
static inline float __uint_as_float(unsigned x) { float f; memcpy(&f, &x, 4); return f; }
static inline int __float_as_int(float f) { int x; memcpy(&x, &f, 4); return x; }
static inline unsigned __float_as_uint(float f) { unsigned x; memcpy(&x, &f, 4); return x; }
static inline unsigned __funnelshift_r(unsigned lo, unsigned hi, unsigned s) {
  return (unsigned)((((unsigned long long)hi << 32) | lo) >> (s & 31)); }
static inline float __fadd_rn(float a, float b) { return a + b; }

// ---- fibers: every thread of a block; the scheduler always resumes the first (or, in reverse order, the last) one
// that can go on, so one warp runs as far ahead of the others as the barriers let it: a missing barrier shows ----
struct Dim { unsigned x, y, z; };
struct Barrier { int members = 0, arrived = 0; unsigned generation = 0; };
struct Fiber { ucontext_t context; bool done; const Barrier* waiting; unsigned generation; };
static ucontext_t gg_scheduler;
static std::vector<Fiber> gg_fibers;
static int gg_current = 0;
static Dim gg_block_index;
static unsigned char* gg_block_shared;
#define threadIdx (Dim{(unsigned)gg_current, 0u, 0u})
#define blockIdx gg_block_index

static std::vector<Barrier> gg_warp_barriers;
static Barrier gg_block_barrier;
static inline void gg_arrive(Barrier& b) {
  if (++b.arrived == b.members) { b.arrived = 0; b.generation++; return; }
  Fiber& me = gg_fibers[gg_current];
  me.waiting = &b, me.generation = b.generation;
  swapcontext(&me.context, &gg_scheduler);
  me.waiting = nullptr;
}
static inline void __syncthreads() { gg_arrive(gg_block_barrier); }
static inline void __syncwarp() { gg_arrive(gg_warp_barriers[gg_current / 32]); }

// a warp-wide instruction: every lane posts its operands, then every lane reads the others'
struct Posted { unsigned u[8]; float f[8]; };
static std::vector<Posted> gg_posted;
static inline Posted& gg_mine() { return gg_posted[gg_current]; }
static inline const Posted& gg_lane(int lane) { return gg_posted[gg_current / 32 * 32 + lane]; }
static inline void gg_exchange() { __syncwarp(); }

template <class T> static inline T __shfl_xor_sync(unsigned, T value, int mask) {
  memcpy(gg_mine().u, &value, sizeof(T)); gg_exchange();
  T out; memcpy(&out, gg_lane((gg_current % 32) ^ mask).u, sizeof(T)); gg_exchange(); return out;
}

// ---- shared memory, cp.async (a thread's copies land when it waits for their group), ldmatrix ----
struct Copy { unsigned dst; const void* src; unsigned bytes; };
static std::vector<std::vector<std::vector<Copy>>> gg_groups;  // a thread's groups, the open one last
static inline unsigned gg_smem(const void* p) { return (unsigned)((const unsigned char*)p - gg_block_shared); }
static inline void gg_cp_async16(unsigned dst, const void* src, unsigned bytes) {
  gg_groups[gg_current].back().push_back(Copy{dst, src, bytes}); }
static inline void gg_cp_async16(unsigned dst, const void* src) { gg_cp_async16(dst, src, 16); }
static inline void gg_cp_async_commit() { gg_groups[gg_current].emplace_back(); }
template <int N> static inline void gg_cp_async_wait() {
  auto& groups = gg_groups[gg_current];
  while ((int)groups.size() - 1 > N) {  // every committed group but the newest N
    for (const Copy& c : groups.front()) {
      memset(gg_block_shared + c.dst, 0, 16);
      memcpy(gg_block_shared + c.dst, c.src, c.bytes);
    }
    groups.erase(groups.begin());
  }
}
static inline unsigned short gg_shared16(unsigned address) {
  unsigned short x; memcpy(&x, gg_block_shared + address, 2); return x; }
// matrix j's rows are named by lanes 8j .. 8j+7; lane l gets row l/4, columns 2(l%4), +1 (transposed: column l/4)
static inline void gg_ldmatrix_any(unsigned* r, unsigned address, bool trans) {
  gg_mine().u[0] = address; gg_exchange();
  const int lane = gg_current % 32;
  for (int j = 0; j < 4; j++) {
    unsigned half[2];
    for (int e = 0; e < 2; e++) {
      const int row = trans ? 2 * (lane % 4) + e : lane / 4, col = trans ? lane / 4 : 2 * (lane % 4) + e;
      half[e] = gg_shared16(gg_lane(8 * j + row).u[0] + 2 * col);
    }
    r[j] = half[0] | half[1] << 16;
  }
  gg_exchange();
}
static inline void gg_ldmatrix(unsigned* r, unsigned address) { gg_ldmatrix_any(r, address, false); }
static inline void gg_ldmatrix_trans(unsigned* r, unsigned address) { gg_ldmatrix_any(r, address, true); }

// ---- 16-bit floats ----
static inline float gg_half(unsigned short x) { _Float16 h; memcpy(&h, &x, 2); return (float)h; }
static inline unsigned short gg_to_half(float f) {
  _Float16 h = (_Float16)f; unsigned short x; memcpy(&x, &h, 2); return x; }
static inline float gg_bf16(unsigned short x) { return __uint_as_float((unsigned)x << 16); }
static inline unsigned short gg_to_bf16(float f) {
  const unsigned u = __float_as_uint(f); return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16); }
static inline float gg_h2f(unsigned short x) { return gg_half(x); }
static inline unsigned short gg_f2h(float f) { return gg_to_half(f); }
static inline unsigned short gg_d2h(double d) { return gg_to_half((float)d); }
static inline unsigned gg_tf32(unsigned x) { return x; }
#ifdef GG_BF16
#define GG_FROM16 gg_bf16
#define GG_TO16 gg_to_bf16
#else
#define GG_FROM16 gg_half
#define GG_TO16 gg_to_half
#endif
static inline float gg_exp2(float x) { return exp2f(x); }
static inline unsigned gg_pack(float lo, float hi) { return GG_TO16(lo) | (unsigned)GG_TO16(hi) << 16; }

// mma.m16n8k16.row.col, float32 accumulators; element i of a fragment is half i%2 of register i/2 (PTX ISA tables)
static inline void gg_mma(float* d, const unsigned* a, const unsigned* b) {
  Posted& mine = gg_mine();
  for (int i = 0; i < 4; i++) mine.u[i] = a[i], mine.f[i] = d[i];
  mine.u[4] = b[0], mine.u[5] = b[1];
  gg_exchange();
  float big_a[16][16], big_b[16][8];
  for (int lane = 0; lane < 32; lane++) {
    const int g = lane / 4, t = lane % 4;
    for (int i = 0; i < 8; i++) {
      const int row = (i < 2 || (i >= 4 && i < 6)) ? g : g + 8, col = 2 * t + (i & 1) + (i >= 4 ? 8 : 0);
      big_a[row][col] = GG_FROM16((unsigned short)(gg_lane(lane).u[i / 2] >> (16 * (i % 2))));
    }
    for (int i = 0; i < 4; i++) {
      const unsigned short bits = (unsigned short)(gg_lane(lane).u[4 + i / 2] >> (16 * (i % 2)));
      big_b[2 * t + (i & 1) + (i >= 2 ? 8 : 0)][g] = GG_FROM16(bits);
    }
  }
  const int g = (gg_current % 32) / 4, t = gg_current % 4;
  float out[4];
  for (int i = 0; i < 4; i++) {
    const int row = i < 2 ? g : g + 8, col = 2 * t + (i & 1);
    float sum = mine.f[i];
    for (int k = 0; k < 16; k++) sum += big_a[row][k] * big_b[k][col];
    out[i] = sum;
  }
  gg_exchange();
  for (int i = 0; i < 4; i++) d[i] = out[i];
}
"""

LAUNCHER = r"""
template <class... P, size_t... I>
static void gg_call(void (*kernel)(P...), void** args, std::index_sequence<I...>) { kernel((P)args[I]...); }
template <class... P> static void gg_call(void (*kernel)(P...), void** args) {
  gg_call(kernel, args, std::index_sequence_for<P...>{}); }
static void** gg_args;
static void gg_fiber() { gg_call(KERNEL, gg_args); gg_fibers[gg_current].done = true; }

static int gg_next(int threads, bool reverse) {
  for (int i = 0; i < threads; i++) {
    const int t = reverse ? threads - 1 - i : i;
    const Fiber& f = gg_fibers[t];
    if (!f.done && (f.waiting == nullptr || f.waiting->generation != f.generation)) return t;
  }
  return -1;
}

// returns 0, or 1 where the block's threads wait for each other forever (a barrier some never reach)
extern "C" int gg_launch(void** args, int blocks, int threads, int reverse) {
  gg_args = args;
  std::vector<unsigned char> shared(gg_dynamic_shared_bytes + 16);
  std::vector<std::vector<char>> stacks(threads, std::vector<char>(1 << 18));
  gg_posted.assign(threads, Posted{});
  for (int block = 0; block < blocks; block++) {
    gg_block_index = Dim{(unsigned)block, 0u, 0u};
    memset(shared.data(), 0xff, shared.size());  // not zeros: a read before the copies shows
    gg_block_shared = shared.data();
    gg_warp_barriers.assign((threads + 31) / 32, Barrier{});
    for (auto& b : gg_warp_barriers) b.members = 32;
    gg_block_barrier = Barrier{};
    gg_block_barrier.members = threads;
    gg_groups.assign(threads, std::vector<std::vector<Copy>>(1));
    gg_fibers.assign(threads, Fiber{});
    for (int t = 0; t < threads; t++) {
      ucontext_t& c = gg_fibers[t].context;
      getcontext(&c);
      c.uc_stack.ss_sp = stacks[t].data();
      c.uc_stack.ss_size = stacks[t].size();
      c.uc_link = &gg_scheduler;
      makecontext(&c, gg_fiber, 0);
    }
    for (int t; (t = gg_next(threads, reverse)) >= 0;) {
      gg_current = t;
      swapcontext(&gg_scheduler, &gg_fibers[t].context);
    }
    for (const Fiber& f : gg_fibers)
      if (!f.done) return 1;
  }
  return 0;
}
"""


def compiler_missing() -> str | None:
    """Why kernels cannot be emulated here (no g++), or None."""
    return None if shutil.which("g++") else "the CUDA emulator needs g++"


def emulated_source(src: str, name: str) -> str:
    """The kernel's source made plain C++: its one-line PTX helpers dropped (the shim defines them), its dynamic
    shared array the block's emulated one."""
    kept = [line for line in src.splitlines() if not re.match(r"\s*(template <int N> )?static inline .*\basm\b", line)
            and not line.startswith("#define INFINITY") and not line.startswith("#define NAN")]  # fmt: skip
    body = "\n".join(kept).replace(
        "extern __shared__ __align__(128) unsigned char gg_shared[];", "unsigned char* gg_shared = gg_block_shared;"
    )
    defines = "#define GG_BF16\n" if ".bf16.bf16.f32" in src else ""
    constants = "#define INFINITY (__int_as_float(0x7f800000))\n#define NAN (__int_as_float(0x7fc00000))\n"
    return defines + SHIM + constants + body + "\n" + LAUNCHER.replace("KERNEL", name)


_loaded: dict[str, ctypes.CDLL] = {}


def emulate(src: str, name: str, blocks: int, threads: int, buffers: list[np.ndarray], reverse: bool = False) -> None:
    """Runs kernel `name` of `src` over `blocks` blocks of `threads` threads on `buffers` (written in place), the
    first threads first (the last, with `reverse`) as far as the barriers let them."""
    code = emulated_source(src, name)
    key = hashlib.sha256(code.encode()).hexdigest()[:16]
    if key not in _loaded:
        folder = pathlib.Path(tempfile.mkdtemp(prefix="gg-emulator-"))
        (folder / "kernel.cpp").write_text(code)
        command = ["g++", "-std=c++20", "-O1", "-shared", "-fPIC", "-w", "-o", str(folder / "kernel.so"),
                   str(folder / "kernel.cpp")]  # fmt: skip
        subprocess.run(command, check=True, capture_output=True, text=True)
        _loaded[key] = ctypes.CDLL(str(folder / "kernel.so"))
    pointers = (ctypes.c_void_p * len(buffers))(*(b.ctypes.data for b in buffers))
    if _loaded[key].gg_launch(pointers, blocks, threads, int(reverse)):
        raise RuntimeError(f"{name}: threads of a block wait at a barrier that others never reach")
