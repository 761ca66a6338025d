"""The CPU device: C source compiled by the machine's C compiler into a shared library, run through ctypes."""

from __future__ import annotations

import _ctypes
import ctypes
import ctypes.util
import functools
import mmap
import operator
import os
import shutil
import subprocess
import tempfile
import threading
import time

from glassgrad.renderer.cstyle import CRenderer
from glassgrad.runtime.cpu_threads import CThreads
from glassgrad.runtime.device import Allocator, Compiled, Compiler, Program
from glassgrad.runtime.out_of_memory import CHECKED_FROM, check_host_memory

ALIGN = 64  # bytes: room for the widest vector loads
HUGE_PAGE = 2 << 20  # buffers this large are mapped on their own and asked for 2 MiB pages: a 64 MiB row sum reads
# at 56 GB/s from them against 48-53 from 4 KiB pages, whose TLB misses stall the loads (NumPy asks the same)


REUSE_MIN_BYTES = 1 << 20  # freed buffers this large are kept for the next of their size:
REUSE_MAX_BYTES = 256 << 20  # a new one costs a pass of page faults and zeroing (16 MiB: ~7 ms, a tenth of a matmul)
PLAIN_BELOW = min(REUSE_MIN_BYTES, CHECKED_FROM, HUGE_PAGE)  # smaller buffers are a plain ctypes array each


class CPUAllocator(Allocator):
    """Host memory from ctypes arrays, aligned to 64 bytes; the array object keeps it alive. Large freed buffers are
    handed out again to the next request of their size; past REUSE_MAX_BYTES in all, the oldest of the largest size
    kept is dropped."""

    def __init__(self):
        self.freed: dict[int, list[tuple[ctypes.Array, int]]] = {}  # by size, in the order they were freed
        self.freed_bytes = 0
        self.lock = threading.Lock()  # a buffer is freed by whichever thread drops it last, while another allocates

    def alloc(self, nbytes: int) -> tuple[ctypes.Array, int]:
        if nbytes >= PLAIN_BELOW:  # (smaller ones are never kept, checked or mapped: an eager op's skips all three)
            with self.lock:
                if self.freed.get(nbytes):
                    self.freed_bytes -= nbytes
                    return self.freed[nbytes].pop()
            check_host_memory(nbytes)  # mapped anyway, its pages would get the process killed when touched
            if nbytes >= HUGE_PAGE:
                return huge_page_buffer(nbytes)
        raw = (ctypes.c_uint8 * (nbytes + ALIGN))()
        address = ctypes.addressof(raw)
        return raw, address + (-address % ALIGN)

    def free(self, handle: tuple[ctypes.Array, int], nbytes: int) -> None:
        if not REUSE_MIN_BYTES <= nbytes <= REUSE_MAX_BYTES:
            return
        with self.lock:
            self.freed.setdefault(nbytes, []).append(handle)
            self.freed_bytes += nbytes
            while self.freed_bytes > REUSE_MAX_BYTES:  # drop the oldest of the largest size kept
                size = max(size for size, kept in self.freed.items() if kept)
                self.freed[size].pop(0)
                self.freed_bytes -= size

    def copyin(self, dest: tuple[ctypes.Array, int], src: memoryview) -> None:
        ctypes.memmove(dest[1], (ctypes.c_char * src.nbytes).from_buffer_copy(src) if src.readonly else
                       (ctypes.c_char * src.nbytes).from_buffer(src), src.nbytes)  # fmt: skip

    def copyout(self, dest: memoryview, src: tuple[ctypes.Array, int]) -> None:
        ctypes.memmove((ctypes.c_char * dest.nbytes).from_buffer(dest), src[1], dest.nbytes)


