"""Reading an ONNX file: the model proto, its tensors as glassgrad Tensors, its attributes as Python values.

The `onnx` package (an optional dependency) parses the protobuf; nothing in a model file is ever executed.
"""

from __future__ import annotations

import math
import os
from typing import Any

from glassgrad.dtype import DType, dtypes
from glassgrad.tensor import Tensor


class OnnxError(ValueError):
    """A model glassgrad cannot read or run: a malformed file, a bad input, an operator it does not support."""


class OnnxUnsupported(OnnxError):
    """An operator, attribute value or data type glassgrad does not implement (named in the message)."""


def import_onnx():
    """The `onnx` package, or a clear error saying how to install it."""
    try:
        import onnx
    except ImportError as e:
        raise ImportError("glassgrad.onnx needs the `onnx` package: pip install onnx") from e
    return onnx


# TensorProto.DataType numbers -> glassgrad dtypes (the ones glassgrad has)
ONNX_DTYPES: dict[int, DType] = {
    1: dtypes.float32, 2: dtypes.uint8, 3: dtypes.int8, 4: dtypes.uint16, 5: dtypes.int16, 6: dtypes.int32,
    7: dtypes.int64, 9: dtypes.bool, 10: dtypes.float16, 11: dtypes.float64, 12: dtypes.uint32, 13: dtypes.uint64,
    16: dtypes.bfloat16,
}  # fmt: skip


def onnx_dtype(number: int, where: str) -> DType:
    """The glassgrad dtype of an ONNX element type number; an error naming the type when glassgrad has none."""
    if number in ONNX_DTYPES:
        return ONNX_DTYPES[number]
    onnx = import_onnx()
    name = onnx.TensorProto.DataType.Name(number) if number in onnx.TensorProto.DataType.values() else str(number)
    raise OnnxUnsupported(f"{where}: data type {name} is not supported by glassgrad")


def load_model(source: Any):
    """A ModelProto from a path, bytes or a ModelProto, checked enough that a broken file is a clear error."""
    onnx = import_onnx()
    if isinstance(source, onnx.ModelProto):
        model = source
    else:
        if isinstance(source, (bytes, bytearray, memoryview)):
            raw, name = bytes(source), "the given bytes"
        elif isinstance(source, (str, os.PathLike)):
            name = os.fspath(source)
            if not os.path.isfile(name):
                raise FileNotFoundError(f"ONNX model file not found: {name}")
            with open(name, "rb") as f:
                raw = f.read()
        else:
            raise TypeError(f"load an ONNX model from a path, bytes or onnx.ModelProto, not {type(source).__name__}")
        model = onnx.ModelProto()
        try:
            model.ParseFromString(raw)
        except Exception as e:  # protobuf's DecodeError, or a RuntimeWarning-free variant of it
            raise OnnxError(f"{name} is not a valid ONNX model (truncated or not a protobuf): {e}") from None
        if not model.HasField("graph") or not model.graph.node and not model.graph.output:
            raise OnnxError(f"{name} is not a valid ONNX model: it has no graph (truncated or not an ONNX file)")
        if not isinstance(source, (bytes, bytearray, memoryview)):
            _load_external_data(model, os.path.dirname(os.path.abspath(name)), name)
    try:
        onnx.checker.check_model(model)
    except Exception as e:
        raise OnnxError(f"not a valid ONNX model: {str(e).strip().splitlines()[0]}") from None
    return model


def _load_external_data(model, directory: str, name: str) -> None:
    """Weights kept beside the model file (torch.onnx.export writes MODEL.onnx.data for large models), read here,
    whatever the installed onnx package checks: each location must resolve (symlinks followed) to a file inside the
    model's folder, and each span must lie inside that file and hold the tensor's bytes."""
    onnx = import_onnx()
    folder = os.path.realpath(directory)
    for tensor in _tensors_of_graph(model.graph):
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            continue
        where = f"{name}: tensor {tensor.name!r} keeps its data in an external file"
        info = {entry.key: entry.value for entry in tensor.external_data}
        location = info.get("location", "")
        path = os.path.realpath(os.path.join(folder, location))
        if not location or os.path.isabs(location) or os.path.commonpath([folder, path]) != folder:
            raise OnnxError(f"{where}, {location!r}, which is not inside the model's folder {folder}; glassgrad reads "
                            "external data only from the model's folder")  # fmt: skip
        tensor.raw_data = _read_span(path, info, _tensor_bytes(tensor), where)
        del tensor.external_data[:]
        tensor.data_location = onnx.TensorProto.DEFAULT


