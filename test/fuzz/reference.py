"""The reference side: PyTorch tensors standing for glassgrad values of every dtype, and casts with C's meaning.

PyTorch 2.13 on the CPU stores uint16, uint32 and uint64 but computes almost nothing on them ("add_stub not implemented
for 'UInt16'"). So a value of those dtypes lives in an int64 *carrier*: uint16 and uint32 as their value (always
in range, re-wrapped after each op by `wrap`), uint64 as its two's-complement bit pattern (add, sub, mul, bitwise ops
and shifts left are the same bits either way). The ops whose meaning depends on the sign (comparisons, max/min,
division, shifts right, casts to float) go through `order` or NumPy's uint64 here.
"""

from __future__ import annotations

import numpy as np
import torch

from glassgrad import dtypes
from glassgrad.dtype import ALL_DTYPES, FLOATS, DType, promote_types

CARRIED = (dtypes.uint16, dtypes.uint32, dtypes.uint64)
TORCH = {d: getattr(torch, n) for d, n in [
    (dtypes.bool, "bool"), (dtypes.int8, "int8"), (dtypes.uint8, "uint8"), (dtypes.int16, "int16"),
    (dtypes.int32, "int32"), (dtypes.int64, "int64"), (dtypes.float16, "float16"), (dtypes.bfloat16, "bfloat16"),
    (dtypes.float32, "float32"), (dtypes.float64, "float64")]} | {d: torch.int64 for d in CARRIED}  # fmt: skip
NUMPY = {
    dtypes.bool: np.bool_, dtypes.int8: np.int8, dtypes.uint8: np.uint8, dtypes.int16: np.int16,
    dtypes.uint16: np.uint16, dtypes.int32: np.int32, dtypes.uint32: np.uint32, dtypes.int64: np.int64,
    dtypes.uint64: np.uint64, dtypes.float16: np.float16, dtypes.bfloat16: np.float32, dtypes.float32: np.float32,
    dtypes.float64: np.float64,
}  # fmt: skip
GG_OF_TORCH = {t: d for d, t in TORCH.items() if d not in CARRIED}
SIGN_BIT = -(2**63)
# relative tolerance per float dtype: a few roundings of it, as fused glassgrad kernels round in other places
RTOL = {dtypes.float16: 2e-2, dtypes.bfloat16: 4e-2, dtypes.float32: 2e-4, dtypes.float64: 1e-9}


class Undefined(Exception):
    """The step has no defined result (C and PyTorch leave it undefined): the generator picks another."""


def is_float(d: DType) -> bool:
    return d in FLOATS


def is_int(d: DType) -> bool:
    return d not in FLOATS and d != dtypes.bool


def bits(d: DType) -> int:
    return 8 * d.itemsize


def wrap(t: torch.Tensor, d: DType) -> torch.Tensor:
    """A carrier of uint16/uint32 kept to the dtype's width (uint64's bit pattern needs nothing)."""
    return t & ((1 << bits(d)) - 1) if d in (dtypes.uint16, dtypes.uint32) else t


def order(t: torch.Tensor, d: DType) -> torch.Tensor:
    """A key that sorts as the values do: uint64's bit pattern with the sign bit flipped (an int64 order)."""
    return t ^ SIGN_BIT if d == dtypes.uint64 else t


def unorder(t: torch.Tensor, d: DType) -> torch.Tensor:
    return t ^ SIGN_BIT if d == dtypes.uint64 else t


def to_numpy(t: torch.Tensor, d: DType) -> np.ndarray:
    """The values as NumPy holds them in glassgrad's dtype (bfloat16 as float32, as glassgrad's numpy() gives)."""
    t = t.detach()
    if d == dtypes.uint64:
        return t.numpy().view(np.uint64)
    if d == dtypes.bfloat16:
        return t.float().numpy()
    return t.numpy().astype(NUMPY[d])


def from_numpy(a: np.ndarray, d: DType) -> torch.Tensor:
    """A reference tensor of glassgrad dtype `d` from NumPy values of that dtype."""
    if d == dtypes.uint64:
        return torch.from_numpy(np.array(a, order="C").view(np.int64))
    if d in CARRIED:
        return torch.from_numpy(a.astype(np.int64))
    if d == dtypes.bfloat16:
        return torch.from_numpy(a.astype(np.float32)).to(torch.bfloat16)
    return torch.from_numpy(np.array(a, order="C"))  # a copy; np.ascontiguousarray makes a 0-d array 1-d


def cast(t: torch.Tensor, src: DType, dst: DType) -> torch.Tensor:
    """Convert as C does; float -> int out of range (or NaN) is undefined in C and in PyTorch, so it raises."""
    if src == dst:
        return t
    if is_float(src) and is_int(dst):
        signed = dst not in (dtypes.uint8,) + CARRIED
        lo, hi = (-float(2 ** (bits(dst) - 1)), float(2 ** (bits(dst) - 1))) if signed else (0.0, float(2 ** bits(dst)))
        v = t.double()
        if not bool(((v > lo - 1) & (v < hi)).all()):
            raise Undefined(f"{src} -> {dst} of a value out of range")
        if dst == dtypes.uint64:
            return torch.from_numpy(v.trunc().numpy().astype(np.uint64).view(np.int64))
        return t.double().trunc().to(TORCH[dst])
    if src == dtypes.uint64 and is_float(dst):
        return torch.from_numpy(t.numpy().view(np.uint64).astype(np.float64)).to(TORCH[dst])
    if dst == dtypes.bool:
        return t != 0
    if dst in CARRIED:
        return wrap(t.to(torch.int64), dst)
    return t.to(TORCH[dst])


def promote(a: DType, b: DType) -> DType:
    """torch.promote_types where PyTorch has both dtypes, else glassgrad's documented rule (PyTorch has none)."""
    if a in CARRIED or b in CARRIED:
        return promote_types(a, b)
    return GG_OF_TORCH[torch.promote_types(TORCH[a], TORCH[b])]


def dtype_of(t: torch.Tensor, claimed: DType | None = None) -> DType:
    """The glassgrad dtype a reference result stands for: `claimed` for carriers, else PyTorch's own."""
    return claimed if claimed in CARRIED else GG_OF_TORCH[t.dtype]


def udiv(a: torch.Tensor, b: torch.Tensor, d: DType, mod: bool) -> torch.Tensor:
    """Floor division or remainder of two carriers of dtype d (uint64 through NumPy's uint64)."""
    if bool((b == 0).any()):
        raise ZeroDivisionError("integer division by zero")  # as PyTorch: RuntimeError: ZeroDivisionError
    if d != dtypes.uint64:
        return a % b if mod else a // b
    x, y = np.broadcast_arrays(a.numpy().view(np.uint64), b.numpy().view(np.uint64))
    return torch.from_numpy((x % y if mod else x // y).astype(np.uint64).view(np.int64))


def ushr(a: torch.Tensor, n: int, d: DType) -> torch.Tensor:
    if d != dtypes.uint64:
        return a >> n
    return torch.from_numpy((a.numpy().view(np.uint64) >> np.uint64(n)).view(np.int64))


__all__ = ["ALL_DTYPES", "CARRIED", "TORCH", "NUMPY", "Undefined", "cast", "promote", "wrap", "order", "unorder"]
