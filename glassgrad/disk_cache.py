"""The disk cache (compiled kernels, BEAM's choices): each entry is written atomically and checked before use.

An entry is a header, then its data: a magic string, the sha256 of the key it was written for, the sha256 of the data
and the data's length. Reading one checks all four before anything sees the data, so an entry that a crash or a full
disk cut short, one garbled on the disk, or another key's entry copied over it is never used: it is reported in one
warning line naming it, and the caller builds it again (and writes it back). A cache folder that cannot be used (not
writable, or a file where the folder should be) is one warning, and glassgrad runs without the disk cache.

The folder is $GLASSGRAD_CACHE_DIR where set, else $XDG_CACHE_HOME/glassgrad or ~/.cache/glassgrad; GLASSGRAD_CACHE=0
turns the disk cache off. Past GLASSGRAD_CACHE_MB megabytes (1024) of entries, the least recently used are deleted
(a read marks an entry used), checked when a process first writes and after every tenth of the cap it writes.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import pathlib
import struct
import threading
import time
import warnings

MAGIC = b"GGCACHE1"
HEADER = struct.Struct("<8s32s32sQ")  # magic, sha256 of the key, sha256 of the data, the data's length in bytes

_usable: dict[pathlib.Path, bool] = {}  # each cache folder is tried once per process
_warned: set[pathlib.Path] = set()  # entries and folders warned about
_written: dict[pathlib.Path, int] = {}  # bytes this process wrote to each folder since its size was last checked


def cache_dir() -> pathlib.Path | None:
    """Where glassgrad keeps its disk cache ($GLASSGRAD_CACHE_DIR, else $XDG_CACHE_HOME/glassgrad or
    ~/.cache/glassgrad), or None where GLASSGRAD_CACHE=0 turns it off or (with one warning) where that folder cannot
    be made or written."""
    if os.environ.get("GLASSGRAD_CACHE", "1") == "0":
        return None
    if not (where := os.environ.get("GLASSGRAD_CACHE_DIR")):
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        where = os.path.join(base, "glassgrad")
    path = pathlib.Path(where)
    if path not in _usable:
        try:
            path.mkdir(parents=True, exist_ok=True)
            if not os.access(path, os.W_OK | os.X_OK):
                raise PermissionError("not writable")
            _usable[path] = True
        except OSError as e:
            _usable[path] = False
            reason = "a file is where the folder should be" if path.exists() and not path.is_dir() else _reason(e)
            _warn_once(
                path, f"glassgrad: cannot use the cache folder {path} ({reason}); running without the disk cache"
            )
    return path if _usable[path] else None


def cache_get(table: str, key: str) -> bytes | None:
    """The data stored for `key` in `table`, or None where there is none or the entry is damaged (with a warning)."""
    if (path := _entry_path(table, key)) is None:
        return None
    try:
        with open(path, "rb") as f:
            header = f.read(HEADER.size)
            problem = _header_problem(header, key, os.fstat(f.fileno()).st_size)
            data = f.read() if problem is None else b""
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as e:
        problem = f"unreadable ({_reason(e)})"
    if problem is None and hashlib.sha256(data).digest() != HEADER.unpack(header)[2]:
        problem = "damaged: its data does not match its checksum"
    if problem is not None:
        _warn_once(path, f"glassgrad: the cache entry {path} is {problem}; building it again")
        return None
    with contextlib.suppress(OSError):  # used now: the size cap deletes the least recently used first
        os.utime(path)
    return data


def cache_put(table: str, key: str, data: bytes) -> None:
    """Store `data` for `key` in `table`: written to a temporary file, then renamed over the entry in one step."""
    if (path := _entry_path(table, key)) is None:
        return
    header = HEADER.pack(MAGIC, _key_digest(key), hashlib.sha256(data).digest(), len(data))
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")  # entries are written side by side
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb") as f:
            f.write(header + data)
        os.replace(tmp, path)
        _count_written(path.parent.parent.parent, HEADER.size + len(data))
    except OSError as e:
        with contextlib.suppress(OSError):  # never made, or its folder could not be
            tmp.unlink()
        folder = path.parent.parent.parent  # one warning for the folder, not one per entry (a full disk fails them all)
        _warn_once(folder, f"glassgrad: cannot write the cache entry {path} ({_reason(e)}); not keeping it on disk")


def cache_limit_bytes() -> int:
    """The size cap of the cache folder (GLASSGRAD_CACHE_MB megabytes, 1024 unless set)."""
    return int(float(os.environ.get("GLASSGRAD_CACHE_MB", 1024)) * 1e6)


def _count_written(folder: pathlib.Path, nbytes: int) -> None:
    """Trim the folder when this process first writes to it, and after each tenth of the cap it writes."""
    first = folder not in _written
    _written[folder] = _written.get(folder, 0) + nbytes
    if first or _written[folder] >= cache_limit_bytes() // 10:
        _written[folder] = 0
        trim(folder, cache_limit_bytes())


def trim(folder: pathlib.Path, limit: int) -> None:
    """Delete the least recently used entries under `folder` until what is left holds at most 90% of `limit` bytes
    (nothing where it holds no more than `limit`). Another process may delete the same entry: that is no error."""
    found = []
    for table in _subfolders(folder):
        for shard in _subfolders(table):
            with contextlib.suppress(OSError):
                for entry in os.scandir(shard):
                    stat = entry.stat()
                    found.append((stat.st_mtime, stat.st_size, entry.path))
    total = sum(size for _, size, _ in found)
    if total <= limit:
        return
    stale = time.time() - 60  # a temporary file this young may still be written by another process
    for mtime, size, path in sorted(found):
        if total <= limit * 0.9:
            break
        if path.endswith(".tmp") and mtime > stale:
            continue
        with contextlib.suppress(OSError):
            os.unlink(path)
        total -= size


def _subfolders(folder: pathlib.Path | str) -> list[str]:
    try:
        return [e.path for e in os.scandir(folder) if e.is_dir(follow_symlinks=False)]
    except OSError:
        return []


def _entry_path(table: str, key: str) -> pathlib.Path | None:
    if (folder := cache_dir()) is None:
        return None
    digest = _key_digest(key).hex()
    return folder / table / digest[:2] / digest


def _key_digest(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


def _header_problem(header: bytes, key: str, file_size: int) -> str | None:
    """What is wrong with an entry's header (read from a file of `file_size` bytes), or None."""
    if len(header) < HEADER.size:
        return f"too short to be an entry ({file_size} bytes)"
    magic, key_digest, _, length = HEADER.unpack(header)
    if magic != MAGIC:
        return "not a glassgrad cache entry"
    if key_digest != _key_digest(key):
        return "another key's entry"
    if length != file_size - HEADER.size:
        return f"cut short or padded: it holds {file_size - HEADER.size} bytes of data but says {length}"
    return None


def _reason(e: OSError) -> str:
    return f"{type(e).__name__}: {e.strerror or e}"


def _warn_once(about: pathlib.Path, message: str) -> None:
    if about not in _warned:
        _warned.add(about)
        warnings.warn(message, RuntimeWarning, stacklevel=2)
