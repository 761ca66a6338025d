"""The CUDA device: CUDA C compiled by NVRTC, loaded and launched through the driver API, both through ctypes.

Nothing is compiled ahead of time and nothing is imported but ctypes: the driver's libcuda and NVRTC's libnvrtc are
found at run time. Where either is missing, or the driver finds no GPU, opening `CUDA` raises an error that says
what was looked for and why CUDA is unavailable; the CPU stays the default device.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import glob
import os
import sys
import threading

from glassgrad.renderer.cuda import HOPPER_CONFIGS, CUDARenderer
from glassgrad.runtime.device import Allocator, Compiled, Compiler, Program
from glassgrad.runtime.out_of_memory import human_bytes

CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
SHARED_BYTES_SYMBOL = b"gg_dynamic_shared_bytes"  # a kernel that needs dynamic shared memory says how much here

# threads a block where each thread takes global indices (bench/gpu_elementwise.py, H100, one index a thread: 128
# reached 0.84 of the copy bandwidth, 256 reached 0.92)
BLOCK_SIZE = 256


class CUDAError(RuntimeError):
    """A CUDA driver or NVRTC call failed; the message carries the library's own words."""


class CUDAUnavailable(CUDAError):
    """This machine cannot run CUDA: a library is missing or the driver finds no GPU."""


# ---- finding the libraries ----


def _candidates(names: list[str], folders: list[str]) -> list[str]:
    """Library files to try, in order: what the loader's cache knows, then each folder's matching files."""
    found = [p for n in names if (p := ctypes.util.find_library(n))]
    for folder in folders:
        for name in names:
            found += sorted(glob.glob(os.path.join(folder, f"lib{name}.so*")), reverse=True)  # newest version first
    return found


def _open_library(what: str, names: list[str], folders: list[str]) -> ctypes.CDLL:
    tried = _candidates(names, folders)
    for path in tried:
        try:
            return ctypes.CDLL(path)
        except OSError:
            continue
    looked = ", ".join(f"lib{n}.so" for n in names)
    could_not = f"; could not load {', '.join(tried)}" if tried else ""
    raise CUDAUnavailable(f"CUDA is unavailable: {what} ({looked}) was not found; looked in the loader's cache "
                          f"(ldconfig) and in {', '.join(folders)}{could_not}")  # fmt: skip


def _toolkit_folders(subfolder: str) -> list[str]:
    roots = [os.environ[k] for k in ("CUDA_PATH", "CUDA_HOME") if k in os.environ] + ["/usr/local/cuda", "/opt/cuda"]
    return [os.path.join(r, subfolder) for r in roots]


@functools.cache
def libcuda() -> ctypes.CDLL:
    """The NVIDIA driver's library."""
    folders = ["/usr/local/nvidia/lib64", "/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib/wsl/lib"]
    return _open_library("the NVIDIA driver library", ["cuda"], folders)


@functools.cache
def libnvrtc() -> ctypes.CDLL:
    """NVRTC, the CUDA C compiler library: from the toolkit, or from the nvidia-cuda-nvrtc wheel."""
    wheels = [os.path.join(p, "nvidia", sub, "lib") for p in sys.path for sub in ("cu13", "cu12", "cuda_nvrtc")]
    return _open_library("NVRTC, the CUDA C compiler library", ["nvrtc"], _toolkit_folders("lib64") + wheels)


# ---- calling them ----


def _driver_error(code: int) -> str:
    name, text = ctypes.c_char_p(), ctypes.c_char_p()
    libcuda().cuGetErrorName(code, ctypes.byref(name))
    libcuda().cuGetErrorString(code, ctypes.byref(text))
    return f"{(name.value or b'CUDA_ERROR').decode()} ({code}): {(text.value or b'unknown error').decode()}"


def check(code: int, call: str) -> None:
    """Raise CUDAError with the driver's own message where a driver call did not return CUDA_SUCCESS."""
    if code != 0:
        raise CUDAError(f"{call} failed: {_driver_error(code)}")


