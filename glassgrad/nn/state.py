"""Model state: finding parameters, state dicts, safetensors files and PyTorch checkpoints (torch_file.py).

Reading a file never runs code from it: safetensors is JSON and raw bytes, and PyTorch's pickles go
through an unpickler that only builds tensors, storages and plain containers.
"""

from __future__ import annotations

import json
import os
import struct
from typing import Any, BinaryIO

from glassgrad.dtype import DType, dtypes
from glassgrad.helpers import prod
from glassgrad.nn.archives import TensorIO, tar_extract, zip_extract
from glassgrad.nn.torch_file import torch_load
from glassgrad.tensor import Tensor

__all__ = [
    "TensorIO",
    "get_parameters",
    "get_state_dict",
    "load_state_dict",
    "safe_load",
    "safe_load_metadata",
    "safe_save",
    "tar_extract",
    "torch_load",
    "zip_extract",
]

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
    if not isinstance(state_dict, dict):
        raise TypeError(f"load_state_dict: expected a state dict (a dict of name -> Tensor, as get_state_dict, "
                        f"safe_load and torch_load give), got {type(state_dict).__name__}")  # fmt: skip
    own = get_state_dict(model)
    if strict:
        missing, unexpected = sorted(set(own) - set(state_dict)), sorted(set(state_dict) - set(own))
        if missing or unexpected:
            raise KeyError(f"load_state_dict: missing keys {missing}, unexpected keys {unexpected} "
                           "(pass strict=False to load only the keys both have)")  # fmt: skip
    common = [key for key in own if key in state_dict]
    if wrong := {key: type(state_dict[key]).__name__ for key in common if not isinstance(state_dict[key], Tensor)}:
        raise TypeError(f"load_state_dict: the state dict's values must be Tensors; these are not: {wrong}")
    # every shape is checked before anything is written: a failed load changes nothing (the message is tinygrad's)
    for key in common:
        if state_dict[key].shape != own[key].shape:
            raise ValueError(f"load_state_dict: Shape mismatch in layer `{key}`: Expected shape {own[key].shape}, but "
                             f"found {state_dict[key].shape} in state dict.")  # fmt: skip
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


MAX_HEADER_BYTES = 100_000_000  # as the safetensors library: a larger header is refused before it is read


def _read_safetensors_header(path: str, f: BinaryIO, size: int) -> tuple[dict, int]:
    """The header of an open safetensors file of `size` bytes, and where its data starts."""
    if size < 8:
        raise ValueError(f"safe_load: {path} is {size} bytes, too short for a safetensors file")
    (header_size,) = struct.unpack("<Q", f.read(8))
    if 8 + header_size > size:
        raise ValueError(f"safe_load: {path}: the header says it is {header_size} bytes, but the file has only "
                         f"{size - 8} after the size field (truncated or not safetensors)")  # fmt: skip
    if header_size > MAX_HEADER_BYTES:
        raise ValueError(f"safe_load: {path}: the header says it is {header_size} bytes, more than the "
                         f"{MAX_HEADER_BYTES} a safetensors header may have")  # fmt: skip
    try:
        header = json.loads(f.read(header_size))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"safe_load: {path}: the header is not valid JSON ({e})") from None
    except RecursionError:
        raise ValueError(
            f"safe_load: {path}: the header is JSON nested too deeply to be a safetensors header"
        ) from None
    if not isinstance(header, dict):
        raise ValueError(f"safe_load: {path}: the header is not a JSON object")
    metadata = header.get("__metadata__", {})
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise ValueError(f"safe_load: {path}: __metadata__ must map names to strings, got {metadata!r:.200}")
    return header, 8 + header_size


def safe_load_metadata(path: str) -> dict[str, str]:
    """The __metadata__ of a safetensors file."""
    with open(path, "rb") as f:
        return _read_safetensors_header(path, f, os.fstat(f.fileno()).st_size)[0].get("__metadata__", {})


def safe_load(path: str, device: str | None = None) -> dict[str, Tensor]:
    """Tensors from a safetensors file; every entry is checked against the file before any tensor is read."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            raise ValueError(f"safe_load: {path} is empty")
        header, start = _read_safetensors_header(path, f, size)
        entries = _safetensors_entries(path, header, size - start)
        out = {}
        for name, (
            dtype,
            shape,
            begin,
            end,
        ) in entries.items():  # each tensor's bytes read once, straight from the file
            f.seek(start + begin)
            out[name] = Tensor.frombuffer(f.read(end - begin), dtype, shape, device)
        return out


def _safetensors_entries(path: str, header: dict, available: int) -> dict[str, tuple[DType, tuple[int, ...], int, int]]:
    """Each tensor's dtype, shape and data offsets, checked: every entry well formed and inside the data, and the
    tensors covering the data exactly, with no overlap and no gap (as the safetensors library checks)."""
    entries = {name: _safetensors_entry(path, name, info, available) for name, info in header.items()
               if name != "__metadata__"}  # fmt: skip
    covered = 0
    for name, (_, _, begin, end) in sorted(entries.items(), key=lambda item: item[1][2:]):
        if begin != covered:
            what = "overlaps the tensor before it" if begin < covered else f"leaves bytes {covered}..{begin} unused"
            raise ValueError(f"safe_load: {path}: tensor {name!r} at data_offsets [{begin}, {end}] {what}; the "
                             "tensors of a safetensors file cover its data exactly once")  # fmt: skip
        covered = end
    if covered != available:
        raise ValueError(f"safe_load: {path}: the tensors cover {covered} of the {available} bytes of data")
    return entries


def _is_count(v: Any) -> bool:
    return type(v) is int and v >= 0


def _safetensors_entry(path: str, name: str, info: Any, available: int) -> tuple[DType, tuple[int, ...], int, int]:
    where = f"safe_load: {path}: tensor {name!r}"
    if not isinstance(info, dict) or not {"dtype", "shape", "data_offsets"} <= set(info):
        raise ValueError(f"{where} has a malformed entry {info!r:.200} (it needs dtype, shape and data_offsets)")
    if not isinstance(info["dtype"], str) or info["dtype"] not in SAFETENSORS_DTYPES:
        raise ValueError(f"{where} has dtype {info['dtype']!r:.50}, which glassgrad does not read (it reads "
                         f"{', '.join(SAFETENSORS_DTYPES)})")  # fmt: skip
    shape, offsets = info["shape"], info["data_offsets"]
    if not isinstance(shape, list) or not all(map(_is_count, shape)):
        raise ValueError(f"{where} has shape {shape!r:.200}; a shape is a list of ints >= 0")
    if not isinstance(offsets, list) or len(offsets) != 2 or not all(map(_is_count, offsets)):
        raise ValueError(f"{where} has data_offsets {offsets!r:.200}; they are two ints >= 0, [begin, end]")
    dtype, (begin, end) = SAFETENSORS_DTYPES[info["dtype"]], offsets
    if not begin <= end <= available:
        raise ValueError(f"{where} has data_offsets [{begin}, {end}] outside the {available} bytes of data")
    if end - begin != prod(shape) * dtype.itemsize:
        raise ValueError(f"{where} of shape {tuple(shape)} and dtype {info['dtype']} needs "
                         f"{prod(shape) * dtype.itemsize} bytes but its data_offsets span {end - begin}")  # fmt: skip
    return dtype, tuple(shape), begin, end


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
