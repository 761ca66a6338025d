"""BEAM search: time candidate optimizations of a kernel on its device, keep the best N, cache the winner on disk.

`BEAM=N` makes every new kernel search: starting from the heuristics' choice (and from no optimizations, for small
kernels), each round applies every valid action (on a GPU LOCAL and GROUP too) to
each of the N fastest kernels so far, compiles and times the results on the device (on scratch buffers of the
kernel's sizes), and keeps the N fastest; it stops when a round finds nothing faster. The chosen actions are stored
in the disk cache (disk_cache.py, table "beam"), keyed by the kernel's AST, the device, its compiler, N and the
heuristics' choice (the search's starting point: when the heuristics change, an old winner found from a worse start is
searched again), so a second run does not search.
"""

from __future__ import annotations

import json
import struct
import time
from typing import TYPE_CHECKING

from glassgrad.codegen.checks import ERROR_SLOTS
from glassgrad.codegen.opt import MAX_BLOCK_THREADS, THREAD_OPS, Opt, block_threads, main_reduce
from glassgrad.disk_cache import cache_get, cache_put
from glassgrad.dtype import dtypes
from glassgrad.helpers import DEBUG, TF32, prod
from glassgrad.uop.ops import Ops, UOp

if TYPE_CHECKING:
    from glassgrad.runtime.device import Buffer

UPCAST_AMOUNTS = (2, 3, 4, 8, 16)
UNROLL_AMOUNTS = (2, 4, 8, 16)
TILE_AMOUNTS = (2, 4, 8, 16)
LOCAL_AMOUNTS = (2, 4, 8, 16, 32, 64, 128, 256)  # a block's threads along an output axis
GROUP_AMOUNTS = (2, 4, 8, 16, 32, 64, 128, 256)  # threads sharing a reduced axis's loop (need not divide it)
MAX_LANES = 256  # outputs and unrolled terms per iteration: beyond this the code stops fitting in registers
TIMING_RUNS = 3
WARMUP_RUNS = 4  # untimed runs of the first candidate: freshly written host memory reads slowly its first few times
SLOW_FACTOR = 3.0  # a candidate this much slower than the best after one run is not timed again
PLAIN_LOOPS_LIMIT = 2**24  # outputs times reduced terms: a kernel this small is also timed without any opts


def output_shape(ast: UOp) -> tuple[int, ...]:
    return ast.src[0].src[1].arg.shape


def reduce_size(ast: UOp) -> int:
    reduce = main_reduce(ast)
    return prod(reduce.src[0].shape[a] for a in reduce.arg[1]) if reduce is not None else 1


def valid(ast: UOp, opts: tuple[Opt, ...], has_local: bool = False) -> bool:
    """Every action splits a loop into a whole number of pieces (a GROUP's threads share a loop of 2 or more
    iterations, evenly or not), each reduced axis is unrolled and grouped once, lanes stay few, and a block holds its
    threads; LOCAL and GROUP only where the renderer has blocks of threads (`has_local`)."""
    out, red = list(output_shape(ast)), {}
    reduce = main_reduce(ast)
    if reduce is not None:
        red = {a: reduce.src[0].shape[a] for a in reduce.arg[1]}
    if any(o.op == "TC" for o in opts):  # a tensor-core kernel takes no other action (the seeds hold each one)
        return False
    lanes, unrolled, grouped = 1, set(), set()
    for o in opts:
        if o.op in THREAD_OPS and not has_local:
            return False
        sizes = red if o.op in ("UNROLL", "GROUP") else out
        if o.axis not in (sizes if o.op in ("UNROLL", "GROUP") else range(len(out))) or o.amount < 2:
            return False
        if o.op == "GROUP":
            if o.axis in grouped:
                return False
            grouped.add(o.axis)
            continue
        if sizes[o.axis] % o.amount or sizes[o.axis] == o.amount and o.op == "TILE":
            return False
        if o.op == "UNROLL":
            if o.axis in unrolled:
                return False
            unrolled.add(o.axis)
        if o.op in ("UPCAST", "UNROLL"):
            lanes *= o.amount
        if o.op in ("UPCAST", "UNROLL", "LOCAL"):
            sizes[o.axis] //= o.amount
        else:
            sizes[o.axis] = o.amount
    shared = all(red[a] >= 2 for a in grouped)  # what UNROLL leaves of a grouped loop
    return lanes <= MAX_LANES and shared and block_threads(opts) <= MAX_BLOCK_THREADS


def actions(ast: UOp, has_local: bool = False) -> list[Opt]:
    """Every single action that might apply to this kernel (LOCAL and GROUP where the renderer has blocks)."""
    out = output_shape(ast)
    reduce = main_reduce(ast)
    found = [Opt("UPCAST", a, n) for a in range(len(out)) for n in _amounts(UPCAST_AMOUNTS, out[a])]
    found += [Opt("TILE", a, n) for a in range(len(out)) for n in TILE_AMOUNTS]
    if has_local:
        found += [Opt("LOCAL", a, n) for a in range(len(out)) for n in _amounts(LOCAL_AMOUNTS, out[a])]
    if reduce is not None:
        full = reduce.src[0].shape
        found += [Opt("UNROLL", a, n) for a in reduce.arg[1] for n in _amounts(UNROLL_AMOUNTS, full[a])]
        if has_local:
            found += [Opt("GROUP", a, n) for a in reduce.arg[1] for n in GROUP_AMOUNTS if n <= full[a]]
    return found


def _amounts(amounts: tuple[int, ...], size: int) -> tuple[int, ...]:
    """The usual amounts, and the whole axis where it is short and none of them divides it (a 3x3 window, 5, 7)."""
    return amounts if size > max(amounts) or size in amounts else (*amounts, size)


