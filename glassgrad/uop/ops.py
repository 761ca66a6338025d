"""UOp, the one graph node of glassgrad, from the Tensor graph down to the rendered program."""

from __future__ import annotations

import functools
import itertools
import math
import operator
from collections.abc import Callable
from typing import Any

from glassgrad.dtype import DType, dtypes, truncate
from glassgrad.helpers import KeyedRef, prod
from glassgrad.uop.opcodes import GroupOp, Ops
from glassgrad.uop.operators import BinaryOperators
from glassgrad.uop.rewrite import PatternMatcher, UPat, graph_rewrite  # noqa: F401  (the seed import path)


class _computed_once:
    """functools.cached_property without its lock (Python 3.11 takes one for every first computation, which is
    every new node's shape and device): the value is stored in the node's __dict__, where later reads find it."""

    def __init__(self, compute: Callable[[UOp], Any]):
        self.compute, self.name, self.__doc__ = compute, compute.__name__, compute.__doc__

    def __get__(self, node: UOp | None, owner: type | None = None) -> Any:
        if node is None:
            return self
        value = node.__dict__[self.name] = self.compute(node)
        return value


def _arg_key(arg: Any) -> Any:
    # 0.0 == -0.0 and True == 1 in Python, but they are different constants to a kernel.
    if isinstance(arg, float):
        return ("float", arg.hex())
    if isinstance(arg, bool):
        return ("bool", arg)
    return arg


def _forget(ref: KeyedRef) -> None:
    # not a newer node of the same key, interned after this one died
    if _interned.get(ref.key) is ref:
        del _interned[ref.key]


def live_nodes() -> list[UOp]:
    """Every node alive now (a walk over all of them: for a question asked rarely, such as TinyJit's at a capture)."""
    return [node for ref in list(_interned.values()) if (node := ref()) is not None]


# (op, dtype, src, arg) -> the live node. A plain dict of weak references rather than a WeakValueDictionary, whose
# get and set are Python functions: building a node is the hottest path there is (about 2 us -> 0.8 us a new node).
_interned: dict[tuple, KeyedRef] = {}