CUDA_ERROR_OUT_OF_MEMORY = 2


def cu(name: str, *args) -> None:
    """Call the driver function `name` and check its result."""
    check(getattr(libcuda(), name)(*args), name)


def _nvrtc_check(code: int, call: str, log: str = "") -> None:
    if code != 0:
        libnvrtc().nvrtcGetErrorString.restype = ctypes.c_char_p
        message = libnvrtc().nvrtcGetErrorString(code).decode()
        raise CUDAError(f"{call} failed: {message} ({code})" + (f"\n{log}" if log else ""))


@functools.cache
def init_driver() -> int:
    """cuInit once; returns how many CUDA devices the driver sees."""
    lib = libcuda()
    # device pointers are 64-bit: say so where they are passed, or ctypes would pass them as C ints
    lib.cuMemcpyHtoD_v2.argtypes = [ctypes.c_uint64, ctypes.c_void_p, ctypes.c_size_t]
    lib.cuMemcpyDtoH_v2.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_size_t]
    lib.cuMemcpyDtoD_v2.argtypes = [ctypes.c_uint64, ctypes.c_uint64, ctypes.c_size_t]
    lib.cuMemcpyPeer.argtypes = [ctypes.c_uint64, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_void_p, ctypes.c_size_t]
    lib.cuMemAlloc_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
    lib.cuMemFree_v2.argtypes = [ctypes.c_uint64]
    # every launch: declared, ctypes converts each argument without guessing its type
    lib.cuCtxSetCurrent.argtypes = [ctypes.c_void_p]
    lib.cuLaunchKernel.argtypes = [ctypes.c_void_p, *[ctypes.c_uint] * 7, ctypes.c_void_p, ctypes.c_void_p,
                                   ctypes.c_void_p]  # fmt: skip
    code = lib.cuInit(0)
    if code != 0:
        raise CUDAUnavailable(f"CUDA is unavailable: the driver found no usable GPU (cuInit: {_driver_error(code)})")
    count = ctypes.c_int()
    cu("cuDeviceGetCount", ctypes.byref(count))
    return count.value


def device_index(name: str) -> int:
    """'CUDA' -> 0, 'CUDA:1' -> 1, checked against the devices the driver sees."""
    index = int(name.partition(":")[2] or 0)
    count = init_driver()
    if not 0 <= index < count:
        raise CUDAError(f"device {name} does not exist: the driver sees {count} CUDA device(s)"
                        + (f", CUDA to CUDA:{count - 1}" if count > 1 else ""))  # fmt: skip
    return index


# ---- the four pieces ----


