"""The beautiful_mnist step's heaviest GPU kernels, each timed under the heuristics' opts and under other opt choices.

A tool for tuning the GPU heuristics (codegen/heuristics.py), not a comparison with other frameworks:
    CUDA=1 python bench/gpu_kernel_opts.py                (TOP=8 kernels, VARIANTS=150 opt choices each)
    CUDA=1 ASTS=asts.pkl python bench/gpu_kernel_opts.py  (the kernels of an earlier run, without training steps)
    CUDA=1 GROUPED=1 python bench/gpu_kernel_opts.py      (only kernels whose threads share sums; GROUPs refitted too)
It runs 3 training steps (no TinyJit), records every kernel's AST (pickled to $OUT/asts.pkl where OUT is set), times
each kernel under the heuristics, then for the TOP slowest times VARIANTS other opt choices (upcasts of up to three
output axes, unrolls of short reduced axes, the heuristics' LOCAL and GROUP kept or dropped), compiled in parallel.
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
import pickle
import random
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from glassgrad import getenv  # noqa: E402
from glassgrad.codegen.opt import THREAD_OPS, Opt, main_reduce  # noqa: E402
from glassgrad.uop.ops import Ops, UOp  # noqa: E402

TOP, VARIANTS, RUNS = getenv("TOP", 8), getenv("VARIANTS", 150), 7
GROUPED = getenv("GROUPED", 0)  # only kernels whose threads share sums (GROUP), with GROUPs fitted to each choice too
AMOUNTS = (2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32)


def capture_asts() -> list[UOp]:
    """Every distinct kernel AST that 3 training steps of bench/mnist.py's glassgrad run compile."""
    import numpy as np

    import glassgrad.engine.realize as realize
    from bench import mnist

    seen: dict[UOp, None] = {}
    original = realize.get_kernel

    def spy(device: str, ast: UOp):
        seen.setdefault(ast)
        return original(device, ast)

    realize.get_kernel = spy
    mnist.STEPS = 3
    data = mnist.load_mnist()
    batches = np.random.default_rng(0).integers(0, data[0].shape[0], size=(3, 512), dtype=np.int32)
    mnist.run_glassgrad(data, batches)
    realize.get_kernel = original
    return list(seen)


def variants(ast: UOp, base: tuple[Opt, ...], count: int, seed: int = 0) -> list[tuple[Opt, ...]]:
    """Up to `count` opt choices besides `base`: upcasts of up to three output axes (4..128 lanes), unrolls of short
    reduced axes, with the base's thread opts or none."""
    from glassgrad.codegen.search import valid

    shape = ast.src[0].src[1].arg.shape
    reduce = main_reduce(ast)
    short = [a for a in (reduce.arg[1] if reduce is not None else ()) if 1 < reduce.src[0].shape[a] <= 8]
    unrolls = [()] + [tuple(Opt("UNROLL", a, reduce.src[0].shape[a]) for a in c)
                      for n in (1, 2) for c in itertools.combinations(short, n)]  # fmt: skip
    axes = [a for a in range(len(shape)) if shape[a] > 1]
    upcasts = []
    for n in (1, 2, 3):
        for combo in itertools.combinations(axes[::-1], n):  # innermost axis first, as the heuristics order them
            for amounts in itertools.product(*([x for x in AMOUNTS if shape[a] % x == 0] for a in combo)):
                lanes = 1
                for x in amounts:
                    lanes *= x
                if 8 <= lanes <= 128:
                    upcasts.append(tuple(Opt("UPCAST", a, x) for a, x in zip(combo, amounts)))
    threads = [o for o in base if o.op in THREAD_OPS]
    families = [tuple(threads)] + ([()] if threads else []) + ([None] if GROUPED and threads else [])
    found = set()
    for t, u, r in itertools.product(families, upcasts, unrolls):
        opts = (t if t is not None else _blocks_for(ast, u + r)) + u + r
        lanes = 1
        for o in u + r:
            lanes *= o.amount
        if lanes <= 1024 and valid(ast, opts, has_local=True) and opts != base:
            found.add(opts)
    ordered = sorted(found, key=repr)
    random.Random(seed).shuffle(ordered)
    return ordered[:count]


def _blocks_for(ast: UOp, opts: tuple[Opt, ...]) -> tuple[Opt, ...]:
    """The heuristics' LOCALs and GROUPs (codegen/heuristics.py's _block) for a choice of upcasts and unrolls."""
    from glassgrad.codegen.heuristics import _accesses, _block

    accesses, live = _accesses(ast)
    local, groups = _block(ast, main_reduce(ast), list(opts), accesses, live)
    return tuple(local + groups)


def _compile(job: tuple[UOp, tuple[Opt, ...], str, bool]):
    """In a worker: lower, render and compile one choice (the disk cache keeps the binary for the parent)."""
    ast, opts, arch, fma = job
    from glassgrad.codegen import get_program
    from glassgrad.renderer.cuda import CUDARenderer
    from glassgrad.runtime.ops_cuda import NVRTCCompiler

    renderer = CUDARenderer()
    renderer.fuse_mulacc = renderer.chain_sums = fma
    try:
        spec = get_program(ast, renderer, opts)
        binary = NVRTCCompiler(arch).compile_cached(spec.src)
    except Exception as error:
        return None, f"{type(error).__name__}: {str(error)[:200]}"
    return (spec.name, spec.src, spec.global_size, spec.local_size, spec.ops, binary), None