class UOp(BinaryOperators):
    """An immutable, interned graph node: building the same (op, dtype, src, arg) twice gives the same object."""

    __slots__ = ("op", "dtype", "src", "arg", "_key", "__weakref__", "__dict__")

    def __new__(cls, op: Ops, dtype: DType = dtypes.void, src: tuple[UOp, ...] = (), arg: Any = None) -> UOp:
        # the dtype as its plain tuple (hashed in C); the arg as it is where it is None or an int (no call)
        key = (op, dtype.ident, src, arg if arg is None or type(arg) is int else _arg_key(arg))
        if (ref := _interned.get(key)) is not None and (found := ref()) is not None:
            return found
        node = object.__new__(cls)
        node.op, node.dtype, node.src, node.arg, node._key = op, dtype, src, arg, key
        ref = KeyedRef(node, _forget)  # its key: the node's (to drop the entry when the node dies)
        ref.key = key
        # setdefault, not a set: where another thread interned the same node meanwhile, that one is the node
        if (first := _interned.setdefault(key, ref)) is not ref:
            if (found := first()) is not None:
                return found
            _interned[key] = ref  # the entry of a dead node whose _forget has not run yet
        return node

    def __reduce__(self):  # pickling rebuilds through __new__ so interning holds
        return UOp, (self.op, self.dtype, self.src, self.arg)

    def replace(self, **changes: Any) -> UOp:
        """A UOp like this one with some of op, dtype, src, arg changed."""
        parts = {"op": self.op, "dtype": self.dtype, "src": self.src, "arg": self.arg} | changes
        return UOp(parts["op"], parts["dtype"], tuple(parts["src"]), parts["arg"])

    # ---- walking the graph ----

    def toposort(self, enter: Callable[[UOp], bool] | None = None) -> list[UOp]:
        """Every node this one depends on, each after all of its sources, this node last.

        Where `enter(node)` is False the node is listed but its sources are not visited."""
        # a depth-first walk that keeps, for each node on the path, an iterator over the sources it has yet to visit:
        # each node and each edge is handled once (every realize walks its graph, so this is a hot loop)
        order: list[UOp] = []
        seen = {self}
        stack = [(self, iter(self.src if enter is None or enter(self) else ()))]
        while stack:
            node, sources = stack[-1]
            for s in sources:
                if s not in seen:
                    seen.add(s)
                    stack.append((s, iter(s.src if enter is None or enter(s) else ())))
                    break
            else:
                stack.pop()
                order.append(node)
        return order

    def substitute(self, mapping: dict[UOp, UOp], rebuilt: Callable[[UOp, UOp, dict[UOp, UOp]], None] | None = None
                   ) -> UOp:  # fmt: skip
        """This graph with every node found in `mapping` replaced by its value; `rebuilt(old, new, done)` is told of
        each node above a replaced one that was built again (`done` maps the nodes seen so far to their new ones)."""
        new: dict[UOp, UOp] = {}
        # a replaced node's sources are not read: the walk stops there (a kernelized graph's KERNELs, say)
        for node in self.toposort(enter=lambda n: n not in mapping):
            if node in mapping:
                new[node] = mapping[node]
                continue
            src = tuple(new[s] for s in node.src)
            new[node] = node if src == node.src else node.replace(src=src)
            if rebuilt is not None and new[node] is not node:
                rebuilt(node, new[node], new)
        return new[self]

    # ---- building nodes ----

    @staticmethod
    def const(dtype: DType, value: Any) -> UOp:
        """A constant of `dtype` (a kernel-level constant, with no device)."""
        return UOp(Ops.CONST, dtype, (), truncate(dtype.scalar, value) if dtype.count == 1 else value)

    def const_like(self, value: Any) -> UOp:
        """A constant of this node's dtype."""
        return UOp.const(self.dtype, value)

    def alu(self, op: Ops, *src: UOp) -> UOp:
        """An elementwise op on this node and `src`; comparisons give bool, WHERE takes the value dtype."""
        dtype = dtypes.bool if op in GroupOp.Comparison else (src[-1].dtype if op is Ops.WHERE else self.dtype)
        return UOp(op, dtype, (self, *src))

    def _binary(self, op: Ops, other: UOp | int | float | bool, reverse: bool = False) -> UOp:
        other = other if isinstance(other, UOp) else self.const_like(other)
        return other.alu(op, self) if reverse else self.alu(op, other)

    def __neg__(self):
        return self.alu(Ops.NEG)

    def __sub__(self, x):
        return self + (-x if isinstance(x, UOp) else self.const_like(-x))

    def __rsub__(self, x):
        return (-self) + x

    def __ge__(self, x):
        return self.__lt__(x).logical_not()

    def __le__(self, x):
        return self.__gt__(x).logical_not()

    __eq__ = object.__eq__  # identity: interning makes structural equality the same thing
    __hash__ = object.__hash__

    def eq(self, x) -> UOp:
        return self.ne(x).logical_not()

    def logical_not(self) -> UOp:
        return self.ne(True)

    def where(self, x, y) -> UOp:
        x = x if isinstance(x, UOp) else (y.const_like(x) if isinstance(y, UOp) else UOp.const(dtypes.from_py(x), x))
        y = y if isinstance(y, UOp) else x.const_like(y)
        return self.alu(Ops.WHERE, x, y)

    def cast(self, dtype: DType) -> UOp:
        return self if self.dtype == dtype else UOp(Ops.CAST, dtype, (self,))

    # ---- facts derived from the graph ----

    @_computed_once
    def shape(self) -> tuple[int, ...] | None:
        """The shape of a Tensor-level node (None for nodes without one, such as DEVICE)."""
        return _shape_of(self)

    @property
    def size(self) -> int:
        return prod(self.shape) if self.shape is not None else 0

    @_computed_once
    def device(self) -> str | None:
        """The device a Tensor-level node lives on."""
        if self.op is Ops.DEVICE:
            return self.arg
        if self.op is Ops.BUFFER:  # (UNIQUE, DEVICE): every new buffer asks, and its UNIQUE needs no device of its own
            return self.src[1].arg
        if self.op is Ops.COPY:
            return self.src[1].arg
        if self.op is Ops.MULTI:
            return tuple(s.device for s in self.src)
        if self.op is Ops.MSELECT:
            return self.src[0].device[self.arg[0]]
        for s in self.src:
            if (d := s.device) is not None:
                return d
        return None

    @property
    def base(self) -> UOp:
        """The node under a chain of movement ops."""
        node = self
        while node.op in GroupOp.Movement or node.op is Ops.VIEW:
            node = node.src[0]
        return node

    def __repr__(self) -> str:
        return pretty_print(self)

    def __bool__(self) -> bool:
        # a comparison of symbolic sizes (`if size < 0` on a shape holding a Variable) has no truth value: raise rather
        # than take a branch (any other node is true, as every object is)
        if self.dtype == dtypes.bool and any(n.op in (Ops.DEFINE_VAR, Ops.BIND) for n in self.toposort()):
            raise TypeError(f"the truth value of the symbolic comparison {render_sint(self)} is not known")
        return True

    # ---- symbolic ints (tinygrad's Variable: uop/variable.py) ----

    def __index__(self) -> int:  # a symbolic size where an int is needed: numpy(), an index, a Python range
        raise TypeError(
            f"the symbolic size {render_sint(self)} is not an int, and an int is needed here (to read a tensor of a "
            "symbolic shape, reshape it to ints first: t.reshape(3, 4) for (3, i=4))"
        )

    @staticmethod
    def variable(name: str, min_val: int, max_val: int) -> UOp:
        """A symbolic int named `name` that takes values min_val..max_val (bind it to a value with .bind(value))."""
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError(f"Variable: the name must be an identifier (it names a kernel parameter), got {name!r}")
        if any(not isinstance(b, int) or isinstance(b, bool) for b in (min_val, max_val)):
            raise TypeError(f"Variable {name}: min and max must be ints, got {min_val!r} and {max_val!r}")
        if not 0 <= min_val <= max_val:
            raise ValueError(f"Variable {name}: need 0 <= min <= max (a size), got min {min_val} and max {max_val}")
        return UOp(Ops.DEFINE_VAR, dtypes.int, (), (name, min_val, max_val))

    def bind(self, value: int) -> UOp:
        """This variable bound to `value` for one call: BIND(var, value); a value outside [min, max] is a ValueError."""
        if self.op is not Ops.DEFINE_VAR:
            raise TypeError(f"bind: only a Variable can be bound, not {render_sint(self)}")
        name, low, high = self.arg
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(f"bind: Variable {name} takes an int, got {type(value).__name__} {value!r}")
        if not low <= value <= high:
            raise ValueError(f"bind: {value} is outside the range of Variable {name}, [{low}, {high}]")
        return UOp(Ops.BIND, dtypes.int, (self, UOp.const(dtypes.int, value)))

    def unbind(self) -> tuple[UOp, int]:
        """(the variable, its value) of a bound variable."""
        if self.op is not Ops.BIND:
            raise TypeError(f"unbind: {render_sint(self)} is not a bound Variable")
        for readers in value_readers:  # a TinyJit capture: a replay must not bind it to another value
            readers.setdefault(self.src[0], self.src[1].arg)
        return self.src[0], self.src[1].arg

    @property
    def expr(self) -> str:
        """A variable's name."""
        return self.src[0].arg[0] if self.op is Ops.BIND else self.arg[0]

    @property
    def val(self) -> int:
        """The value a bound variable has."""
        return self.unbind()[1]


