"""TinyJit's replays as one CUDA graph: the captured kernels (and copies within the GPU) go to the driver in one call.

A replay that launches kernel after kernel pays the driver's launch cost and Python's loop for each. When every
captured item runs on one CUDA device, the first replay builds a graph of them instead (a kernel node per kernel, a
copy node per device-to-device copy, each depending on the one before, so they run in the captured order) and
instantiates it; every replay then launches it with one cuGraphLaunch. A replay whose buffers differ from the graph's
(new inputs swapped in) updates the changed nodes' parameters in the instantiated graph rather than building again.
Where some items cannot be graph nodes (an NCCL collective, a copy through the host), each stretch of two or more
that can becomes a graph of its own, and the others run by themselves between them (GraphRuns).

JIT_GRAPH=0 (or `Context(JIT_GRAPH=0)`) replays kernel by kernel instead.
"""

from __future__ import annotations

import ctypes
from collections.abc import Mapping, Sequence
from typing import Any

from glassgrad.engine.realize import CopyRunner
from glassgrad.helpers import ContextVar
from glassgrad.runtime.counters import GlobalCounters
from glassgrad.runtime.device import Buffer, Device
from glassgrad.runtime.ops_cuda import CudaDevice, CUDAProgram, EventTimer, cu, kernel_params, launch_dims

JIT_GRAPH = ContextVar("JIT_GRAPH", 1)

CU_MEMORYTYPE_DEVICE = 2


class KernelNodeParams(ctypes.Structure):
    """CUDA_KERNEL_NODE_PARAMS (v1): what a kernel node launches, and how."""

    _fields_ = [("func", ctypes.c_void_p)]
    _fields_ += [(f"{d}Dim{a}", ctypes.c_uint) for d in ("grid", "block") for a in "XYZ"]
    _fields_ += [("sharedMemBytes", ctypes.c_uint), ("kernelParams", ctypes.c_void_p), ("extra", ctypes.c_void_p)]


def _memcpy_side(side: str) -> list[tuple[str, type]]:
    """One end's fields of CUDA_MEMCPY3D, in the header's order."""
    size, pointer = ctypes.c_size_t, ctypes.c_void_p
    kinds = [("XInBytes", size), ("Y", size), ("Z", size), ("LOD", size), ("MemoryType", ctypes.c_int),
             ("Host", pointer), ("Device", ctypes.c_uint64), ("Array", pointer), ("Reserved", pointer),
             ("Pitch", size), ("Height", size)]  # fmt: skip
    return [(side + name, kind) for name, kind in kinds]


class Memcpy3D(ctypes.Structure):
    """CUDA_MEMCPY3D: a copy node's source, destination and extent (here one row of bytes, device to device)."""

    _fields_ = _memcpy_side("src") + _memcpy_side("dst") + \
        [("WidthInBytes", ctypes.c_size_t), ("Height", ctypes.c_size_t), ("Depth", ctypes.c_size_t)]  # fmt: skip


def _is_kernel(item) -> bool:
    return isinstance(getattr(item.runner, "program", None), CUDAProgram)


def _item_device(item, bufs: Sequence[Buffer]) -> CudaDevice | None:
    """The CUDA device a graph node for this item would run on: a kernel's, or both ends of a copy's; else None (a
    collective, a copy between devices or to the host: it runs by itself, between graphs)."""
    if _is_kernel(item):
        devices = [item.runner.program.device]
    elif isinstance(item.runner, CopyRunner):
        devices = [Device[b.device] for b in bufs]
    else:
        return None
    first = devices[0]
    return first if isinstance(first, CudaDevice) and all(d is first for d in devices) else None


def graph_for(items: Sequence, bufs: Sequence[Sequence[Buffer]]) -> CUDAGraph | GraphRuns | None:
    """What replays the ExecItems `items` on `bufs` (one list per item) in fewest launches: one CUDA graph where all
    are kernels or copies on one CUDA device; else a graph for each stretch of two or more such items on one device
    with the others (an NCCL all-reduce) run by themselves between them; None where no stretch can be a graph."""
    if not JIT_GRAPH or not items:
        return None
    devices = [_item_device(item, b) for item, b in zip(items, bufs)]
    if devices[0] is not None and all(d is devices[0] for d in devices):
        return CUDAGraph(devices[0], items, bufs)
    stretches, start = [], 0
    for i in range(1, len(items) + 1):  # stretches of one device (or of None: items that run by themselves)
        if i == len(items) or devices[i] is not devices[start] or devices[i] is None:
            stretches.append((start, i))
            start = i
    if not any(devices[a] is not None and b - a >= 2 for a, b in stretches):
        return None
    return GraphRuns(items, bufs, [(a, b, devices[a]) for a, b in stretches])


class GraphRuns:
    """A replay in stretches: a CUDA graph for each stretch of kernels on one device, the other items run one by one
    in between (each on the default stream, as the graphs are: they stay in the captured order)."""

    def __init__(self, items: Sequence, bufs: Sequence[Sequence[Buffer]], stretches: list[tuple[int, int, Any]]):
        self.items = list(items)
        self.stretches = [(a, b, CUDAGraph(d, items[a:b], bufs[a:b]) if d is not None and b - a >= 2 else None)
                          for a, b, d in stretches]  # fmt: skip

    def __call__(self, bufs: Mapping[int, Sequence[Buffer]], wait: bool = False) -> None:
        """Launch each stretch, the items' buffers those `bufs` names (by item index) or the captured ones."""
        for a, b, graph in self.stretches:
            if graph is not None:
                graph({i - a: item_bufs for i, item_bufs in bufs.items() if a <= i < b}, wait)
            else:
                for i in range(a, b):
                    self.items[i].run()


