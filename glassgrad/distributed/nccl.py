"""NCCL through ctypes: NVIDIA's collectives on the GPU, from the library of NVIDIA's wheel (the `multigpu` extra).

Nothing is built: libnccl.so.2 is found at run time (NCCL_LIBRARY, else the nvidia/nccl/lib folder of an installed
nvidia-nccl-cu12 or -cu13 wheel, else the loader's cache). A communicator per device joins the ranks through the
unique id that rank 0 makes and the store carries; its collectives are queued on the default stream, where
glassgrad's CUDA device runs every kernel and copy, so they run in order with them.
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys

from glassgrad.distributed.store import DistError
from glassgrad.dtype import DType, dtypes
from glassgrad.runtime.device import Buffer
from glassgrad.runtime.ops_cuda import CudaDevice, _candidates

NCCL_DTYPES = {dtypes.int8: 0, dtypes.bool: 1, dtypes.uint8: 1, dtypes.int32: 2, dtypes.uint32: 3, dtypes.int64: 4,
               dtypes.uint64: 5, dtypes.float16: 6, dtypes.float32: 7, dtypes.float64: 8, dtypes.bfloat16: 9,
               dtypes.fp8e4m3: 10, dtypes.fp8e5m2: 11}  # fmt: skip
NCCL_OPS = {"sum": 0, "product": 1, "max": 2, "min": 3, "avg": 4}


class DistBackendError(DistError):
    """NCCL failed, or cannot be loaded (torch.distributed.DistBackendError)."""


class UniqueId(ctypes.Structure):
    """ncclUniqueId: 128 opaque bytes that rank 0 makes and every rank passes to ncclCommInitRank."""

    _fields_ = [("internal", ctypes.c_char * 128)]


def _folders() -> list[str]:
    return [os.path.join(p, "nvidia", sub, "lib") for p in sys.path for sub in ("nccl", "cu13", "cu12")]


@functools.cache
def libnccl() -> ctypes.CDLL:
    """NCCL's library, its functions' argument types set."""
    tried = [os.environ["NCCL_LIBRARY"]] if os.environ.get("NCCL_LIBRARY") else _candidates(["nccl"], _folders())
    for path in tried:
        try:
            lib = ctypes.CDLL(path)
            break
        except OSError:
            continue
    else:
        could_not = f"; could not load {', '.join(tried)}" if tried else ""
        raise DistBackendError("glassgrad.distributed: NCCL (libnccl.so.2) was not found: looked in NCCL_LIBRARY, "
                               "the nvidia/nccl/lib folder of site-packages and the loader's cache" + could_not +
                               "; install it with `pip install 'glassgrad[multigpu]'` (nvidia-nccl-cu12; "
                               "nvidia-nccl-cu13 for CUDA 13), or use backend='cpu'")  # fmt: skip
    pointer, size = ctypes.c_void_p, ctypes.c_size_t
    lib.ncclGetErrorString.restype = ctypes.c_char_p
    lib.ncclGetLastError.restype = ctypes.c_char_p
    lib.ncclCommInitRank.argtypes = [ctypes.POINTER(pointer), ctypes.c_int, UniqueId, ctypes.c_int]
    lib.ncclAllReduce.argtypes = [pointer, pointer, size, ctypes.c_int, ctypes.c_int, pointer, pointer]
    lib.ncclBroadcast.argtypes = [pointer, pointer, size, ctypes.c_int, ctypes.c_int, pointer, pointer]
    lib.ncclAllGather.argtypes = [pointer, pointer, size, ctypes.c_int, pointer, pointer]
    lib.ncclReduceScatter.argtypes = [pointer, pointer, size, ctypes.c_int, ctypes.c_int, pointer, pointer]
    lib.ncclCommDestroy.argtypes = [pointer]
    return lib


def _check(code: int, call: str, comm: ctypes.c_void_p | None = None) -> None:
    if code != 0:
        lib = libnccl()
        detail = (lib.ncclGetLastError(comm) or b"").decode(errors="replace")
        raise DistBackendError(f"glassgrad.distributed: {call} failed: {lib.ncclGetErrorString(code).decode()} "
                               f"({code})" + (f": {detail}" if detail else ""))  # fmt: skip


def version() -> str:
    """NCCL's version, as "2.21.5"."""
    code = ctypes.c_int()
    _check(libnccl().ncclGetVersion(ctypes.byref(code)), "ncclGetVersion")
    v = code.value
    return f"{v // 10000}.{v // 100 % 100}.{v % 100}" if v >= 10000 else f"{v // 1000}.{v // 100 % 10}.{v % 100}"


