"""realize(): run a schedule's kernels on their devices, with DEBUG output and GlobalCounters."""

from __future__ import annotations

import os
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

from glassgrad.codegen import ProgramSpec, get_program
from glassgrad.engine import program_cache
from glassgrad.engine.beam import beam_opts
from glassgrad.engine.checks import error_buffer, raise_failed_checks
from glassgrad.engine.compile_progress import CompileProgress
from glassgrad.engine.debug import copy_ran, kernel_ran
from glassgrad.engine.memory import plan_memory
from glassgrad.engine.threads import captures
from glassgrad.helpers import BEAM, DEBUG, NOOPT, TF32
from glassgrad.runtime.counters import GlobalCounters
from glassgrad.runtime.device import Buffer, Device, Program
from glassgrad.schedule import ScheduleItem
from glassgrad.uop.ops import Ops, UOp, live_nodes
from glassgrad.uop.variable import UnboundVariableError

# The memory behind each BUFFER node lives exactly as long as the node does: it is kept on the node (a hot path's
# lookup, and nothing else to set up or tear down per buffer; TinyJit asks which buffers are held by a walk over the
# live nodes, once per capture).


def held_buffers() -> list[Buffer]:
    """The Buffers of the BUFFER nodes alive now."""
    return [
        found for node in live_nodes() if node.op is Ops.BUFFER and (found := node.__dict__.get("_buffer")) is not None
    ]


def share_buffer(alias: UOp, node: UOp) -> None:
    """Make the BUFFER node `alias` name the same memory as `node` (a new name for a buffer an assign changed)."""
    alias.__dict__["_buffer"] = buffer_of(node)


def buffer_of(node: UOp) -> Buffer:
    """The Buffer of a BUFFER node (allocated lazily)."""
    if (found := node.__dict__.get("_buffer")) is None:
        found = node.__dict__["_buffer"] = Buffer(node.device, node.arg, node.dtype)
    return found


def handles_of(bufs: Sequence[Buffer]) -> list:
    """The buffers' device handles (each allocated now if it was not)."""
    return [b._handle or b.handle for b in bufs]  # (an allocated buffer's own handle: no property call)


class CompiledKernel:
    """A program ready to run on one device, with what DEBUG prints about it."""

    def __init__(self, device: str, spec: ProgramSpec, program: Program):
        self.device, self.spec, self.program = device, spec, program
        self.plans: weakref.WeakSet[RunPlan] = weakref.WeakSet()  # the run plans that call it

    def __call__(self, bufs: list[Buffer], wait: bool, var_vals: dict[UOp, int] | None = None) -> float | None:
        return self.launch(handles_of(bufs), wait, var_vals)

    def launch(self, handles: list, wait: bool, var_vals: dict[UOp, int] | None = None) -> float | None:
        """Run on these buffers' handles (handles_of); the seconds it took where `wait`."""
        spec = self.spec
        if not spec.vars:  # a Program of a device registered before Variables (its __call__ without `vals`) runs
            # every kernel without them as it did
            return self.program(*handles, global_size=spec.global_size, local_size=spec.local_size, wait=wait)
        vals = tuple([var_vals[v] for v in spec.vars])  # (a missing value: RunPlan and lower_item checked)
        return self.program(*handles, global_size=spec.global_size, local_size=spec.local_size, wait=wait, vals=vals)


# The kernels compiled in this process, the most recently used last. Past KERNEL_CACHE_SIZE the least recently used
# is forgotten (and unloaded once nothing else, a TinyJit's capture say, holds it): a program that makes a new kernel
# every call (a new constant in each, or a new shape) would otherwise grow by a loaded library per call.
KERNEL_CACHE_SIZE = 1024
_kernels: OrderedDict[tuple[str, UOp, int, int, int], CompiledKernel] = OrderedDict()


def get_kernel(device: str, ast: UOp) -> CompiledKernel:
    """Compile an AST for a device once per process (its spec and binary are also cached on disk)."""
    return get_kernels([(device, ast)])[0]


