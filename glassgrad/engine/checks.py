"""Each device's error buffer, which kernels with checks write where a check fails (codegen/checks.py), and the
error the host raises after those kernels ran.

The buffer holds two int64s: the failed check's id (0: none failed) and the bad value's bits. A kernel writes them
only where a check fails, so a run that fails nowhere costs one read of 16 bytes per device after it; a failure is
raised once, naming the op, the value and the bound, and the buffer is cleared for the next run.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import TYPE_CHECKING

from glassgrad.codegen.checks import ERROR_SLOTS
from glassgrad.dtype import dtypes
from glassgrad.runtime.device import Buffer
from glassgrad.uop.check import Check
from glassgrad.uop.ops import Ops, UOp

if TYPE_CHECKING:
    from glassgrad.engine.realize import CompiledKernel

_CLEAR = bytes(8 * ERROR_SLOTS)
_error_buffers: dict[str, Buffer] = {}


def error_buffer(device: str) -> Buffer:
    """The error buffer of a device, zeros until a check fails."""
    if (found := _error_buffers.get(device)) is None:
        found = _error_buffers[device] = Buffer(device, ERROR_SLOTS, dtypes.int64).copyin(_CLEAR)
    return found


def raise_failed_checks(kernels: Sequence[CompiledKernel]) -> None:
    """Raise the error of a check that failed in these kernels with checks (which have run), clearing its record."""
    if not kernels:
        return
    for device in dict.fromkeys(k.device for k in kernels):
        errors = _error_buffers[device]
        check_id, bits = struct.unpack("<qq", errors.as_bytes())
        if check_id == 0:
            continue
        errors.copyin(_CLEAR)
        check = next((c for k in kernels for c in k.spec.checks if c.id == check_id), None)
        if check is None:  # a kernel run by hand, outside run_schedule and TinyJit, recorded it
            raise RuntimeError(f"a check with id {check_id} failed on {device}, in none of the kernels just run")
        raise check.error(bits)


def unaffected_by(check: Check, assigns: list[UOp]) -> list[UOp]:
    """The ASSIGN(BUFFER, KERNEL)s of a run (in the order it ran them) whose kernels neither test `check` nor read
    anything such a kernel wrote: their results stand although the run raised."""
    tainted: set[UOp] = set()
    for assign in assigns:
        kernel = assign.src[1]
        if any(s in tainted for s in kernel.src) or any(n.arg == check for n in kernel.arg.ast.toposort()
                                                        if n.op is Ops.CHECK):  # fmt: skip
            tainted.add(assign)
    return [a for a in assigns if a not in tainted]
