"""PyTorch checkpoints (torch.save's zip format) read without trusting them.

The pickle goes through an unpickler that builds only plain containers and records of tensors: it refuses every
other global, and a record refuses state set on it (pickle's BUILD), so nothing from the file reaches an object's
attributes. Only after the whole pickle is read is each record checked against the storage it names (strides not
negative, every element it reads inside the storage, the storage's declared size that of its data in the archive)
and the archive's members against the file (stored, not compressed: a compressed member can inflate far beyond the
file); then each storage is read once and every tensor of it is a view of that one copy.
"""

from __future__ import annotations

import os
import pickle
import zipfile
from typing import Any

from glassgrad.dtype import DType, dtypes
from glassgrad.helpers import prod, strides_for_shape
from glassgrad.tensor import Tensor

TORCH_STORAGE_DTYPES: dict[str, DType] = {
    "BoolStorage": dtypes.bool, "CharStorage": dtypes.int8, "ByteStorage": dtypes.uint8,
    "ShortStorage": dtypes.int16, "IntStorage": dtypes.int32, "LongStorage": dtypes.int64,
    "HalfStorage": dtypes.float16, "BFloat16Storage": dtypes.bfloat16, "FloatStorage": dtypes.float32,
    "DoubleStorage": dtypes.float64,
}  # fmt: skip


class _Refused(Exception):
    """Carries an error that already names the file out of the unpickler, past the net for malformed pickles."""

    def __init__(self, error: Exception):
        self.error = error


class _StateRefused(Exception):
    """Pickle's BUILD tried to set state on an object the unpickler made."""

    def __init__(self, obj: Any, state: Any):
        self.names = sorted(map(str, state)) if isinstance(state, dict) else f"from a {type(state).__name__}"
        self.kind = {"_Tensor": "tensor", "_Storage": "storage"}.get(type(obj).__name__, "storage type")


class _NoState:
    """Refuses pickle's BUILD: state from a file never reaches an object's attributes."""

    __slots__ = ()

    def __setstate__(self, state: Any) -> None:
        raise _StateRefused(self, state)


class _StorageType(_NoState):
    __slots__ = ("dtype",)

    def __init__(self, dtype: DType):
        self.dtype = dtype


class _Storage(_NoState):
    """A storage the pickle names: its key in the archive (data/<key>), dtype and declared element count."""

    __slots__ = ("key", "dtype", "numel")

    def __init__(self, key: str, dtype: DType, numel: int):
        self.key, self.dtype, self.numel = key, dtype, numel


class _Tensor(_NoState):
    """A tensor the pickle describes, made a Tensor once every one was checked (torch's _rebuild_tensor_v2 args)."""

    __slots__ = ("storage", "offset", "size", "stride")

    def __init__(self, storage: Any, offset: Any, size: Any, stride: Any, *_unused: Any):
        self.storage, self.offset, self.size, self.stride = storage, offset, size, stride


class _StateDict(dict):
    """collections.OrderedDict as torch's state_dict() pickles it: a dict, and a `_metadata` attribute we drop."""

    def __setstate__(self, state: Any) -> None:
        pass


def _rebuild_parameter(data: _Tensor, *_unused: Any) -> _Tensor:
    return data


class _CheckpointUnpickler(pickle.Unpickler):
    """Builds only tensor records, storages and plain containers; refuses every other global a pickle names."""

    ALLOWED = {
        ("collections", "OrderedDict"): _StateDict,
        ("torch._utils", "_rebuild_tensor_v2"): _Tensor,
        ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
    }

    def __init__(self, file, sizes: dict[str, int], path: str):
        super().__init__(file)
        self.sizes, self.path = sizes, path  # each storage's bytes in the archive, by key

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in self.ALLOWED:
            return self.ALLOWED[(module, name)]
        if module == "torch" and name in TORCH_STORAGE_DTYPES:
            return _StorageType(TORCH_STORAGE_DTYPES[name])
        raise _Refused(
            pickle.UnpicklingError(
                f"torch_load: {self.path} refers to {module}.{name}; only tensors, "
                "storages and plain containers are loaded, so this file is refused"
            )
        )

    def persistent_load(self, pid: Any) -> _Storage:
        if not (isinstance(pid, tuple) and len(pid) >= 5 and pid[0] == "storage" and isinstance(pid[1], _StorageType)
                and _is_count(pid[4])):  # fmt: skip
            raise _Refused(pickle.UnpicklingError(f"torch_load: {self.path} has an unknown persistent id {pid!r}"))
        key, dtype, numel = str(pid[2]), pid[1].dtype, pid[4]
        if key not in self.sizes:
            raise _Refused(pickle.UnpicklingError(f"torch_load: {self.path} names storage {key!r}, which the archive "
                                                  "lacks"))  # fmt: skip
        if numel * dtype.itemsize != self.sizes[key]:
            raise _Refused(
                ValueError(
                    f"torch_load: {self.path}: storage {key!r} is declared as {numel} {dtype.name} "
                    f"({numel * dtype.itemsize} bytes) but data/{key} holds {self.sizes[key]}"
                )
            )
        return _Storage(key, dtype, numel)


