"""Datasets read from local files (nothing is downloaded): MNIST and Fashion-MNIST in the idx format."""

from __future__ import annotations

import gzip
import hashlib
import os
import pathlib
import struct
import zlib

from glassgrad.dtype import dtypes
from glassgrad.helpers import prod
from glassgrad.tensor import Tensor

PROJECT_ROOT = pathlib.Path(__file__).resolve().parents[2]

# sha256 of the uncompressed files: MNIST as shipped in datasets/mnist, Fashion-MNIST as Debian packages it.
CHECKSUMS = {
    "mnist": {
        "train-images-idx3-ubyte": "ba891046e6505d7aadcbbe25680a0738ad16aec93bde7f9b65e87a2fc25776db",
        "train-labels-idx1-ubyte": "65a50cbbf4e906d70832878ad85ccda5333a97f0f4c3dd2ef09a8a9eef7101c5",
        "t10k-images-idx3-ubyte": "0fa7898d509279e482958e8ce81c8e77db3f2f8254e26661ceb7762c4d494ce7",
        "t10k-labels-idx1-ubyte": "ff7bcfd416de33731a308c3f266cc351222c34898ecbeaf847f06e48f7ec33f2",
    },
    "fashion-mnist": {
        "train-images-idx3-ubyte": "c59f468a2f672dc815687fe0f83887768d799fd8a3f3276145d20f83aa44d888",
        "train-labels-idx1-ubyte": "bad3541b69d912435c50bb6ba87bec294ff4f6a2e1246121d8633921760443d9",
        "t10k-images-idx3-ubyte": "5b4141f0afbad91edebe8549f8fcffe087ea10ca49f1dbef5c9a5cd8815ce37b",
        "t10k-labels-idx1-ubyte": "0402a96d92fd2663957122ceb108a494c5af83dab82d92729df917d7dec38c34",
    },
}

IDX_MAGIC = {2049: 1, 2051: 3}  # labels: 1 dimension; images: 3
# The size of each file uncompressed, the same in both datasets: a file is never read past it, so a gzip bomb (1 MB
# that inflates to 1 GB) costs no more memory than the real file.
CHUNK = 1 << 20  # bytes read (inflated) at a time
FILE_SIZES = {"train-images-idx3-ubyte": 47_040_016, "train-labels-idx1-ubyte": 60_008,
              "t10k-images-idx3-ubyte": 7_840_016, "t10k-labels-idx1-ubyte": 10_008}  # fmt: skip


def search_dirs(name: str, path: str | os.PathLike | None) -> list[pathlib.Path]:
    """Where a dataset is looked for: only the folder given, else $GLASSGRAD_DATA/<name>, the project, Debian's."""
    if path is not None:  # a folder the user names is where the files must be: no silent fallback to other copies
        return [pathlib.Path(path)]
    dirs = []
    if env := os.environ.get("GLASSGRAD_DATA"):
        dirs.append(pathlib.Path(env) / name)
    dirs += [PROJECT_ROOT / "datasets" / name, pathlib.Path("/usr/share/datasets") / name]
    return dirs


def read_idx(raw: bytes, where: str) -> tuple[bytes, tuple[int, ...]]:
    """The payload and shape of an idx file (big-endian magic 2049 for labels, 2051 for images)."""
    shape = idx_shape(raw, where)
    payload = raw[4 + 4 * len(shape) :]
    if len(payload) != prod(shape):
        raise ValueError(f"{where}: the header says shape {shape} ({prod(shape)} bytes) but {len(payload)} follow")
    return payload, shape


