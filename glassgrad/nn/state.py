"""Model state: finding parameters, state dicts, safetensors files and PyTorch checkpoints.

Reading a file never runs code from it: safetensors is JSON and raw bytes, and PyTorch's pickles go
through an unpickler that only builds tensors, storages and plain containers.
"""

from __future__ import annotations

import json
import mmap
import os
import pickle
import struct
import zipfile
from typing import Any

from glassgrad.dtype import DType, dtypes
from glassgrad.helpers import prod, strides_for_shape
from glassgrad.tensor import Tensor

# ---- state dicts ----


def get_state_dict(obj: Any, prefix: str = "") -> dict[str, Tensor]:
    """Every Tensor reachable from obj's attributes, lists and dicts, named as PyTorch names them ("l1.weight")."""
    if isinstance(obj, Tensor):
        return {prefix.rstrip("."): obj}
    if isinstance(obj, (list, tuple)):
        return {k: v for i, x in enumerate(obj) for k, v in get_state_dict(x, f"{prefix}{i}.").items()}
    if isinstance(obj, dict):
        return {k: v for key, x in obj.items() for k, v in get_state_dict(x, f"{prefix}{key}.").items()}
    if hasattr(obj, "__dict__") and not isinstance(obj, type):
        return get_state_dict(vars(obj), prefix)
    return {}


def get_parameters(obj: Any) -> list[Tensor]:
    """The tensors of obj's state dict, each once (for an optimizer)."""
    unique: dict[int, Tensor] = {}
    for t in get_state_dict(obj).values():
        unique.setdefault(id(t), t)
    return list(unique.values())


def load_state_dict(model: Any, state_dict: dict[str, Tensor], strict: bool = True, realize: bool = True) -> None:
    """Copy tensors into the model's tensors by name; with strict, missing and unexpected keys are errors."""
    own = get_state_dict(model)
    if strict:
        missing, unexpected = sorted(set(own) - set(state_dict)), sorted(set(state_dict) - set(own))
        if missing or unexpected:
            raise KeyError(f"load_state_dict: missing keys {missing}, unexpected keys {unexpected} "
                           "(pass strict=False to load only the keys both have)")  # fmt: skip
    common = [key for key in own if key in state_dict]
    for key in common:  # every shape is checked before anything is written: a failed load changes nothing
        if state_dict[key].shape != own[key].shape:
            raise ValueError(f"load_state_dict: {key!r} has shape {state_dict[key].shape} in the state dict but "
                             f"{own[key].shape} in the model")  # fmt: skip
    for key in common:
        target = own[key]
        target.assign(state_dict[key].to(target.device).cast(target.dtype).contiguous())
    if realize and own:
        Tensor.realize(*own.values())


# ---- safetensors ----

SAFETENSORS_DTYPES: dict[str, DType] = {
    "BOOL": dtypes.bool, "I8": dtypes.int8, "U8": dtypes.uint8, "I16": dtypes.int16, "U16": dtypes.uint16,
    "I32": dtypes.int32, "U32": dtypes.uint32, "I64": dtypes.int64, "U64": dtypes.uint64, "F16": dtypes.float16,
    "BF16": dtypes.bfloat16, "F32": dtypes.float32, "F64": dtypes.float64,
}  # fmt: skip


def _read_safetensors_header(path: str, data: memoryview) -> tuple[dict, int]:
    if len(data) < 8:
        raise ValueError(f"safe_load: {path} is {len(data)} bytes, too short for a safetensors file")
    (header_size,) = struct.unpack("<Q", data[:8])
    if 8 + header_size > len(data):
        raise ValueError(f"safe_load: {path}: the header says it is {header_size} bytes, but the file has only "
                         f"{len(data) - 8} after the size field (truncated or not safetensors)")  # fmt: skip
    try:
        header = json.loads(bytes(data[8 : 8 + header_size]))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"safe_load: {path}: the header is not valid JSON ({e})") from None
    if not isinstance(header, dict):
        raise ValueError(f"safe_load: {path}: the header is not a JSON object")
    return header, 8 + header_size


def safe_load_metadata(path: str) -> dict[str, str]:
    """The __metadata__ of a safetensors file."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        with mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ) if size else _empty() as data:
            return _read_safetensors_header(path, memoryview(data))[0].get("__metadata__", {})


class _empty:
    def __enter__(self):
        return b""

    def __exit__(self, *exc):
        return None


def safe_load(path: str, device: str | None = None) -> dict[str, Tensor]:
    """Tensors from a safetensors file, read through a memory map (only each tensor's bytes are copied)."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            raise ValueError(f"safe_load: {path} is empty")
        with mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ) as mapped:
            data = memoryview(mapped)
            try:
                return _tensors_from_safetensors(path, data, device)
            finally:
                data.release()


def _tensors_from_safetensors(path: str, data: memoryview, device: str | None) -> dict[str, Tensor]:
    header, start = _read_safetensors_header(path, data)
    available = len(data) - start
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype = SAFETENSORS_DTYPES[info["dtype"]]
            shape, (begin, end) = tuple(int(s) for s in info["shape"]), info["data_offsets"]
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"safe_load: {path}: tensor {name!r} has a malformed entry {info!r} ({e!r})") from None
        if not 0 <= begin <= end <= available:
            raise ValueError(f"safe_load: {path}: tensor {name!r} has data_offsets [{begin}, {end}] outside the "
                             f"{available} bytes of data")  # fmt: skip
        if end - begin != prod(shape) * dtype.itemsize:
            needed = prod(shape) * dtype.itemsize
            raise ValueError(f"safe_load: {path}: tensor {name!r} of shape {shape} and dtype {info['dtype']} needs "
                             f"{needed} bytes but its data_offsets span {end - begin}")  # fmt: skip
        raw = bytes(data[start + begin : start + end])
        out[name] = Tensor.frombuffer(raw, dtype, shape, device)
    return out