def time_compiled(device, bufs, compiled) -> float:
    """Median seconds of RUNS launches (after one warm-up)."""
    from glassgrad.runtime.ops_cuda import CUDAProgram

    name, _, global_size, local_size, _, binary = compiled
    program = CUDAProgram(device, name, binary)
    handles = [b.handle for b in bufs]
    program(*handles, global_size=global_size, local_size=local_size, wait=True)
    return statistics.median(
        program(*handles, global_size=global_size, local_size=local_size, wait=True) for _ in range(RUNS)
    )


def scratch_buffers(ast: UOp, device: str):
    """Buffers of the kernel's sizes: floats uniform in [-1, 1), anything else zeros (an index stays in range)."""
    import numpy as np

    from glassgrad.runtime.device import Buffer

    globals_ = sorted((u for u in ast.toposort() if u.op is Ops.DEFINE_GLOBAL), key=lambda u: u.arg)
    rng = np.random.default_rng(1)
    bufs = []
    for g in globals_:
        size = max(g.dtype.size, 1)
        buf = Buffer(device, size, g.dtype.base).ensure_allocated()
        if g.dtype.base.name == "float":
            data = rng.uniform(-1, 1, size).astype(np.float32)
        else:
            data = np.zeros(size * g.dtype.base.itemsize, np.uint8)
        buf.copyin(memoryview(data).cast("B"))
        bufs.append(buf)
    return bufs


def main() -> None:
    from glassgrad.codegen import choose_opts
    from glassgrad.runtime.device import Device

    out = os.environ.get("OUT")
    if path := os.environ.get("ASTS"):
        with open(path, "rb") as f:
            asts = pickle.load(f)
    else:
        asts = capture_asts()
    if out:
        with open(os.path.join(out, "asts.pkl"), "wb") as f:
            pickle.dump(asts, f)
    device = Device["CUDA"]
    asts = [a for a in asts if a.op is Ops.SINK]
    pool = multiprocessing.get_context("spawn").Pool(max(1, (os.cpu_count() or 2) - 2))
    arch = device.compiler.arch
    base = {ast: choose_opts(ast, device.renderer) for ast in asts}
    jobs = [(ast, base[ast], arch, fma) for ast in asts for fma in (False, True)]
    results = pool.map(_compile, jobs)
    table = []
    for (ast, opts, _, fma), (compiled, error) in zip(jobs, results):
        if compiled is None:
            print(f"# {opts}: {error}")
            continue
        bufs = scratch_buffers(ast, "CUDA")
        table.append((ast, fma, compiled[0], time_compiled(device, bufs, compiled), compiled[4]))
    by_ast = {}
    for ast, fma, name, seconds, ops in table:
        by_ast.setdefault(ast, {})[fma] = (name, seconds, ops)
    rows = sorted(by_ast.items(), key=lambda kv: -kv[1].get(False, ("", 0.0, 0))[1])
    print(f"{'kernel':<34} {'opts':<60} {'us mul+add':>10} {'us fma':>8}")
    total = [0.0, 0.0]
    for ast, r in rows:
        name, seconds, _ = r.get(False, ("?", float("nan"), 0))
        fma_seconds = r.get(True, ("?", float("nan"), 0))[1]
        total[0] += seconds
        total[1] += fma_seconds
        print(f"{name:<34} {str(list(base[ast])):<60} {seconds * 1e6:10.1f} {fma_seconds * 1e6:8.1f}")
    print(f"{'total':<95} {total[0] * 1e6:10.1f} {total[1] * 1e6:8.1f}")
    sys.stdout.flush()
    log = open(os.path.join(out, "variants.txt"), "w") if out else sys.stdout
    summary = []
    searched = [(ast, r) for ast, r in rows if not GROUPED or any(o.op == "GROUP" for o in base[ast])]
    for ast, r in searched[:TOP]:
        name, base_seconds, ops = r[True]
        jobs = [(ast, opts, arch, True) for opts in variants(ast, base[ast], VARIANTS)]
        results = pool.map(_compile, jobs)
        bufs = scratch_buffers(ast, "CUDA")
        timed = []
        for (_, opts, _, _), (compiled, error) in zip(jobs, results):
            if compiled is None:
                continue
            try:
                timed.append((time_compiled(device, bufs, compiled), opts, compiled[0]))
            except Exception as error:  # too many registers for the block, say
                print(f"# {opts}: {error}", file=log)
        timed.sort(key=lambda t: t[0])
        print(f"\n{name} base {list(base[ast])} {base_seconds * 1e6:.1f} us (fma), {len(timed)} variants", file=log)
        for seconds, opts, vname in timed[:25]:
            print(f"  {seconds * 1e6:8.1f} us {ops / seconds * 1e-12:6.2f} TFLOP/s  {vname:<40} {list(opts)}", file=log)
        if timed:
            summary.append((name, base_seconds, timed[0]))
    print(f"\n{'kernel':<34} {'base us':>8} {'best us':>8}  best opts")
    for name, base_seconds, (seconds, opts, _) in summary:
        print(f"{name:<34} {base_seconds * 1e6:8.1f} {seconds * 1e6:8.1f}  {list(opts)}")
    pool.close()


if __name__ == "__main__":
    main()