class Timer:
    """Compiles and times candidate kernels of one AST on a device, on scratch buffers of the kernel's sizes."""

    def __init__(self, ast: UOp, device: str):
        from glassgrad.runtime.device import Buffer, Device

        self.ast, self.device = ast, Device[device]
        globals_ = sorted((u for u in ast.toposort() if u.op is Ops.DEFINE_GLOBAL), key=lambda u: u.arg)
        self.bufs = [_filled(Buffer(device, max(g.dtype.size, 1), g.dtype.base)) for g in globals_]
        self.warm = False  # until a candidate has run WARMUP_RUNS times on the buffers
        # where candidates with checks record failures, on scratch data that means nothing (not the device's own)
        self.errors = Buffer(device, ERROR_SLOTS, dtypes.int64).ensure_allocated()

    def seconds(self, opts: tuple[Opt, ...], best: float) -> float:
        """The median time of a few runs (one, when the first is much slower than `best`); inf if it fails."""
        from glassgrad.codegen import get_program

        try:
            spec = get_program(self.ast, self.device.renderer, opts)
            program = self.device.load(spec.name, spec.src)
        except Exception as error:  # a candidate the compiler rejects is simply not chosen
            if DEBUG >= 2:
                print(f"BEAM: {list(opts)} failed: {error}")
            return float("inf")
        handles = [b.handle for b in self.bufs] + ([self.errors.handle] if spec.checks else [])
        warmup, self.warm = (0 if self.warm else WARMUP_RUNS), True
        times = []
        for run in range(warmup + TIMING_RUNS):
            start = time.perf_counter()
            try:
                program(*handles, global_size=spec.global_size, local_size=spec.local_size, wait=True)
            except Exception as error:  # a block that asks for more registers than the GPU has does not launch
                if DEBUG >= 2:
                    print(f"BEAM: {list(opts)} failed to launch: {error}")
                return float("inf")
            if run >= warmup:
                times.append(time.perf_counter() - start)
            if times and times[0] > SLOW_FACTOR * best:
                break
        return sorted(times)[len(times) // 2]


def _filled(buf: Buffer) -> Buffer:
    """A scratch buffer with every element 1: memory never written reads as the one shared page of zeros, so a
    kernel timed on it would read from cache and memory-bound candidates would all look alike."""
    one = struct.pack(buf.dtype.fmt, 1) if buf.dtype.fmt else (0x3F80).to_bytes(2, "little")  # bfloat16's 1.0
    return buf.ensure_allocated().copyin(one * buf.size)


def _heuristic_opts(ast: UOp, device: str) -> tuple[Opt, ...]:
    from glassgrad.codegen.heuristics import hand_coded_opts
    from glassgrad.runtime.device import Device

    renderer = Device[device].renderer
    return tuple(hand_coded_opts(ast, renderer.vector_lanes, renderer.has_local))


def _cache_key(ast: UOp, device: str, width: int, heuristic: tuple[Opt, ...]) -> str:
    from glassgrad.runtime.device import Device

    tf32 = "\0tf32" if TF32 else ""  # TF32 adds the tensor cores' configurations for float32 products
    return f"{device}\0{Device[device].compiler.cache_key}\0{width}\0{heuristic}{tf32}\0{ast!r}"


def cached_opts(ast: UOp, device: str, width: int, heuristic: tuple[Opt, ...] | None = None) -> tuple[Opt, ...] | None:
    """The opts an earlier search chose for this kernel, device and width (from the heuristics' choice), or None."""
    key = _cache_key(ast, device, width, _heuristic_opts(ast, device) if heuristic is None else heuristic)
    if (found := cache_get("beam", key)) is None:
        return None
    return tuple(Opt(op, axis, amount) for op, axis, amount in json.loads(found))


def beam_search(ast: UOp, device: str, width: int) -> tuple[Opt, ...]:
    """The fastest opts a beam of `width` finds for this kernel on `device` (from the disk cache when searched)."""
    heuristic = _heuristic_opts(ast, device)  # the search's starting point, and part of its cache key
    if (found := cached_opts(ast, device, width, heuristic)) is not None:
        return found
    if prod(output_shape(ast)) == 0:
        return ()
    from glassgrad.codegen.tensor_cores import tensor_core_actions

    timer = Timer(ast, device)
    start = time.perf_counter()
    # the search starts from the hand-coded opts, and from none where plain loops cannot take long
    renderer = timer.device.renderer
    seeds = {heuristic}
    if prod(output_shape(ast)) * reduce_size(ast) <= PLAIN_LOOPS_LIMIT:
        seeds.add(())
    seeds |= {(tc,) for tc in tensor_core_actions(ast, timer.device.renderer)}  # every tile configuration that fits
    beam = sorted(((s, timer.seconds(s, float("inf"))) for s in seeds), key=lambda c: c[1])[:width]
    tried = set(seeds)
    while True:
        best = beam[0][1]
        candidates = []
        for opts, _ in beam:
            for action in actions(ast, renderer.has_local):
                new = opts + (action,)
                if new in tried or not valid(ast, new, renderer.has_local):
                    continue
                tried.add(new)
                candidates.append((new, timer.seconds(new, best)))
        merged = sorted(beam + candidates, key=lambda c: c[1])[:width]
        if merged[0][1] >= best:
            break
        beam = merged
    chosen = beam[0][0]
    if DEBUG >= 1:
        print(f"BEAM={width}: {list(chosen)} in {time.perf_counter() - start:.1f} s, {len(tried)} candidates, "
              f"{beam[0][1] * 1e6:.1f} us")  # fmt: skip
    cache_put(
        "beam",
        _cache_key(ast, device, width, heuristic),
        json.dumps([[o.op, o.axis, o.amount] for o in chosen]).encode(),
    )
    return chosen
