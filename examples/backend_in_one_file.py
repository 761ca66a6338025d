"""A new glassgrad device in one file: NUMPY, which runs every kernel as a few whole-array NumPy calls.

A device is four pieces (docs/guide/09-add-a-backend.md walks through them):

  Allocator  owns memory: here a bytearray per buffer
  Renderer   turns a kernel's linear program into source text: here a Python function calling NumPy
  Compiler   turns source into a binary: here Python's compile(), as a syntax check; the binary is the source
  Program    loads a binary and runs it on buffers: here exec() once, then a call per run

The renderer's one idea: a loop is an array axis. `for ridx1 in range(3)` becomes `ridx1 = np.arange(3)` laid along
axis 1, so everything computed from it is an array that holds every iteration at once, NumPy broadcasting lines the
loops up, and a reduction's loop is a `.reduce` over its axis. Run it: `python examples/backend_in_one_file.py`.
"""

from __future__ import annotations

import math
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from glassgrad.dtype import DType, dtypes  # noqa: E402
from glassgrad.renderer import Renderer  # noqa: E402
from glassgrad.runtime.device import Allocator, Compiled, Compiler, Device, Program  # noqa: E402
from glassgrad.uop.ops import Ops, UOp  # noqa: E402

# ---- 1. Allocator: device memory is a bytearray ----


class NumpyAllocator(Allocator):
    """Buffers are bytearrays; a kernel sees each one through np.frombuffer, without a copy."""

    def alloc(self, nbytes: int) -> bytearray:
        return bytearray(nbytes)

    def copyin(self, dest: bytearray, src: memoryview) -> None:
        dest[:] = src

    def copyout(self, dest: memoryview, src: bytearray) -> None:
        dest[:] = src


# ---- 2. Renderer: the linear program becomes a Python function ----


def numpy_type(dtype: DType) -> str:
    """The NumPy scalar type of a dtype, by name: 'float32', 'int32', 'bool', ..."""
    return np.dtype(dtype.fmt).name


# Elementwise ops as Python expressions; {0}, {1}, {2} are the sources' names.
EXPRESSIONS = {
    Ops.ADD: "({0} + {1})", Ops.MUL: "({0} * {1})", Ops.CMPLT: "({0} < {1})", Ops.CMPNE: "({0} != {1})",
    Ops.AND: "({0} & {1})", Ops.OR: "({0} | {1})", Ops.XOR: "({0} ^ {1})", Ops.SHL: "({0} << {1})",
    Ops.SHR: "({0} >> {1})", Ops.MAX: "np.maximum({0}, {1})", Ops.EXP2: "np.exp2({0})", Ops.LOG2: "np.log2({0})",
    Ops.SIN: "np.sin({0})", Ops.SQRT: "np.sqrt({0})", Ops.RECIP: "np.reciprocal({0})", Ops.TRUNC: "np.trunc({0})",
    Ops.WHERE: "np.where({0}, {1}, {2})", Ops.MULACC: "({0} * {1} + {2})", Ops.IDIV: "idiv({0}, {1})",
    Ops.MOD: "mod({0}, {1})",
}  # fmt: skip
REDUCERS = {Ops.ADD: "np.add", Ops.MUL: "np.multiply", Ops.MAX: "np.maximum"}