def get_kernels(kernels: list[tuple[str, UOp]]) -> list[CompiledKernel]:
    """The compiled kernel of each (device, AST): those made before found by one lookup each, the others made
    together (compile_ahead)."""
    flags = kernel_flags()
    keys = [_kernel_key(device, ast, flags) for device, ast in kernels]
    found = [_kernels.get(key) for key in keys]
    if None in found:
        made = compile_ahead(kernels)
        found = [kernel if kernel is not None else made.get(key) or _kernels[key] for key, kernel in zip(keys, found)]
    for key in keys:
        if key in _kernels:  # (a schedule of more kernels than are kept may have pushed out its first)
            _kernels.move_to_end(key)
    return found


def _keep(key: tuple, kernel: CompiledKernel) -> CompiledKernel:
    _kernels[key] = kernel
    while len(_kernels) > KERNEL_CACHE_SIZE:
        _, forgotten = _kernels.popitem(last=False)
        for plan in list(forgotten.plans):  # (a plan must not keep it loaded)
            plan.drop()
    return kernel


def compile_ahead(kernels: list[tuple[str, UOp]]) -> dict[tuple, CompiledKernel]:
    """Make the (device, AST) kernels not made yet in this process, and return those it made by key.

    Each spec comes from the program cache on disk where an earlier process made it, else codegen makes it (Python,
    in order) and it is kept there. Then every source not loaded yet is compiled once (two kernels may render the
    same source), side by side: the compilers (NVRTC through ctypes, the C compiler as a process) run outside the GIL,
    so a first run's compile time (a training step's hundred kernels) is shared among the cores."""
    todo = {key: (device, ast) for device, ast in kernels if (key := _kernel_key(device, ast)) not in _kernels}
    if not todo:
        return {}
    with CompileProgress(len(todo), ", ".join(sorted({device for device, _ in todo.values()}))):
        if len(todo) == 1:  # no pool for one: an eager op's new kernel
            ((key, (device, ast)),) = todo.items()
            specs, compiled = {key: (device, _cached_spec(key, device, ast))}, {}
        else:
            specs, compiled = _specs_and_binaries(todo)
    made = {}
    for key, (device, spec) in specs.items():
        program = Device[device].load(spec.name, spec.src, compiled.get((device, spec.src)))
        made[key] = _keep(key, CompiledKernel(device, spec, program))
    return made


def _specs_and_binaries(todo: dict[tuple, tuple[str, UOp]]) -> tuple[dict, dict[tuple[str, str], bytes]]:
    """Each kernel's spec, made in order, and the binary of each source not loaded yet, compiled once each in a pool
    of threads as soon as its spec is made (so the compilers run while the next kernels are lowered)."""
    specs, pending = {}, {}
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        for key, (device, ast) in todo.items():
            specs[key] = (device, spec := _cached_spec(key, device, ast))
            if (device, spec.src) not in pending and spec.src not in Device[device].programs:
                pending[(device, spec.src)] = pool.submit(Device[device].compiler.compile_cached, spec.src)
        return specs, {found: future.result() for found, future in pending.items()}


def kernel_flags() -> tuple[int, int, int]:
    # the flags choose the optimizations (TF32: whether a float32 product may run as TF32), so each gets its own program
    return NOOPT.value, BEAM.value, TF32.value


def _kernel_key(device: str, ast: UOp, flags: tuple[int, int, int] | None = None) -> tuple:
    return (device, ast, *(kernel_flags() if flags is None else flags))


def _cached_spec(key: tuple, device: str, ast: UOp) -> ProgramSpec:
    """The kernel's spec from the program cache on disk, else made by codegen (and kept there)."""
    flags = key[2:]
    if (spec := program_cache.load_spec(device, ast, flags)) is None:
        spec = _program_spec(device, ast)
        program_cache.store_spec(device, ast, flags, spec)
    elif DEBUG >= 3:
        print(f"optimizations: {list(spec.opts) or 'none'} (from the program cache)")
        print(spec.src)
    return spec


