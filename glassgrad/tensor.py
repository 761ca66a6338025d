"""Tensor: the user's API. Every method builds UOps; nothing runs until a result is needed."""

from __future__ import annotations

import math
import struct
import time
from collections.abc import Sequence
from typing import Any

from glassgrad.dtype import (
    DType,
    bfloat16_to_float,
    dtypes,
    float_to_bfloat16,
    promote_types,
    result_type_with_scalar,
    to_dtype,
    truncate,
)
from glassgrad.engine.checks import unaffected_by
from glassgrad.engine.counters import GlobalCounters
from glassgrad.engine.realize import buffer_of, run_schedule, share_buffer, timed_realize_summary
from glassgrad.engine.threads import one_thread_at_a_time, thread_id
from glassgrad.errors import ArgumentError, DtypeError
from glassgrad.helpers import prod
from glassgrad.live import become, current, intermediates, readers_of_overwritten, register, replaced
from glassgrad.mixin import MIXINS
from glassgrad.raw_bytes import raw_elements
from glassgrad.runtime.device import Device
from glassgrad.schedule import ScheduleItem
from glassgrad.schedule.cache import Scheduled, cached_schedule
from glassgrad.schedule.kernelize import chain_view, fresh_unique, new_buffer
from glassgrad.schedule.split_reduce import split_reduce
from glassgrad.shape import ShapeError, distinct_dims, int_args, shape_arg
from glassgrad.tensor_math import int_quotient
from glassgrad.uop.check import CheckFailed
from glassgrad.uop.ops import GroupOp, Ops, UOp


def _device_node(device: str) -> UOp:
    return UOp(Ops.DEVICE, dtypes.void, (), device)


def _flatten_nested(data: Any, where: str = "data") -> tuple[list[Any], tuple[int, ...]]:
    """The flat values and the shape of a nested list; ragged lists are an error."""
    if not isinstance(data, (list, tuple)):
        return [data], ()
    if len(data) == 0:
        return [], (0,)
    parts = [_flatten_nested(x, f"{where}[{i}]") for i, x in enumerate(data)]
    shape = parts[0][1]
    for i, (_, s) in enumerate(parts):
        if s != shape:
            raise ArgumentError(f"Tensor: nested list is ragged: {where}[0] has shape {shape} but {where}[{i}] has {s}")
    return [v for values, _ in parts for v in values], (len(data), *shape)


def _pack(values: list[Any], dtype: DType) -> bytes:
    """Python scalars as the bytes of a `dtype` buffer."""
    if dtype == dtypes.bfloat16:
        return struct.pack(f"<{len(values)}H", *(float_to_bfloat16(float(v)) for v in values))
    return struct.pack(f"<{len(values)}{dtype.fmt}", *(truncate(dtype, v) for v in values))


def _unpack(raw: bytes | bytearray, dtype: DType) -> list[Any]:
    if dtype == dtypes.bfloat16:
        return [bfloat16_to_float(v) for v in struct.unpack(f"<{len(raw) // 2}H", raw)]
    return list(struct.unpack(f"<{len(raw) // dtype.itemsize}{dtype.fmt}", raw))


def _nest(flat: list[Any], shape: tuple[int, ...]) -> Any:
    if not shape:
        return flat[0]
    if len(shape) == 1:
        return flat
    step = prod(shape[1:])
    return [_nest(flat[i * step : (i + 1) * step], shape[1:]) for i in range(shape[0])]


def _numpy_dtype(dtype: DType):
    import numpy as np

    names = {dtypes.bool: np.bool_, dtypes.int8: np.int8, dtypes.uint8: np.uint8, dtypes.int16: np.int16,
             dtypes.uint16: np.uint16, dtypes.int32: np.int32, dtypes.uint32: np.uint32, dtypes.int64: np.int64,
             dtypes.uint64: np.uint64, dtypes.float16: np.float16, dtypes.float32: np.float32,
             dtypes.float64: np.float64}  # fmt: skip
    return names[dtype]


def _from_numpy_dtype(np_dtype) -> DType:
    name = str(np_dtype)
    if name == "bool":
        return dtypes.bool
    return to_dtype(name)


class _GradSwitch:
    """`Tensor.no_grad`: truthy while gradients are off; `with Tensor.no_grad():` turns them off for a block."""

    def __init__(self):
        self.enabled, self._saved = False, []

    def __bool__(self) -> bool:
        return self.enabled

    def __call__(self) -> _GradSwitch:
        return self

    def __enter__(self) -> None:
        self._saved.append(self.enabled)
        self.enabled = True

    def __exit__(self, *exc) -> None:
        self.enabled = self._saved.pop()


class _TrainingMode:
    """Returned by Tensor.train(): the mode is already set; leaving a `with` block restores the old one."""

    def __init__(self, previous: bool):
        self.previous = previous

    def __enter__(self) -> None:
        pass

    def __exit__(self, *exc) -> None:
        Tensor.training = self.previous


class _TensorType(type):
    def __setattr__(cls, name: str, value: Any) -> None:
        if name == "no_grad" and not isinstance(value, _GradSwitch):  # `Tensor.no_grad = True` flips the switch
            cls.__dict__["no_grad"].enabled = bool(value)
            return
        super().__setattr__(name, value)


