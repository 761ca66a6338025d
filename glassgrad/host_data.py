"""Data between the host and devices: nested lists, bytes and NumPy arrays as buffers, and buffers' bytes as values.

Raw bytes (bytes, a bytearray, or a file's contents given as a pathlib.Path) are a tensor's elements as tinygrad's
Tensor(data, dtype=) reads them: row-major, little-endian, uint8 unless a dtype is given.
"""

from __future__ import annotations

import pathlib
from typing import Any

from glassgrad.dtype import (
    DType,
    dtypes,
    to_dtype,
)
from glassgrad.engine.realize import buffer_of
from glassgrad.errors import ArgumentError
from glassgrad.helpers import prod
from glassgrad.uop.ops import Ops, UOp, new_buffer
from glassgrad.uop.ops import device_node as _device_node


def _flatten_nested(data: Any, where: str = "data") -> tuple[list[Any], tuple[int, ...]]:
    """The flat values and the shape of a nested list; ragged lists are an error."""
    if not isinstance(data, (list, tuple)):  # a NumPy scalar (np.uint8(3)) counts as the Python number it holds
        return [data.item() if type(data).__module__ == "numpy" and hasattr(data, "item") else data], ()
    if len(data) == 0:
        return [], (0,)
    parts = [_flatten_nested(x, f"{where}[{i}]") for i, x in enumerate(data)]
    shape = parts[0][1]
    for i, (_, s) in enumerate(parts):
        if s != shape:
            raise ArgumentError(f"Tensor: nested list is ragged: {where}[0] has shape {shape} but {where}[{i}] has {s}")
    return [v for values, _ in parts for v in values], (len(data), *shape)


def _nest(flat: list[Any], shape: tuple[int, ...]) -> Any:
    if not shape:
        return flat[0]
    if len(shape) == 1:
        return flat
    step = prod(shape[1:])
    return [_nest(flat[i * step : (i + 1) * step], shape[1:]) for i in range(shape[0])]


def _numpy_dtype(dtype: DType):
    import numpy as np

    names = {dtypes.bool: np.bool_, dtypes.int8: np.int8, dtypes.uint8: np.uint8, dtypes.int16: np.int16,
             dtypes.uint16: np.uint16, dtypes.int32: np.int32, dtypes.uint32: np.uint32, dtypes.int64: np.int64,
             dtypes.uint64: np.uint64, dtypes.float16: np.float16, dtypes.float32: np.float32,
             dtypes.float64: np.float64}  # fmt: skip
    return names[dtype]


def _from_numpy_dtype(np_dtype) -> DType:
    name = str(np_dtype)
    if name == "bool":
        return dtypes.bool
    return to_dtype(name)


def _infer_dtype(values: list[Any]) -> DType:
    if not values or any(isinstance(v, float) for v in values):  # an empty list is float32, as in PyTorch
        return dtypes.default_float
    if values and all(isinstance(v, bool) for v in values):
        return dtypes.bool
    for v in values:
        if not isinstance(v, (bool, int, float)):
            raise TypeError(f"Tensor: cannot make a tensor element from {type(v).__name__} {v!r}")
    return dtypes.default_int


def _uop_from_bytes(raw: bytes, dtype: DType, shape: tuple[int, ...], device: str) -> UOp:
    """Data from the host: a PYTHON buffer holding the bytes, copied to `device` when realized."""
    count = prod(shape)
    buf = new_buffer("PYTHON", count, dtype)
    buffer_of(buf).copyin(raw)
    uop = buf if device == "PYTHON" else UOp(Ops.COPY, dtype, (buf, _device_node(device)))
    return uop if shape == (count,) else UOp(Ops.RESHAPE, dtype, (uop,), shape)


def _uop_from_numpy(array, dtype: DType | None, device: str) -> UOp:
    import numpy as np

    array = np.asarray(array)  # NumPy scalars too; tobytes() is row-major for any layout, and keeps a 0-d shape
    source_dtype = _from_numpy_dtype(array.dtype)
    uop = _uop_from_bytes(array.tobytes(order="C"), source_dtype, tuple(array.shape), device)
    return uop if dtype is None or dtype == source_dtype else UOp(Ops.CAST, dtype, (uop,))


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
        raise ArgumentError(f"Tensor: {what} hold {len(raw)} bytes, not a whole number of {dtype} elements "
                            f"({dtype.itemsize} bytes each)")  # fmt: skip
    return raw, dtype, (len(raw) // dtype.itemsize,)