def torch_load(path: str) -> Any:
    """A PyTorch .pt/.pth checkpoint (zip format) as the same structure with glassgrad Tensors in it."""
    try:
        archive = zipfile.ZipFile(path)
    except zipfile.BadZipFile:
        raise ValueError(f"torch_load: {path} is not a zip-format PyTorch checkpoint (saved by torch >= 1.6)") from None
    with archive:
        pickles = [info for info in archive.infolist() if info.filename.endswith("/data.pkl")]
        if not pickles:
            raise ValueError(f"torch_load: {path} has no data.pkl; is it a PyTorch checkpoint?")
        root = pickles[0].filename[: -len("data.pkl")]
        storages = {i.filename[len(root) + len("data/") :]: i for i in archive.infolist() if
                    i.filename.startswith(root + "data/")}  # fmt: skip
        for info in (pickles[0], *storages.values()):
            _check_member(info, path)
        structure = _unpickle(archive, pickles[0], {key: info.file_size for key, info in storages.items()}, path)
        found = _records(structure, "", set(), path)
        for name, record in found:
            _check_record(record, name, path)
        flats = {}  # one copy of each storage, whatever number of tensors view it
        for _, record in found:
            if (key := (record.storage.key, record.storage.dtype)) not in flats:
                flats[key] = Tensor.frombuffer(_read(archive, storages[key[0]], path), key[1])
        tensors = {id(r): _strided_view(flats[(r.storage.key, r.storage.dtype)], r.offset, r.size, r.stride)
                   for _, r in found}  # fmt: skip
        return _with_tensors(structure, tensors, {})


def _check_member(info: zipfile.ZipInfo, path: str) -> None:
    """A member is read only if it is stored as is and lies inside the file."""
    if info.compress_type != zipfile.ZIP_STORED:
        raise ValueError(f"torch_load: {path}: {info.filename} is compressed (zip method {info.compress_type}); "
                         "torch.save stores every member as is, and a compressed one can inflate far beyond the file, "
                         "so it is refused")  # fmt: skip
    size = os.path.getsize(path)
    if info.file_size != info.compress_size or info.header_offset + info.compress_size > size:
        raise ValueError(f"torch_load: {path}: {info.filename} says it holds {info.file_size} bytes at offset "
                         f"{info.header_offset}, past the end of the {size}-byte file (truncated?)")  # fmt: skip


def _unpickle(archive: zipfile.ZipFile, pickle_info: zipfile.ZipInfo, sizes: dict[str, int], path: str) -> Any:
    try:
        with archive.open(pickle_info) as f:
            return _CheckpointUnpickler(f, sizes, path).load()
    except _Refused as refused:
        raise refused.error from None
    except _StateRefused as e:
        raise pickle.UnpicklingError(
            f"torch_load: {path}: its pickle sets attributes {e.names} on a {e.kind}; state "
            "from a file never reaches an object's attributes, so it is refused"
        ) from None
    except Exception as e:  # anything a malformed pickle makes the unpickler raise
        raise pickle.UnpicklingError(f"torch_load: {path}: data.pkl is malformed ({type(e).__name__}: {e})") from None


def _read(archive: zipfile.ZipFile, info: zipfile.ZipInfo, path: str) -> bytes:
    try:
        return archive.read(info)
    except (zipfile.BadZipFile, EOFError, OSError) as e:  # a checksum that does not match, a cut file
        raise ValueError(f"torch_load: {path}: {info.filename} cannot be read ({e})") from None


