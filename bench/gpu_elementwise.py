"""How an elementwise kernel maps onto the GPU: threads per block, and elements (and load width) per thread.

Run (on a machine with an NVIDIA GPU): python bench/gpu_elementwise.py      ELEMENTS=268435456 (the default)

The work is bench/gpu.py's 5-op chain ((a + b) * a - b) * 0.5 + 1 over 256M float32; GB/s counts two reads and one
write. Variants: glassgrad's own kernel, rendered with one element a thread and with THREAD_ITEMS (renderer/cuda.py),
launched with 128 to 1024 threads a block; hand-written kernels doing the same arithmetic with 4 or 8 elements a
thread in float4 loads and stores, or 4 scalar elements a thread a block's width apart. PyTorch's device-to-device
copy of 1 GiB (read plus write) is the reference. Each kernel's output is checked against NumPy. Median of 20
launches timed with CUDA events.
"""

from __future__ import annotations

import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import numpy as np  # noqa: E402

from glassgrad import Device, Tensor  # noqa: E402
from glassgrad.codegen import get_program  # noqa: E402
from glassgrad.engine.realize import CompiledKernel, buffer_of  # noqa: E402
from glassgrad.renderer import cuda as cuda_renderer  # noqa: E402
from glassgrad.runtime import ops_cuda  # noqa: E402

N = int(os.environ.get("ELEMENTS", 1 << 28))
MATH = "((((x+y)*x)+(-y))*0.5f)+1.0f"
SIGNATURE = (
    'extern "C" __global__ void k({t}* __restrict__ out, const {t}* __restrict__ a, '
    "const {t}* __restrict__ b, int n) {{"
)


HAND_WRITTEN = {  # name: (source, elements a thread)
    "float4, 1 vector a thread": (
        f"""
{SIGNATURE.format(t="float4")}
  int i = blockIdx.x*blockDim.x+threadIdx.x; if (i < n) {{
    float4 p = a[i], q = b[i], r;
    {"".join(f"{{ float x = p.{c}, y = q.{c}; r.{c} = {MATH}; }}" for c in "xyzw")}
    out[i] = r; }} }}""",
        4,
    ),
    "float4, 2 vectors a thread": (
        f"""
{SIGNATURE.format(t="float4")}
  int i = 2*(blockIdx.x*blockDim.x)+threadIdx.x;
  float4 p[2], q[2];
  for (int j = 0; j < 2; j++) if (i+j*blockDim.x < n) {{ p[j] = a[i+j*blockDim.x]; q[j] = b[i+j*blockDim.x]; }}
  for (int j = 0; j < 2; j++) if (i+j*blockDim.x < n) {{ float4 r;
    {"".join(f"{{ float x = p[j].{c}, y = q[j].{c}; r.{c} = {MATH}; }}" for c in "xyzw")}
    out[i+j*blockDim.x] = r; }} }}""",
        8,
    ),
    "scalar, 4 a thread (strided by block)": (
        f"""
{SIGNATURE.format(t="float")}
  int i = 4*(blockIdx.x*blockDim.x)+threadIdx.x;
  for (int j = 0; j < 4; j++) {{ int e = i+j*blockDim.x; if (e < n) {{ float x = a[e], y = b[e]; out[e] = {MATH}; }} }}
}}""",
        4,
    ),
}


def event_median(launch, repeats: int = 20) -> float:
    """Median seconds of launch() timed with CUDA events (after 3 warm-ups)."""
    for _ in range(3):
        launch()
    times = []
    for _ in range(repeats):
        with ops_cuda.EventTimer(True) as timer:
            launch()
        times.append(timer.seconds)
    return statistics.median(times)


def main() -> None:
    import torch

    device = Device["CUDA"]
    rng = np.random.default_rng(0)
    a_np, b_np = rng.random(N, dtype=np.float32), rng.random(N, dtype=np.float32)
    expected = ((a_np + b_np) * a_np - b_np) * 0.5 + 1
    a, b = Tensor(a_np, device="CUDA").realize(), Tensor(b_np, device="CUDA").realize()
    nbytes = 3 * 4 * N
    ta = torch.from_numpy(a_np).cuda()
    dst = torch.empty_like(ta)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(23):
        start.record()
        dst.copy_(ta)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    copy = 2 * 4 * N / statistics.median(times[3:]) / 1e9
    rows = [("PyTorch copy (reference)", copy)]

    out = ((a + b) * a - b) * 0.5 + 1
    (item,) = [i for i in out.schedule() if i.ast.op.name == "SINK"]
    bufs = [buffer_of(node).ensure_allocated() for node in item.bufs]
    for items in (1, cuda_renderer.THREAD_ITEMS):
        saved, cuda_renderer.THREAD_ITEMS = cuda_renderer.THREAD_ITEMS, items
        spec = get_program(item.ast, cuda_renderer.CUDARenderer())
        cuda_renderer.THREAD_ITEMS = saved
        kernel = CompiledKernel("CUDA", spec, device.load(spec.name, spec.src))
        for block in (128, 256, 512, 1024):
            ops_cuda.BLOCK_SIZE = block
            bufs[0].copyin(np.full(N, np.nan, np.float32).tobytes())  # poisoned: every element must be written
            seconds = event_median(lambda kernel=kernel: kernel(bufs, wait=False))
            got = np.frombuffer(bufs[0].as_bytes(), np.float32)
            assert np.array_equal(got, expected), f"glassgrad kernel ({items} a thread, {block} a block) is wrong"
            rows.append((f"glassgrad kernel, {items} a thread, {block} threads a block", nbytes / seconds / 1e9))

    for name, (src, per_thread) in HAND_WRITTEN.items():
        program = ops_cuda.CUDAProgram(device, "k", device.compiler.compile(src))
        vectors = N // 4 if "float4" in name else N
        count = ctypes_int(vectors)
        for block in (128, 256, 512):
            bufs[0].copyin(np.full(N, np.nan, np.float32).tobytes())  # poisoned: every element must be written
            grid = (N + block * per_thread - 1) // (block * per_thread)
            params = _params(bufs[0].handle, _handle(a), _handle(b), count)

            def launch(grid=grid, block=block, params=params, program=program):
                ops_cuda.cu("cuLaunchKernel", program.function, grid, 1, 1, block, 1, 1, 0, None, params[1], None)

            seconds = event_median(launch)
            got = np.frombuffer(bufs[0].as_bytes(), np.float32)
            assert np.array_equal(got, expected), f"{name} at {block} threads a block is wrong"
            rows.append((f"{name}, {block} threads a block", nbytes / seconds / 1e9))

    print(f"# {device.gpu_name}; {N:,} float32; 5-op chain")
    print(f"{'variant':<52} {'GB/s':>9} {'of copy':>8}")
    for name, gbs in rows:
        print(f"{name:<52} {gbs:9.1f} {gbs / copy:8.2f}")


def ctypes_int(value: int):
    return ops_cuda.ctypes.c_int(value)


def _handle(t: Tensor) -> int:
    from glassgrad.engine.realize import buffer_of

    return buffer_of(t.uop.base).handle


def _params(*values):
    """Kernel arguments (pointers, then an int) and the array of their addresses, kept together."""
    ctypes = ops_cuda.ctypes
    args = [ctypes.c_uint64(v) if not isinstance(v, ctypes.c_int) else v for v in values]
    pointers = (ctypes.c_void_p * len(args))(*(ctypes.addressof(x) for x in args))
    return args, pointers


if __name__ == "__main__":
    main()