class CUDAGraph:
    """An instantiated CUDA graph of captured items, relaunched by __call__ with their current buffers."""

    launches = 0  # graph launches in this process, all graphs together (tests read it to see a graph was used)

    def __init__(self, device: CudaDevice, items: Sequence, bufs: Sequence[Sequence[Buffer]]):
        self.device, self.items = device, list(items)
        self.kernels = [item.runner for item in self.items if _is_kernel(item)]
        self.ops_and_mem = sum(k.spec.ops for k in self.kernels), sum(k.spec.mem for k in self.kernels)
        device.activate()
        self.graph, self.instance = ctypes.c_void_p(), ctypes.c_void_p()
        cu("cuGraphCreate", ctypes.byref(self.graph), 0)
        self.nodes: list[ctypes.c_void_p] = []
        self.handles: list[tuple[int, ...]] = []
        self._alive: list = []  # the argument arrays a kernel node's parameters point at
        for item, item_bufs in zip(self.items, bufs):
            handles = _handles(item_bufs)
            node, after = ctypes.c_void_p(), self.nodes[-1:]  # each node follows the one before: the captured order
            deps = (ctypes.c_void_p * max(len(after), 1))(*after)
            if _is_kernel(item):
                params = self._kernel_params(item, handles)
                cu("cuGraphAddKernelNode", ctypes.byref(node), self.graph, deps, len(after), ctypes.byref(params))
            else:
                copy = _copy_params(handles, item_bufs[0].nbytes)
                cu("cuGraphAddMemcpyNode", ctypes.byref(node), self.graph, deps, len(after), ctypes.byref(copy),
                   device.context)  # fmt: skip
            self.nodes.append(node)
            self.handles.append(handles)
        cu("cuGraphInstantiateWithFlags", ctypes.byref(self.instance), self.graph, ctypes.c_ulonglong(0))

    def _kernel_params(self, item, handles: tuple[int, ...]) -> KernelNodeParams:
        spec, program = item.runner.spec, item.runner.program
        grid, block = launch_dims(spec.global_size, spec.local_size)
        args, pointers = kernel_params(handles)
        self._alive.append((args, pointers))
        shared = program.shared_bytes  # dynamic shared memory (a tensor-core kernel's tiles)
        return KernelNodeParams(program.function, grid, 1, 1, block, 1, 1, shared, ctypes.addressof(pointers), None)

    def __call__(
        self, bufs: Sequence[Sequence[Buffer]] | Mapping[int, Sequence[Buffer]], wait: bool = False
    ) -> float | None:
        """Launch the graph on `bufs` (one list per item, or a dict of some items' lists: the others keep theirs),
        first updating the nodes whose buffers changed; returns the seconds it took on the GPU where `wait`."""
        self.device.activate()
        for i, item_bufs in bufs.items() if isinstance(bufs, Mapping) else enumerate(bufs):
            if (handles := _handles(item_bufs)) != self.handles[i]:
                self._update(i, handles, item_bufs)
        with EventTimer(wait) as timer:
            cu("cuGraphLaunch", self.instance, None)  # on the default stream: ordered with every other launch and copy
        CUDAGraph.launches += 1
        self._count(timer.seconds)
        return timer.seconds

    def _count(self, seconds: float | None) -> None:
        """GlobalCounters as a kernel-by-kernel replay would count; DEBUG>=2 prints one line for the whole graph."""
        ops, mem = self.ops_and_mem
        GlobalCounters.kernel_count += len(self.kernels)
        GlobalCounters.global_ops += ops
        GlobalCounters.global_mem += mem
        if seconds is not None:
            GlobalCounters.time_sum_s += seconds
            per_s = 1 / seconds / 1e9 if seconds else 0.0
            rates = f"{ops * per_s:9.2f} GFLOPS {mem * per_s:8.2f} GB/s"
            print(f"*** {self.device.name:<7} CUDA graph of {len(self.items)} items tm {seconds * 1e6:9.2f}us {rates}")

    def _update(self, i: int, handles: tuple[int, ...], item_bufs: Sequence[Buffer]) -> None:
        item, node = self.items[i], self.nodes[i]
        if _is_kernel(item):
            if len(self._alive) > 4 * len(self.items):  # drop argument arrays no node points at any more
                self._alive = self._alive[-len(self.items) :]
            cu("cuGraphExecKernelNodeSetParams", self.instance, node, ctypes.byref(self._kernel_params(item, handles)))
        else:
            copy = _copy_params(handles, item_bufs[0].nbytes)
            cu("cuGraphExecMemcpyNodeSetParams", self.instance, node, ctypes.byref(copy), self.device.context)
        self.handles[i] = handles

    def __del__(self):
        try:
            self.device.activate()
            if self.instance:
                cu("cuGraphExecDestroy", self.instance)
            if self.graph:
                cu("cuGraphDestroy", self.graph)
        except Exception:  # interpreter shutdown: the library may already be gone
            pass


def _handles(bufs: Sequence[Buffer]) -> tuple[int, ...]:
    return tuple(b.ensure_allocated().handle for b in bufs)


def _copy_params(handles: tuple[int, ...], nbytes: int) -> Memcpy3D:
    dst, src = handles
    copy = Memcpy3D(srcMemoryType=CU_MEMORYTYPE_DEVICE, srcDevice=src, srcPitch=nbytes, srcHeight=1,
                    dstMemoryType=CU_MEMORYTYPE_DEVICE, dstDevice=dst, dstPitch=nbytes, dstHeight=1)  # fmt: skip
    copy.WidthInBytes, copy.Height, copy.Depth = nbytes, 1, 1
    return copy