class CUDAAllocator(Allocator):
    """Device memory from cuMemAlloc; copies to, from and between devices through the driver.

    A freed allocation is kept for the next one of the same size (a training step's fresh batch each step):
    cuMemAlloc and cuMemFree cost tens of microseconds and cuMemFree waits for the GPU. Reuse is safe because every
    kernel and copy runs on the default stream, in order. When the GPU runs out of memory, the kept ones are freed."""

    def __init__(self, device: CudaDevice):
        self.device = device
        self.kept: dict[int, list[int]] = {}  # freed allocations by size, for reuse
        self.lock = threading.Lock()  # a buffer is freed by whichever thread drops it last, while another allocates

    def alloc(self, nbytes: int) -> int:
        with self.lock:
            if kept := self.kept.get(nbytes):
                return kept.pop()
        self.device.activate()
        pointer = ctypes.c_uint64()
        code = libcuda().cuMemAlloc_v2(ctypes.byref(pointer), max(nbytes, 1))
        if code == CUDA_ERROR_OUT_OF_MEMORY and self.kept:
            self.release_kept()
            code = libcuda().cuMemAlloc_v2(ctypes.byref(pointer), max(nbytes, 1))
        if code == CUDA_ERROR_OUT_OF_MEMORY:  # Buffer says what was asked for; this, what the GPU has
            free, total = ctypes.c_size_t(), ctypes.c_size_t()
            cu("cuMemGetInfo_v2", ctypes.byref(free), ctypes.byref(total))
            raise MemoryError(f"the GPU has {human_bytes(total.value)}, {human_bytes(free.value)} of it free")
        check(code, "cuMemAlloc_v2")
        return pointer.value

    def free(self, handle: int, nbytes: int) -> None:
        with self.lock:
            self.kept.setdefault(nbytes, []).append(handle)

    def release_kept(self) -> None:
        """Give the kept allocations back to the driver."""
        with self.lock:
            kept, self.kept = self.kept, {}
        self.device.activate()
        for handles in kept.values():
            for handle in handles:
                cu("cuMemFree_v2", handle)

    def copyin(self, dest: int, src: memoryview) -> None:
        self.device.activate()
        host = (ctypes.c_char * src.nbytes).from_buffer_copy(src) if src.readonly else \
            (ctypes.c_char * src.nbytes).from_buffer(src)  # fmt: skip
        cu("cuMemcpyHtoD_v2", dest, host, src.nbytes)

    def copyout(self, dest: memoryview, src: int) -> None:
        self.device.activate()
        cu("cuMemcpyDtoH_v2", (ctypes.c_char * dest.nbytes).from_buffer(dest), src, dest.nbytes)

    def transfer(self, dest: int, src: int, nbytes: int, src_allocator: Allocator) -> bool:
        """Copy straight from another CUDA device's memory (or this one's); False for other devices."""
        if not isinstance(src_allocator, CUDAAllocator):
            return False
        self.device.activate()
        if src_allocator.device is self.device:
            cu("cuMemcpyDtoD_v2", dest, src, nbytes)
        else:
            cu("cuMemcpyPeer", dest, self.device.context, src, src_allocator.device.context, nbytes)
        return True


MINIMAL_FROM = (12, 4)  # the NVRTC that has --minimal
NVRTC_ERROR_INVALID_OPTION = 5


class NVRTCCompiler(Compiler):
    """CUDA C -> a cubin for one compute capability, through NVRTC."""

    def __init__(self, arch: str):
        self.arch = arch
        major, minor = ctypes.c_int(), ctypes.c_int()
        _nvrtc_check(libnvrtc().nvrtcVersion(ctypes.byref(major), ctypes.byref(minor)), "nvrtcVersion")
        # --fmad=false: no fused multiply-adds, so every op rounds as written (as the CPU's -ffp-contract=off);
        # functions without __device__ (the renderer's helpers) are device functions; --minimal (NVRTC 12.4+): none
        # of the runtime API's declarations (textures, device-side launches), which no kernel uses: the same cubins
        # (all 130 of the mnist step's), 11% less compile time (bench/nvrtc_compile.py)
        minimal = ["--minimal"] if (major.value, minor.value) >= MINIMAL_FROM else []
        self.options = [f"--gpu-architecture={arch}", "--fmad=false", "--device-as-default-execution-space", *minimal]
        self.cache_key = f"nvrtc {major.value}.{minor.value} {' '.join(self.options)}"

    def options_for(self, src: str) -> list[str]:
        """The options for one kernel: sm_90's wgmma kernels build for sm_90a, the target of that chip alone."""
        if self.arch == "sm_90" and "wgmma." in src:
            return [f"--gpu-architecture={self.arch}a", *self.options[1:]]
        return self.options

    def compile(self, src: str) -> bytes:
        lib = libnvrtc()
        program = ctypes.c_void_p()
        _nvrtc_check(lib.nvrtcCreateProgram(ctypes.byref(program), src.encode(), b"kernel.cu", 0, None, None),
                     "nvrtcCreateProgram")  # fmt: skip
        try:
            opts = self.options_for(src)
            options = (ctypes.c_char_p * len(opts))(*(o.encode() for o in opts))
            code = lib.nvrtcCompileProgram(program, len(opts), options)
            if code == NVRTC_ERROR_INVALID_OPTION and "--minimal" in self.options:  # an NVRTC that lacks it after all
                self.options = [o for o in self.options if o != "--minimal"]
                return self.compile(src)
            _nvrtc_check(code, "nvrtc compiling a kernel", f"{self._log(program)}\n--- source ---\n{src}")
            size = ctypes.c_size_t()
            _nvrtc_check(lib.nvrtcGetCUBINSize(program, ctypes.byref(size)), "nvrtcGetCUBINSize")
            binary = ctypes.create_string_buffer(size.value)
            _nvrtc_check(lib.nvrtcGetCUBIN(program, binary), "nvrtcGetCUBIN")
            return binary.raw
        finally:
            lib.nvrtcDestroyProgram(ctypes.byref(program))

    @staticmethod
    def _log(program: ctypes.c_void_p) -> str:
        size = ctypes.c_size_t()
        libnvrtc().nvrtcGetProgramLogSize(program, ctypes.byref(size))
        log = ctypes.create_string_buffer(size.value)
        libnvrtc().nvrtcGetProgramLog(program, log)
        return log.value.decode(errors="replace")


