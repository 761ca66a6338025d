"""Run many cases: in this process (`run_cases`), or in a child process that a crash cannot take the run down with
(`run_guarded`): the child reports each case as it starts and ends, so the case that killed it is named, and a
fresh child goes on with the next."""

from __future__ import annotations

import faulthandler
import multiprocessing as mp
import os
import signal
import time
import traceback
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from .generator import generate
from .known import KNOWN_FAILURES
from .runner import Failure, check, render, shrink

HANG_SECONDS = 300  # a case with no answer after this long is a hang (cases take about a second)
# a fresh child after this many cases: each compiled kernel stays loaded (a shared library mapped into the process),
# and a process that loaded ~50,000 failed with "cannot apply additional memory protection after relocation"
CASES_PER_CHILD = 1000


@dataclass
class Options:
    device: str | None = None
    ops: list[str] | None = None
    exclude: frozenset[str] = frozenset()
    shrink: bool = True
    die_on: int | None = None  # the seed whose case kills its process (a test of the guard)


@dataclass
class Result:
    seed: int
    kind: str | None  # None: passed
    message: str = ""
    reproducer: str = ""
    ops: list[str] = field(default_factory=list)
    known: list[str] = field(default_factory=list)  # the known failures (known.py) the failing values touch


def run_case(seed: int, opts: Options) -> Result:
    """Generate the case of `seed`, run it, shrink a failure; exceptions of the fuzzer itself are failures too."""
    if seed == opts.die_on:
        os.kill(os.getpid(), signal.SIGSEGV)
    try:
        program = generate(seed, opts.device, opts.ops, opts.exclude)
    except Exception:  # noqa: BLE001 - a bug of the generator is reported, not hidden
        return Result(seed, "fuzzer-error:generate", traceback.format_exc(limit=4))
    try:
        failure = check(program)
        if failure is not None and opts.shrink:
            failure = shrink(failure)
        if failure is not None:
            known = sorted(failure.touches() & set(KNOWN_FAILURES))
            return Result(seed, failure.kind, failure.message, failure.reproducer(), program.ops(), known)
    except Exception:  # noqa: BLE001
        return Result(seed, "fuzzer-error:check", traceback.format_exc(limit=6), render(program, program.outputs, True))
    return Result(seed, None, ops=program.ops())


def run_cases(seeds, opts: Options, report=None) -> list[Result]:
    """Each case in this process (a crash ends the process: see run_guarded)."""
    results = []
    for seed in seeds:
        r = run_case(seed, opts)
        results.append(r)
        if report:
            report(r)
    return results


def _child(conn, seeds, opts: Options) -> None:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    torch.set_num_threads(1)
    for seed in seeds[:CASES_PER_CHILD]:
        conn.send(("start", seed))
        # a case that hangs prints every thread's stack (to stderr) before the parent gives up on it
        faulthandler.dump_traceback_later(HANG_SECONDS - 20)
        result = run_case(seed, opts)
        faulthandler.cancel_dump_traceback_later()
        conn.send(("done", result))
    conn.send(("end", None))


def run_guarded(seeds: list[int], opts: Options, report=None, timeout: float | None = None) -> list[Result]:
    """The cases in child processes; a child that dies or hangs fails the case it was on, and the rest go on."""
    timeout = timeout or HANG_SECONDS
    ctx = mp.get_context("spawn")
    results: list[Result] = []
    todo = list(seeds)
    while todo:
        parent, child = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_child, args=(child, todo, opts), daemon=True)
        proc.start()
        child.close()
        current = None
        while True:
            if not parent.poll(timeout):
                proc.kill()
                kind, why = "hang", f"no answer in {timeout:.0f} s"
                break
            try:
                tag, payload = parent.recv()
            except EOFError:
                proc.join()
                kind, why = "crash", f"the process died (exit code {proc.exitcode}: a signal if negative)"
                break
            if tag == "start":
                current = payload
            elif tag == "done":
                results.append(payload)
                todo.remove(payload.seed)
                current = None
                if report:
                    report(payload)
            else:
                proc.join()
                kind = None
                break
        if current is None or kind is None:
            continue
        results.append(_crash_result(current, opts, kind, why))
        todo.remove(current)
        if report:
            report(results[-1])
    return results


def run_parallel(seeds: list[int], opts: Options, report, jobs: int) -> list[Result]:
    """run_guarded in `jobs` child processes side by side, each with every jobs-th seed."""
    with ThreadPoolExecutor(jobs) as pool:
        parts = pool.map(lambda k: run_guarded(seeds[k::jobs], opts, report), range(jobs))
        return sorted((r for part in parts for r in part), key=lambda r: r.seed)


def _crash_result(seed: int, opts: Options, kind: str, why: str) -> Result:
    """A case that killed its process, shrunk to the first value whose program alone kills a fresh one."""
    program = generate(seed, opts.device, opts.ops, opts.exclude)
    outputs = program.outputs
    if kind == "crash" and opts.shrink and seed != opts.die_on:
        ctx = mp.get_context("spawn")
        for step in program.steps:
            if step.out not in program.values and step is not program.steps[-1]:
                continue
            proc = ctx.Process(target=_check_alone, args=(seed, opts, step.out), daemon=True)
            proc.start()
            proc.join(300)
            if proc.exitcode is not None and proc.exitcode < 0:
                outputs = [step.out]
                break
    last = next((s.op for s in program.steps if s.out == outputs[-1]), "input")
    failure = Failure(f"{kind}:{last}", why, program, outputs, outputs == program.outputs)
    known = sorted(failure.touches() & set(KNOWN_FAILURES))
    return Result(seed, failure.kind, why, failure.reproducer(), program.ops(), known)


def _check_alone(seed: int, opts: Options, name: str) -> None:
    """(In a child) run the case's program with only `name` as its output."""
    check(generate(seed, opts.device, opts.ops, opts.exclude), [name], grads=False)


def summary(results: list[Result], seconds: float) -> str:
    """The closing note: counts, then each failure kind with its count, the known failures its cases touch
    (known.py), and one reproducer (the shortest)."""
    failed = [r for r in results if r.kind]
    kinds = Counter(r.kind for r in failed)
    lines = [f"{len(results)} cases, {len(results) - len(failed)} passed, {len(failed)} failed in {seconds:.0f} s"]
    for kind, n in kinds.most_common():
        cases = [r for r in failed if r.kind == kind]
        example = min(cases, key=lambda r: len(r.reproducer))
        first_line = example.message.strip().splitlines()[0][:400] if example.message.strip() else ""
        known = Counter(", ".join(r.known) or "none" for r in cases)
        lines += ["", f"=== {kind}: {n} case(s); seeds {[r.seed for r in cases][:10]}; known: {dict(known)}",
                  f"--- seed {example.seed}: {first_line}", example.reproducer]  # fmt: skip
    ops = Counter(op for r in results for op in r.ops)
    lines += ["", f"ops run: {len(ops)} kinds, {sum(ops.values())} steps"]
    return "\n".join(lines)


def timed(fn, *args, **kwargs):
    start = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - start
