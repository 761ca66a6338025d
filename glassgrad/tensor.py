"""Tensor: the user's API. Every method builds UOps; nothing runs until a result is needed."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from glassgrad.backward_targets import unasked_flag
from glassgrad.device_info import device_or_default
from glassgrad.dtype import (
    STORED_AS_BITS,
    DType,
    dtypes,
    pack_values,
    to_dtype,
    truncate,
    typed_view,
    unpack_values,
)
from glassgrad.engine.lazy import current, realize_tensors, register, replaced, schedule_tensors, track
from glassgrad.engine.realize import buffer_of
from glassgrad.engine.threads import one_thread_at_a_time, thread_id
from glassgrad.errors import ArgumentError, DtypeError
from glassgrad.helpers import TrainingSwitch, prod, training_flag
from glassgrad.host_data import (
    _device_node,
    _flatten_nested,
    _infer_dtype,
    _nest,
    _numpy_dtype,
    _uop_from_bytes,
    _uop_from_numpy,
    raw_elements,
)
from glassgrad.mixin import (
    AttentionMixin,
    AutogradMixin,
    CompositionMixin,
    ConvMixin,
    ElementwiseMixin,
    GatherMixin,
    IndexMixin,
    JoinMixin,
    LinalgMixin,
    LossMixin,
    MathMixin,
    MovementMixin,
    NormMixin,
    PoolMixin,
    RandomMixin,
    ReduceMixin,
    UserNamesMixin,
)
from glassgrad.mixin.elementwise import check_device_holds
from glassgrad.runtime.device import Device
from glassgrad.shape import shape_arg
from glassgrad.uop.ops import GroupOp, Ops, UOp, fresh_unique, new_buffer
from glassgrad.uop.view import chain_view

if TYPE_CHECKING:
    from glassgrad.schedule import ScheduleItem


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


class _TensorType(TrainingSwitch):
    def __setattr__(cls, name: str, value: Any) -> None:
        if name == "no_grad" and not isinstance(value, _GradSwitch):  # `Tensor.no_grad = True` flips the switch
            cls.__dict__["no_grad"].enabled = bool(value)
            return
        super().__setattr__(name, value)


class Tensor(MovementMixin, ElementwiseMixin, AutogradMixin, MathMixin, ReduceMixin, IndexMixin, GatherMixin,
             JoinMixin, LinalgMixin, ConvMixin, PoolMixin, NormMixin, AttentionMixin, LossMixin, RandomMixin,
             CompositionMixin, UserNamesMixin, metaclass=_TensorType):  # fmt: skip
    """A lazy n-dimensional array: operations build a graph of UOps, realized into buffers when needed."""

    training = training_flag  # the TRAINING flag (helpers.py): Context(TRAINING=1) is Tensor.train()
    no_grad = _GradSwitch()
    _seed: int = int(time.time())
    _rng_states: dict[str, Tensor] = {}  # the random generator state per device (see RandomMixin)

    def __init__(self, data: Any, device: str | None = None, dtype: DType | str | None = None,
                 requires_grad: bool | None = None):  # fmt: skip
        device = device_or_default(device)
        dtype = to_dtype(dtype) if dtype is not None else None
        if isinstance(data, UOp):
            uop = data if dtype is None or data.dtype == dtype else data.cast(dtype)
        elif isinstance(data, (bool, int, float)):
            uop = UOp(Ops.CONST, dtype or dtypes.from_py(data), (_device_node(device),),
                      truncate(dtype or dtypes.from_py(data), data))  # fmt: skip
        elif isinstance(data, (list, tuple)):
            values, shape = _flatten_nested(data)
            dtype = dtype or _infer_dtype(values)
            uop = _uop_from_bytes(pack_values(values, dtype), dtype, shape, device)
        elif (raw := raw_elements(data, dtype)) is not None:  # bytes, or a file's (a pathlib.Path)
            uop = _uop_from_bytes(*raw, device)
        elif type(data).__module__ == "numpy" and hasattr(data, "__array_interface__"):
            uop = _uop_from_numpy(data, dtype, device)
        else:
            raise TypeError(f"Tensor: cannot make a tensor from {type(data).__name__}; "
                            "use a number, a nested list, bytes, a file's path or a NumPy array")  # fmt: skip
        check_device_holds(uop.device or device, uop.dtype)
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
        track(self)

    def kernelize(self, *others: Tensor) -> Tensor:
        """Group this graph (and others') into kernels: realize points become ASSIGN(BUFFER, KERNEL)."""
        schedule_tensors((self, *others))
        return self

    def schedule(self, *others: Tensor) -> list[ScheduleItem]:
        """The kernels that realizing these tensors would run, in order."""
        return schedule_tensors((self, *others)).items

    @one_thread_at_a_time
    def realize(self, *others: Tensor) -> Tensor:
        """Run every kernel this tensor (and others) need; afterwards each is backed by a buffer."""
        realize_tensors((self, *others))
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
        if self.numel() == 0:  # nothing to write (and no kernel to run for it)
            return self
        # the value as it is now: its own graph, built on nodes realized since (rng state + step), keeps old steps alive
        target, value_now = self._current_uop(), value._current_uop()
        if _reads_through_other_view(value_now, target):  # x.assign(x.T): read everything before it is overwritten
            value_now = Tensor(value_now).contiguous().uop
        # a buffer (or a view of one), or an assign still to run on it: this assign is ordered after that one
        if target.base.op not in (Ops.BUFFER, Ops.ASSIGN):
            self.realize()
            target, value_now = self.uop, current(value_now)
        whole = target.op is Ops.ASSIGN or self._is_contiguous_buffer()
        self.uop, self._assigned_in = UOp(Ops.ASSIGN, self.dtype, (target, value_now)), thread_id()  # for TinyJit
        track(self)
        if not whole:  # a view of a buffer other tensors hold: write now, so that they read the new values (torch's)
            self.realize()
        return self

    def _host_bytes(self) -> bytearray:
        if (through := _read_through(self)) is not None:  # a part of a file (DISK computes nothing), or shards
            return self.to(through)._host_bytes()
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
        """The elements as a typed memoryview of this shape, in row-major order (tinygrad's; dtype.typed_view)."""
        return typed_view(self._host_bytes(), self.dtype, self.shape)

    def numpy(self):
        """The values as a NumPy array (bfloat16 and fp8 come back as float32)."""
        import numpy as np

        if self.dtype in STORED_AS_BITS:
            return self.cast(dtypes.float32).numpy()
        return np.frombuffer(self._host_bytes(), dtype=_numpy_dtype(self.dtype)).reshape(self.shape).copy()

    def tolist(self) -> Any:
        """The values as (nested) Python lists, or a scalar for a 0-d tensor."""
        return _nest(unpack_values(self._host_bytes(), self.dtype), self.shape)

    def item(self) -> Any:
        """The value of a one-element tensor as a Python scalar."""
        if self.numel() != 1:
            raise ArgumentError(f"item: the tensor has {self.numel()} elements (shape {self.shape}); item needs 1")
        return unpack_values(self._host_bytes(), self.dtype)[0]

    def to(self, device: str | tuple[str, ...]) -> Tensor:
        """This tensor on another device (a COPY, run when realized), or a copy on each of a tuple of devices."""
        device = Device.canonicalize(device)
        if device == self.device or isinstance(device, tuple):
            return self if device == self.device else self.shard(device)
        check_device_holds(device, self.dtype)
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
        device = device_or_default(device)
        return Tensor(_uop_from_bytes(raw, dtype, shape, device))

    @staticmethod
    def empty(*shape, dtype: DType | str | None = None, device: str | None = None, **kwargs) -> Tensor:
        """A tensor whose values are not set (backed by a fresh buffer)."""
        shape = shape_arg(shape, "empty")
        dtype, device = to_dtype(dtype or dtypes.default_float), device_or_default(device)
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
        device = device_or_default(device)
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
        """`fill_value` with this tensor's shape, dtype and device (split across devices as this tensor is)."""
        return self._split_like(Tensor.full(self.shape, fill_value, dtype=kwargs.pop("dtype", self.dtype),
                                            device=kwargs.pop("device", self.device), **kwargs))  # fmt: skip

    def zeros_like(self, **kwargs) -> Tensor:
        """Zeros with this tensor's shape, dtype and device."""
        return self.full_like(0, **kwargs)

    def ones_like(self, **kwargs) -> Tensor:
        """Ones with this tensor's shape, dtype and device."""
        return self.full_like(1, **kwargs)

    def rand_like(self, **kwargs) -> Tensor:
        """Uniform [0, 1) values with this tensor's shape (split across devices as this tensor is)."""
        dtype = kwargs.pop("dtype", self.dtype if dtypes.is_float(self.dtype) else dtypes.default_float)
        return self._split_like(Tensor.rand(*self.shape, dtype=dtype, device=kwargs.pop("device", self.device),
                                            **kwargs))  # fmt: skip

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
        # (every op of every model passes here: plain loops, and the common case decides with the fewest calls)
        for p in parents:
            if p.uop.dtype is uop.dtype:  # a dtype an input has, its device holds already
                break
        else:
            check_device_holds(uop.device or Device.DEFAULT, uop.dtype)
        out = Tensor.__new__(Tensor)  # not through __init__: the graph is made, there is no data to take in
        asked = [p._requires_grad for p in parents]
        if True in asked and not Tensor.no_grad and dtypes.is_float(uop.dtype):
            out._start(uop, True, is_leaf=False)
        else:
            out._start(uop, unasked_flag(parents) if False in asked else None, is_leaf=True)
        return out


# ---- helpers for the class above ----


def _read_through(t: Tensor) -> str | None:
    """Where to gather a sharded tensor (its first device) or a part of a file DISK can't lay out (the CPU)."""
    if isinstance(t.device, tuple):
        return t.device[0]
    return "CPU" if not Device[t.device].renderer.runs_kernels and not t._is_contiguous_buffer() else None


def _reads_through_other_view(value: UOp, target: UOp) -> bool:
    """Whether `value` reads the buffer under `target` through a view other than `target` itself."""
    if value is target:
        return False
    for node in value.toposort(enter=lambda n: n is not target):
        if node is not target and node.op in GroupOp.Movement and node.base is target.base:
            return True
    return False
