"""What DEBUG=2 prints as kernels and copies run, and the summary it prints at exit."""

from __future__ import annotations

import atexit
import re
from dataclasses import dataclass

from glassgrad.codegen import ProgramSpec
from glassgrad.helpers import DEBUG, colored, use_color
from glassgrad.runtime.counters import GlobalCounters

SLOWEST_SHOWN = 10
NAME_WIDTH = 24
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


@dataclass
class Totals:
    """Runs of one kernel (or all copies) added up for the summary: count, seconds, operations, bytes moved."""

    device: str
    name: str
    runs: int = 0
    seconds: float = 0.0
    ops: int = 0
    mem: int = 0

    def add(self, seconds: float, ops: int, mem: int) -> None:
        self.runs, self.seconds, self.ops, self.mem = (
            self.runs + 1,
            self.seconds + seconds,
            self.ops + ops,
            self.mem + mem,
        )


_kernels: dict[int, Totals] = {}  # keyed by id(ProgramSpec): kernels with equal names stay apart
_copies = Totals("", "copy")
_summary_at_exit: list[bool] = []  # one entry once the summary is registered to print at exit


def plain(text: str) -> str:
    """Text without ANSI color codes."""
    return _ANSI.sub("", text)


def _pad(text: str, width: int) -> str:
    """Left-align text that may hold color codes, counting only the characters that show."""
    return text + " " * max(0, width - len(plain(text)))


def kernel_name(spec: ProgramSpec) -> str:
    """The kernel's name as DEBUG shows it: colored on a terminal, plain under NO_COLOR=1 or in a pipe."""
    name = spec.display_name or spec.name  # codegen colours each part of the name by kind
    if _ANSI.search(name):
        return name if use_color() else plain(name)
    return colored(name, "red" if name.startswith("r") else "blue")


def _rate(amount: float, seconds: float) -> float:
    """Per second, in billions (GFLOP/s, GB/s); 0 for a run too short to time."""
    return amount / seconds / 1e9 if seconds > 0 else 0.0


def _start_summary() -> None:
    if not _summary_at_exit:
        _summary_at_exit.append(True)
        atexit.register(print_summary)


def kernel_ran(device: str, spec: ProgramSpec, seconds: float) -> None:
    """At DEBUG>=2: print one line for a kernel that ran (time, GFLOP/s, GB/s) and add it to the exit summary."""
    if DEBUG < 2:
        return
    _start_summary()
    _kernels.setdefault(id(spec), Totals(device, spec.name)).add(seconds, spec.ops, spec.mem)
    rates = f"{_rate(spec.ops, seconds):9.2f} GFLOPS {_rate(spec.mem, seconds):8.2f} GB/s"
    print(f"*** {device:<7} {GlobalCounters.kernel_count:4d} {_pad(kernel_name(spec), NAME_WIDTH)} "
          f"tm {seconds * 1e6:9.2f}us {rates}")  # fmt: skip


def copy_ran(nbytes: int, source: str, dest: str, seconds: float) -> None:
    """At DEBUG>=2: print one line for a copy between devices and add it to the exit summary."""
    if DEBUG < 2:
        return
    _start_summary()
    _copies.add(seconds, 0, nbytes)
    print(f"{colored('copy', 'yellow')} {nbytes:>10} bytes {source} -> {dest}  "
          f"tm {seconds * 1e6:9.2f}us {_rate(nbytes, seconds):8.2f} GB/s")  # fmt: skip


def summary() -> str:
    """Kernels run, their total time and work, copies, and the kernels that took the most time in all."""
    kernels = list(_kernels.values())
    runs, seconds = sum(k.runs for k in kernels), sum(k.seconds for k in kernels)
    ops, mem = sum(k.ops for k in kernels), sum(k.mem for k in kernels)
    lines = [
        f"summary: {runs} runs of {len(kernels)} kernels in {seconds * 1e3:.2f} ms, {ops / 1e9:.3f} GFLOP "
        f"({_rate(ops, seconds):.2f} GFLOPS), {mem / 1e9:.3f} GB ({_rate(mem, seconds):.2f} GB/s)",
        f"    {_copies.runs} copies, {_copies.mem / 1e6:.2f} MB in {_copies.seconds * 1e3:.2f} ms",
        f"    slowest kernels, by time over all runs:\n"
        f"    {'ms':>9} {'share':>6} {'runs':>6} {'GFLOPS':>9} {'GB/s':>8}  {'device':<7} kernel",
    ]
    for k in sorted(kernels, key=lambda k: k.seconds, reverse=True)[:SLOWEST_SHOWN]:
        share = k.seconds / seconds if seconds > 0 else 0.0
        lines.append(f"    {k.seconds * 1e3:9.2f} {share:6.1%} {k.runs:6d} {_rate(k.ops, k.seconds):9.2f} "
                     f"{_rate(k.mem, k.seconds):8.2f}  {k.device:<7} {k.name}")  # fmt: skip
    return "\n".join(lines)


def print_summary() -> None:
    """Print the summary (registered to run at exit once DEBUG>=2 saw a kernel or a copy), if anything ran."""
    if _kernels or _copies.runs:
        print(summary())


def reset_summary() -> None:
    """Forget the kernels and copies counted so far."""
    _kernels.clear()
    _copies.runs, _copies.seconds, _copies.mem = 0, 0.0, 0