class Tensor(*MIXINS, metaclass=_TensorType):
    """A lazy n-dimensional array: operations build a graph of UOps, realized into buffers when needed."""

    training: bool = False
    no_grad = _GradSwitch()
    _seed: int = int(time.time())
    _rng_states: dict[str, Tensor] = {}  # the random generator state per device (see RandomMixin)

    def __init__(self, data: Any, device: str | None = None, dtype: DType | str | None = None,
                 requires_grad: bool | None = None):  # fmt: skip
        device = Device.canonicalize(device) if device is not None else Device.DEFAULT
        dtype = to_dtype(dtype) if dtype is not None else None
        if isinstance(data, UOp):
            uop = data if dtype is None or data.dtype == dtype else data.cast(dtype)
        elif isinstance(data, (bool, int, float)):
            uop = UOp(Ops.CONST, dtype or dtypes.from_py(data), (_device_node(device),),
                      truncate(dtype or dtypes.from_py(data), data))  # fmt: skip
        elif isinstance(data, (list, tuple)):
            values, shape = _flatten_nested(data)
            dtype = dtype or _infer_dtype(values)
            uop = _uop_from_bytes(_pack(values, dtype), dtype, shape, device)
        elif (raw := raw_elements(data, dtype)) is not None:  # bytes, or a file's (a pathlib.Path)
            uop = _uop_from_bytes(*raw, device)
        elif type(data).__module__ == "numpy" and hasattr(data, "__array_interface__"):
            uop = _uop_from_numpy(data, dtype, device)
        else:
            raise TypeError(f"Tensor: cannot make a tensor from {type(data).__name__}; "
                            "use a number, a nested list, bytes, a file's path or a NumPy array")  # fmt: skip
        _check_device_holds(uop.device or device, uop.dtype)
        self._start(uop, None, is_leaf=True)
        self._set_requires_grad(requires_grad)

    def _start(self, uop: UOp, requires_grad: bool | None, is_leaf: bool) -> None:
        """The fields every tensor has (AutogradMixin says what the autograd ones mean); it is listed as live."""
        self.uop: UOp = uop
        self.grad: Tensor | None = None
        self._requires_grad, self._is_leaf, self._autograd_uop = requires_grad, is_leaf, None
        register(self)

    # ---- facts ----

    @property
    def shape(self) -> tuple[int, ...]:
        """The size of each dimension."""
        return self.uop.shape

    @property
    def dtype(self) -> DType:
        """The element type."""
        return self.uop.dtype

    @property
    def device(self) -> str:
        """The device the tensor lives on."""
        return self.uop.device

    @property
    def ndim(self) -> int:
        """The number of dimensions."""
        return len(self.shape)

    def numel(self) -> int:
        """The number of elements."""
        return prod(self.shape)

    def element_size(self) -> int:
        """Bytes per element."""
        return self.dtype.itemsize

    def nbytes(self) -> int:
        """Bytes of all elements."""
        return self.numel() * self.dtype.itemsize

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __repr__(self) -> str:
        u = self.uop
        arg = u.arg if u.op is not Ops.BUFFER else None
        graph = f"<UOp {u.device} {u.shape} {u.dtype.name} ({u.op}, {arg})>"
        return f"<Tensor {graph} on {self.device} with grad {self.grad!r}>"

    def __bool__(self):
        if self.numel() != 1:
            raise RuntimeError(f"the truth value of a tensor of shape {self.shape} is ambiguous; use .any() or .all()")
        return bool(self.item())

    __hash__ = object.__hash__

    # ---- running the graph ----

    def _current_uop(self) -> UOp:
        """This tensor's graph with nodes that were already realized replaced by their buffers."""
        return current(self.uop)

    def _set_uop(self, uop: UOp) -> None:
        """Point this tensor at a new graph for the same values, keeping the old one if backward() may need it."""
        if self._requires_grad and not self._is_leaf and self._autograd_uop is None and not self._graph_freed:
            self._autograd_uop = self.uop
        self.uop = uop

    def kernelize(self, *others: Tensor) -> Tensor:
        """Group this graph (and others') into kernels: realize points become ASSIGN(BUFFER, KERNEL)."""
        _kernelize((self, *others))
        return self

    def schedule(self, *others: Tensor) -> list[ScheduleItem]:
        """The kernels that realizing these tensors would run, in order."""
        return _kernelize((self, *others)).items

    @one_thread_at_a_time
    def realize(self, *others: Tensor) -> Tensor:
        """Run every kernel this tensor (and others) need; afterwards each is backed by a buffer."""
        start, before = time.perf_counter(), GlobalCounters.kernel_count
        tensors = (self, *others, *readers_of_overwritten((self, *others)))
        scheduled = _kernelize(tensors)
        unused = intermediates(scheduled.mapping, tensors)
        try:
            run_schedule(scheduled.items, unused)
        except CheckFailed as error:  # what ran apart from the failure stands (an assign must not run twice); what
            kept = unaffected_by(error.check, scheduled.assigns)  # reads the failure stays to run, and raises again
            _realized(tensors, scheduled, [a for a in kept if a.src[0] not in unused])
            raise
        _realized(tensors, scheduled, scheduled.assigns)
        timed_realize_summary(start, before)
        return self

    def contiguous(self) -> Tensor:
        """A tensor with its own buffer in row-major order (a no-op if this one already is)."""
        if self._is_contiguous_buffer():
            return self
        # each call gets its own buffer, even for identical graphs: an assign to one must not change the other
        return Tensor._derived(UOp(Ops.CONTIGUOUS, self.dtype, (self.uop, fresh_unique())), self)

    def detach(self) -> Tensor:
        """The same values, cut from the autograd graph."""
        return Tensor(UOp(Ops.DETACH, self.dtype, (self.uop,)))

    def assign(self, value: Tensor | Any) -> Tensor:
        """Write `value` into this tensor's buffer (lazily); the tensor keeps its identity and storage."""
        value = value if isinstance(value, Tensor) else Tensor(value, self.device, self.dtype)
        if value.shape != self.shape:
            value = value._broadcast_to(self.shape, "assign")
        if value.device != self.device:
            raise ArgumentError(f"assign: value is on {value.device} but the tensor is on {self.device}")
        if value.dtype != self.dtype:
            raise DtypeError(f"assign: value has dtype {value.dtype} but the tensor has {self.dtype}; use .cast()")
        # the value as it is now: its own graph, built on nodes realized since (rng state + step), keeps old steps alive
        target, value_now = self._current_uop(), value._current_uop()
        if _reads_through_other_view(value_now, target):  # x.assign(x.T): read everything before it is overwritten
            value_now = Tensor(value_now).contiguous().uop
        # a buffer (or a view of one), or an assign still to run on it: this assign is ordered after that one
        if target.base.op not in (Ops.BUFFER, Ops.ASSIGN):
            self.realize()
            target, value_now = self.uop, current(value_now)
        self.uop, self._assigned_in = UOp(Ops.ASSIGN, self.dtype, (target, value_now)), thread_id()  # for TinyJit
        return self

    def _host_bytes(self) -> bytearray:
        t = self if self._is_contiguous_buffer() else self.contiguous()
        t.realize()
        return buffer_of(t.uop.base).as_bytes()

    def _is_contiguous_buffer(self) -> bool:
        node = self.uop  # first the common case, a buffer or reshapes of one (TinyJit checks each argument every call)
        while node.op is Ops.RESHAPE and node not in replaced:
            node = node.src[0]
        if node.op is Ops.BUFFER and node not in replaced:  # nothing replaced: the graph is current, no walk needed
            return True
        u = self._current_uop()
        if u.base.op is not Ops.BUFFER or u.size != u.base.arg:
            return False
        node = u
        while node.op is Ops.RESHAPE:  # reshapes of a whole buffer keep it contiguous: no view to build
            node = node.src[0]
        return node.op is Ops.BUFFER or chain_view(u).contiguous

    def data(self) -> memoryview:
        """The raw bytes of this tensor, in row-major order."""
        return memoryview(self._host_bytes())

    def numpy(self):
        """The values as a NumPy array (bfloat16 comes back as float32)."""
        import numpy as np

        if self.dtype == dtypes.bfloat16:
            return self.cast(dtypes.float32).numpy()
        return np.frombuffer(self._host_bytes(), dtype=_numpy_dtype(self.dtype)).reshape(self.shape).copy()

    def tolist(self) -> Any:
        """The values as (nested) Python lists, or a scalar for a 0-d tensor."""
        return _nest(_unpack(self._host_bytes(), self.dtype), self.shape)

    def item(self) -> Any:
        """The value of a one-element tensor as a Python scalar."""
        if self.numel() != 1:
            raise ArgumentError(f"item: the tensor has {self.numel()} elements (shape {self.shape}); item needs 1")
        return _unpack(self._host_bytes(), self.dtype)[0]

    def to(self, device: str) -> Tensor:
        """This tensor on another device (a COPY, run when realized)."""
        device = Device.canonicalize(device)
        if device == self.device:
            return self
        _check_device_holds(device, self.dtype)
        flat = self.reshape(self.numel()) if self.ndim != 1 else self
        copy = UOp(Ops.COPY, self.dtype, (flat.uop, _device_node(device)))
        return Tensor._derived(copy, flat).reshape(self.shape)

    def clone(self) -> Tensor:
        """A copy of this tensor with its own buffer."""
        return Tensor._derived(UOp(Ops.CONTIGUOUS, self.dtype, (self.uop, fresh_unique())), self)

    # ---- creation ----

    @staticmethod
    def full(shape: int | Sequence[int], fill_value: Any, dtype: DType | str | None = None,
             device: str | None = None, **kwargs) -> Tensor:  # fmt: skip
        """A tensor of `shape` with every element `fill_value`."""
        shape = shape_arg(shape, "full")
        const = Tensor(fill_value, device=device, dtype=dtype)
        filled = const.reshape((1,) * len(shape)).expand(shape) if shape else const
        return filled.requires_grad_(kwargs.get("requires_grad"))

    @staticmethod
    def zeros(*shape, dtype: DType | str | None = None, device: str | None = None, **kwargs) -> Tensor:
        """A tensor of zeros (float32 unless `dtype` says otherwise)."""
        return Tensor.full(shape_arg(shape, "zeros"), 0.0, dtype or dtypes.default_float, device, **kwargs)

    @staticmethod
    def ones(*shape, dtype: DType | str | None = None, device: str | None = None, **kwargs) -> Tensor:
        """A tensor of ones (float32 unless `dtype` says otherwise)."""
        return Tensor.full(shape_arg(shape, "ones"), 1.0, dtype or dtypes.default_float, device, **kwargs)

    @staticmethod
    def frombuffer(data: bytes | bytearray | memoryview, dtype: DType | str, shape: Sequence[int] | None = None,
                   device: str | None = None) -> Tensor:  # fmt: skip
        """A tensor holding a copy of raw bytes, read as `dtype` (row-major, little-endian)."""
        dtype, raw = to_dtype(dtype), bytes(data)
        if len(raw) % dtype.itemsize:
            raise ArgumentError(f"frombuffer: {len(raw)} bytes are not a whole number of {dtype} ({dtype.itemsize} B)")
        shape = (len(raw) // dtype.itemsize,) if shape is None else tuple(shape)
        if prod(shape) * dtype.itemsize != len(raw):
            raise ArgumentError(f"frombuffer: {len(raw)} bytes cannot be a {dtype} tensor of shape {shape}")
        device = Device.canonicalize(device or Device.DEFAULT)
        return Tensor(_uop_from_bytes(raw, dtype, shape, device))

    @staticmethod
    def empty(*shape, dtype: DType | str | None = None, device: str | None = None, **kwargs) -> Tensor:
        """A tensor whose values are not set (backed by a fresh buffer)."""
        shape = shape_arg(shape, "empty")
        dtype, device = to_dtype(dtype or dtypes.default_float), Device.canonicalize(device or Device.DEFAULT)
        empty = Tensor(new_buffer(device, prod(shape), dtype)).reshape(shape)
        return empty.requires_grad_(kwargs.get("requires_grad"))

    @staticmethod
    def arange(start: int | float, stop: int | float | None = None, step: int | float = 1,
               dtype: DType | str | None = None, device: str | None = None, **kwargs) -> Tensor:  # fmt: skip
        """Evenly spaced values in [start, stop), as Python's range but for floats too."""
        if stop is None:
            start, stop = 0, start
        if step == 0:
            raise ArgumentError("arange: step must not be zero")
        count = max(0, math.ceil((stop - start) / step))
        ints = dtypes.int64 if max(abs(start), abs(start + step * count)) >= 2**31 else dtypes.default_int  # past int32
        floats = any(isinstance(x, float) for x in (start, stop, step))
        dtype = to_dtype(dtype) if dtype is not None else dtypes.default_float if floats else ints
        device = Device.canonicalize(device or Device.DEFAULT)
        position = dtypes.int64 if count >= 2**31 else dtypes.int32
        index = Tensor(UOp(Ops.ARANGE, position, (_device_node(device),), count))
        # start + i * step rounded once to a 16-bit float (as PyTorch): its index alone is inexact past 2048 or 256
        working = dtypes.float32 if dtype in (dtypes.float16, dtypes.bfloat16) else dtype
        return (index.cast(working) * step + start).cast(dtype).requires_grad_(kwargs.get("requires_grad"))

    @staticmethod
    def eye(n: int, m: int | None = None, dtype: DType | str | None = None, device: str | None = None,
            **kwargs) -> Tensor:  # fmt: skip
        """The n x m identity matrix."""
        m = n if m is None else m
        shape_arg((n, m), "eye")
        rows = Tensor.arange(n, device=device).reshape(n, 1)
        cols = Tensor.arange(m, device=device).reshape(1, m)
        return (rows == cols).cast(dtype or dtypes.default_float).requires_grad_(kwargs.get("requires_grad"))

    def full_like(self, fill_value: Any, **kwargs) -> Tensor:
        """`fill_value` with this tensor's shape, dtype and device."""
        return Tensor.full(self.shape, fill_value, dtype=kwargs.pop("dtype", self.dtype),
                           device=kwargs.pop("device", self.device), **kwargs)  # fmt: skip

    def zeros_like(self, **kwargs) -> Tensor:
        """Zeros with this tensor's shape, dtype and device."""
        return self.full_like(0, **kwargs)

    def ones_like(self, **kwargs) -> Tensor:
        """Ones with this tensor's shape, dtype and device."""
        return self.full_like(1, **kwargs)

    def rand_like(self, **kwargs) -> Tensor:
        """Uniform [0, 1) values with this tensor's shape."""
        dtype = kwargs.pop("dtype", self.dtype if dtypes.is_float(self.dtype) else dtypes.default_float)
        return Tensor.rand(*self.shape, dtype=dtype, device=kwargs.pop("device", self.device), **kwargs)

    def randn_like(self, **kwargs) -> Tensor:
        """Standard normal values with this tensor's shape."""
        dtype = kwargs.pop("dtype", self.dtype if dtypes.is_float(self.dtype) else dtypes.default_float)
        return Tensor.randn(*self.shape, dtype=dtype, device=kwargs.pop("device", self.device), **kwargs)

    @staticmethod
    def train(mode: bool = True) -> _TrainingMode:
        """Set Tensor.training (dropout and batchnorm read it); usable as `with Tensor.train():` too."""
        previous, Tensor.training = Tensor.training, mode
        return _TrainingMode(previous)

    @staticmethod
    def test() -> _TrainingMode:
        """Leave training mode (Tensor.train(False))."""
        return Tensor.train(False)

    @staticmethod
    def _derived(uop: UOp, *parents: Tensor) -> Tensor:
        """The result of an op: a float result requires grad when any input does, and then it has autograd history
        (it is not a leaf)."""
        if all(p.uop.dtype is not uop.dtype for p in parents):  # a dtype an input has, its device holds already
            _check_device_holds(uop.device or Device.DEFAULT, uop.dtype)
        out = Tensor.__new__(Tensor)  # not through __init__: the graph is made, there is no data to take in
        grad = not Tensor.no_grad and any(p._requires_grad for p in parents) and dtypes.is_float(uop.dtype)
        out._start(uop, True if grad else None, is_leaf=not grad)
        return out

    # ---- movement: views of the same data, no copies ----

    def _axis(self, axis: int, op: str, ndim: int | None = None) -> int:
        ndim = self.ndim if ndim is None else ndim
        if not -max(ndim, 1) <= axis < max(ndim, 1):
            raise IndexError(f"{op}: dimension {axis} is out of range for a tensor of shape {self.shape} "
                             f"(expected -{max(ndim, 1)} to {max(ndim, 1) - 1})")  # fmt: skip
        return axis % max(ndim, 1)

    def _movement(self, op: Ops, arg: Any) -> Tensor:
        return Tensor._derived(UOp(op, self.dtype, (self.uop,), arg), self)

    def reshape(self, *shape) -> Tensor:
        """The same elements in row-major order, with a new shape; one dimension may be -1."""
        shape = shape_arg(shape, "reshape", minus_one="infer", current=self.shape)
        if -1 in shape:
            known = prod(s for s in shape if s != -1)
            if known == 0 or self.numel() % known:
                why = f"the other sizes multiply to {known}, which does not divide {self.numel()}"
                if known == 0:
                    why = "-1 is ambiguous where the other sizes multiply to 0"
                raise ShapeError(f"reshape: cannot reshape tensor of shape {self.shape} ({self.numel()} elements) "
                                 f"into {shape}: {why}")  # fmt: skip
            shape = tuple(self.numel() // known if s == -1 else s for s in shape)
        if prod(shape) != self.numel():
            raise ShapeError(f"reshape: cannot reshape tensor of shape {self.shape} ({self.numel()} elements) "
                             f"into {shape} ({prod(shape)} elements); the element count must not change")  # fmt: skip
        return self if shape == self.shape else self._movement(Ops.RESHAPE, shape)

    def view(self, *shape) -> Tensor:
        """The same as reshape: a view with a new shape."""
        return self.reshape(*shape)

    def permute(self, *order) -> Tensor:
        """Reorder the dimensions: the result's dim i is this tensor's dim order[i]."""
        order = tuple(self._axis(o, "permute") for o in int_args(order, "permute", "dims must be integers"))
        if sorted(order) != list(range(self.ndim)):
            raise ArgumentError(f"permute: {order} is not a permutation of the {self.ndim} dimensions of {self.shape}; "
                                f"name each of 0..{self.ndim - 1} exactly once")  # fmt: skip
        return self if order == tuple(range(self.ndim)) else self._movement(Ops.PERMUTE, order)

    def expand(self, *shape) -> Tensor:
        """Broadcast size-1 dimensions to larger sizes without copying; -1 keeps a dimension."""
        shape = shape_arg(shape, "expand", minus_one="keep")
        if len(shape) < self.ndim:
            raise ArgumentError(f"expand: the target shape {shape} has fewer dimensions than the tensor {self.shape}")
        if -1 in shape[: len(shape) - self.ndim]:
            raise ShapeError(f"expand: -1 keeps a dimension's size, but {shape} puts one at a new leading dimension")
        padded = (1,) * (len(shape) - self.ndim) + self.shape
        new = tuple(old if s == -1 else s for s, old in zip(shape, padded))
        for old, s in zip(padded, new):
            if old != s and old != 1:
                raise ArgumentError(f"expand: cannot expand shape {self.shape} to {shape}: only size-1 dimensions grow")
        x = self.reshape(padded) if padded != self.shape else self
        return x if new == x.shape else x._movement(Ops.EXPAND, new)

    def _broadcast_to(self, shape: tuple[int, ...], op: str) -> Tensor:
        try:
            return self.expand(shape)
        except ValueError:
            raise ArgumentError(f"{op}: cannot broadcast shape {self.shape} to {shape}") from None

    def shrink(self, arg: Sequence[tuple[int, int] | None]) -> Tensor:
        """Crop each dimension to [start, end) (None keeps it whole)."""
        if len(arg) != self.ndim:
            raise ArgumentError(f"shrink: need one (start, end) per dimension of {self.shape}, got {arg}")
        arg = tuple((0, s) if a is None else (int(a[0]), int(a[1])) for a, s in zip(arg, self.shape))
        for (start, end), s in zip(arg, self.shape):
            if not 0 <= start <= end <= s:
                raise ShapeError(f"shrink: range {(start, end)} is outside a dimension of size {s} in {self.shape}")
        if arg == tuple((0, s) for s in self.shape):
            return self
        return self._movement(Ops.SHRINK, arg)

    def flip(self, *axis) -> Tensor:
        """Reverse the order of elements along the given dimensions."""
        axes = set(distinct_dims([self._axis(a, "flip") for a in int_args(axis, "flip", "dims must be integers")],
                                 "flip"))  # fmt: skip
        if not axes:
            return self
        return self._movement(Ops.FLIP, tuple(i in axes for i in range(self.ndim)))

    def transpose(self, dim0: int = 1, dim1: int = 0) -> Tensor:
        """Swap two dimensions."""
        order = list(range(self.ndim))
        a, b = self._axis(dim0, "transpose"), self._axis(dim1, "transpose")
        order[a], order[b] = order[b], order[a]
        return self.permute(order)

    @property
    def T(self) -> Tensor:
        """The transpose: dimensions in reverse order."""
        return self.permute(tuple(reversed(range(self.ndim))))

    def squeeze(self, dim: int | None = None) -> Tensor:
        """Remove size-1 dimensions (all of them, or only `dim`)."""
        if dim is None:
            return self.reshape(tuple(s for s in self.shape if s != 1))
        dim = self._axis(dim, "squeeze")
        if not self.shape or self.shape[dim] != 1:
            return self
        return self.reshape(self.shape[:dim] + self.shape[dim + 1 :])

    def unsqueeze(self, dim: int) -> Tensor:
        """Insert a size-1 dimension at `dim`."""
        dim = self._axis(dim, "unsqueeze", self.ndim + 1)
        return self.reshape(self.shape[:dim] + (1,) + self.shape[dim:])

    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> Tensor:
        """Merge dimensions start_dim..end_dim into one."""
        if self.ndim == 0:
            return self.reshape(1)
        start, end = self._axis(start_dim, "flatten"), self._axis(end_dim, "flatten")
        return self.reshape(self.shape[:start] + (prod(self.shape[start : end + 1]),) + self.shape[end + 1 :])

    # ---- elementwise ----

    def _binary_operands(self, other: Any, op: str, reverse: bool = False) -> tuple[Tensor, Tensor]:
        """Both operands as tensors of one dtype and one broadcast shape."""
        if isinstance(other, Tensor):
            if other.device != self.device:
                raise ArgumentError(f"{op}: tensors are on different devices: {self.device} and {other.device}; "
                                    "move one with .to()")  # fmt: skip
            dtype = promote_types(self.dtype, other.dtype)
        elif isinstance(other, (bool, int, float)):
            dtype = result_type_with_scalar(self.dtype, other)
            other = Tensor(other, device=self.device, dtype=dtype)
        else:
            raise TypeError(f"{op}: unsupported operand type {type(other).__name__}")
        x, y = (other, self) if reverse else (self, other)
        shape = _broadcast_shape(x.shape, y.shape, op)
        return x.cast(dtype)._broadcast_to(shape, op), y.cast(dtype)._broadcast_to(shape, op)

    def _alu(self, op: Ops, *others: Tensor) -> Tensor:
        return Tensor._derived(self.uop.alu(op, *(o.uop for o in others)), self, *others)

    def cast(self, dtype: DType | str) -> Tensor:
        """The values converted to another dtype."""
        dtype = to_dtype(dtype)
        if dtype == self.dtype:
            return self
        _check_device_holds(self.device, dtype)
        return Tensor._derived(UOp(Ops.CAST, dtype, (self.uop,)), self)

    def bitcast(self, dtype: DType | str) -> Tensor:
        """The same bytes read as another dtype of the same size."""
        dtype = to_dtype(dtype)
        if dtype.itemsize != self.dtype.itemsize:
            raise ArgumentError(f"bitcast: {self.dtype} and {dtype} differ in size ({self.dtype.itemsize} vs "
                                f"{dtype.itemsize} bytes)")  # fmt: skip
        return self if dtype == self.dtype else Tensor(UOp(Ops.BITCAST, dtype, (self.uop,)))

    def float(self) -> Tensor:
        """This tensor as float32."""
        return self.cast(dtypes.float32)

    def half(self) -> Tensor:
        """This tensor as float16."""
        return self.cast(dtypes.float16)

    def double(self) -> Tensor:
        """This tensor as float64."""
        return self.cast(dtypes.float64)

    def int(self) -> Tensor:
        """This tensor as int32."""
        return self.cast(dtypes.int32)

    def long(self) -> Tensor:
        """This tensor as int64."""
        return self.cast(dtypes.int64)

    def bool(self) -> Tensor:
        """This tensor as bool (nonzero is True)."""
        return self.cast(dtypes.bool)

    def bfloat16(self) -> Tensor:
        """This tensor as bfloat16."""
        return self.cast(dtypes.bfloat16)

    def _float_input(self) -> Tensor:
        return self if dtypes.is_float(self.dtype) else self.cast(dtypes.default_float)

    def add(self, other: Any, reverse: bool = False) -> Tensor:
        """Elementwise sum, with broadcasting."""
        x, y = self._binary_operands(other, "add", reverse)
        return x._alu(Ops.ADD, y)

    def sub(self, other: Any, reverse: bool = False) -> Tensor:
        """Elementwise difference."""
        x, y = self._binary_operands(other, "sub", reverse)
        if x.dtype == dtypes.bool:
            raise DtypeError("sub: subtracting bool tensors is not supported; use ^ or logical_xor")
        return x._alu(Ops.ADD, y.neg())

    def mul(self, other: Any, reverse: bool = False) -> Tensor:
        """Elementwise product."""
        x, y = self._binary_operands(other, "mul", reverse)
        return x._alu(Ops.MUL, y)

    def div(self, other: Any, reverse: bool = False, rounding_mode: str | None = None) -> Tensor:
        """Elementwise true division (ints become floats); rounding_mode 'trunc' or 'floor' as in PyTorch."""
        x, y = self._binary_operands(other, "div", reverse)
        if rounding_mode is None:
            x, y = x._float_input(), y._float_input()
            return x._alu(Ops.MUL, y._alu(Ops.RECIP))
        if dtypes.is_int(x.dtype):
            return int_quotient(x, y, rounding_mode, "div")
        quotient = x._alu(Ops.MUL, y._alu(Ops.RECIP))
        return quotient.trunc() if rounding_mode == "trunc" else quotient.floor()

    def idiv(self, other: Any, reverse: bool = False) -> Tensor:
        """Integer division truncating toward zero (C semantics)."""
        x, y = self._binary_operands(other, "idiv", reverse)
        return int_quotient(x, y, "trunc", "idiv")

    def floordiv(self, other: Any, reverse: bool = False) -> Tensor:
        """Elementwise division rounded down (Python's //)."""
        x, y = self._binary_operands(other, "floordiv", reverse)
        return int_quotient(x, y, "floor", "floordiv") if dtypes.is_int(x.dtype) else x.div(y, rounding_mode="floor")

    def mod(self, other: Any, reverse: bool = False) -> Tensor:
        """Remainder with the sign of the divisor, as Python's % and torch.remainder."""
        x, y = self._binary_operands(other, "mod", reverse)
        q = int_quotient(x, y, "floor", "mod") if dtypes.is_int(x.dtype) else x.div(y, rounding_mode="floor")
        return x - q * y

    def neg(self) -> Tensor:
        """Elementwise negation (logical not for bool)."""
        return self.logical_not() if self.dtype == dtypes.bool else self._alu(Ops.NEG)

    def maximum(self, other: Any) -> Tensor:
        """Elementwise maximum (NaN if either is NaN)."""
        x, y = self._binary_operands(other, "maximum")
        return x._alu(Ops.MAX, y)

    def minimum(self, other: Any) -> Tensor:
        """Elementwise minimum (NaN if either is NaN)."""
        x, y = self._binary_operands(other, "minimum")
        return x._inverted()._alu(Ops.MAX, y._inverted())._inverted()

    def _inverted(self) -> Tensor:
        """An order-reversing map that is its own inverse: -x for floats, ~x for integers, not for bools."""
        if self.dtype == dtypes.bool:
            return self.logical_not()
        return self.neg() if dtypes.is_float(self.dtype) else self.bitwise_not()

    def where(self, x: Any, y: Any) -> Tensor:
        """x where this (a condition) is true, else y."""
        cond = self if self.dtype == dtypes.bool else self.ne(0)
        if not isinstance(x, Tensor):  # a Python scalar takes the other side's dtype unless it lifts the kind
            dtype = result_type_with_scalar(y.dtype, x) if isinstance(y, Tensor) else None
            x = Tensor(x, device=self.device, dtype=dtype)
        x, y = x._binary_operands(y, "where")
        shape = _broadcast_shape(cond.shape, x.shape, "where")
        cond, x, y = (t._broadcast_to(shape, "where") for t in (cond, x, y))
        return cond._alu(Ops.WHERE, x, y)

    # comparisons

    def __lt__(self, other: Any) -> Tensor:
        x, y = self._binary_operands(other, "<")
        return x._alu(Ops.CMPLT, y)

    def __gt__(self, other: Any) -> Tensor:
        x, y = self._binary_operands(other, ">", reverse=True)
        return x._alu(Ops.CMPLT, y)

    def ne(self, other: Any) -> Tensor:
        """Elementwise !=."""
        x, y = self._binary_operands(other, "!=")
        return x._alu(Ops.CMPNE, y)

    def eq(self, other: Any) -> Tensor:
        """Elementwise ==."""
        return self.ne(other).logical_not()

    def __eq__(self, other: Any) -> Tensor:  # type: ignore[override]
        return self.eq(other)

    def __ne__(self, other: Any) -> Tensor:  # type: ignore[override]
        return self.ne(other)

    # logic and bits

    def logical_not(self) -> Tensor:
        """True where the value is false (zero)."""
        return self.ne(True) if self.dtype == dtypes.bool else self.eq(0)

    def _bitwise(self, op: Ops, other: Any, name: str, reverse: bool = False) -> Tensor:
        x, y = self._binary_operands(other, name, reverse)
        if dtypes.is_float(x.dtype):
            raise DtypeError(f"{name}: bitwise ops need bool or integer tensors, got {x.dtype}")
        return x._alu(op, y)

    def bitwise_and(self, other: Any) -> Tensor:
        """Elementwise & of bools or integers."""
        return self._bitwise(Ops.AND, other, "&")

    def bitwise_or(self, other: Any) -> Tensor:
        """Elementwise | of bools or integers."""
        return self._bitwise(Ops.OR, other, "|")

    def bitwise_xor(self, other: Any) -> Tensor:
        """Elementwise ^ of bools or integers."""
        return self._bitwise(Ops.XOR, other, "^")

    def bitwise_not(self) -> Tensor:
        """~x: logical not for bools, all bits flipped for integers."""
        if self.dtype == dtypes.bool:
            return self.logical_not()
        return self._bitwise(Ops.XOR, -1 if not dtypes.is_unsigned(self.dtype) else dtypes.max(self.dtype), "~")

    def lshift(self, bits: Any) -> Tensor:
        """Shift integer elements left by `bits`."""
        return self._bitwise(Ops.SHL, bits, "<<")

    def rshift(self, bits: Any) -> Tensor:
        """Shift integer elements right by `bits`."""
        return self._bitwise(Ops.SHR, bits, ">>")

    # ---- reductions ----

    def _reduce_axis(self, op: Ops, axes: tuple[int, ...]) -> Tensor:
        """One REDUCE_AXIS node over `axes`, kept as size-1 dims."""
        return Tensor._derived(UOp(Ops.REDUCE_AXIS, self.dtype, (self.uop,), (op, axes)), self)

    def _reduce(self, op: Ops, axis: int | Sequence[int] | None, keepdim: bool, name: str) -> Tensor:
        axes = tuple(range(self.ndim)) if axis is None else tuple(
            self._axis(a, name) for a in ((axis,) if isinstance(axis, int) else axis))  # fmt: skip
        axes = tuple(sorted(set(a for a in axes if self.ndim)))
        if axes and (split := split_reduce(self, op, axes)) is not None:  # a long reduction on a GPU: two kernels
            reduced = split
        else:
            reduced = self._reduce_axis(op, axes) if axes else self
        if keepdim or not axes:
            return reduced
        return reduced.reshape(tuple(s for i, s in enumerate(self.shape) if i not in axes))

    # ---- Python operators ----

    def __neg__(self):
        return self.neg()

    def __add__(self, x):
        return self.add(x)

    def __radd__(self, x):
        return self.add(x, True)

    def __sub__(self, x):
        return self.sub(x)

    def __rsub__(self, x):
        return self.sub(x, True)

    def __mul__(self, x):
        return self.mul(x)

    def __rmul__(self, x):
        return self.mul(x, True)

    def __truediv__(self, x):
        return self.div(x)

    def __rtruediv__(self, x):
        return self.div(x, True)

    def __floordiv__(self, x):
        return self.floordiv(x)

    def __rfloordiv__(self, x):
        return self.floordiv(x, True)

    def __mod__(self, x):
        return self.mod(x)

    def __rmod__(self, x):
        return self.mod(x, True)

    def __pow__(self, x):
        return self.pow(x)

    def __rpow__(self, x):
        return self.pow(x, True)

    def __and__(self, x):
        return self.bitwise_and(x)

    def __rand__(self, x):
        return self._bitwise(Ops.AND, x, "&", True)

    def __or__(self, x):
        return self.bitwise_or(x)

    def __ror__(self, x):
        return self._bitwise(Ops.OR, x, "|", True)

    def __xor__(self, x):
        return self.bitwise_xor(x)

    def __rxor__(self, x):
        return self._bitwise(Ops.XOR, x, "^", True)

    def __invert__(self):
        return self.bitwise_not()

    def __lshift__(self, x):
        return self.lshift(x)

    def __rshift__(self, x):
        return self.rshift(x)

    def __iadd__(self, x):
        return self.assign(self + x)

    def __isub__(self, x):
        return self.assign(self - x)

    def __imul__(self, x):
        return self.assign(self * x)

    def __itruediv__(self, x):
        return self.assign(self / x)


# ---- helpers for the class above ----


def _infer_dtype(values: list[Any]) -> DType:
    if not values or any(isinstance(v, float) for v in values):  # an empty list is float32, as in PyTorch
        return dtypes.default_float
    if values and all(isinstance(v, bool) for v in values):
        return dtypes.bool
    for v in values:
        if not isinstance(v, (bool, int, float)):
            raise TypeError(f"Tensor: cannot make a tensor element from {type(v).__name__} {v!r}")
    return dtypes.default_int


def _uop_from_bytes(raw: bytes, dtype: DType, shape: tuple[int, ...], device: str) -> UOp:
    """Data from the host: a PYTHON buffer holding the bytes, copied to `device` when realized."""
    count = prod(shape)
    buf = new_buffer("PYTHON", count, dtype)
    buffer_of(buf).copyin(raw)
    uop = buf if device == "PYTHON" else UOp(Ops.COPY, dtype, (buf, _device_node(device)))
    return uop if shape == (count,) else UOp(Ops.RESHAPE, dtype, (uop,), shape)


def _uop_from_numpy(array, dtype: DType | None, device: str) -> UOp:
    import numpy as np

    array = np.asarray(array)  # NumPy scalars too; tobytes() is row-major for any layout, and keeps a 0-d shape
    source_dtype = _from_numpy_dtype(array.dtype)
    uop = _uop_from_bytes(array.tobytes(order="C"), source_dtype, tuple(array.shape), device)
    return uop if dtype is None or dtype == source_dtype else UOp(Ops.CAST, dtype, (uop,))


def _check_device_holds(device: str, dtype: DType) -> None:
    if not Device[device].supports(dtype):
        raise TypeError(f"device {device} cannot hold {dtype}; cast to a supported dtype or use another device")


def _broadcast_shape(a: tuple[int, ...], b: tuple[int, ...], op: str) -> tuple[int, ...]:
    """NumPy broadcasting: align from the right; sizes must match or be 1."""
    n = max(len(a), len(b))
    a2, b2 = (1,) * (n - len(a)) + a, (1,) * (n - len(b)) + b
    out = []
    for i, (x, y) in enumerate(zip(a2, b2)):
        if x != y and x != 1 and y != 1:
            raise ArgumentError(f"{op}: shapes {a} and {b} cannot broadcast: dimension {i - n} has sizes {x} and {y}; "
                                "sizes must match or be 1 (reshape or unsqueeze one side to line them up)")  # fmt: skip
        out.append(y if x == 1 else x)
    return tuple(out)


def _reads_through_other_view(value: UOp, target: UOp) -> bool:
    """Whether `value` reads the buffer under `target` through a view other than `target` itself."""
    if value is target:
        return False
    for node in value.toposort(enter=lambda n: n is not target):
        if node is not target and node.op in GroupOp.Movement and node.base is target.base:
            return True
    return False


@one_thread_at_a_time
def _kernelize(tensors: Sequence[Tensor]) -> Scheduled:
    """Kernelize the tensors' graphs and point every tensor at the result; returns kernelize's answer and the
    schedule of its kernels."""
    for t in tensors:
        t._set_uop(t._current_uop())
    scheduled = cached_schedule([t.uop for t in tensors])
    become(scheduled.mapping)
    for t, root in zip(tensors, scheduled.roots):  # a view of a kernelized node now reads through its buffer
        t._set_uop(root)
    return scheduled


def _realized(tensors: Sequence[Tensor], scheduled: Scheduled, ran: list[UOp]) -> None:
    """Point the tensors, and every graph, at the buffers the kernels of the assigns `ran` filled."""
    realized = {n: _renamed_after_assign(n) for n in ran}
    become(realized)
    for t, root in zip(tensors, scheduled.roots):
        t._set_uop(root.substitute(realized))
        if t.uop.base.op is Ops.BUFFER:  # Tensor.empty's too: its memory exists now, or OutOfMemoryError said why
            buffer_of(t.uop.base).ensure_allocated()


def _renamed_after_assign(assigned: UOp) -> UOp:
    """The BUFFER a realized ASSIGN(BUFFER, KERNEL) leaves behind. A buffer an assign overwrote gets a new name for
    the same memory: graphs built from it later must not match results remembered from its old contents."""
    buffer = assigned.src[0]
    if not assigned.src[1].arg.assign:
        return buffer
    alias = new_buffer(buffer.device, buffer.arg, buffer.dtype)
    share_buffer(alias, buffer)
    return alias
