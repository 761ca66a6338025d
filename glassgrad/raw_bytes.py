"""Raw bytes as a tensor's elements: bytes, a bytearray or a file's contents (a pathlib.Path), read as a dtype.

As tinygrad's Tensor(data, dtype=): the bytes are the elements' in row-major order, little-endian, uint8 unless
a dtype is given. A file is read whole (it cannot be read past its end).
"""

from __future__ import annotations

import pathlib
from typing import Any

from glassgrad.dtype import DType, dtypes


def raw_elements(data: Any, dtype: DType | None) -> tuple[bytes, DType, tuple[int, ...]] | None:
    """(bytes, dtype, shape) of a 1-d tensor holding `data`'s bytes, or None where data is not raw bytes."""
    if isinstance(data, pathlib.PurePath):
        raw, what = pathlib.Path(data).read_bytes(), f"the file {data}"
    elif isinstance(data, (bytes, bytearray, memoryview)):
        raw, what = bytes(data), "the bytes given"
    else:
        return None
    dtype = dtype or dtypes.uint8
    if len(raw) % dtype.itemsize:
        raise ValueError(f"Tensor: {what} hold {len(raw)} bytes, not a whole number of {dtype} elements "
                         f"({dtype.itemsize} bytes each)")  # fmt: skip
    return raw, dtype, (len(raw) // dtype.itemsize,)