def _records(obj: Any, name: str, seen: set[int], path: str) -> list[tuple[str, _Tensor]]:
    """Every tensor record in the structure, with the name it has there ('model.l1.weight'), each once."""
    if not isinstance(obj, (_Tensor, dict, list, tuple)) or id(obj) in seen:
        return []
    seen.add(id(obj))
    if isinstance(obj, _Tensor):
        return [(name or "(the checkpoint itself)", obj)]
    items = obj.items() if isinstance(obj, dict) else enumerate(obj)
    try:
        return [found for key, value in items for found in _records(value, f"{name}.{key}" if name else str(key),
                                                                    seen, path)]  # fmt: skip
    except RecursionError:
        raise ValueError(f"torch_load: {path}: the structure is nested too deeply to read") from None


def _is_count(v: Any) -> bool:
    return type(v) is int and v >= 0


def _check_record(record: _Tensor, name: str, path: str) -> None:
    """A tensor reads only elements of its storage, with sizes and strides that are counts."""
    where = f"torch_load: {path}: tensor {name!r}"
    storage, offset = getattr(record, "storage", None), getattr(record, "offset", None)  # NEWOBJ sets none of them
    size, stride = getattr(record, "size", None), getattr(record, "stride", None)
    if not isinstance(storage, _Storage):
        raise ValueError(f"{where} has no storage (got {type(storage).__name__})")
    if not (isinstance(size, tuple) and isinstance(stride, tuple) and len(size) == len(stride)):
        raise ValueError(f"{where} has size {size!r} and stride {stride!r}, not two tuples of one length")
    if not all(map(_is_count, (*size, offset))):
        raise ValueError(f"{where} has size {size!r} and offset {offset!r}; both must be counts (ints >= 0)")
    if not all(type(s) is int for s in stride) or any(s < 0 for s in stride):
        raise ValueError(f"{where} has strides {stride!r}; glassgrad (and PyTorch) read only strides >= 0")
    if prod(size) == 0:
        return
    last = offset + sum((n - 1) * s for n, s in zip(size, stride))
    if last >= storage.numel:
        raise ValueError(f"{where} of shape {size}, strides {stride} and offset {offset} reads element "
                         f"{last} of storage {storage.key!r}, which holds {storage.numel} {storage.dtype.name} "
                         f"({storage.numel * storage.dtype.itemsize} bytes)")  # fmt: skip


def _strided_view(flat: Tensor, offset: int, size: tuple[int, ...], stride: tuple[int, ...]) -> Tensor:
    """The elements offset + sum(i_k * stride_k) of a flat tensor, as a tensor of `size` (a view where it can be)."""
    if prod(size) == 0:
        return Tensor.zeros(*size, dtype=flat.dtype)
    read = [k for k, (n, s) in enumerate(zip(size, stride)) if n > 1 and s > 0]  # the rest repeat what these read
    core = _core_view(flat, offset, tuple(size[k] for k in read), tuple(stride[k] for k in read))
    return core.reshape(tuple(n if k in read else 1 for k, n in enumerate(size))).expand(size)


def _core_view(flat: Tensor, offset: int, size: tuple[int, ...], stride: tuple[int, ...]) -> Tensor:
    """As _strided_view, for sizes > 1 and strides > 0."""
    order = sorted(range(len(size)), key=lambda k: -stride[k])
    permuted = tuple(size[k] for k in order)
    if tuple(stride[k] for k in order) == strides_for_shape(permuted):  # a permutation of a contiguous block
        block = flat[offset : offset + prod(size)].reshape(permuted)
        return block.permute(sorted(range(len(order)), key=order.__getitem__))
    index_dtype = dtypes.int32 if flat.numel() < 2**31 else dtypes.int64  # any other strides: gather, by an index
    index = Tensor.full(size, offset, dtype=index_dtype)  # computed lazily (a list of them could be most of memory)
    for k, (n, s) in enumerate(zip(size, stride)):
        index = index + Tensor.arange(n, dtype=index_dtype).reshape([n if j == k else 1 for j in range(len(size))]) * s
    return flat[index.reshape(-1)].reshape(size)


def _with_tensors(obj: Any, tensors: dict[int, Tensor], done: dict[int, Any]) -> Any:
    """The structure with each record replaced by its Tensor (dicts and lists in place; tuples rebuilt)."""
    if isinstance(obj, _Tensor):
        return tensors[id(obj)]
    if not isinstance(obj, (dict, list, tuple)):
        return obj
    if id(obj) in done:
        return done[id(obj)]
    if isinstance(obj, tuple):
        done[id(obj)] = rebuilt = tuple(_with_tensors(v, tensors, done) for v in obj)
        return rebuilt
    done[id(obj)] = obj
    for key, value in list(obj.items() if isinstance(obj, dict) else enumerate(obj)):
        obj[key] = _with_tensors(value, tensors, done)
    return obj