def huge_page_buffer(nbytes: int) -> tuple[ctypes.Array, int]:
    """Zeroed memory mapped on its own, starting at a 2 MiB boundary and advised to use huge pages where the kernel
    offers them (Linux's transparent huge pages; elsewhere the advice is skipped)."""
    private = {"flags": mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS} if hasattr(mmap, "MAP_ANONYMOUS") else {}
    mapped = mmap.mmap(-1, nbytes + HUGE_PAGE, **private)  # private: the default is shared, which a fork would share
    raw = (ctypes.c_uint8 * (nbytes + HUGE_PAGE)).from_buffer(mapped)  # keeps the mapping alive while it lives
    skip = -ctypes.addressof(raw) % HUGE_PAGE
    if hasattr(mapped, "madvise") and hasattr(mmap, "MADV_HUGEPAGE"):
        mapped.madvise(mmap.MADV_HUGEPAGE, skip, nbytes)
    return raw, ctypes.addressof(raw) + skip


def find_c_compiler() -> str:
    """$CC if set, else the first of clang, gcc, cc found on PATH."""
    if cc := os.environ.get("CC"):
        return cc
    for name in ("gcc", "clang", "cc"):
        if shutil.which(name):
            return name
    raise RuntimeError(
        "the CPU device needs a C compiler, but none of gcc, clang or cc is on PATH; "
        "install one (apt-get install gcc) or set CC=/path/to/compiler"
    )


def _has_libmvec() -> bool:
    """Whether glibc's vector math library (exp2f, log2f, sinf of whole vectors; glibc 2.35+) can be linked."""
    name = ctypes.util.find_library("mvec")
    if name is None:
        return False
    try:
        return hasattr(ctypes.CDLL(name), "_ZGVbN4v_exp2f")
    except OSError:
        return False


HAS_LIBMVEC = _has_libmvec()


@functools.cache
def _is_gcc(cc: str) -> bool:
    """Whether `cc` is GCC, whatever its name (GCC's --version names the Free Software Foundation, clang's itself)."""
    try:
        done = subprocess.run([cc, "--version"], capture_output=True, text=True)
    except OSError:
        return False
    return done.returncode == 0 and "clang" not in done.stdout and "Free Software Foundation" in done.stdout


class CCompiler(Compiler):
    """C -> shared library bytes."""

    # -ffp-contract=off: no fused multiply-adds beyond the renderer's own, so every op rounds as written (float16 needs
    # that); -fno-tree-slp-vectorize: GCC 12's SLP pass miscompiles lane-by-lane vector constructors such as
    # (floatx4){c?a[0]:b[0], ...} inside loops (lanes 1..3 came out 0), and the renderer writes its vectors itself
    flags = ["-shared", "-fPIC", "-O2", "-march=native", "-fno-math-errno", "-ffp-contract=off",
             "-fno-tree-slp-vectorize", "-std=gnu11"]  # fmt: skip
    # GCC only (clang rejects it): GCC would keep a convolution's input values in registers from one window step to
    # the next and broadcast each from a register, a shuffle on the port of the second multiply-add unit; broadcast
    # from memory, each is a load (the convolution's main kernel ran 8% faster, matmuls the same)
    gcc_flags = ["-fno-predictive-commoning"]

    def __init__(self):
        self.cc = find_c_compiler()
        self.flags = self.flags + (self.gcc_flags if _is_gcc(self.cc) else [])
        self.libs = ["-lm"] + (["-lmvec"] if HAS_LIBMVEC else [])  # after the source, so the linker keeps them
        self.cache_key = f"{self.cc} {' '.join(self.flags)} -x c - {' '.join(self.libs)}"

    def compile(self, src: str) -> bytes:
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "kernel.so")
            try:
                done = subprocess.run([self.cc, *self.flags, "-x", "c", "-", "-o", out, *self.libs], input=src.encode(),
                                      capture_output=True)  # fmt: skip
            except FileNotFoundError:
                raise RuntimeError(f"C compiler {self.cc!r} not found; install gcc or set CC to a compiler") from None
            if done.returncode != 0:
                error = done.stderr.decode()
                raise RuntimeError(f"{self.cc} failed to compile a kernel:\n{error}\n--- source ---\n{src}")
            with open(out, "rb") as f:
                return f.read()


_address = operator.itemgetter(1)  # a buffer's address, of its handle (array, address)
THREADS = int(os.environ.get("NUM_CPU_THREADS") or os.cpu_count() or 1)
THREADING_THRESHOLD_S = 100e-6  # kernels faster than this on one core don't repay waking the other threads