# Where a graph's sizes depend on a bound variable's value, not on the variable (a crop back to ints, code reading
# .val): each dict here (a TinyJit capture's) is told the variable and the value (the engine reads values directly).
value_readers: list[dict[UOp, int]] = []


def _pad_shape(shape, arg):
    return tuple(s if before == after == 0 else size_sum(s, before, after) for s, (before, after) in zip(shape, arg))


def _terms(x: Any, scale: int, found: dict) -> None:
    """Add scale * x to `found` (an expression's terms: each non-sum node to its factor, None to the constant)."""
    if isinstance(x, int) or x.op is Ops.CONST:
        found[None] = found.get(None, 0) + scale * (x if isinstance(x, int) else x.arg)
    elif x.op is Ops.ADD:
        _terms(x.src[0], scale, found)
        _terms(x.src[1], scale, found)
    elif x.op is Ops.NEG:
        _terms(x.src[0], -scale, found)
    elif x.op is Ops.MUL and x.src[1].op is Ops.CONST:
        _terms(x.src[0], scale * x.src[1].arg, found)
    else:
        found[x] = found.get(x, 0) + scale


def size_sum(*sizes: Any) -> Any:
    """The sum of sizes (ints and symbolic ones, uop/variable.py) with like terms collected: an int where the
    variables cancel (a symbolic dim padded back to a fixed size), the one term itself where it is alone."""
    if all(isinstance(s, int) for s in sizes):
        return sum(sizes)
    found: dict = {}
    for s in sizes:
        _terms(s, 1, found)
    constant = found.pop(None, 0)
    terms = [t if f == 1 else t * f for t, f in found.items() if f != 0]
    total = functools.reduce(operator.add, terms) if terms else constant
    return total + constant if terms and constant else total