def safe_save(tensors: dict[str, Tensor], path: str, metadata: dict[str, str] | None = None) -> None:
    """Write tensors to a safetensors file."""
    names = {v: k for k, v in SAFETENSORS_DTYPES.items()}
    header: dict[str, Any] = {"__metadata__": metadata} if metadata else {}
    blobs, offset = [], 0
    for name, t in tensors.items():
        raw = bytes(t.data())
        header[name] = {"dtype": names[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for blob in blobs:
            f.write(blob)


# ---- PyTorch checkpoints ----

TORCH_STORAGE_DTYPES: dict[str, DType] = {
    "BoolStorage": dtypes.bool, "CharStorage": dtypes.int8, "ByteStorage": dtypes.uint8,
    "ShortStorage": dtypes.int16, "IntStorage": dtypes.int32, "LongStorage": dtypes.int64,
    "HalfStorage": dtypes.float16, "BFloat16Storage": dtypes.bfloat16, "FloatStorage": dtypes.float32,
    "DoubleStorage": dtypes.float64,
}  # fmt: skip


class _StorageType:
    def __init__(self, dtype: DType):
        self.dtype = dtype


def _rebuild_tensor(storage: tuple[bytes, DType], offset: int, size: tuple[int, ...], stride: tuple[int, ...],
                    *_unused: Any) -> Tensor:  # fmt: skip
    """A tensor from a storage's bytes, an element offset, a size and strides (PyTorch's _rebuild_tensor_v2)."""
    raw, dtype = storage
    flat = Tensor.frombuffer(raw, dtype)
    return _strided_view(flat, offset, tuple(size), tuple(stride))


def _strided_view(flat: Tensor, offset: int, size: tuple[int, ...], stride: tuple[int, ...]) -> Tensor:
    """The elements offset + sum(i_k * stride_k) of a flat tensor, as a tensor of `size`."""
    if prod(size) == 0:
        return Tensor.zeros(*size, dtype=flat.dtype)
    order = sorted(range(len(size)), key=lambda k: -stride[k] if size[k] > 1 else 0)
    permuted = tuple(size[k] for k in order)
    if tuple(stride[k] for k in order if size[k] > 1) == tuple(
        s for s, n in zip(strides_for_shape(permuted), permuted) if n > 1
    ):  # a permutation of a contiguous block: a reshape and a permute
        block = flat[offset : offset + prod(size)].reshape(permuted)
        inverse = sorted(range(len(order)), key=order.__getitem__)
        return block.permute(inverse)
    index = [offset]  # any other strides: gather the elements one index at a time
    for n, s in zip(size, stride):
        index = [i + j * s for i in index for j in range(n)]
    return flat[Tensor(index)].reshape(size)


def _rebuild_parameter(data: Tensor, requires_grad: bool, *_unused: Any) -> Tensor:
    return data


class _StateDict(dict):
    """collections.OrderedDict as torch's state_dict() pickles it: a dict, and a `_metadata` attribute we drop."""

    def __setstate__(self, state: Any) -> None:
        pass


class _RestrictedUnpickler(pickle.Unpickler):
    """Builds only tensors, storages and plain containers; refuses every other global a pickle names."""

    ALLOWED = {
        ("collections", "OrderedDict"): _StateDict,
        ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor,
        ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
    }

    def __init__(self, file, storages: dict[str, bytes], path: str):
        super().__init__(file)
        self.storages, self.path = storages, path

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in self.ALLOWED:
            return self.ALLOWED[(module, name)]
        if module == "torch" and name in TORCH_STORAGE_DTYPES:
            return _StorageType(TORCH_STORAGE_DTYPES[name])
        raise pickle.UnpicklingError(f"torch_load: {self.path} refers to {module}.{name}; only tensors, storages "
                                     "and plain containers are loaded, so this file is refused")  # fmt: skip

    def persistent_load(self, pid: Any) -> tuple[bytes, DType]:
        if not (isinstance(pid, tuple) and len(pid) >= 3 and pid[0] == "storage" and isinstance(pid[1], _StorageType)):
            raise pickle.UnpicklingError(f"torch_load: {self.path} has an unknown persistent id {pid!r}")
        key = str(pid[2])
        if key not in self.storages:
            raise pickle.UnpicklingError(f"torch_load: {self.path} names storage {key!r}, which the archive lacks")
        return self.storages[key], pid[1].dtype


def torch_load(path: str) -> Any:
    """A PyTorch .pt/.pth checkpoint (zip format) as the same structure with glassgrad Tensors in it."""
    try:
        archive = zipfile.ZipFile(path)
    except zipfile.BadZipFile:
        raise ValueError(f"torch_load: {path} is not a zip-format PyTorch checkpoint (saved by torch >= 1.6)") from None
    with archive:
        names = archive.namelist()
        pickles = [n for n in names if n.endswith("/data.pkl")]
        if not pickles:
            raise ValueError(f"torch_load: {path} has no data.pkl; is it a PyTorch checkpoint?")
        root = pickles[0][: -len("data.pkl")]
        storages = {n[len(root) + len("data/") :]: archive.read(n) for n in names if n.startswith(root + "data/")}
        with archive.open(pickles[0]) as f:
            return _RestrictedUnpickler(f, storages, path).load()
