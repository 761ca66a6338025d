"""TinyJit: run a function once, capture the kernels it runs, then replay them with new inputs.

The first call runs the function as usual (compiling its kernels). The second call runs it again while
recording every kernel and the buffers it touched. Every later call skips Python's graph building,
scheduling and compiling entirely: it swaps the new inputs' buffers in and replays the recorded kernels.

A bound Variable (an argument, or a size in a tensor argument's shape) may take another value in each call: the
kernels were compiled for the variable, and a replay passes them this call's values (uop/variable.py).
"""

from __future__ import annotations

import functools
import gc
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from glassgrad.engine import cuda_graph
from glassgrad.engine.checks import raise_failed_checks
from glassgrad.engine.lazy import pending_assigns, readers_of_buffers
from glassgrad.engine.memory import plan_memory
from glassgrad.engine.realize import CompiledKernel, ExecItem, buffer_of, checking_kernels, held_buffers
from glassgrad.engine.threads import captures, one_thread_at_a_time, thread_id
from glassgrad.helpers import DEBUG, JIT
from glassgrad.runtime.device import Buffer
from glassgrad.tensor import Tensor
from glassgrad.uop.ops import Ops, UOp, value_readers
from glassgrad.uop.variable import rebind, unbound, values_bound

R = TypeVar("R")


class JitError(TypeError):
    """A replay called with arguments unlike the capture's: tinygrad's name (engine.jit.JitError), a TypeError."""


def _signature(args: tuple, kwargs: dict) -> list[tuple[str, Any]]:
    """What a call's arguments look like: for a tensor its shape, dtype and device; for anything else its value."""
    named = [(i, _kind(a)) for i, a in enumerate(args)]  # names are spelled out only for an error (_arg_name)
    return named + [(k, _kind(kwargs[k])) for k in sorted(kwargs)]  # keyword order does not matter


def _arg_name(key: int | str) -> str:
    return f"argument {key}" if isinstance(key, int) else f"argument {key!r}"


def _kind(v: Any) -> tuple:
    """A tensor by shape, dtype and device; lists, tuples and dicts by their items; anything else by type and value."""
    if isinstance(v, Tensor):  # a symbolic size by its variables, whatever values they have in this call
        return ("Tensor", tuple(unbound(s) if isinstance(s, UOp) else s for s in v.shape), v.dtype, v.device)
    if isinstance(v, UOp) and v.op is Ops.BIND:
        return ("Variable", UOp, v.src[0])
    if isinstance(v, (list, tuple)):
        return ("sequence", type(v), tuple(_kind(x) for x in v))
    if isinstance(v, dict):
        return ("dict", type(v), tuple((k, _kind(x)) for k, x in v.items()))
    return ("value", type(v), v)


def _same_kind(a: tuple, b: tuple) -> bool:
    if a[0] != b[0] or (a[0] != "Tensor" and a[1] is not b[1]):
        return False
    if a[0] == "sequence":
        return len(a[2]) == len(b[2]) and all(_same_kind(x, y) for x, y in zip(a[2], b[2]))
    if a[0] == "dict":
        return len(a[2]) == len(b[2]) and all(k == j and _same_kind(x, y) for (k, x), (j, y) in zip(a[2], b[2]))
    if a[0] == "value":
        try:  # a value whose == is not a plain bool (a NumPy array) only matches itself
            return bool(a[2] == b[2])
        except Exception:
            return a[2] is b[2]
    return a == b


def _describe(kind: tuple) -> str:
    if kind[0] == "Tensor":
        return f"a Tensor of shape {kind[1]}, {kind[2]} on {kind[3]}"
    if kind[0] == "sequence":
        return f"{kind[1].__name__} of [{', '.join(_describe(k) for k in kind[2])}]"
    if kind[0] == "dict":
        return f"{kind[1].__name__} of {{{', '.join(f'{k!r}: {_describe(v)}' for k, v in kind[2])}}}"
    if kind[0] == "Variable":
        return "Variable {} bound to a value in {}..{}".format(*kind[2].arg)
    return f"{kind[1].__name__} {kind[2]!r}"


