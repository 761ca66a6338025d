"""Files inside archives as tensors, as tinygrad's nn.state has them: TensorIO reads a uint8 tensor as a file;
tar_extract and zip_extract give each member's bytes as a slice of the archive's tensor (a DISK tensor reads only
what is used). An archive's listing is checked against the tensor: a member that would lie past its end is an
error naming it, never a shorter slice."""

from __future__ import annotations

import io
import os
import struct
import tarfile
import zipfile
from typing import Any

from glassgrad.dtype import dtypes
from glassgrad.tensor import Tensor


class TensorIO(io.RawIOBase):
    """A 1-D uint8 tensor read as a binary file (seekable), for Python's file readers (tarfile, zipfile, pickle)."""

    def __init__(self, t: Tensor):
        if t.ndim != 1 or t.dtype != dtypes.uint8:
            raise ValueError(f"TensorIO: needs a 1-D uint8 tensor, got shape {t.shape} and {t.dtype}")
        super().__init__()
        self._tensor, self._position = t, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        """Read up to len(buffer) bytes from the current position; 0 at the end."""
        view = memoryview(buffer).cast("B")
        end = min(self._position + len(view), self._tensor.shape[0])
        if end <= self._position:
            return 0
        data = self._tensor[self._position : end].data()
        view[: end - self._position] = memoryview(data).cast("B")
        count, self._position = end - self._position, end
        return count

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        """Move to a byte, as a file's seek (past the end is allowed; reading there gives nothing)."""
        position = {io.SEEK_SET: 0, io.SEEK_CUR: self._position, io.SEEK_END: self._tensor.shape[0]}[whence] + offset
        if position < 0:
            raise ValueError(f"TensorIO: negative seek position {position}")
        self._position = position
        return position

    def tell(self) -> int:
        return self._position


def _archive_tensor(archive: Tensor | str | os.PathLike, op: str) -> Tensor:
    """The archive's bytes: the tensor given, or its file on the DISK device."""
    if isinstance(archive, Tensor):
        return archive
    if not isinstance(archive, (str, os.PathLike)):
        raise TypeError(f"{op}: expected a uint8 Tensor or a file path, got {type(archive).__name__}")
    path = os.fspath(archive)
    return Tensor.empty(os.stat(path).st_size, dtype=dtypes.uint8, device=f"disk:{os.path.abspath(path)}")


def _member(t: Tensor, name: str, start: int, size: int, op: str) -> Tensor:
    if start < 0 or size < 0 or start + size > t.shape[0]:
        raise ValueError(f"{op}: member {name!r} says it lies at bytes {start} to {start + size}, past the end of "
                         f"the archive ({t.shape[0]} bytes): truncated or corrupt")  # fmt: skip
    return t[start : start + size]


def tar_extract(archive: Tensor | str | os.PathLike) -> dict[str, Tensor]:
    """Each regular file of a tar archive (a uint8 tensor or a path) as the slice of its bytes, by name."""
    t = _archive_tensor(archive, "tar_extract")
    try:
        with tarfile.open(fileobj=TensorIO(t), mode="r:") as tar:
            members = [m for m in tar if m.isreg()]
    except tarfile.TarError as e:
        raise ValueError(f"tar_extract: not a readable tar archive ({e})") from None
    return {m.name: _member(t, m.name, m.offset_data, m.size, "tar_extract") for m in members}


ZIP_LOCAL_HEADER = struct.Struct("<4s22xHH")  # signature ... file name length, extra field length: 30 bytes


def zip_extract(archive: Tensor | str | os.PathLike) -> dict[str, Tensor]:
    """Each file of a zip archive (a uint8 tensor or a path) by name: a stored one as the slice of its bytes, a
    compressed one decompressed (zipfile checks its size and CRC) into a tensor of its own."""
    t = _archive_tensor(archive, "zip_extract")
    stream = TensorIO(t)
    files: dict[str, Tensor] = {}
    try:
        with zipfile.ZipFile(stream, "r") as zf:
            for info in zf.infolist():
                if info.is_dir():
                    continue
                if info.compress_type != zipfile.ZIP_STORED:
                    files[info.filename] = Tensor(zf.read(info))
                    continue
                stream.seek(info.header_offset)
                signature, name_length, extra_length = ZIP_LOCAL_HEADER.unpack(stream.read(ZIP_LOCAL_HEADER.size))
                if signature != b"PK\x03\x04":
                    raise ValueError(f"zip_extract: member {info.filename!r} has no local header at byte "
                                     f"{info.header_offset}: corrupt archive")  # fmt: skip
                start = info.header_offset + ZIP_LOCAL_HEADER.size + name_length + extra_length
                files[info.filename] = _member(t, info.filename, start, info.file_size, "zip_extract")
    except (zipfile.BadZipFile, struct.error) as e:
        raise ValueError(f"zip_extract: not a readable zip archive ({e})") from None
    return files