def launch_dims(global_size: tuple[int, ...] | None, local_size: tuple[int, ...] | None) -> tuple[int, int]:
    """(blocks, threads per block) for a kernel: a block per global index where it has a local size, else a thread."""
    size = global_size[0] if global_size else 1
    if local_size:
        return size, local_size[0]
    block = min(size, BLOCK_SIZE)
    return (size + block - 1) // block, block


def kernel_params(bufs: tuple[int, ...] | list[int]) -> tuple[ctypes.Array, ctypes.Array]:
    """The pointer arguments and the array of their addresses that a launch takes (keep both alive while used)."""
    args = (ctypes.c_uint64 * max(len(bufs), 1))(*bufs)
    params = (ctypes.c_void_p * max(len(bufs), 1))(*(ctypes.addressof(args) + 8 * i for i in range(len(bufs))))
    return args, params


class CUDAProgram(Program):
    """A kernel in a loaded module; its outer output loop is spread over blocks of BLOCK_SIZE threads."""

    def __init__(self, device: CudaDevice, name: str, binary: bytes):
        super().__init__(name, binary)
        self.device = device
        device.activate()
        self.module, self.function = ctypes.c_void_p(), ctypes.c_void_p()
        cu("cuModuleLoadData", ctypes.byref(self.module), binary)
        cu("cuModuleGetFunction", ctypes.byref(self.function), self.module, name.encode())
        self.shared_bytes = self._dynamic_shared_bytes()
        self._last_launch: tuple | None = None  # the arguments of the last launch, and what it passed the driver
        self._launch: tuple = ()
        self._params: tuple = ()  # (the arrays the launch's arguments point into, kept alive while used)
        self._launch_kernel = libcuda().cuLaunchKernel
        if self.shared_bytes:  # beyond 48 KB a kernel must ask for it
            cu("cuFuncSetAttribute", self.function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, self.shared_bytes)

    def _dynamic_shared_bytes(self) -> int:
        """The dynamic shared memory the kernel launches with: the module's gg_dynamic_shared_bytes, else 0."""
        address, size = ctypes.c_uint64(), ctypes.c_size_t()
        if libcuda().cuModuleGetGlobal_v2(ctypes.byref(address), ctypes.byref(size), self.module, SHARED_BYTES_SYMBOL):
            return 0  # no such symbol: the kernel declares its shared memory statically, if at all
        value = ctypes.c_uint32()
        cu("cuMemcpyDtoH_v2", ctypes.addressof(value), address.value, ctypes.sizeof(value))
        return value.value

    def __call__(self, *bufs: int, global_size: tuple[int, ...] | None = None,
                 local_size: tuple[int, ...] | None = None, wait: bool = False, vals: tuple[int, ...] = ()
                 ) -> float | None:  # fmt: skip
        if (launch := (bufs, vals, global_size, local_size)) != self._last_launch:  # made again only when they
            # change: an eager op's next call gets the same allocations back from the allocator's kept ones
            self._params = kernel_params((*bufs, *vals))  # an int parameter reads the low half of its 8 bytes
            grid, block = launch_dims(global_size, local_size)  # (the driver copies the arguments at the launch)
            self._last_launch = launch
            self._launch = (self.function, grid, 1, 1, block, 1, 1, self.shared_bytes, None, self._params[1], None)
        self.device.activate()
        if not wait:  # (no timer made: every eager op's launch)
            check(self._launch_kernel(*self._launch), "cuLaunchKernel")
            return None
        with EventTimer(True) as timer:
            check(self._launch_kernel(*self._launch), "cuLaunchKernel")
        return timer.seconds

    def __del__(self):
        try:
            self.device.activate()
            libcuda().cuModuleUnload(self.module)
        except Exception:  # interpreter shutdown: the library may already be gone
            pass