class CPUProgram(Program):
    """A kernel in a shared library, loaded with ctypes (which releases the GIL while it runs). A kernel with an outer
    loop runs it on THREADS threads (runtime/cpu_threads.py) once two runs in a row on a single core took
    THREADING_THRESHOLD_S or more, and goes back to one core when a threaded run takes under a quarter of that."""

    threads: CThreads | None = None  # the pool, shared by every kernel, compiled when a kernel first needs it

    def __init__(self, name: str, binary: bytes):
        super().__init__(name, binary)
        with tempfile.NamedTemporaryFile(suffix=".so", delete=False) as f:
            f.write(binary)
        self.lib = ctypes.CDLL(f.name)
        os.unlink(f.name)
        self.fn = getattr(self.lib, name)
        self.fn.restype = None
        range_fn = getattr(self.lib, f"{name}_range", None)  # kernels with an outer loop have one
        self.range_fn = ctypes.cast(range_fn, ctypes.c_void_p).value if range_fn is not None else None
        self.single_thread_seconds = 0.0  # until runs say otherwise, a kernel is too small to be worth threads
        self._last_single_run = 0.0  # seconds its last run on one core took (0: none yet)
        self._last_bufs: tuple = ()
        self._last_pointers: ctypes.Array | None = None

    def __call__(self, *bufs, global_size=None, local_size=None, wait: bool = False, vals: tuple[int, ...] = ()
                 ) -> float | None:  # fmt: skip
        start = time.perf_counter()
        if self.fn.argtypes is None:  # declared once: ctypes then converts plain ints, twice as fast as c_void_p(...)
            self.fn.argtypes = ([ctypes.c_void_p] * len(bufs) + [ctypes.c_int] * len(vals)
                                + [ctypes.c_longlong] * (2 * (global_size is not None)))  # fmt: skip
        if global_size is None:  # no loop to split: the kernel takes its buffers and its Variables' values
            self.fn(*map(_address, bufs), *vals)
        elif self.single_thread_seconds < THREADING_THRESHOLD_S or THREADS < 2:
            self.fn(*map(_address, bufs), *vals, 0, global_size[0])
            # the faster of its last two runs on one core decides: a first run is slow for reasons of its own (cold
            # caches, fresh pages), and a tiny kernel sent to the pool by it would pay the threads' wake-up each run
            seconds = time.perf_counter() - start
            self.single_thread_seconds, self._last_single_run = min(seconds, self._last_single_run), seconds
        else:
            if CPUProgram.threads is None:
                CPUProgram.threads = CThreads(CCompiler())
            CPUProgram.threads.run(self.range_fn, self._pointers(bufs, vals), global_size[0], THREADS)
            if time.perf_counter() - start < THREADING_THRESHOLD_S / 4:  # its slow runs were cold starts (caches,
                self.single_thread_seconds = 0.0  # page faults): next time it runs on one core and is timed again
        return time.perf_counter() - start if wait else None

    def __del__(self):
        try:  # unmap the library: a process that makes many kernels must not keep every one it ever made
            _ctypes.dlclose(self.lib._handle)
        except Exception:  # interpreter shutdown, or __init__ failed before it was loaded
            pass

    def _pointers(self, bufs: tuple, vals: tuple[int, ...]) -> ctypes.Array:
        """The buffers' addresses and the Variables' values as a C array for the pool, made again only when they
        change (a TinyJit replay or a cached schedule runs a kernel on the same buffers again)."""
        if (bufs, vals) != self._last_bufs:
            addresses = [b[1] for b in bufs] + list(vals)
            self._last_bufs, self._last_pointers = (bufs, vals), (ctypes.c_void_p * len(addresses))(*addresses)
        return self._last_pointers


class CpuDevice(Compiled):
    def __init__(self, name: str):
        renderer = CRenderer()
        renderer.vector_math = HAS_LIBMVEC
        super().__init__(name, CPUAllocator(), renderer, CCompiler(), CPUProgram)
