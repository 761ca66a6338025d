"""NVRTC's share of the GPU's cold start, measured without a GPU: the CUDA kernels of beautiful_mnist's first training
step (bench/startup.py's mnist case), rendered for an sm_90 device (H100, H200), compiled by NVRTC one after another
and in a pool of threads, as engine/realize.py's compile_ahead does.

Run: python bench/nvrtc_compile.py                 # sm_90, threads: every core, each way 3 times
     python bench/nvrtc_compile.py --threads 16 --options=--Ofast-compile=max

The step runs on a device registered here, SOURCES: the CPU's memory and the CUDA renderer of an sm_90 device (so
kernelize and codegen decide as for the GPU), with a compiler that keeps each source and makes no binary; its
kernels run as no-ops (the step's values are not looked at). Only NVRTC is timed: lowering the kernels (codegen's
Python) is the rest of a cold start. `--options` adds NVRTC options to each compile (their effect on the time; the
kernels' speed they change is not measured here).
"""

from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import numpy as np  # noqa: E402

from bench.common import lazy_mnist_step  # noqa: E402

STEP_BATCH = 512


def step_sources(arch: str) -> list[str]:
    """The CUDA C of every kernel the mnist step's first call compiles, in the order it compiles them."""
    os.environ["GLASSGRAD_CACHE_DIR"] = tempfile.mkdtemp(prefix="nvrtc-bench-")  # nothing served from a cache
    from examples.beautiful_mnist import Model
    from glassgrad import Device, Tensor, nn
    from glassgrad.renderer.cuda import HOPPER_CONFIGS, CUDARenderer
    from glassgrad.runtime.device import Compiled, Compiler, Program
    from glassgrad.runtime.ops_cpu import CPUAllocator

    sources: list[str] = []

    class KeepSource(Compiler):
        cache_key = f"sources for {arch}"

        def compile(self, src: str) -> bytes:
            sources.append(src)
            return b""

    class NoOp(Program):
        def __call__(self, *bufs, global_size=None, local_size=None, wait=False, vals=()) -> None:
            return None

    def open_sources(name: str) -> Compiled:
        renderer = CUDARenderer()
        if arch == "sm_90":
            renderer.tile_configs = HOPPER_CONFIGS  # as runtime/ops_cuda.py's CudaDevice sets it for sm_90
        return Compiled(name, CPUAllocator(), renderer, KeepSource(), NoOp)

    Device.register("SOURCES", open_sources)
    Device.DEFAULT = "SOURCES"
    rng = np.random.default_rng(0)
    step = lazy_mnist_step(Tensor, nn, Tensor.train, Model, rng)
    step(Tensor(rng.integers(0, 1024, STEP_BATCH, dtype=np.int32)).realize()).item()
    return sources


def nvrtc_compile(src: str, options: list[str]) -> float:
    """Seconds NVRTC takes to compile one source to a cubin."""
    from glassgrad.runtime import ops_cuda

    lib, program = ops_cuda.libnvrtc(), ctypes.c_void_p()
    start = time.perf_counter()
    assert lib.nvrtcCreateProgram(ctypes.byref(program), src.encode(), b"kernel.cu", 0, None, None) == 0
    try:
        encoded = (ctypes.c_char_p * len(options))(*(o.encode() for o in options))
        assert lib.nvrtcCompileProgram(program, len(options), encoded) == 0, ops_cuda.NVRTCCompiler._log(program)
        size = ctypes.c_size_t()
        lib.nvrtcGetCUBINSize(program, ctypes.byref(size))
        lib.nvrtcGetCUBIN(program, ctypes.create_string_buffer(size.value))
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(program))
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arch", default="sm_90")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--options", action="append", default=[], help="an NVRTC option added to every compile")
    args = parser.parse_args()
    from glassgrad.runtime import ops_cuda

    made = step_sources(args.arch)
    sources = list(dict.fromkeys(made))  # compile_ahead compiles each source once
    compiler = ops_cuda.NVRTCCompiler(args.arch)
    options = [[*compiler.options_for(src), *args.options] for src in sources]
    print(f"mnist step on {args.arch}: {len(made)} kernels, {len(sources)} sources; NVRTC options "
          f"{' '.join(compiler.options + args.options)}; {os.cpu_count()} cores here")  # fmt: skip
    each = [nvrtc_compile(src, opts) for src, opts in zip(sources, options)]  # (a warm-up, and each one's time)
    serial, pooled, cpu = [], [], []
    for _ in range(args.repeats):
        start, cpu_start = time.perf_counter(), time.process_time()
        for src, opts in zip(sources, options):
            nvrtc_compile(src, opts)
        serial.append(time.perf_counter() - start)
        start = time.perf_counter()
        with ThreadPoolExecutor(max_workers=args.threads) as pool:
            list(pool.map(nvrtc_compile, sources, options))
        pooled.append(time.perf_counter() - start)
        cpu.append(time.process_time() - cpu_start)
    slowest = sorted(zip(each, sources), reverse=True)[:3]
    print(f"one after another: {statistics.median(serial):.2f} s (median of {args.repeats}); "
          f"in {args.threads} threads: {statistics.median(pooled):.2f} s "
          f"({statistics.median(serial) / statistics.median(pooled):.2f}x); CPU time of both: "
          f"{statistics.median(cpu):.2f} s")  # fmt: skip
    print(
        f"per source: median {statistics.median(each) * 1e3:.0f} ms, slowest "
        + ", ".join(f"{t * 1e3:.0f} ms ({src.split('__global__ void ')[1].split('(')[0]})" for t, src in slowest)
    )


if __name__ == "__main__":
    main()