class EventTimer:
    """Times the work queued inside the block with two CUDA events (when `enabled`), waiting for it to finish."""

    def __init__(self, enabled: bool):
        self.enabled, self.seconds = enabled, None

    def __enter__(self) -> EventTimer:
        if self.enabled:
            self.start, self.end = ctypes.c_void_p(), ctypes.c_void_p()
            cu("cuEventCreate", ctypes.byref(self.start), 0)
            cu("cuEventCreate", ctypes.byref(self.end), 0)
            cu("cuEventRecord", self.start, None)
        return self

    def __exit__(self, *exc) -> None:
        if not self.enabled or exc[0] is not None:
            return
        cu("cuEventRecord", self.end, None)
        cu("cuEventSynchronize", self.end)
        ms = ctypes.c_float()
        cu("cuEventElapsedTime", ctypes.byref(ms), self.start, self.end)
        self.seconds = ms.value / 1e3
        for event in (self.start, self.end):
            cu("cuEventDestroy_v2", event)


class CudaDevice(Compiled):
    """One NVIDIA GPU (`CUDA`, `CUDA:1`, ...), through its primary context."""

    def __init__(self, name: str):
        self.index = device_index(name)
        self.handle, self.context = ctypes.c_int(), ctypes.c_void_p()
        cu("cuDeviceGet", ctypes.byref(self.handle), self.index)
        cu("cuDevicePrimaryCtxRetain", ctypes.byref(self.context), self.handle)
        self._set_current = libcuda().cuCtxSetCurrent  # (activate runs before every launch: no lookup by name)
        self.activate()
        major, minor = (self.attribute(a) for a in (75, 76))  # CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR/MINOR
        self.arch = f"sm_{major}{minor}"
        program = functools.partial(CUDAProgram, self)
        renderer = CUDARenderer()
        if major < 8:  # mma.sync, ldmatrix and cp.async (the tiled products' copies) need sm_80
            renderer.tile_configs, renderer.mma_attention = (), False
        if (major, minor) == (9, 0):  # wgmma: Hopper's own (sm_90a), preferred; mma.sync for the tiles it lacks
            renderer.tile_configs = HOPPER_CONFIGS
        super().__init__(name, CUDAAllocator(self), renderer, NVRTCCompiler(self.arch), program)  # type: ignore[arg-type]

    def attribute(self, attribute: int) -> int:
        value = ctypes.c_int()
        cu("cuDeviceGetAttribute", ctypes.byref(value), attribute, self.handle)
        return value.value

    @property
    def gpu_name(self) -> str:
        """The GPU's marketing name, as the driver reports it."""
        text = ctypes.create_string_buffer(256)
        cu("cuDeviceGetName", text, 256, self.handle)
        return text.value.decode()

    def activate(self) -> None:
        """Make this device's context current in the calling thread (driver calls act on the current context)."""
        if code := self._set_current(self.context):
            check(code, "cuCtxSetCurrent")

    def synchronize(self) -> None:
        self.activate()
        cu("cuCtxSynchronize")
