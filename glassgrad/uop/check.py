"""What a CHECK node requires of its value, and the error the host raises where a kernel finds a value that fails.

A CHECK marks a value that must meet a condition: an index within its dimension, a divisor that is not zero. It is
the value itself (an elementwise identity); the kernel that computes it tests the condition there, and where it fails
records which check failed and the value in the device's error buffer, which the host reads after the kernels ran
(codegen/checks.py writes the records, engine/checks.py reads them).
"""

from __future__ import annotations

import functools
import hashlib
import math
import operator
import struct
from dataclasses import dataclass

from glassgrad.dtype import DType, dtypes
from glassgrad.uop.ops import Ops, UOp


class CheckFailed(RuntimeError):
    """A value failed its check; `check` is the Check (None where the error was found before any kernel ran)."""

    check: Check | None = None


class IndexOutOfBoundsError(IndexError, CheckFailed):
    """An index outside its dimension: an IndexError, and the RuntimeError PyTorch raises for gather and scatter."""


class DivisionByZeroError(ZeroDivisionError, CheckFailed):
    """Integer division by zero: a ZeroDivisionError, and the RuntimeError("ZeroDivisionError") PyTorch raises."""


@dataclass(frozen=True)
class Check:
    """The condition on a value of `dtype`: low <= value < high (a whole number, for a float), or value == allowed;
    or, with `nonzero`, value != 0. `message` is the error's text, with {value} where the bad value goes."""

    message: str
    dtype: DType
    low: int | None = None
    high: int | None = None
    allowed: int | None = None  # a value that passes whatever the bounds say (a loss's ignore_index)
    nonzero: bool = False

    @property
    def id(self) -> int:
        """A nonzero 63-bit number naming this check in the error buffer, the same in every process (it is part of a
        kernel's source, which the compiler caches on disk by its text)."""
        digest = hashlib.blake2b(repr(self).encode(), digest_size=8).digest()
        return int.from_bytes(digest, "little") >> 1 or 1

    def holds(self, x: UOp) -> UOp:
        """The condition on the kernel value `x`, as a bool UOp (bounds no value of x's dtype reaches are left out)."""
        if self.nonzero:
            return x.ne(0)
        parts = []
        if self.high is not None and self.high <= dtypes.max(x.dtype):
            parts.append(x < self.high)
        if self.low is not None and self.low > dtypes.min(x.dtype):
            parts.append((x < self.low).logical_not())  # (x < high) & !(x < 0): collapse_gathers' guard, one node
        if dtypes.is_float(x.dtype):
            parts.append(x.eq(x.alu(Ops.TRUNC)))  # a class index given as a float is whole (NaN is not)
        ok = functools.reduce(operator.and_, parts) if parts else UOp.const(dtypes.bool, True)
        if self.allowed is not None and dtypes.min(x.dtype) <= self.allowed <= dtypes.max(x.dtype):
            ok = ok | x.eq(self.allowed)
        return ok

    def holds_for(self, value: int | float) -> bool:
        """The condition on a Python number."""
        if self.nonzero:
            return value != 0
        if value == self.allowed:
            return True
        if not math.isfinite(value) or value != int(value):
            return False
        return (self.low is None or value >= self.low) and (self.high is None or value < self.high)

    def error(self, bits: int) -> Exception:
        """The exception for a failed check whose value the kernel recorded as the 64 bits `bits` (bits_of)."""
        value = value_from_bits(bits, self.dtype)
        text = str(value) if not self.holds_for(value) else "(unknown: another check failed at the same time)"
        error = (DivisionByZeroError if self.nonzero else IndexOutOfBoundsError)(self.message.format(value=text))
        error.check = self
        return error


def records_failure(u: UOp) -> bool:
    """A STORE into the error buffer (its arg is the check whose failure it records): it writes no output."""
    return u.op is Ops.STORE and isinstance(u.arg, Check)


def bits_of(x: UOp) -> UOp:
    """A kernel value (each lane of a vector) as the int64 that the error buffer holds: an int widened, a float's
    float64 bits."""
    wide, lanes = dtypes.int64.vec(x.dtype.count), x.dtype.count
    if dtypes.is_float(x.dtype):
        return UOp(Ops.BITCAST, wide, (x.cast(dtypes.float64.vec(lanes)),))
    return x.cast(wide)


def value_from_bits(bits: int, dtype: DType) -> int | float:
    """The value bits_of recorded, read back as a Python number."""
    if dtypes.is_float(dtype):
        return struct.unpack("<d", struct.pack("<q", bits))[0]
    return bits % 2**64 if dtypes.is_unsigned(dtype) else bits