class NumpyRenderer(Renderer):
    """Writes one Python function per kernel: a line per instruction, loops as array axes."""

    device = "NUMPY"
    unsupported_dtypes = frozenset({dtypes.bfloat16})  # NumPy has no bfloat16

    def render(self, name: str, program: list[UOp], outer_loop: UOp | None = None) -> str:
        """The source of `def name(buf0, buf1, ...)`: one branch below per kind of instruction."""
        ndim = 1 + max((u.arg for u in program if u.op is Ops.RANGE), default=-1)  # one array axis per loop
        names: dict[UOp, str] = {}
        params: list[str] = []
        lines: list[str] = []
        open_loops: list[UOp] = []
        loops_at: dict[UOp, int] = {}  # an accumulator: how many loops were open where it was defined
        for i, u in enumerate(program):
            src = [names.get(s) for s in u.src]
            if u.op is Ops.DEFINE_GLOBAL:
                params.append(f"buf{u.arg}")
                names[u] = f"data{u.arg}"
                lines.append(f"data{u.arg} = np.frombuffer(buf{u.arg}, {numpy_type(u.dtype.base)})")
            elif u.op is Ops.CONST:
                names[u] = self.render_const(u.arg, u.dtype)
            elif u.op is Ops.RANGE:
                names[u] = f"ridx{u.arg}"
                lines.append(f"ridx{u.arg} = loop({src[0]}, axis={u.arg}, ndim={ndim})")
                open_loops.append(u)
            elif u.op is Ops.ENDRANGE:
                open_loops.remove(u.src[0])
            elif u.op is Ops.INDEX:  # an address: buffer, index, and a validity gate if there is padding
                names[u] = ", ".join(src)
            elif u.op is Ops.LOAD:
                names[u] = f"val{i}"
                lines.append(f"val{i} = load({src[0]})")
            elif u.op is Ops.STORE:
                data, idx, *gate = (names[s] for s in u.src[0].src)  # a gate if there is padding (or a check)
                lines.append(f"store({data}, {idx}, {src[1]}{f', valid={gate[0]}' if gate else ''})")
            elif u.op is Ops.DEFINE_ACC:
                names[u] = f"acc{u.arg}"
                loops_at[u] = len(open_loops)
                lines.append(f"acc{u.arg} = {src[0]}")
            elif u.op is Ops.ASSIGN:
                pass  # the update before it already wrote the accumulator
            elif i + 1 < len(program) and program[i + 1].op is Ops.ASSIGN and program[i + 1].src[1] is u:
                # acc = acc op value inside loops: all iterations at once, a reduce over the loops' axes
                acc = program[i + 1].src[0]
                loops = ", ".join(names[r] for r in open_loops[loops_at[acc] :]) + ","
                names[u] = names[acc]
                value = [names[s] for s in u.src if s is not acc]  # MULACC(a, b, acc) adds a*b
                op, value = (Ops.ADD, f"({value[0]} * {value[1]})") if u.op is Ops.MULACC else (u.op, value[0])
                lines.append(f"{names[acc]} = reduce({REDUCERS[op]}, {names[acc]}, {value}, ({loops}))")
            else:
                names[u] = f"alu{i}"
                lines.append(f"alu{i} = {self.render_alu(u, src)}")
        body = "\n".join(f"    {line}" for line in lines)
        return f"def {name}({', '.join(params)}):\n{body}\n"

    def render_const(self, value, dtype: DType) -> str:
        """A typed NumPy scalar, so that math on it keeps the kernel's dtypes: int32(3), float32(0.5)."""
        if dtype == dtypes.bool:
            return repr(bool(value))
        if dtypes.is_float(dtype):
            value = float(value)
            return f"{numpy_type(dtype)}({value!r})" if math.isfinite(value) else f"{numpy_type(dtype)}('{value}')"
        return f"{numpy_type(dtype)}({int(value)})"

    def render_alu(self, u: UOp, src: list[str]) -> str:
        if u.op is Ops.CAST:
            return f"cast({src[0]}, {numpy_type(u.dtype)})"
        if u.op is Ops.BITCAST:
            return f"np.asarray({src[0]}).view({numpy_type(u.dtype)})"
        if u.op is Ops.NEG:
            return f"np.logical_not({src[0]})" if u.dtype == dtypes.bool else f"(-{src[0]})"
        return EXPRESSIONS[u.op].format(*src)


# The helpers a rendered kernel calls, with C's semantics where NumPy's differ.


def loop(size, axis: int, ndim: int) -> np.ndarray:
    """Every value of a loop variable at once, 0 .. size-1, laid along `axis` of `ndim` axes."""
    shape = [1] * ndim
    shape[axis] = int(size)
    return np.arange(size, dtype=np.result_type(size)).reshape(shape)


