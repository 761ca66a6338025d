"""BEAM search: time candidate optimizations of a kernel on its device, keep the best N, cache the winner on disk.

`BEAM=N` makes every new kernel search: starting from the heuristics' choice (and from no optimizations, for small
kernels), each round applies every valid action (codegen/search.py; on a GPU LOCAL and GROUP too) to each of the N
fastest kernels so far, compiles and times the results on the device (on scratch buffers of the kernel's sizes), and
keeps the N fastest; it stops when a round finds nothing faster. The chosen actions are stored in the disk cache
(disk_cache.py, table "beam"), keyed by the kernel's AST, the device, its compiler, N and the heuristics' choice (the
search's starting point: when the heuristics change, an old winner found from a worse start is searched again), so a
second run does not search.
"""

from __future__ import annotations

import json
import struct
import time

from glassgrad.codegen import get_program, symbolic_kernel
from glassgrad.codegen.attention import is_attention
from glassgrad.codegen.checks import ERROR_SLOTS
from glassgrad.codegen.heuristics import renderer_opts
from glassgrad.codegen.opt import Opt
from glassgrad.codegen.search import actions, output_shape, reduce_size, valid
from glassgrad.codegen.tensor_cores import tensor_core_actions
from glassgrad.disk_cache import cache_get, cache_put
from glassgrad.dtype import dtypes
from glassgrad.engine.program_cache import source_digest
from glassgrad.helpers import BEAM, DEBUG, NOOPT, TF32, prod
from glassgrad.runtime.device import Buffer, Device
from glassgrad.uop.ops import Ops, UOp

TIMING_RUNS = 3
WARMUP_RUNS = 4  # untimed runs of the first candidate: freshly written host memory reads slowly its first few times
SLOW_FACTOR = 3.0  # a candidate this much slower than the best after one run is not timed again
PLAIN_LOOPS_LIMIT = 2**24  # outputs times reduced terms: a kernel this small is also timed without any opts


def beam_opts(ast: UOp, device: str) -> tuple[Opt, ...] | None:
    """The opts a BEAM=N search chooses for the kernel, or None where BEAM is off (codegen chooses: NOOPT, the
    heuristics, tensor cores)."""
    searched = BEAM >= 1 and not NOOPT and not symbolic_kernel(ast) and not is_attention(ast)  # (written whole)
    return beam_search(ast, device, int(BEAM)) if searched else None


class Timer:
    """Compiles and times candidate kernels of one AST on a device, on scratch buffers of the kernel's sizes."""

    def __init__(self, ast: UOp, device: str):
        self.ast, self.device = ast, Device[device]
        globals_ = sorted((u for u in ast.toposort() if u.op is Ops.DEFINE_GLOBAL), key=lambda u: u.arg)
        self.bufs = [_filled(Buffer(device, max(g.dtype.size, 1), g.dtype.base)) for g in globals_]
        self.warm = False  # until a candidate has run WARMUP_RUNS times on the buffers
        # where candidates with checks record failures, on scratch data that means nothing (not the device's own)
        self.errors = Buffer(device, ERROR_SLOTS, dtypes.int64).ensure_allocated()

    def seconds(self, opts: tuple[Opt, ...], best: float) -> float:
        """The median time of a few runs (one, when the first is much slower than `best`); inf if it fails."""
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
    renderer = Device[device].renderer
    return tuple(renderer_opts(ast, renderer))


def _cache_key(ast: UOp, device: str, width: int, heuristic: tuple[Opt, ...]) -> str:
    tf32 = "\0tf32" if TF32 else ""  # TF32 adds the tensor cores' configurations for float32 products
    # the source's digest: an Opt names an action or a tile configuration by its place in lists the code defines
    return f"{source_digest()}\0{device}\0{Device[device].compiler.cache_key}\0{width}\0{heuristic}{tf32}\0{ast!r}"


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
