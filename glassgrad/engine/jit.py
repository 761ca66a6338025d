"""TinyJit: run a function once, capture the kernels it runs, then replay them with new inputs.

The first call runs the function as usual (compiling its kernels). The second call runs it again while
recording every kernel and the buffers it touched. Every later call skips Python's graph building,
scheduling and compiling entirely: it swaps the new inputs' buffers in and replays the recorded kernels.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from glassgrad.engine.realize import ExecItem, capturing
from glassgrad.helpers import getenv
from glassgrad.runtime.device import Buffer

R = TypeVar("R")


def _tensor_class():
    from glassgrad.tensor import Tensor

    return Tensor


def _signature(args: tuple, kwargs: dict) -> list[tuple[str, Any]]:
    """What a call's arguments look like: for a tensor its shape, dtype and device; for anything else its value."""
    Tensor = _tensor_class()
    named = [(f"argument {i}", a) for i, a in enumerate(args)] + [(f"argument {k!r}", v) for k, v in kwargs.items()]
    return [(name, ("Tensor", v.shape, v.dtype, v.device) if isinstance(v, Tensor) else ("value", v))
            for name, v in named]  # fmt: skip


def _describe(kind: tuple) -> str:
    if kind[0] == "Tensor":
        return f"a Tensor of shape {kind[1]}, {kind[2]} on {kind[3]}"
    return f"{type(kind[1]).__name__} {kind[1]!r}"


def _tensors_in(value: Any) -> list:
    Tensor = _tensor_class()
    if isinstance(value, Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors_in(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _tensors_in(v)]
    return []


class TinyJit(Generic[R]):
    """Decorate a function whose work is all Tensor ops: after two calls, later calls replay its kernels."""

    def __init__(self, fn: Callable[..., R]):
        self.fn = fn
        self.calls = 0
        self.items: list[ExecItem] = []
        self.input_slots: list[tuple[int, int, int]] = []  # (item, buffer position, input number)
        self.signature: list[tuple[str, Any]] | None = None
        self.result: R | None = None
        functools.update_wrapper(self, fn)

    def reset(self) -> None:
        """Forget the capture: the next two calls run the function again."""
        self.calls, self.items, self.input_slots, self.signature, self.result = 0, [], [], None, None

    def __get__(self, obj, objtype=None):  # decorating a method binds it like a function
        return functools.partial(self.__call__, obj) if obj is not None else self

    def __call__(self, *args: Any, **kwargs: Any) -> R:
        if not getenv("JIT", 1):
            return self.fn(*args, **kwargs)
        inputs = self._realized_inputs(args, kwargs)
        if self.calls >= 2:
            return self._replay(args, kwargs, inputs)
        self.calls += 1
        if self.calls == 1:
            return self._run_and_realize(args, kwargs)
        return self._capture(args, kwargs, inputs)

    def _realized_inputs(self, args: tuple, kwargs: dict) -> list:
        """The tensor arguments, each realized as a contiguous buffer (so replays can swap buffers in)."""
        inputs = _tensors_in(list(args) + list(kwargs.values()))
        for t in inputs:
            if not t._is_contiguous_buffer():
                t._set_uop(t.contiguous().realize().uop)
        return inputs

    def _run_and_realize(self, args: tuple, kwargs: dict) -> R:
        Tensor = _tensor_class()
        result = self.fn(*args, **kwargs)
        pending = _tensors_in(result) + Tensor._pending_assigns()
        if pending:
            Tensor.realize(*pending)
        return result

    def _capture(self, args: tuple, kwargs: dict, inputs: list) -> R:
        recorded: list[ExecItem] = []
        capturing.append(recorded)
        try:
            result = self._run_and_realize(args, kwargs)
        finally:
            capturing.remove(recorded)
        self.items, self.result, self.signature = recorded, result, _signature(args, kwargs)
        input_buffers = {id(_buffer_of_tensor(t)): n for n, t in enumerate(inputs)}
        self.input_slots = [(i, j, input_buffers[id(b)]) for i, item in enumerate(recorded)
                            for j, b in enumerate(item.bufs) if id(b) in input_buffers]  # fmt: skip
        return result

    def _replay(self, args: tuple, kwargs: dict, inputs: list) -> R:
        self._check_same_call(args, kwargs)
        buffers = [_buffer_of_tensor(t) for t in inputs]
        swapped: dict[int, list[Buffer]] = {}
        for item_index, position, input_number in self.input_slots:
            bufs = swapped.setdefault(item_index, list(self.items[item_index].bufs))
            bufs[position] = buffers[input_number]
        for i, item in enumerate(self.items):
            item.run(swapped.get(i))
        return self.result  # type: ignore[return-value]

    def _check_same_call(self, args: tuple, kwargs: dict) -> None:
        now = _signature(args, kwargs)
        if len(now) != len(self.signature) or any(a[0] != b[0] for a, b in zip(now, self.signature)):
            before, after = [n for n, _ in self.signature], [n for n, _ in now]
            raise TypeError(f"TinyJit: {self.fn.__name__} was captured with arguments {before} and is now called "
                            f"with {after}")  # fmt: skip
        for (name, kind), (_, captured) in zip(now, self.signature):
            if kind != captured:
                hint = "" if kind[0] == captured[0] == "Tensor" else "; pass values that change as Tensors"
                raise TypeError(f"TinyJit: {name} of {self.fn.__name__} was {_describe(captured)} when captured "
                                f"and is now {_describe(kind)}{hint} (call .reset() to capture again)")  # fmt: skip


def _buffer_of_tensor(t) -> Buffer:
    from glassgrad.engine.realize import buffer_of

    return buffer_of(t.uop.base)
