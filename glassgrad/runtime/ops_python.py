"""The PYTHON device: interprets the linear program in pure Python. Slow, needs nothing, and is the reference."""

from __future__ import annotations

import json
import struct
import time

from glassgrad.dtype import DTYPES_BY_NAME, STORED_AS_BITS, DType, PtrDType, dtypes
from glassgrad.renderer import Renderer
from glassgrad.runtime.device import Allocator, Compiled, Compiler, Program
from glassgrad.runtime.out_of_memory import host_bytes
from glassgrad.uop.alu import exec_alu, exec_bitcast, exec_cast
from glassgrad.uop.ops import Ops, UOp
from glassgrad.uop.variable import kernel_vars


class PythonAllocator(Allocator):
    """Buffers are bytearrays."""

    def alloc(self, nbytes: int) -> bytearray:
        return host_bytes(nbytes)

    def copyin(self, dest: bytearray, src: memoryview) -> None:
        dest[:] = src

    def copyout(self, dest: memoryview, src: bytearray) -> None:
        dest[:] = src


def _dtype_name(dtype: DType) -> str:
    return ("*" + dtype.base.name) if isinstance(dtype, PtrDType) else dtype.name


class PythonRenderer(Renderer):
    """The 'source' is the linear program itself, one JSON instruction per line: [op, dtype, sources, arg]."""

    device = "PYTHON"

    def render(self, name: str, program: list[UOp], outer_loop: UOp | None = None) -> str:
        position: dict[UOp, int] = {}  # a value computed in two loops over one range reads its latest copy
        variables = kernel_vars(program)
        rows = []
        for i, u in enumerate(program):
            arg = u.arg if u.op is not Ops.STORE else "ADD" if u.arg is Ops.ADD else None  # (or the check it records)
            arg = variables.index(u) if u.op is Ops.DEFINE_VAR else arg
            rows.append([u.op.name, _dtype_name(u.dtype), [position[s] for s in u.src], arg])
            position[u] = i
        return "\n".join([name] + [json.dumps(row) for row in rows])


class PythonCompiler(Compiler):
    def compile(self, src: str) -> bytes:
        return src.encode()


class Memory:
    """Typed element access to a bytearray, with the struct format of its dtype."""

    def __init__(self, raw: bytearray, dtype: DType):
        self.raw, self.dtype, self.size = raw, dtype, dtype.itemsize
        self.bits = STORED_AS_BITS.get(dtype)  # bfloat16 and fp8: raw bits, converted on each access
        self.fmt = "<" + (self.bits.storage if self.bits is not None else dtype.fmt)

    def load(self, i: int):
        (value,) = struct.unpack_from(self.fmt, self.raw, i * self.size)
        return self.bits.decode(value) if self.bits is not None else value

    def store(self, i: int, value) -> None:
        if self.bits is not None:
            value = self.bits.encode(value)
        struct.pack_into(self.fmt, self.raw, i * self.size, value)


class PythonProgram(Program):
    """Runs the instructions with a program counter; loops jump between RANGE and ENDRANGE."""

    def __init__(self, name: str, binary: bytes):
        super().__init__(name, binary)
        lines = binary.decode().split("\n")[1:]
        self.code = [(Ops[op], DTYPES_BY_NAME[dt.lstrip("*")], src, arg) for op, dt, src, arg in map(json.loads, lines)]
        self.loop_end = {}
        for i, (op, _, src, _) in enumerate(self.code):
            if op is Ops.ENDRANGE:
                self.loop_end[src[0]] = i

    def __call__(self, *bufs, global_size=(1,), local_size=(1,), wait: bool = False, vals: tuple[int, ...] = ()
                 ) -> float | None:  # fmt: skip
        start = time.perf_counter()
        code, values = self.code, [None] * len(self.code)
        pc = 0
        while pc < len(code):
            op, dtype, src, arg = code[pc]
            if op is Ops.DEFINE_GLOBAL:
                values[pc] = Memory(bufs[arg], dtype)
            elif op is Ops.CONST:
                values[pc] = arg
            elif op is Ops.DEFINE_VAR:  # arg: its place among the kernel's Variables
                values[pc] = vals[arg]
            elif op is Ops.RANGE:
                values[pc] = 0
                if values[src[0]] <= 0:
                    pc = self.loop_end[pc]
            elif op is Ops.ENDRANGE:
                loop = src[0]
                values[loop] += 1
                if values[loop] < values[code[loop][2][0]]:
                    pc = loop
            elif op is Ops.INDEX:
                values[pc] = (values[src[0]], values[src[1]], values[src[2]] if len(src) > 2 else True)
            elif op is Ops.LOAD:
                memory, i, valid = values[src[0]]
                values[pc] = memory.load(i) if valid else exec_cast(0, dtypes.int32, dtype)
            elif op is Ops.STORE:
                memory, i, valid = values[src[0]]
                if valid and arg == "ADD":  # a scatter's store adds into memory
                    memory.store(i, exec_alu(Ops.ADD, code[src[1]][1], [memory.load(i), values[src[1]]]))
                elif valid:
                    memory.store(i, values[src[1]])
            elif op in (Ops.DEFINE_ACC, Ops.ASSIGN):
                values[src[0] if op is Ops.ASSIGN else pc] = values[src[-1] if op is Ops.ASSIGN else src[0]]
            elif op is Ops.CAST:
                values[pc] = exec_cast(values[src[0]], code[src[0]][1], dtype)
            elif op is Ops.BITCAST:
                values[pc] = exec_bitcast(values[src[0]], code[src[0]][1], dtype)
            else:
                values[pc] = exec_alu(op, dtype, [values[s] for s in src])
            pc += 1
        return time.perf_counter() - start if wait else None


class PythonDevice(Compiled):
    def __init__(self, name: str):
        super().__init__(name, PythonAllocator(), PythonRenderer(), PythonCompiler(), PythonProgram)
