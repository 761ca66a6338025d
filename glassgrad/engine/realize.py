"""realize(): run a schedule's kernels on their devices, with DEBUG output and GlobalCounters."""

from __future__ import annotations

import time
import weakref

from glassgrad.codegen import ProgramSpec, get_program
from glassgrad.engine.counters import GlobalCounters
from glassgrad.helpers import DEBUG, colored
from glassgrad.runtime.device import Buffer, Device, Program
from glassgrad.schedule import ScheduleItem
from glassgrad.uop.ops import Ops, UOp

# The memory behind each BUFFER node lives exactly as long as the node does.
_buffers: weakref.WeakKeyDictionary[UOp, Buffer] = weakref.WeakKeyDictionary()


def share_buffer(alias: UOp, node: UOp) -> None:
    """Make the BUFFER node `alias` name the same memory as `node` (a new name for a buffer an assign changed)."""
    _buffers[alias] = buffer_of(node)


def buffer_of(node: UOp) -> Buffer:
    """The Buffer of a BUFFER node (allocated lazily)."""
    if (found := _buffers.get(node)) is None:
        found = _buffers[node] = Buffer(node.device, node.arg, node.dtype)
    return found


class CompiledKernel:
    """A program ready to run on one device, with what DEBUG prints about it."""

    def __init__(self, device: str, spec: ProgramSpec, program: Program):
        self.device, self.spec, self.program = device, spec, program

    def __call__(self, bufs: list[Buffer], wait: bool) -> float | None:
        return self.program(*(b.handle for b in bufs), global_size=self.spec.global_size, wait=wait)


_kernels: dict[tuple[str, UOp], CompiledKernel] = {}


def get_kernel(device: str, ast: UOp) -> CompiledKernel:
    """Compile an AST for a device once per process (the source is also cached on disk by the compiler)."""
    key = (device, ast)
    if key not in _kernels:
        dev = Device[device]
        if DEBUG >= 4:
            print(f"--- kernel AST ---\n{ast}")
        spec = get_program(ast, dev.renderer)
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
        _kernels[key] = CompiledKernel(device, spec, dev.load(spec.name, spec.src))
    return _kernels[key]


class CopyRunner:
    """Moves a buffer's bytes to a buffer on another device (through the host)."""

    def __call__(self, bufs: list[Buffer], wait: bool) -> float | None:
        dst, src = bufs
        dst.copyin(src.as_bytes())
        if DEBUG >= 2:
            print(f"{colored('copy', 'yellow')} {dst.nbytes:>10} bytes {src.device} -> {dst.device}")
        return None


class ExecItem:
    """One step of a run: a compiled kernel or a copy, with the buffers it works on."""

    def __init__(self, runner: CompiledKernel | CopyRunner, bufs: list[Buffer]):
        self.runner, self.bufs = runner, bufs

    def run(self, bufs: list[Buffer] | None = None) -> None:
        """Run on this item's buffers, or on `bufs` in their place (TinyJit's replay)."""
        bufs = [b.ensure_allocated() for b in (bufs or self.bufs)]
        seconds = self.runner(bufs, wait=DEBUG >= 2)
        if isinstance(self.runner, CopyRunner):
            return
        GlobalCounters.kernel_count += 1
        GlobalCounters.global_ops += self.runner.spec.ops
        GlobalCounters.global_mem += self.runner.spec.mem
        if seconds is not None:
            GlobalCounters.time_sum_s += seconds
            _print_kernel_line(self.runner, seconds)


# While TinyJit captures a function, every item that runs is also appended here.
capturing: list[list[ExecItem]] = []


def lower_item(item: ScheduleItem) -> ExecItem:
    bufs = [buffer_of(b) for b in item.bufs]
    if item.ast.op is Ops.COPY:
        return ExecItem(CopyRunner(), bufs)
    return ExecItem(get_kernel(bufs[0].device, item.ast), bufs)


def run_schedule(schedule: list[ScheduleItem]) -> None:
    """Run each item in order: copies move bytes, kernels run compiled programs."""
    for item in schedule:
        if item.bufs[0].arg == 0:  # an empty output: nothing to compute or copy
            buffer_of(item.bufs[0]).ensure_allocated()
            continue
        exec_item = lower_item(item)
        exec_item.run()
        for captured in capturing:
            captured.append(exec_item)


def _print_kernel_line(kernel: CompiledKernel, seconds: float) -> None:
    spec = kernel.spec
    gflops = spec.ops / seconds / 1e9 if seconds > 0 else 0.0
    gbs = spec.mem / seconds / 1e9 if seconds > 0 else 0.0
    name = (spec.display_name or spec.name) + " " * max(0, 24 - len(spec.name))  # parts coloured by kind
    print(f"*** {kernel.device:<7} {GlobalCounters.kernel_count:4d} {name} tm {seconds * 1e6:9.2f}us "
          f"{gflops:8.2f} GFLOPS {gbs:8.2f} GB/s")  # fmt: skip


def timed_realize_summary(start: float, kernels_before: int) -> None:
    if DEBUG >= 1:
        ran = GlobalCounters.kernel_count - kernels_before
        print(f"realize: {ran} kernels in {(time.perf_counter() - start) * 1e3:.2f} ms, "
              f"{GlobalCounters.mem_used / 1e6:.2f} MB in use")  # fmt: skip