# set by viz/recorder.py while it records (VIZ=1): it makes each kernel's program by calling the function it is given
compile_tracer: Callable[[str, UOp, Callable[[str, UOp], ProgramSpec]], ProgramSpec] | None = None


def _make_program(device: str, ast: UOp) -> ProgramSpec:
    return get_program(ast, Device[device].renderer, beam_opts(ast, device))


def _program_spec(device: str, ast: UOp) -> ProgramSpec:
    """Optimize, lower and render one kernel (DEBUG=3 prints its actions and source, DEBUG=4 its AST and program)."""
    if DEBUG >= 4:
        print(f"--- kernel AST ---\n{ast}")
    if compile_tracer is None:
        spec = _make_program(device, ast)
    else:  # VIZ=1 records the kernel and lists the rewrites made while its program is made under it
        spec = compile_tracer(device, ast, _make_program)
    if DEBUG >= 4:
        print(
            "--- linear program ---\n"
            + "\n".join(
                f"{i:4d} {u.op.name:<14} {u.dtype!r:<22} {[spec.program.index(s) for s in u.src]} {u.arg!r}"
                for i, u in enumerate(spec.program)
            )
        )
    if DEBUG >= 3:
        print(f"optimizations: {list(spec.opts) or 'none'}")
        print(spec.src)
    return spec


class CopyRunner:
    """Moves a buffer's bytes to a buffer on another device (directly where the devices can, else via the host);
    from `start` bytes into the source where that is a part of a file (DISK)."""

    def __init__(self, start: int = 0):
        self.start = start

    def __call__(self, bufs: list[Buffer], wait: bool) -> float | None:
        dst, src = bufs
        start = time.perf_counter()
        dst.copy_from(src, self.start)
        copy_ran(dst.nbytes, src.device, dst.device, time.perf_counter() - start)
        return None


class Runner(Protocol):
    """What an ExecItem runs: a kernel, a copy, or a collective (glassgrad/distributed/) on its buffers."""

    def __call__(self, bufs: list[Buffer], wait: bool) -> float | None: ...


class ExecItem:
    """One step of a run: a compiled kernel, a copy or a collective, with the buffers it works on (it writes the
    first)."""

    def __init__(self, runner: CompiledKernel | Runner, bufs: list[Buffer], var_vals: dict[UOp, int] | None = None):
        self.runner, self.bufs, self.var_vals = runner, bufs, var_vals or {}

    def run(self, var_vals: dict[UOp, int] | None = None) -> None:
        """Run on this item's buffers (a TinyJit replay puts its inputs into them first), with its Variables' values
        (a replay's own, where given)."""
        run_step(self.runner, self.bufs, self.var_vals if var_vals is None else var_vals)


def run_step(runner: CompiledKernel | Runner, bufs: list[Buffer], var_vals: dict[UOp, int]) -> None:
    """Run a kernel, a copy or a collective on its buffers; a kernel is counted (and timed under DEBUG=2)."""
    if not isinstance(runner, CompiledKernel):  # a copy or a collective: no kernel to count
        runner(bufs, wait=DEBUG.value >= 2)
        return
    seconds = runner(bufs, DEBUG.value >= 2, var_vals)  # (a buffer is allocated when its handle is read)
    _count(1, runner.spec.ops, runner.spec.mem)
    if seconds is not None:
        _timed(runner, seconds)


def _count(kernels: int, ops: int, mem: int) -> None:
    """Add kernels that ran to the counters."""
    GlobalCounters.kernel_count += kernels
    GlobalCounters.global_ops += ops
    GlobalCounters.global_mem += mem


def _timed(kernel: CompiledKernel, seconds: float) -> None:
    """A timed run's seconds (DEBUG=2) added to the counters and shown."""
    GlobalCounters.time_sum_s += seconds
    kernel_ran(kernel.device, kernel.spec, seconds)