def load(data: np.ndarray, idx, valid=True):
    """data[idx]; where `valid` is false, 0 (and the address is never read)."""
    if valid is True:
        return data[idx]
    safe = np.where(valid, idx, 0)
    values = data[safe] if data.size else np.zeros(np.shape(safe), data.dtype)
    return np.where(valid, values, data.dtype.type(0))


def store(data: np.ndarray, idx, value, valid=True) -> None:
    """data[idx] = value for every iteration; only where `valid` when there is a gate (a check's record of a
    failure: every iteration that fails writes, and one of them is what stays)."""
    idx, value, valid = np.broadcast_arrays(idx, value, valid)
    data[idx[valid]] = value[valid]


def reduce(ufunc: np.ufunc, acc, value, loops: tuple[np.ndarray, ...]):
    """acc op (value combined over every iteration of `loops`); the result keeps their axes, with size 1."""
    # a value that does not vary along a loop still counts once per iteration: broadcast it over the loops first
    value = np.broadcast_to(value, np.broadcast_shapes(np.shape(value), *(r.shape for r in loops)))
    axes = tuple(int(np.argmax(r.shape)) for r in loops)  # the axis each loop lies along
    return ufunc(acc, ufunc.reduce(value, axis=axes, keepdims=True, dtype=value.dtype))


def idiv(x, y):
    """Integer division truncated toward zero, as in C; dividing by zero gives 0."""
    q = np.abs(x) // np.where(y == 0, 1, np.abs(y))
    return np.where(y == 0, 0, np.where((x < 0) != (y < 0), -q, q)).astype(np.result_type(x, y))


def mod(x, y):
    """The remainder with the sign of x, as in C: x == idiv(x, y) * y + mod(x, y); modulo zero gives 0."""
    return np.where(y == 0, 0, x - idiv(x, y) * y).astype(np.result_type(x, y))


def cast(x, to: type):
    """A C cast: to bool is "not zero"; float to int truncates (NaN and infinities, undefined in C, give 0)."""
    x = np.asarray(x)
    if to is np.bool_:
        return x != 0
    if np.issubdtype(to, np.integer) and np.issubdtype(x.dtype, np.floating):
        x = np.where(np.isfinite(x), np.trunc(x), 0).astype(np.int64 if to != np.uint64 else np.uint64)
    return x.astype(to)


# ---- 3. Compiler: the source is the binary ----


class NumpyCompiler(Compiler):
    """Python's compile() checks the source; the binary handed to the program is the source itself."""

    def compile(self, src: str) -> bytes:
        compile(src, "<kernel>", "exec")
        return src.encode()


# ---- 4. Program: exec the source once, call the function on every run ----

NUMPY_TYPES = ("bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64", "float16", "float32",
               "float64")  # fmt: skip


class NumpyProgram(Program):
    """The kernel's function, defined by exec() among the helpers above."""

    def __init__(self, name: str, binary: bytes):
        super().__init__(name, binary)
        namespace = {"np": np, "loop": loop, "load": load, "store": store, "reduce": reduce, "idiv": idiv,
                     "mod": mod, "cast": cast} | {t: getattr(np, t) for t in NUMPY_TYPES}  # fmt: skip
        exec(compile(binary.decode(), f"<{name}>", "exec"), namespace)
        self.fn = namespace[name]

    def __call__(self, *bufs, global_size=None, local_size=None, wait: bool = False) -> float | None:
        start = time.perf_counter()
        with np.errstate(all="ignore"):  # overflow wraps and 1/0 is inf, as in C: no warnings
            self.fn(*bufs)
        return time.perf_counter() - start if wait else None


class NumpyDevice(Compiled):
    """The four pieces under one name."""

    def __init__(self, name: str):
        super().__init__(name, NumpyAllocator(), NumpyRenderer(), NumpyCompiler(), NumpyProgram)


Device.register("NUMPY", NumpyDevice)

if __name__ == "__main__":
    from glassgrad import Tensor

    x = Tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], device="NUMPY")
    print(((x + 1) * 2).sum(axis=1).tolist())
    print((x @ x.T).tolist())
