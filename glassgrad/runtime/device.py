"""Devices as plug-ins: each is an Allocator, a Renderer, a Compiler and a Program, found by name."""

from __future__ import annotations

import errno
import importlib
import os
import pathlib
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from glassgrad import device_info
from glassgrad.disk_cache import cache_get, cache_put
from glassgrad.dtype import DType
from glassgrad.helpers import getenv
from glassgrad.runtime.counters import GlobalCounters
from glassgrad.runtime.out_of_memory import OutOfMemoryError, host_bytes


class Allocator:
    """Owns device memory: alloc, free, copyin (host -> device), copyout (device -> host)."""

    def alloc(self, nbytes: int) -> Any:
        raise NotImplementedError

    def free(self, handle: Any, nbytes: int) -> None:
        pass

    def copyin(self, dest: Any, src: memoryview) -> None:
        raise NotImplementedError

    def copyout(self, dest: memoryview, src: Any) -> None:
        raise NotImplementedError

    def copyout_part(self, dest: memoryview, src: Any, start: int, nbytes: int) -> None:
        """Copy dest.nbytes bytes from `start` bytes into `src` (of `nbytes`); by default through a copy of it all."""
        whole = host_bytes(nbytes)
        self.copyout(memoryview(whole), src)
        dest[:] = memoryview(whole)[start : start + dest.nbytes]

    def transfer(self, dest: Any, src: Any, nbytes: int, src_allocator: Allocator) -> bool:
        """Copy from another allocator's memory without the host in between; False where this device can't."""
        return False


class Compiler:
    """Turns source text into a loadable binary; results are cached on disk by a hash of source and flags."""

    cache_key: str = "none"  # changes whenever the flags or compiler change

    def compile(self, src: str) -> bytes:
        raise NotImplementedError

    def compile_cached(self, src: str) -> bytes:
        if getenv("DISABLE_COMPILER_CACHE", 0):
            return self.compile(src)
        key = f"{type(self).__name__}\0{self.cache_key}\0{src}"
        if (binary := cache_get("kernels", key)) is None:
            binary = self.compile(src)
            cache_put("kernels", key, binary)
        return binary


class Program:
    """A loaded kernel: call it with buffers (and loop bounds for threads; `vals`, the values of its Variables, only
    where it takes some) to run it; returns seconds if timed."""

    def __init__(self, name: str, binary: bytes):
        self.name = name  # the binary is not kept: a loaded program holds what it needs

    def __call__(self, *bufs: Any, global_size: tuple[int, ...] = (1,), local_size: tuple[int, ...] = (1,),
                 wait: bool = False, vals: tuple[int, ...] = ()) -> float | None:  # fmt: skip
        raise NotImplementedError


@dataclass
class Compiled:
    """One device: its name and its four pieces."""

    name: str
    allocator: Allocator
    renderer: Any  # glassgrad.renderer.Renderer
    compiler: Compiler
    program: type[Program]
    # loaded programs, by source, while something (the engine's kernels, a TinyJit's capture) holds them
    programs: weakref.WeakValueDictionary[str, Program] = field(default_factory=weakref.WeakValueDictionary)

    def load(self, name: str, src: str, binary: bytes | None = None) -> Program:
        """Load a kernel's source once per process: its `binary` where compiled already, else through the compiler's
        disk cache."""
        if (found := self.programs.get(src)) is None:
            found = self.programs[src] = self.program(name, binary or self.compiler.compile_cached(src))
        return found

    def supports(self, dtype: DType) -> bool:
        return self.renderer.supports(dtype)

    def synchronize(self) -> None:
        pass


class _DeviceRegistry:
    """`Device["CPU"]` finds and opens a device; `Device.DEFAULT` is where new tensors go."""

    def __init__(self):
        self._opened: dict[str, Compiled] = {}
        self._default: str | None = None
        self._registered: dict[str, Callable[[str], Compiled]] = {}  # devices defined outside glassgrad/runtime
        self._opening = threading.RLock()  # re-entrant, should a device's factory open another device

    def register(self, name: str, factory: Callable[[str], Compiled]) -> None:
        """Add a device defined outside glassgrad: `Device["NAME"]` (or "NAME:1") then opens `factory(name)`."""
        base = self.canonicalize(name).split(":")[0]
        self._registered[base] = factory
        self._opened = {k: v for k, v in self._opened.items() if k.split(":")[0] != base}  # reopen with the new one

    canonicalize = staticmethod(device_info.canonical)  # 'cpu' -> 'CPU', 'cuda:0' -> 'CUDA', 'CUDA:1' stays

    def __getitem__(self, name: str) -> Compiled:
        if (opened := self._opened.get(name)) is not None:  # a canonical name, opened: every buffer asks this
            return opened
        name = self.canonicalize(name)
        if name not in self._opened:
            with self._opening:  # opened once, even when two threads ask for it first at the same time
                if name not in self._opened:
                    self._opened[name] = self._factory(name)(name)
        return self._opened[name]

    def _factory(self, name: str) -> Callable[[str], Compiled]:
        """A registered device's factory, or the `<Name>Device` class of glassgrad/runtime/ops_<name>.py."""
        base = name.split(":")[0]
        if base in self._registered:
            return self._registered[base]
        try:
            module = importlib.import_module(f"glassgrad.runtime.ops_{base.lower()}")
        except ModuleNotFoundError:
            raise ValueError(f"unknown device {name!r}; glassgrad has: {', '.join(available_devices())}") from None
        return getattr(module, f"{base.capitalize()}Device")

    @property
    def DEFAULT(self) -> str:
        if self._default is None:
            self._default = _default_from_env()
        return self._default

    @DEFAULT.setter
    def DEFAULT(self, name: str) -> None:
        self._default = self.canonicalize(name)


