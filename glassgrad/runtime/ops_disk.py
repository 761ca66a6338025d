"""The DISK device: a tensor whose bytes are a file, as tinygrad's (`device="disk:/path/to/file"`).

Each file is a device of its own ("DISK:/path"). A buffer on it is the file's bytes from the start, mapped into
memory (mmap) only while one is read or written. Writing (`t.to("disk:/path").realize()`) creates the file or
grows it to the buffer's size; reading (`Tensor.empty(n, dtype=..., device="disk:/path")`, then `.to("CPU")`,
`.numpy()`, a slice of it) copies bytes out of the file and never past its end: a tensor larger than the file is an
error naming the file, and nothing in a file is ever run. Views that are a contiguous run of the file's bytes (a
slice, a reshape, a same-size bitcast) are read as they lie (schedule/kernelize.py `disk_span`); anything that
needs computing is done after `.to()` a compute device: DISK runs no kernels.
"""

from __future__ import annotations

import mmap
import os
from dataclasses import dataclass

from glassgrad.renderer import Renderer
from glassgrad.runtime.device import Allocator, Compiled, Compiler, Program
from glassgrad.uop.ops import UOp


class DiskError(RuntimeError):
    """A DISK tensor read past the end of its file, or asked to compute."""


@dataclass(frozen=True)
class FileSpan:
    """A buffer on a DISK device: `nbytes` of the file at `path` from its start."""

    path: str
    nbytes: int


class DiskAllocator(Allocator):
    """Buffers are spans of one file; nothing is opened until they are read or written."""

    def __init__(self, path: str):
        self.path = path

    def alloc(self, nbytes: int) -> FileSpan:
        if nbytes == 0:  # nothing will be written: an empty tensor written to a file makes the file (as tinygrad's)
            os.close(os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644))
        return FileSpan(self.path, nbytes)

    def copyin(self, dest: FileSpan, src: memoryview) -> None:
        """Write the bytes into the file, creating it or growing it to hold the buffer (as tinygrad's DISK does)."""
        fd = os.open(dest.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            if os.fstat(fd).st_size < dest.nbytes:
                os.ftruncate(fd, dest.nbytes)
            if dest.nbytes:
                with mmap.mmap(fd, dest.nbytes) as mapped:
                    mapped[:] = src
        finally:
            os.close(fd)

    def copyout(self, dest: memoryview, src: FileSpan) -> None:
        self.copyout_part(dest, src, 0, src.nbytes)

    def copyout_part(self, dest: memoryview, src: FileSpan, start: int, nbytes: int) -> None:
        """Read dest.nbytes bytes of the file from byte `start`; an error naming the file if it has fewer."""
        with open(src.path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            end = start + dest.nbytes
            if end > size:
                raise DiskError(
                    f"DISK:{src.path}: reading bytes {start} to {end} of a file of {size} bytes would read "
                    "past its end; the tensor is larger than the file (check its shape and dtype)"
                )
            if dest.nbytes:
                with mmap.mmap(f.fileno(), end, access=mmap.ACCESS_READ) as mapped:
                    dest[:] = memoryview(mapped)[start:end]


class DiskRenderer(Renderer):
    """DISK computes nothing: a kernel meant for it is an error that says to move the tensor first."""

    device = "DISK"
    runs_kernels = False

    def render(self, name: str, program: list[UOp], outer_loop: UOp | None = None) -> str:
        raise DiskError(
            "a DISK tensor holds a file's bytes and runs no kernels: move it to a compute device "
            "first (.to('CPU')); slices, reshapes and same-size bitcasts read a DISK tensor as it lies"
        )


def DiskDevice(name: str) -> Compiled:
    """The device of one file: name is "DISK:/path/to/file"."""
    path = name.partition(":")[2]
    if not path:
        raise ValueError("the DISK device needs a file: device='disk:/path/to/file'")
    return Compiled(name, DiskAllocator(path), DiskRenderer(), Compiler(), Program)
