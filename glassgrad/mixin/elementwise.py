"""Tensor methods for elementwise ops on the primitives: casts, arithmetic, comparisons, logic, bits, operators."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from glassgrad.device_info import holds
from glassgrad.dtype import DType, dtypes, promote_types, result_type_with_scalar, to_dtype
from glassgrad.errors import ArgumentError, DtypeError
from glassgrad.shape import broadcast_shape
from glassgrad.tensor_math import float_floor_quotient, float_remainder, int_quotient
from glassgrad.uop.ops import Ops, UOp

if TYPE_CHECKING:
    from glassgrad.tensor import Tensor


def check_device_holds(device: str | tuple[str, ...], dtype: DType) -> None:
    """A TypeError unless `device` (or each device of a tuple) can hold `dtype`."""
    if isinstance(device, tuple):
        for d in device:
            check_device_holds(d, dtype)
    elif not holds(device, dtype):
        raise TypeError(f"device {device} cannot hold {dtype}; cast to a supported dtype or use another device")


def _cast_to(dtype: DType, words: str) -> Callable[[Any], Any]:
    """A method that casts its tensor to `dtype` (t.float(), t.int(), ...)."""

    def cast(self):
        return self.cast(dtype)

    cast.__doc__ = f"This tensor as {words}."
    return cast


def _calls(method: str, reverse: bool = False) -> Callable[[Any, Any], Any]:
    """The operator `self <op> x` as self.method(x); with `reverse`, `x <op> self` as self.method(x, True) (Python
    calls __radd__ for `1 + t`)."""

    def operator(self, x):
        return getattr(self, method)(x, True) if reverse else getattr(self, method)(x)

    return operator


def _reversed_bitwise(op: Ops, name: str) -> Callable[[Any, Any], Any]:
    """`x <op> self` for &, | and ^ (bitwise_and and the others take no `reverse`)."""

    def operator(self, x):
        return self._bitwise(op, x, name, True)

    return operator


def _in_place(method: str) -> Callable[[Any, Any], Any]:
    """`self <op>= x`: the result assigned into self."""

    def operator(self, x):
        return self.assign(getattr(self, method)(x))

    return operator


class ElementwiseMixin:
    """Tensor methods for elementwise arithmetic, comparisons, logic and bits."""

    def _binary_operands(self, other: Any, op: str, reverse: bool = False) -> tuple[Tensor, Tensor]:
        """Both operands as tensors of one dtype and one broadcast shape."""
        if isinstance(other, ElementwiseMixin):  # (read from the nodes: every op of every model passes here)
            if other.uop.device != self.uop.device:
                raise ArgumentError(f"{op}: tensors are on different devices: {self.device} and {other.device}; "
                                    "move one with .to()")  # fmt: skip
            dtype = self.uop.dtype if self.uop.dtype is other.uop.dtype else promote_types(self.dtype, other.dtype)
        elif isinstance(other, (bool, int, float)):
            dtype = result_type_with_scalar(self.dtype, other)
            other = type(self)(other, device=self.device, dtype=dtype)
        else:
            raise TypeError(f"{op}: unsupported operand type {type(other).__name__}")
        x, y = (other, self) if reverse else (self, other)
        if x.uop.dtype is not dtype:  # (the common case, both of one dtype and shape, calls nothing more)
            x = x.cast(dtype)
        if y.uop.dtype is not dtype:
            y = y.cast(dtype)
        if (shape := x.uop.shape) == y.uop.shape:
            return x, y
        shape = broadcast_shape(shape, y.shape, op)
        return x._broadcast_to(shape, op), y._broadcast_to(shape, op)

    def _alu(self, op: Ops, *others: Tensor) -> Tensor:
        return self._derived(self.uop.alu(op, *[o.uop for o in others]), self, *others)

    def cast(self, dtype: DType | str) -> Tensor:
        """The values converted to another dtype."""
        dtype = to_dtype(dtype)
        if dtype == self.dtype:
            return self
        check_device_holds(self.device, dtype)
        return self._derived(UOp(Ops.CAST, dtype, (self.uop,)), self)

    def bitcast(self, dtype: DType | str) -> Tensor:
        """The same bytes read as another dtype of the same size."""
        dtype = to_dtype(dtype)
        if dtype.itemsize != self.dtype.itemsize:
            raise ArgumentError(f"bitcast: {self.dtype} and {dtype} differ in size ({self.dtype.itemsize} vs "
                                f"{dtype.itemsize} bytes)")  # fmt: skip
        return self if dtype == self.dtype else type(self)(UOp(Ops.BITCAST, dtype, (self.uop,)))

    # PyTorch's cast shortcuts: t.float() is t.cast(dtypes.float32)
    float, half = _cast_to(dtypes.float32, "float32"), _cast_to(dtypes.float16, "float16")
    double, bfloat16 = _cast_to(dtypes.float64, "float64"), _cast_to(dtypes.bfloat16, "bfloat16")
    int, long = _cast_to(dtypes.int32, "int32"), _cast_to(dtypes.int64, "int64")
    bool = _cast_to(dtypes.bool, "bool (nonzero is True)")

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
        if rounding_mode not in (None, "trunc", "floor"):
            raise ArgumentError(f"div: rounding_mode must be None, 'trunc' or 'floor', got {rounding_mode!r}")
        x, y = self._binary_operands(other, "div", reverse)
        if rounding_mode is None:
            x, y = x._float_input(), y._float_input()
            return x._alu(Ops.MUL, y._alu(Ops.RECIP))
        if dtypes.is_int(x.dtype):
            return int_quotient(x, y, rounding_mode, "div")
        if rounding_mode == "floor":
            return float_floor_quotient(x, y, "div")
        return x._alu(Ops.MUL, y._alu(Ops.RECIP)).trunc()

    def idiv(self, other: Any, reverse: bool = False) -> Tensor:
        """Integer division truncating toward zero (C semantics)."""
        x, y = self._binary_operands(other, "idiv", reverse)
        return int_quotient(x, y, "trunc", "idiv")

    def floordiv(self, other: Any, reverse: bool = False) -> Tensor:
        """Elementwise division rounded down (Python's //)."""
        x, y = self._binary_operands(other, "floordiv", reverse)
        return int_quotient(x, y, "floor", "floordiv") if dtypes.is_int(x.dtype) else float_floor_quotient(x, y)

    def mod(self, other: Any, reverse: bool = False) -> Tensor:
        """Remainder with the sign of the divisor, as Python's % and torch.remainder."""
        x, y = self._binary_operands(other, "mod", reverse)
        if not dtypes.is_int(x.dtype):
            return float_remainder(x, y)
        return x - int_quotient(x, y, "floor", "mod") * y

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
        if not isinstance(x, ElementwiseMixin):  # a Python scalar takes the other side's dtype unless it lifts the kind
            dtype = result_type_with_scalar(y.dtype, x) if isinstance(y, ElementwiseMixin) else None
            x = type(self)(x, device=self.device, dtype=dtype)
        x, y = x._binary_operands(y, "where")
        shape = broadcast_shape(cond.shape, x.shape, "where")
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

    def logical_and(self: Tensor, other: Tensor | bool) -> Tensor:
        """Elementwise `and` of truth values (nonzero is true); gives bool."""
        x, y = _truth_values(self, other, "logical_and")
        return x & y

    def logical_or(self: Tensor, other: Tensor | bool) -> Tensor:
        """Elementwise `or` of truth values (nonzero is true); gives bool."""
        x, y = _truth_values(self, other, "logical_or")
        return x | y

    def logical_xor(self: Tensor, other: Tensor | bool) -> Tensor:
        """Elementwise `xor` of truth values (nonzero is true); gives bool."""
        x, y = _truth_values(self, other, "logical_xor")
        return x ^ y

    def __ge__(self: Tensor, other: Any) -> Tensor:
        """Elementwise >= (False where either side is NaN)."""
        x, y = self._binary_operands(other, ">=")
        if dtypes.is_float(x.dtype):  # not (x < y) would be true for NaN
            return (y < x) | x.eq(y)
        return (x < y).logical_not()

    def __le__(self: Tensor, other: Any) -> Tensor:
        """Elementwise <= (False where either side is NaN)."""
        x, y = self._binary_operands(other, "<=")
        if dtypes.is_float(x.dtype):
            return (x < y) | x.eq(y)
        return (y < x).logical_not()

    # ---- Python operators: one row each (as uop/operators.py's for UOp) ----

    def __neg__(self):
        return self.neg()

    def __invert__(self):
        return self.bitwise_not()

    __add__, __radd__ = _calls("add"), _calls("add", reverse=True)
    __sub__, __rsub__ = _calls("sub"), _calls("sub", reverse=True)
    __mul__, __rmul__ = _calls("mul"), _calls("mul", reverse=True)
    __truediv__, __rtruediv__ = _calls("div"), _calls("div", reverse=True)
    __floordiv__, __rfloordiv__ = _calls("floordiv"), _calls("floordiv", reverse=True)
    __mod__, __rmod__ = _calls("mod"), _calls("mod", reverse=True)
    __pow__, __rpow__ = _calls("pow"), _calls("pow", reverse=True)
    __and__, __rand__ = _calls("bitwise_and"), _reversed_bitwise(Ops.AND, "&")
    __or__, __ror__ = _calls("bitwise_or"), _reversed_bitwise(Ops.OR, "|")
    __xor__, __rxor__ = _calls("bitwise_xor"), _reversed_bitwise(Ops.XOR, "^")
    __lshift__, __rshift__ = _calls("lshift"), _calls("rshift")
    __iadd__, __isub__ = _in_place("add"), _in_place("sub")
    __imul__, __itruediv__ = _in_place("mul"), _in_place("div")


def _truth_values(x: Tensor, other: Any, op: str) -> tuple[Tensor, Tensor]:
    if not isinstance(other, ElementwiseMixin):
        if not isinstance(other, (bool, int, float)):
            raise TypeError(f"{op}: other must be a Tensor or a Python scalar, got {type(other).__name__}")
        other = type(x)(bool(other), device=x.device)
    return x.cast(dtypes.bool), other.cast(dtypes.bool)