def new_unique_id() -> bytes:
    """A fresh ncclUniqueId, as the bytes every rank passes to Communicator."""
    uid = UniqueId()
    _check(libnccl().ncclGetUniqueId(ctypes.byref(uid)), "ncclGetUniqueId")
    return bytes(uid)  # all 128 bytes (the field itself would stop at the first zero byte)


def nccl_dtype(dtype: DType, what: str) -> int:
    """NCCL's number for a glassgrad dtype, or a TypeError naming the dtypes it has."""
    if dtype not in NCCL_DTYPES:
        names = ", ".join(sorted({str(d) for d in NCCL_DTYPES}))
        raise TypeError(f"{what}: NCCL has no {dtype} type (it has {names}); cast the tensor, or use "
                        "backend='cpu'")  # fmt: skip
    return NCCL_DTYPES[dtype]


class Communicator:
    """One rank's NCCL communicator on one CUDA device."""

    def __init__(self, device: CudaDevice, unique_id: bytes, world_size: int, rank: int):
        self.device = device
        self.comm = ctypes.c_void_p()
        uid = UniqueId.from_buffer_copy(unique_id)
        device.activate()  # NCCL works on the current context's device
        _check(libnccl().ncclCommInitRank(ctypes.byref(self.comm), world_size, uid, rank), "ncclCommInitRank")

    def run(self, kind: str, out: int, src: int, count: int, dtype: DType, op: str, root: int) -> None:
        """Queue one collective on the default stream: `count` elements each rank sends (all_gather) or receives
        (reduce_scatter), or of the whole tensor (all_reduce, broadcast)."""
        lib, dt, stream = libnccl(), nccl_dtype(dtype, kind), None
        self.device.activate()
        if kind == "all_reduce":
            code = lib.ncclAllReduce(src, out, count, dt, NCCL_OPS[op], self.comm, stream)
        elif kind == "broadcast":
            code = lib.ncclBroadcast(src, out, count, dt, root, self.comm, stream)
        elif kind == "all_gather":
            code = lib.ncclAllGather(src, out, count, dt, self.comm, stream)
        else:
            code = lib.ncclReduceScatter(src, out, count, dt, NCCL_OPS[op], self.comm, stream)
        _check(code, f"nccl {kind}", self.comm)

    def destroy(self) -> None:
        """Free the communicator (after the work queued on it has finished)."""
        if self.comm:
            self.device.synchronize()
            _check(libnccl().ncclCommDestroy(self.comm), "ncclCommDestroy")
            self.comm = ctypes.c_void_p()


class NcclCollective:
    """A collective through NCCL, run as an ExecItem's runner (so TinyJit records and replays it) on the buffers
    (output, input)."""

    def __init__(self, communicator: Communicator, kind: str, op: str, root: int):
        self.communicator, self.kind, self.op, self.root = communicator, kind, op, root

    def __call__(self, bufs: list[Buffer], wait: bool) -> None:
        out, src = bufs
        count = out.size if self.kind == "reduce_scatter" else src.size  # what each rank receives, or sends
        self.communicator.run(self.kind, out.handle, src.handle, count, src.dtype, self.op, self.root)
        if wait:
            self.communicator.device.synchronize()