def available_devices() -> list[str]:
    here = pathlib.Path(__file__).parent
    return sorted({p.stem[4:].upper() for p in here.glob("ops_*.py")} | set(Device._registered))


def _default_from_env() -> str:
    if name := os.environ.get("DEV"):
        return device_info.canonical(name)
    for name in available_devices():
        if getenv(name, 0):
            return name
    return "CPU"


Device = _DeviceRegistry()
device_info.answer_with(Device)  # what building a graph asks of a device (mixin/), the registry answers


class Buffer:
    """A span of device memory holding `size` elements of `dtype`; allocated on first use. A buffer the memory
    planner placed in another's memory (`shares`) uses that one's allocation and owns none of its own."""

    def __init__(self, device: str, size: int, dtype: DType):
        self.device, self.size, self.dtype = device, size, dtype
        self.nbytes = size * dtype.itemsize
        self._handle: Any = None
        self._base: Buffer | None = None
        self._allocator: Allocator | None = None  # the one that allocated it (its device's), which frees it

    @property
    def allocated(self) -> bool:
        return self._handle is not None or (self._base is not None and self._base.allocated)

    def shares(self, base: Buffer) -> Buffer:
        """Use `base`'s memory from now on (the memory planner found their lifetimes don't overlap)."""
        assert base.device == self.device and base.nbytes == self.nbytes, "shared memory must match in size"
        self._free()
        self._base = base._base or base
        return self

    def ensure_allocated(self) -> Buffer:
        if self._base is not None:
            self._base.ensure_allocated()
        elif self._handle is None:
            try:
                self._allocator = Device[self.device].allocator
                self._handle = self._allocator.alloc(self.nbytes)
            except (MemoryError, OverflowError, OSError) as e:  # OSError: a mapping refused (ENOMEM); others rise
                if isinstance(e, OSError) and e.errno != errno.ENOMEM:
                    raise
                reason = str(e) or "the allocator has no memory left"
                raise OutOfMemoryError(self.device, self.size, self.dtype, reason) from None
            GlobalCounters.add_memory(self.nbytes)
        return self

    @property
    def handle(self) -> Any:
        if self._handle is not None:  # (allocated, so not placed in another's memory: every kernel call asks)
            return self._handle
        return self._base.handle if self._base is not None else self.ensure_allocated()._handle

    def copyin(self, data: memoryview | bytes | bytearray) -> Buffer:
        data = memoryview(data).cast("B")
        if data.nbytes != self.nbytes:
            raise ValueError(f"copyin: got {data.nbytes} bytes for a buffer of {self.nbytes}")
        Device[self.device].allocator.copyin(self.handle, data)
        return self

    def copy_from(self, src: Buffer, start: int = 0) -> Buffer:
        """Take `src`'s contents (from `start` bytes into it, as many bytes as this buffer has): straight between
        devices that can (GPU to GPU), else through the host."""
        allocator, src_allocator = Device[self.device].allocator, Device[src.device].allocator
        whole = start == 0 and src.nbytes == self.nbytes
        if not whole or not allocator.transfer(self.handle, src.handle, self.nbytes, src_allocator):
            self.copyin(src.as_bytes(start, self.nbytes) if not whole else src.as_bytes())
        return self

    def as_bytes(self, start: int = 0, nbytes: int | None = None) -> bytearray:
        """A host copy of the whole buffer, or of `nbytes` of it from `start`."""
        nbytes = self.nbytes if nbytes is None else nbytes
        try:
            out = host_bytes(nbytes)
        except MemoryError as e:
            raise OutOfMemoryError(f"the host (copying a {self.device} buffer)", nbytes // self.dtype.itemsize,
                                   self.dtype, str(e)) from None  # fmt: skip
        if nbytes == self.nbytes:
            Device[self.device].allocator.copyout(memoryview(out), self.handle)
        elif nbytes:
            Device[self.device].allocator.copyout_part(memoryview(out), self.handle, start, self.nbytes)
        return out

    def _free(self) -> None:
        if self._handle is not None:
            GlobalCounters.mem_used -= self.nbytes
            self._allocator.free(self._handle, self.nbytes)
            self._handle = None

    def __del__(self):
        try:
            self._free()
        except Exception:  # interpreter shutdown: modules may already be gone
            pass

    def __repr__(self) -> str:
        return f"<Buffer {self.device} {self.size} {self.dtype}>"
