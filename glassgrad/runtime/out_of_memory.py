"""Running out of memory: the error a buffer too big for its device raises, and how much memory the host has left.

An allocator raises MemoryError (or the OSError ENOMEM of a failed mapping) with its reason; Buffer turns it into an
OutOfMemoryError that says what was asked for, how big, of which dtype, on which device. On the host, a request that
cannot fit in what the machine has available is refused before mapping it: Linux would map it (it overcommits) and
kill the process when its pages are touched."""

from __future__ import annotations

import math
import os

from glassgrad.dtype import DType

CGROUP = "/sys/fs/cgroup"  # cgroup v2: a container's memory.max and memory.current


class OutOfMemoryError(MemoryError, RuntimeError):
    """A device could not allocate a buffer (a MemoryError; a RuntimeError too, as torch.OutOfMemoryError is)."""

    def __init__(self, device: str, size: int, dtype: DType, reason: str):
        super().__init__(device, size, dtype, reason)
        self.device, self.size, self.dtype, self.reason = device, size, dtype, reason
        self.nbytes = size * dtype.itemsize

    def __str__(self) -> str:
        return (
            f"out of memory on {self.device}: a buffer of {self.size:,} elements of {self.dtype} (shape "
            f"({self.size},), {self.nbytes:,} bytes = {human_bytes(self.nbytes)}) was asked for; {self.reason}"
        )


def human_bytes(n: float) -> str:
    """1536 -> '1.5 KiB'."""
    if n < 1024:
        return f"{int(n)} B"
    exponent = min(int(math.log(n, 1024)), 5)
    return f"{n / 1024**exponent:.1f} {'BKMGTP'[exponent]}iB"


def _meminfo() -> dict[str, int]:
    """/proc/meminfo in bytes (empty where there is none)."""
    try:
        with open("/proc/meminfo") as f:
            return {k: int(v.split()[0]) * 1024 for k, v in (line.split(":", 1) for line in f)}
    except OSError:
        return {}


def _cgroup_left() -> int | None:
    """What a cgroup v2 memory limit leaves this process's group, or None where there is no limit."""
    try:
        with open(f"{CGROUP}/memory.max") as limit, open(f"{CGROUP}/memory.current") as used:
            maximum = limit.read().strip()
            return None if maximum == "max" else int(maximum) - int(used.read())
    except (OSError, ValueError):
        return None


def host_memory() -> tuple[int, int]:
    """(total, available) bytes of the host: memory plus swap, and what the kernel says new allocations can have."""
    info = _meminfo()
    if not info:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        return total, total
    total = info.get("MemTotal", 0) + info.get("SwapTotal", 0)
    available = info.get("MemAvailable", info.get("MemFree", 0)) + info.get("SwapFree", 0)
    if (left := _cgroup_left()) is not None:
        available = min(available, left)
    return total, available


CHECKED_FROM = 1 << 20  # host allocations this large are checked first (reading /proc costs ~20 us)


def check_host_memory(nbytes: int) -> None:
    """Raise MemoryError where `nbytes` more cannot fit in the host's available memory."""
    if nbytes < CHECKED_FROM:
        return
    total, available = host_memory()
    if nbytes > available:
        raise MemoryError(f"the host has {human_bytes(total)} of memory and swap, {human_bytes(available)} of it "
                          "available")  # fmt: skip


def host_bytes(nbytes: int) -> bytearray:
    """`nbytes` zeroed bytes of host memory, or MemoryError where the host cannot hold them (bytearray would touch
    every page of an overcommitted mapping, and the kernel would kill the process)."""
    check_host_memory(nbytes)
    return bytearray(nbytes)