def _tensors_in(value: Any) -> list:
    if isinstance(value, Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors_in(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _tensors_in(v)]
    return []


def _bound_values(args: tuple, kwargs: dict) -> dict[UOp, int]:
    """The values a call binds its Variables to: bound Variables among its arguments and in its tensors' shapes."""
    sizes = [s for t in _tensors_in(args) + _tensors_in(kwargs) for s in t.shape if isinstance(s, UOp)]
    sizes += [a for a in (*args, *kwargs.values()) if isinstance(a, UOp)]
    return values_bound(sizes, "in one call (TinyJit)", JitError)


class TinyJit(Generic[R]):
    """Decorate a function whose work is all Tensor ops: after two calls, later calls replay its kernels."""

    def __init__(self, fn: Callable[..., R]):
        self.fn = fn
        self.calls = 0
        self.items: list[ExecItem] = []
        self.input_slots: list[tuple[int, int, int]] = []  # (item, buffer position, input number)
        self.signature: list[tuple[int | str, Any]] | None = None
        self.sharing: tuple[int, ...] = ()  # for each input, the first input with the same buffer
        self.internal: set[int] = set()  # ids of the captured buffers that are not inputs
        self.written: tuple[set[int], set[int]] = (set(), set())  # ids of the internal buffers a replay writes, and
        # the numbers of the inputs it writes
        self.result: R | None = None
        self.result_inputs: list[tuple[int, int, UOp | None]] = []  # (result tensor, input, view of it or None)
        self.memory_saved = 0  # bytes the memory planner found the captured buffers can share
        # built on the first replay; False: none can be
        self.graph: cuda_graph.CUDAGraph | cuda_graph.GraphRuns | None | bool = None
        self.checking: list[CompiledKernel] = []  # the captured kernels that check values: read after each replay
        self.variables: set[UOp] = set()  # the Variables the captured kernels take: each replay binds them anew
        self.values_read: dict[UOp, int] = {}  # Variables whose capture-time value the captured kernels hold
        functools.update_wrapper(self, fn)

    def reset(self) -> None:
        """Forget the capture: the next two calls run the function again."""
        self.calls, self.items, self.input_slots, self.signature, self.result = 0, [], [], None, None
        self.sharing, self.internal, self.result_inputs, self.graph, self.checking = (), set(), [], None, []
        self.written, self.variables, self.values_read = (set(), set()), set(), {}

    def __get__(self, obj, objtype=None):  # decorating a method binds it like a function
        return functools.partial(self.__call__, obj) if obj is not None else self

    @one_thread_at_a_time  # a replay puts this call's inputs into the captured items: one call at a time
    def __call__(self, *args: Any, **kwargs: Any) -> R:
        if not JIT:
            return self.fn(*args, **kwargs)
        inputs = self._realized_inputs(args, kwargs)
        if self.calls >= 2:
            return self._replay(args, kwargs, inputs)
        # a call counts once it has run: a function that raised while being captured is captured again next call
        result = self._run_and_realize(args, kwargs) if self.calls == 0 else self._capture(args, kwargs, inputs)
        self.calls += 1
        return result

    def _realized_inputs(self, args: tuple, kwargs: dict) -> list:
        """The tensor arguments, each realized as a contiguous buffer (so replays can swap buffers in); a sharded
        one as a tensor per shard."""
        inputs = _tensors_in(args + tuple(kwargs[k] for k in sorted(kwargs)) if kwargs else args)  # _signature's order
        for t in inputs:
            if not t._is_contiguous_buffer():
                t._set_uop(t.contiguous().realize().uop)
        return [s for t in inputs for s in ([Tensor(u) for u in t.uop.src] if t.uop.op is Ops.MULTI else [t])]

    def _run_and_realize(self, args: tuple, kwargs: dict) -> R:
        result = self.fn(*args, **kwargs)
        here = thread_id()  # this thread's assigns: another thread's belong to that thread's step; and the step's
        # own (ASSIGN(target, value)), not the kernels a failed realize left standing (ASSIGN(BUFFER, KERNEL)): those
        # raise their error again when their own tensors are realized, not in an unrelated step
        assigned = [t for t in pending_assigns() if getattr(t, "_assigned_in", here) == here
                    and t.uop.src[1].op is not Ops.KERNEL]  # fmt: skip
        if pending := _tensors_in(result) + assigned:
            Tensor.realize(*pending)
        return result

    def _capture(self, args: tuple, kwargs: dict, inputs: list) -> R:
        recorded: list[ExecItem] = []
        captures().append(recorded)
        value_readers.append(values_read := {})
        try:
            result = self._run_and_realize(args, kwargs)
        finally:
            captures().remove(recorded)
            value_readers[:] = [r for r in value_readers if r is not values_read]
        self.values_read = values_read
        self.items, self.result, self.signature = recorded, result, _signature(args, kwargs)
        self.checking = checking_kernels(recorded)
        self.variables = {
            v for item in recorded if isinstance(item.runner, CompiledKernel) for v in item.runner.spec.vars
        }
        input_buffers = {id(_buffer_of_tensor(t)): n for n, t in enumerate(inputs)}
        self.input_slots = [(i, j, input_buffers[id(b)]) for i, item in enumerate(recorded)
                            for j, b in enumerate(item.bufs) if id(b) in input_buffers]  # fmt: skip
        self.sharing = _sharing([_buffer_of_tensor(t) for t in inputs])
        self.internal = {id(b) for item in recorded for b in item.bufs if id(b) not in input_buffers}
        outputs = [item.bufs[0] for item in recorded]
        self.written = ({id(b) for b in outputs if id(b) not in input_buffers},
                        {input_buffers[id(b)] for b in outputs if id(b) in input_buffers})  # fmt: skip
        for i, j, _ in self.input_slots:  # every replay puts its own inputs in: the capture's need not stay allocated
            recorded[i].bufs[j] = None  # type: ignore[call-overload]
        self.memory_saved = _plan_replay_memory(recorded)
        # outputs that are inputs (or views of them): replays return the new inputs in their place
        input_nodes = {t.uop.base: n for n, t in enumerate(inputs)}
        self.result_inputs = []
        for r, t in enumerate(_tensors_in(result)):
            same = next((n for n, i in enumerate(inputs) if i is t), None)
            if same is not None:
                self.result_inputs.append((r, same, None))
            elif (n := input_nodes.get(t.uop.base)) is not None:
                self.result_inputs.append((r, n, t.uop))
        return result

    def _replay(self, args: tuple, kwargs: dict, inputs: list) -> R:
        buffers = [_buffer_of_tensor(t) for t in inputs]
        self._check_same_call(args, kwargs, buffers)
        var_vals = _bound_values(args, kwargs) if self.variables or self.values_read else {}
        if changed := sorted(v.arg[0] for v, value in self.values_read.items() if var_vals.get(v, value) != value):
            raise JitError(f"TinyJit: {self._name()} read the value of Variable {', '.join(changed)} when captured "
                           "(a symbolic size cropped back to ints, or .val), so its kernels hold that value; it is "
                           "now bound to another (call .reset() to capture again)")  # fmt: skip
        if missing := sorted(v.arg[0] for v in self.variables if v not in var_vals):
            raise JitError(f"TinyJit: {self._name()}'s kernels take Variable {', '.join(missing)}, which this call "
                           "does not bind: pass it bound, as an argument or in a tensor argument's shape")  # fmt: skip
        # a lazy tensor that reads what the replay overwrites keeps the values it was built to have (as realize does)
        if readers := readers_of_buffers(self.written[0] | {id(buffers[n]) for n in self.written[1]}):
            Tensor.realize(*readers)
        for n, b in enumerate(buffers):
            if id(b) in self.internal:  # an earlier output passed back in: the replay would overwrite it as it reads
                buffers[n] = Buffer(b.device, b.size, b.dtype).copyin(b.as_bytes())
        for item_index, position, input_number in self.input_slots:  # this call's inputs, taken out again below
            self.items[item_index].bufs[position] = buffers[input_number]
        try:
            self._run_items(var_vals)
        finally:
            for item_index, position, _ in self.input_slots:
                self.items[item_index].bufs[position] = None  # type: ignore[call-overload]
        for t in _tensors_in(self.result) if var_vals else []:  # a symbolic size of a result takes this call's value
            t._set_uop(rebind(t.uop, var_vals))
        if not self.result_inputs:
            return self.result  # type: ignore[return-value]
        captured = _tensors_in(self.result)
        fresh = {id(captured[r]): _fresh(inputs[n], view) for r, n, view in self.result_inputs}
        return _replace_tensors(self.result, fresh)

    def _run_items(self, var_vals: dict[UOp, int]) -> None:
        """Run the captured items with this call's Variables, on a GPU as one CUDA graph where it can (JIT_GRAPH=0:
        one by one; not where kernels take Variables, whose values a graph fixes); raise where a check failed."""
        if self.graph is None and cuda_graph.JIT_GRAPH and not self.variables:
            self.graph = cuda_graph.graph_for(self.items, [item.bufs for item in self.items]) or False
        try:
            if self.graph and cuda_graph.JIT_GRAPH:
                swapped = {i: self.items[i].bufs for i, _, _ in self.input_slots}  # only these can have new buffers
                self.graph(swapped, wait=DEBUG.value >= 2)
            else:
                for item in self.items:
                    item.run(var_vals if item.var_vals else None)
        finally:
            raise_failed_checks(self.checking)

    def _name(self) -> str:
        return getattr(self.fn, "__name__", None) or repr(self.fn)

    def _check_signature(self, now: list[tuple[int | str, Any]]) -> None:
        """Raise, naming the argument, where this call's arguments differ from the capture's in kind."""
        try:
            if now == self.signature:  # the common case, at the cost of one comparison
                return
        except Exception:  # a value whose == is not a plain bool (a NumPy array): compared one by one below
            pass
        if [k for k, _ in now] != [k for k, _ in self.signature]:
            before, after = [_arg_name(k) for k, _ in self.signature], [_arg_name(k) for k, _ in now]
            raise JitError(f"TinyJit: {self._name()} was captured with arguments {before} and is now called "
                           f"with {after}")  # fmt: skip
        for (key, kind), (_, captured) in zip(now, self.signature):
            if not _same_kind(kind, captured):
                hint = "; pass values that change as Tensors" if "value" in (kind[0], captured[0]) else ""
                raise JitError(f"TinyJit: {_arg_name(key)} of {self._name()} was {_describe(captured)} when captured "
                               f"and is now {_describe(kind)}{hint} (call .reset() to capture again)")  # fmt: skip

    def _check_same_call(self, args: tuple, kwargs: dict, buffers: list[Buffer]) -> None:
        self._check_signature(_signature(args, kwargs))
        if (sharing := _sharing(buffers)) != self.sharing:
            name = self._name()
            i = next(i for i, (a, b) in enumerate(zip(self.sharing, sharing)) if a != b)
            owner = lambda s: "its own buffer" if s == i else f"the buffer of tensor input {s}"
            raise JitError(f"TinyJit: tensor input {i} of {name} had {owner(self.sharing[i])} when captured and "
                           f"now has {owner(sharing[i])}; the kernels were captured for the first "
                           f"(call .reset() to capture again)")  # fmt: skip


def _plan_replay_memory(items: list[ExecItem]) -> int:
    """Buffers that only the captured kernels use (no tensor holds them) share memory where their lifetimes in the
    replay don't overlap; returns the bytes saved."""
    gc.collect()  # tensors of the captured call that only a reference cycle still held
    held = {id(m) for b in held_buffers() for m in (b, b._base) if m is not None}  # a held buffer's memory too
    return plan_memory(items, kept=lambda b: id(b) in held, reuse_allocated=True)


def _fresh(new_input, view: UOp | None):
    """The new input, or a tensor for the same view of it."""
    return new_input if view is None else Tensor(view.substitute({view.base: new_input.uop.base}))


def _sharing(buffers: list[Buffer]) -> tuple[int, ...]:
    """For each input's buffer, the first input with the same one."""
    ids = [id(b) for b in buffers]
    return tuple(ids.index(i) for i in ids)


def _replace_tensors(value: Any, fresh: dict[int, Any]) -> Any:
    """`value` (a tensor, or lists, tuples and dicts of them) with the tensors whose ids are in `fresh` replaced."""
    if id(value) in fresh:
        return fresh[id(value)]
    if isinstance(value, (list, tuple)):
        items = [_replace_tensors(v, fresh) for v in value]
        return type(value)(*items) if hasattr(value, "_fields") else type(value)(items)  # a namedtuple takes fields
    if isinstance(value, dict):
        return type(value)((k, _replace_tensors(v, fresh)) for k, v in value.items())
    return value


def _buffer_of_tensor(t: Tensor) -> Buffer:
    return buffer_of(t.uop.base)