def _tensors_of_graph(graph) -> list:
    """The graph's initializers and the tensors in its nodes' attributes, its subgraphs' too."""
    found = list(graph.initializer)
    for node in graph.node:
        for attr in node.attribute:
            found += ([attr.t] if attr.HasField("t") else []) + list(attr.tensors)
            for subgraph in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                found += _tensors_of_graph(subgraph)
    return found


def _tensor_bytes(tensor) -> int | None:
    """The bytes a tensor's raw data holds, where glassgrad knows its element type."""
    dtype = ONNX_DTYPES.get(tensor.data_type)
    return None if dtype is None else dtype.itemsize * math.prod(tensor.dims)


def _read_span(path: str, info: dict[str, str], expected: int | None, where: str) -> bytes:
    """`length` bytes at `offset` of the file (both from the tensor's external_data), checked before reading."""
    try:
        offset, length = int(info.get("offset", 0)), int(info["length"]) if "length" in info else expected
    except ValueError:
        raise OnnxError(f"{where}: its offset {info.get('offset')!r} or length {info.get('length')!r} is not an "
                        "integer") from None  # fmt: skip
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            length = size - offset if length is None else length
            if offset < 0 or length < 0 or offset + length > size or (expected is not None and length != expected):
                raise OnnxError(f"{where}, {path}: {length} bytes at offset {offset} do not lie inside its {size} "
                                f"bytes or are not the tensor's {expected} bytes")  # fmt: skip
            f.seek(offset)
            return f.read(length)
    except OSError as e:
        raise OnnxError(f"{where}, {path}, which cannot be read: {e.strerror or e}") from None


def _numpy_to_tensor(array, dtype: DType, device: str) -> Tensor:
    import numpy as np

    if dtype == dtypes.bfloat16:  # NumPy has no bfloat16: carry the bits and reinterpret them
        return Tensor(np.asarray(array).view(np.uint16), device=device).bitcast(dtypes.bfloat16)
    return Tensor(np.asarray(array), device=device)


def tensor_from_proto(proto, device: str) -> Tensor:
    """A TensorProto (an initializer or a Constant's value) as a Tensor, raw bytes or typed fields alike."""
    onnx = import_onnx()
    from onnx import numpy_helper

    dtype = onnx_dtype(proto.data_type, f"tensor {proto.name!r}")
    if proto.data_location == onnx.TensorProto.EXTERNAL:
        raise OnnxUnsupported(f"tensor {proto.name!r} keeps its data in an external file; load the model with "
                              f"onnx.load(path) (which reads external data) and pass the ModelProto")  # fmt: skip
    try:
        array = numpy_helper.to_array(proto)
    except Exception as e:
        raise OnnxError(f"tensor {proto.name!r} is malformed: {e}") from None
    return _numpy_to_tensor(array, dtype, device)


def array_to_tensor(value: Any, device: str) -> Tensor:
    """A graph input given as a NumPy array (or anything NumPy reads) as a Tensor."""
    import numpy as np

    array = np.asarray(value)
    if array.dtype.name == "bfloat16":
        return _numpy_to_tensor(array, dtypes.bfloat16, device)
    return Tensor(array, device=device)


def attribute_value(attr, device: str) -> Any:
    """One node attribute as a Python value (ints, floats, strings, lists of them) or a Tensor."""
    onnx = import_onnx()
    kind = onnx.AttributeProto
    if attr.type == kind.FLOAT:
        return attr.f
    if attr.type == kind.INT:
        return attr.i
    if attr.type == kind.STRING:
        return attr.s.decode("utf-8", errors="replace")
    if attr.type == kind.TENSOR:
        return tensor_from_proto(attr.t, device)
    if attr.type == kind.FLOATS:
        return tuple(attr.floats)
    if attr.type == kind.INTS:
        return tuple(attr.ints)
    if attr.type == kind.STRINGS:
        return tuple(s.decode("utf-8", errors="replace") for s in attr.strings)
    if attr.type == kind.GRAPH:
        return attr.g
    name = kind.AttributeType.Name(attr.type)
    raise OnnxUnsupported(f"attribute {attr.name!r} has type {name}, which glassgrad does not support")