def lower_item(item: ScheduleItem, bufs: list[Buffer] | None = None, var_vals: dict[UOp, int] | None = None
               ) -> ExecItem:  # fmt: skip
    """The ExecItem of a schedule item: a copy, or its kernel compiled for the output's device (with the values of
    its Variables, from `var_vals`)."""
    bufs = bufs or [buffer_of(b) for b in item.bufs]
    if item.ast.op is Ops.COPY:
        return ExecItem(CopyRunner(item.ast.arg[1]), bufs)
    kernel = get_kernel(bufs[0].device, item.ast)
    check_bound(kernel, var_vals or {})
    return ExecItem(kernel, [*bufs, error_buffer(kernel.device)] if kernel.spec.checks else bufs,
                    _own_values(kernel, var_vals or {}))  # fmt: skip


def check_bound(kernel: CompiledKernel, var_vals: dict[UOp, int]) -> None:
    """An UnboundVariableError unless every Variable the kernel takes has a value."""
    if missing := [v.arg[0] for v in kernel.spec.vars if v not in var_vals]:
        raise UnboundVariableError(
            f"realize: kernel {kernel.spec.name} needs the value of Variable "
            f"{', '.join(missing)}, which no shape bound; bind it with .bind(value)"
        )


def _own_values(runner: CompiledKernel | Runner, var_vals: dict[UOp, int]) -> dict[UOp, int] | None:
    """The values of the Variables a kernel takes (what a TinyJit capture keeps of a run's)."""
    if not isinstance(runner, CompiledKernel) or not runner.spec.vars:
        return None
    return {v: var_vals[v] for v in runner.spec.vars}


def checking_kernels(items: list[ExecItem]) -> list[CompiledKernel]:
    """The kernels of these items that check values (and take their device's error buffer)."""
    return [item.runner for item in items if isinstance(item.runner, CompiledKernel) and item.runner.spec.checks]


class RunPlan:
    """A schedule's steps, ready to run on any buffers that stand where its own stand: each kernel compiled (under
    the optimization flags `flags`) or copy, with the positions of the buffers it takes in the list a run gets (the
    `nodes` it was made for, then the error buffer of a kernel that checks values). The schedule cache keeps one per
    realized template: a hit binds its own buffers and calls the kernels, with no lookup or item built per kernel."""

    def __init__(self, items: Sequence[ScheduleItem], nodes: Sequence[UOp]):
        self.flags, at = kernel_flags(), {node: i for i, node in enumerate(nodes)}
        work = [item for item in items if item.bufs[0].arg != 0]
        self.empty = tuple(at[item.bufs[0]] for item in items if item.bufs[0].arg == 0)  # nothing to compute or copy
        compiled = iter(get_kernels([(item.bufs[0].device, item.ast) for item in _kernel_items(work)]))
        self.fixed: list[Buffer] = []  # buffers every run takes (error buffers), after the nodes' own
        steps = []
        for item in work:
            runner = CopyRunner(item.ast.arg[1]) if item.ast.op is Ops.COPY else next(compiled)
            slots = [at[b] for b in item.bufs]
            if isinstance(runner, CompiledKernel) and runner.spec.checks:
                slots.append(len(nodes) + self._fixed(error_buffer(runner.device)))
            steps.append((runner, tuple(slots), isinstance(runner, CompiledKernel)))
        # each step: what runs, its buffers' positions, whether it is a kernel (counted, timed under DEBUG=2)
        self.steps: tuple[tuple[CompiledKernel | CopyRunner, tuple[int, ...], bool], ...] = tuple(steps)
        self.kernels = kernels = [r for r, _, kernel in steps if kernel]
        self.binding = [k for k in kernels if k.spec.vars]  # the kernels that take Variables
        self.checking = [k for k in kernels if k.spec.checks]
        self.counts = (len(kernels), sum(k.spec.ops for k in kernels), sum(k.spec.mem for k in kernels))
        self.keys = [_kernel_key(k.device, item.ast, self.flags) for k, item in zip(kernels, _kernel_items(work))]
        self.stale = False  # the kernel cache forgot a kernel of it: made again at its next use (plan_for)
        for kernel in kernels:
            kernel.plans.add(self)

    def drop(self) -> None:
        """Let go of the kernels (the kernel cache forgot one: it must be unloadable); plan_for makes a new plan."""
        self.stale, self.steps, self.kernels, self.binding, self.checking = True, (), [], [], []

    def _fixed(self, buffer: Buffer) -> int:
        if buffer not in self.fixed:
            self.fixed.append(buffer)
        return self.fixed.index(buffer)

    def run(self, nodes: Sequence[UOp], intermediates: set[UOp] = frozenset(),
            var_vals: dict[UOp, int] | None = None) -> None:  # fmt: skip
        """Run the steps on these BUFFER nodes' buffers (in the order of the plan's own); see run_schedule."""
        var_vals = var_vals or {}
        for kernel in self.binding:
            check_bound(kernel, var_vals)
        buffers = list(map(buffer_of, nodes))  # (map: on Python 3.11 a comprehension is a function made and called)
        buffers += self.fixed
        for i in self.empty:
            buffers[i].ensure_allocated()
        if intermediates:
            planned = {id(buffer_of(node)) for node in intermediates}
            steps = [ExecItem(runner, [buffers[i] for i in slots]) for runner, slots, _ in self.steps]
            plan_memory(steps, kept=lambda b: id(b) not in planned)
        capturing, wait = captures(), DEBUG.value >= 2  # (the TinyJit captures running in this thread)
        try:
            for runner, slots, kernel in self.steps:
                if kernel:  # (its buffers' handles as handles_of reads them, in one pass)
                    handles = [(b := buffers[i])._handle or b.handle for i in slots]
                    seconds = runner.launch(handles, wait, var_vals)
                    if wait:  # DEBUG=2: counted one by one, so that its line numbers it
                        _count(1, runner.spec.ops, runner.spec.mem)
                        if seconds is not None:
                            _timed(runner, seconds)
                else:  # a copy
                    runner([buffers[i] for i in slots], wait)
                if capturing:
                    recorded = ExecItem(runner, [buffers[i] for i in slots], _own_values(runner, var_vals))
                    for captured in capturing:
                        captured.append(recorded)
        finally:  # also when a kernel failed to run: a check's record must not outlive the run that made it
            if self.checking:
                raise_failed_checks(self.checking)
        if not wait:
            _count(*self.counts)