def idx_shape(raw: bytes, where: str) -> tuple[int, ...]:
    """The shape an idx file's header (at the start of `raw`) declares."""
    if len(raw) < 8:
        raise ValueError(f"{where}: {len(raw)} bytes is too short for an idx file")
    (magic,) = struct.unpack(">I", raw[:4])
    if magic not in IDX_MAGIC:
        hint = "; it looks gzip-compressed (name it .gz)" if raw[:2] == b"\x1f\x8b" else ""
        raise ValueError(f"{where}: magic number {magic} (0x{magic:08x}) is not an idx label (2049) or image (2051) "
                         f"file{hint}")  # fmt: skip
    ndim = IDX_MAGIC[magic]
    if len(raw) < 4 + 4 * ndim:
        raise ValueError(f"{where}: {len(raw)} bytes is too short for the header of an idx file of {ndim} dimensions")
    return struct.unpack(f">{ndim}I", raw[4 : 4 + 4 * ndim])


def _load_file(name: str, stem: str, dirs: list[pathlib.Path]) -> tuple[bytes, tuple[int, ...]]:
    for folder in dirs:
        for candidate in (folder / f"{stem}.gz", folder / stem):
            if candidate.exists():
                raw = _read_capped(name, candidate, FILE_SIZES[stem])
                found = hashlib.sha256(raw).hexdigest()
                if found != CHECKSUMS[name][stem]:
                    raise ValueError(f"{name}: {candidate} is corrupt: its sha256 is {found}, expected "
                                     f"{CHECKSUMS[name][stem]}")  # fmt: skip
                return read_idx(raw, str(candidate))
    looked = ", ".join(str(d) for d in dirs)
    hint = " (install the Debian package dataset-fashion-mnist)" if name == "fashion-mnist" else ""
    raise FileNotFoundError(f"{name}: {stem}[.gz] not found; looked in: {looked}{hint}")


def _read_capped(name: str, path: pathlib.Path, size: int) -> bytes:
    """The file's bytes (inflated, for a .gz), streamed: its idx header must declare `size` bytes in all, and the
    stream is read no further than one byte past them."""
    try:
        with gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb") as f:
            head = f.read(8)  # the magic number and the first dimension
            head += f.read(4 * IDX_MAGIC.get(int.from_bytes(head[:4], "big"), 1) - 4)  # an unknown magic: idx_shape
            declared = len(head) + prod(idx_shape(head, f"{name}: {path}"))
            if declared != size:
                raise ValueError(f"{name}: {path}: its header declares {declared} bytes in all, but this file of "
                                 f"{name} is {size} bytes")  # fmt: skip
            chunks, got = [head], len(head)
            while got < size and (chunk := f.read(min(CHUNK, size - got))):  # never more than the header declares
                chunks.append(chunk)
                got += len(chunk)
            if got < size or f.read(1):
                raise ValueError(f"{name}: {path} is {'cut short' if got < size else 'longer than'} the {size} "
                                 "bytes its header declares")  # fmt: skip
    except (OSError, EOFError, zlib.error) as e:  # not gzip (BadGzipFile), a stream cut short
        raise ValueError(
            f"{name}: {path} cannot be read as {'gzip' if path.suffix == '.gz' else 'a file'}: {type(e).__name__}: {e}"
        ) from None
    return b"".join(chunks)


def mnist(fashion: bool = False, path: str | os.PathLike | None = None,
          device: str | None = None) -> tuple[Tensor, Tensor, Tensor, Tensor]:  # fmt: skip
    """X_train (60000, 1, 28, 28), Y_train (60000,), X_test (10000, 1, 28, 28), Y_test (10000,), all uint8."""
    name = "fashion-mnist" if fashion else "mnist"
    dirs = search_dirs(name, path)
    out = []
    for split in ("train", "t10k"):
        images, (n, h, w) = _load_file(name, f"{split}-images-idx3-ubyte", dirs)
        labels, (m,) = _load_file(name, f"{split}-labels-idx1-ubyte", dirs)
        if n != m:
            raise ValueError(f"{name}: {split} has {n} images but {m} labels")
        out += [Tensor.frombuffer(images, dtypes.uint8, (n, 1, h, w), device),
                Tensor.frombuffer(labels, dtypes.uint8, (m,), device)]  # fmt: skip
    return out[0], out[1], out[2], out[3]