# How each Tensor-level op derives its shape from its sources and arg.
_SHAPE_RULES: dict[Ops, Callable[[UOp], tuple[int, ...] | None]] = {
    Ops.BUFFER: lambda u: (u.arg,),
    Ops.CONST: lambda u: (),
    Ops.ARANGE: lambda u: (u.arg,),
    Ops.RESHAPE: lambda u: tuple(u.arg),
    Ops.EXPAND: lambda u: tuple(u.arg),
    Ops.PERMUTE: lambda u: tuple(u.src[0].shape[i] for i in u.arg),
    Ops.PAD: lambda u: _pad_shape(u.src[0].shape, u.arg),
    Ops.SHRINK: lambda u: tuple(end if start == 0 else size_sum(end, -start) for start, end in u.arg),
    Ops.FLIP: lambda u: u.src[0].shape,
    Ops.REDUCE_AXIS: lambda u: tuple(1 if i in u.arg[1] else s for i, s in enumerate(u.src[0].shape)),
    Ops.VIEW: lambda u: u.arg.shape,
    Ops.SCATTER_ADD: lambda u: u.src[0].shape,
    Ops.ATTENTION: lambda u: (prod(u.src[0].shape[:-1]) * (u.src[2].shape[-1] + 1),),  # outputs, then logsumexps
    Ops.MULTI: lambda u: _resized(u.src[0].shape, u.arg, lambda n: n * len(u.src)),
    Ops.MSELECT: lambda u: _resized(u.src[0].shape, u.arg[1], lambda n: n // len(u.src[0].device)),
    Ops.KERNEL: lambda u: None,
    Ops.SINK: lambda u: None,
    Ops.STORE: lambda u: None,
    Ops.DEVICE: lambda u: None,
    Ops.UNIQUE: lambda u: None,
    Ops.DEFINE_GLOBAL: lambda u: None,
    Ops.RANGE: lambda u: None,
    Ops.DEFINE_VAR: lambda u: None,
    Ops.BIND: lambda u: None,
}


def _resized(shape: tuple[int, ...], axis: int | None, size: Callable[[int], int]) -> tuple[int, ...]:
    return shape if axis is None else tuple(size(n) if i == axis else n for i, n in enumerate(shape))


def _shape_of(u: UOp) -> tuple[int, ...] | None:
    if (rule := _SHAPE_RULES.get(u.op)) is not None:
        return rule(u)
    # elementwise, COPY, ASSIGN, CONTIGUOUS, DETACH, LOAD: the shape of the sources. Inside a kernel a
    # constant has shape () and broadcasts, so a source that is not a constant decides.
    shapes = [s.shape for s in u.src if s.shape is not None]
    real = [s.shape for s in u.src if s.shape is not None and s.op is not Ops.CONST]
    return (real or shapes or [None])[0]


def pretty_print(root: UOp, max_nodes: int = 400) -> str:
    """A readable, indented listing of a graph; a node used more than once is named x0, x1, … and reused."""
    order = root.toposort()
    uses: dict[UOp, int] = {}
    for node in order:
        for s in node.src:
            uses[s] = uses.get(s, 0) + 1
    names: dict[UOp, str] = {}
    lines: list[str] = []

    def emit(node: UOp, depth: int) -> None:
        pad, comma = "  " * depth, "," if depth else ""
        if node in names:
            lines.append(f"{pad} {names[node]}{comma}")
            return
        if len(lines) > max_nodes:
            lines.append(f"{pad} ...{comma}")
            return
        label = ""
        if uses.get(node, 0) > 1:
            names[node] = f"x{len(names)}"
            label = f"{names[node]}:="
        head = f"{pad}{label}UOp({node.op!r}, {node.dtype!r}, arg={_arg_repr(node.arg)}, src=("
        if not node.src:
            lines.append(f"{head})){comma}")
            return
        lines.append(head)
        for s in node.src:
            emit(s, depth + 1)
        lines[-1] += f")){comma}"

    emit(root, 0)
    return "\n".join(lines)


def render_sint(u: UOp) -> str:
    """A symbolic int as text: `i`, `(i+1)`, `i=3` for a bound variable."""
    if u.op is Ops.DEFINE_VAR:
        return u.arg[0]
    if u.op is Ops.BIND:
        return f"{u.src[0].arg[0]}={u.src[1].arg}"
    if u.op is Ops.CONST:
        return repr(u.arg)
    symbol = {Ops.ADD: "+", Ops.MUL: "*", Ops.IDIV: "//", Ops.MOD: "%", Ops.CMPLT: "<", Ops.CMPNE: "!="}.get(u.op)
    if symbol is None or len(u.src) != 2:
        return f"{u.op.name.lower()}({', '.join(render_sint(s) for s in u.src)})"
    return f"({render_sint(u.src[0])}{symbol}{render_sint(u.src[1])})"


def _arg_repr(arg: Any) -> str:
    if isinstance(arg, float) and (math.isinf(arg) or math.isnan(arg)):
        return f"float('{arg}')"
    return repr(arg)


_unique_ids = itertools.count(1 << 20)


def fresh_unique() -> UOp:
    """A node unlike any other: it keeps two otherwise identical nodes apart (two buffers, two copies)."""
    return UOp(Ops.UNIQUE, dtypes.void, (), next(_unique_ids))


# whether some graph has named several devices (a tuple DEVICE, a MULTI): until then uop/multi.py has nothing to lower
several_devices = {"seen": False}


def device_node(device: str | tuple[str, ...]) -> UOp:
    """The DEVICE node of one device, or of a tuple of them (a tensor split across devices)."""
    if isinstance(device, tuple):
        several_devices["seen"] = True
    return UOp(Ops.DEVICE, dtypes.void, (), device)


def new_buffer(device: str | tuple[str, ...], size: int, dtype: DType) -> UOp:
    """A fresh BUFFER node; UNIQUE makes it different from every other buffer of the same size."""
    return UOp(Ops.BUFFER, dtype, (fresh_unique(), device_node(device)), size)
