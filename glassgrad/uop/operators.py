"""Python's operators for graph nodes and for patterns: `x + 1` builds ADD(x, 1) from a UOp, and the pattern of an ADD
from a UPat (`UPat.var("x") + 0`), each through its own `_binary`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from glassgrad.uop.opcodes import Ops


def _operator(op: Ops, reverse: bool = False) -> Callable[[Any, Any], Any]:
    """The method `self <op> x`; with `reverse`, `x <op> self` (Python calls __radd__ for `1 + node`)."""

    def method(self, x):
        return self._binary(op, x, reverse)

    return method


class BinaryOperators:
    """The operators, built by the subclass's `_binary(op, other, reverse)`: one row per operator."""

    __slots__ = ()

    def _binary(self, op: Ops, other: Any, reverse: bool = False) -> Any:
        """The node (or pattern) of `op` on self and other, or on other and self when `reverse`."""
        raise NotImplementedError

    __add__, __radd__ = _operator(Ops.ADD), _operator(Ops.ADD, reverse=True)
    __mul__, __rmul__ = _operator(Ops.MUL), _operator(Ops.MUL, reverse=True)
    __floordiv__ = _operator(Ops.IDIV)
    __mod__ = _operator(Ops.MOD)
    __and__, __or__, __xor__ = _operator(Ops.AND), _operator(Ops.OR), _operator(Ops.XOR)
    __lt__ = _operator(Ops.CMPLT)
    __gt__ = _operator(Ops.CMPLT, reverse=True)  # x > y is y < x
    maximum = _operator(Ops.MAX)
    ne = _operator(Ops.CMPNE)
