"""Python's operators for graph nodes and for patterns: `x + 1` builds ADD(x, 1) from a UOp, and the pattern of an ADD
from a UPat (`UPat.var("x") + 0`), each through its own `_binary`."""

from __future__ import annotations

from typing import Any

from glassgrad.uop.opcodes import Ops


class BinaryOperators:
    """+, *, //, %, &, |, ^, <, >, maximum and ne, built by the subclass's `_binary(op, other, reverse)`."""

    __slots__ = ()

    def _binary(self, op: Ops, other: Any, reverse: bool = False) -> Any:
        """The node (or pattern) of `op` on self and other, or on other and self when `reverse`."""
        raise NotImplementedError

    def __add__(self, x):
        return self._binary(Ops.ADD, x)

    def __radd__(self, x):
        return self._binary(Ops.ADD, x, True)

    def __mul__(self, x):
        return self._binary(Ops.MUL, x)

    def __rmul__(self, x):
        return self._binary(Ops.MUL, x, True)

    def __floordiv__(self, x):
        return self._binary(Ops.IDIV, x)

    def __mod__(self, x):
        return self._binary(Ops.MOD, x)

    def __and__(self, x):
        return self._binary(Ops.AND, x)

    def __or__(self, x):
        return self._binary(Ops.OR, x)

    def __xor__(self, x):
        return self._binary(Ops.XOR, x)

    def __lt__(self, x):
        return self._binary(Ops.CMPLT, x)

    def __gt__(self, x):
        return self._binary(Ops.CMPLT, x, True)

    def maximum(self, x):
        return self._binary(Ops.MAX, x)

    def ne(self, x):
        return self._binary(Ops.CMPNE, x)