def _kernel_items(items: list[ScheduleItem]) -> list[ScheduleItem]:
    return [item for item in items if item.ast.op is not Ops.COPY]


def plan_for(plans: dict[tuple, RunPlan], items: Sequence[ScheduleItem], nodes: Sequence[UOp]) -> RunPlan:
    """The run plan of these items kept in `plans` for the optimization flags of now: made where there is none yet
    or the kernel cache forgot a kernel of it; else its kernels count as used now (the cache keeps the recent)."""
    if (plan := plans.get(flags := kernel_flags())) is not None and not plan.stale:
        try:
            for key in plan.keys:
                _kernels.move_to_end(key)
            return plan
        except KeyError:  # the cache was emptied (a test's fresh start)
            pass
    plan = plans[flags] = RunPlan(items, nodes)
    return plan


def run_schedule(schedule: list[ScheduleItem], intermediates: set[UOp] = frozenset(),
                 var_vals: dict[UOp, int] | None = None) -> None:  # fmt: skip
    """Run each item in order: copies move bytes, kernels run compiled programs (given the values of their
    Variables, `var_vals`). The buffers of `intermediates` (BUFFER nodes nothing reads after this run) may share
    memory where their lifetimes don't overlap."""
    nodes = list(dict.fromkeys(b for item in schedule for b in item.bufs))
    RunPlan(schedule, nodes).run(nodes, intermediates, var_vals)


def timed_realize_summary(start: float, kernels_before: int) -> None:
    if DEBUG.value >= 1:
        ran = GlobalCounters.kernel_count - kernels_before
        used, peak = GlobalCounters.mem_used / 1e6, GlobalCounters.mem_peak / 1e6
        ms = (time.perf_counter() - start) * 1e3
        print(f"realize: {ran} kernels in {ms:.2f} ms, {used:.2f} MB in use, peak {peak:.2f} MB")
