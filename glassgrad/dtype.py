"""Data types, their C names and storage formats, and PyTorch-style type promotion."""

from __future__ import annotations

import dataclasses
import functools
import math
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from glassgrad.errors import UnknownDtypeError
from glassgrad.fp8 import E4M3, E5M2


@dataclass(frozen=True, eq=True)
class DType:
    """A scalar element type (or a short vector of one, when `count` > 1)."""

    priority: int  # orders dtypes of one kind from narrow to wide
    itemsize: int  # bytes per element
    name: str
    fmt: str | None  # struct format character; None where Python's struct has none (bfloat16)
    count: int = 1

    # every node's interning key holds its dtype, so hashing one is on the hottest path: `ident`, the dtype as a
    # plain tuple (equal exactly where the dtypes are), is what a node's key holds (hashed in C, no call to this
    # class), and this class's hash is computed once (both rebuilt on unpickling: a string's hash differs from
    # process to process)
    def __post_init__(self):
        ident = (type(self).__name__, *(v.ident if isinstance(v, DType) else v for v in self._fields()))
        object.__setattr__(self, "ident", ident)
        object.__setattr__(self, "_hash", hash(ident))

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return self is other or (isinstance(other, DType) and self.ident == other.ident)

    def _fields(self) -> tuple:
        return tuple(getattr(self, f.name) for f in dataclasses.fields(self))

    def __reduce__(self):
        return type(self), self._fields()

    def __repr__(self) -> str:
        return f"dtypes.{self.name}" if self.count == 1 else f"dtypes.{self.name}.vec({self.count})"

    def __lt__(self, other: DType) -> bool:
        return (self.priority, self.itemsize, self.name) < (other.priority, other.itemsize, other.name)

    def vec(self, count: int) -> DType:
        """This dtype as a vector of `count` lanes (used by the optimizer's UPCAST)."""
        return self if count == 1 else DType(self.priority, self.itemsize * count, self.name, None, count)

    @property
    def scalar(self) -> DType:
        return self if self.count == 1 else DTYPES_BY_NAME[self.name]

    def ptr(self, size: int = -1) -> PtrDType:
        """A pointer to `size` elements of this dtype (the type of a kernel's buffer argument)."""
        return PtrDType(self.priority, self.itemsize, self.name, self.fmt, self.count, self, size)

    @property
    def min(self) -> Any:
        """The smallest value of this dtype (-inf for floats), as tinygrad's DType.min."""
        return dtypes.min(self)

    @property
    def max(self) -> Any:
        """The largest value of this dtype (inf for floats), as tinygrad's DType.max."""
        return dtypes.max(self)


@dataclass(frozen=True, eq=True)
class PtrDType(DType):
    """A pointer to a buffer of `base` elements."""

    base: DType = None  # type: ignore[assignment]
    size: int = -1

    __hash__, __eq__ = DType.__hash__, DType.__eq__  # (the dataclass decorator would write field-by-field ones)

    def __repr__(self) -> str:
        return f"{self.base!r}.ptr({self.size})"


class dtypes:
    """The dtypes glassgrad knows, with PyTorch's names and aliases."""

    void: Final = DType(-1, 0, "void", None)
    bool: Final = DType(0, 1, "bool", "?")
    int8: Final = DType(1, 1, "char", "b")
    uint8: Final = DType(2, 1, "uchar", "B")
    int16: Final = DType(3, 2, "short", "h")
    uint16: Final = DType(4, 2, "ushort", "H")
    int32: Final = DType(5, 4, "int", "i")
    uint32: Final = DType(6, 4, "uint", "I")
    int64: Final = DType(7, 8, "long", "q")
    uint64: Final = DType(8, 8, "ulong", "Q")
    fp8e4m3: Final = DType(9, 1, "fp8e4m3", None)  # PyTorch's float8_e4m3fn (glassgrad/fp8.py)
    fp8e5m2: Final = DType(10, 1, "fp8e5m2", None)  # PyTorch's float8_e5m2
    float16: Final = DType(11, 2, "half", "e")
    bfloat16: Final = DType(12, 2, "bfloat16", None)
    float32: Final = DType(13, 4, "float", "f")
    float64: Final = DType(14, 8, "double", "d")

    # aliases
    char, uchar, short, ushort = int8, uint8, int16, uint16
    int, uint, long, ulong = int32, uint32, int64, uint64
    half, float, double = float16, float32, float64
    float8_e4m3fn, float8_e5m2 = fp8e4m3, fp8e5m2

    fp8s: tuple[DType, ...] = (fp8e4m3, fp8e5m2)
    floats: tuple[DType, ...] = (fp8e4m3, fp8e5m2, float16, bfloat16, float32, float64)
    uints: tuple[DType, ...] = (uint8, uint16, uint32, uint64)
    sints: tuple[DType, ...] = (int8, int16, int32, int64)
    ints: tuple[DType, ...] = sints + uints

    default_float: DType = float32
    default_int: DType = int32

    @staticmethod
    def is_float(dtype: DType) -> bool:
        return dtype.scalar in FLOATS

    @staticmethod
    def is_int(dtype: DType) -> bool:
        return dtype.scalar in INTS

    @staticmethod
    def is_unsigned(dtype: DType) -> bool:
        return dtype.scalar in UNSIGNED

    @staticmethod
    def from_py(value: Any) -> DType:
        """The dtype a Python scalar becomes: bool, int32 or float32 (the defaults)."""
        if isinstance(value, bool):
            return dtypes.bool
        if isinstance(value, int):
            return dtypes.default_int
        if isinstance(value, float):
            return dtypes.default_float
        raise TypeError(f"cannot make a tensor element from {type(value).__name__} {value!r}")

    @staticmethod
    def min(dtype: DType) -> Any:
        """The smallest value of a dtype (-inf for floats)."""
        if dtypes.is_float(dtype):
            return -math.inf
        if dtype == dtypes.bool:
            return False
        return 0 if dtypes.is_unsigned(dtype) else -(2 ** (8 * dtype.itemsize - 1))

    @staticmethod
    def max(dtype: DType) -> Any:
        """The largest value of a dtype (inf for floats)."""
        if dtypes.is_float(dtype):
            return math.inf
        if dtype == dtypes.bool:
            return True
        return 2 ** (8 * dtype.itemsize - (0 if dtypes.is_unsigned(dtype) else 1)) - 1


# the dtypes NumPy and PyTorch compute with (fp8 is only stored and cast: PyTorch has no math on it)
ALL_DTYPES = (
    dtypes.bool, dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16, dtypes.int32, dtypes.uint32,
    dtypes.int64, dtypes.uint64, dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64,
)  # fmt: skip
DTYPES_BY_NAME = {d.name: d for d in ALL_DTYPES + dtypes.fp8s} | {"void": dtypes.void}
FLOATS = dtypes.floats
UNSIGNED = (dtypes.uint8, dtypes.uint16, dtypes.uint32, dtypes.uint64)
INTS = (dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64) + UNSIGNED

# PyTorch names (torch.float32 -> "float32") for every dtype, used by to_dtype and error messages.
TORCH_NAMES = {
    "bool": dtypes.bool, "int8": dtypes.int8, "uint8": dtypes.uint8, "int16": dtypes.int16,
    "uint16": dtypes.uint16, "int32": dtypes.int32, "uint32": dtypes.uint32, "int64": dtypes.int64,
    "uint64": dtypes.uint64, "float16": dtypes.float16, "bfloat16": dtypes.bfloat16,
    "float32": dtypes.float32, "float64": dtypes.float64, "float8_e4m3fn": dtypes.fp8e4m3,
    "float8_e5m2": dtypes.fp8e5m2,
}  # fmt: skip


def to_dtype(spec: DType | str) -> DType:
    """Accept a DType or a name such as 'float32', 'half' or 'int'."""
    if isinstance(spec, DType):
        return spec
    if isinstance(spec, str):
        found = TORCH_NAMES.get(spec) or getattr(dtypes, spec, None)
        if isinstance(found, DType):
            return found
    raise UnknownDtypeError(f"unknown dtype {spec!r}; use one of: {', '.join(TORCH_NAMES)}")


def _category(dtype: DType) -> int:
    """0 for bool, 1 for integers, 2 for floats: the kinds PyTorch promotes across."""
    return 0 if dtype == dtypes.bool else 2 if dtypes.is_float(dtype) else 1


def _promote_ints(a: DType, b: DType) -> DType:
    if dtypes.is_unsigned(a) == dtypes.is_unsigned(b):
        return max(a, b, key=lambda d: d.itemsize)
    signed, unsigned = (b, a) if dtypes.is_unsigned(a) else (a, b)
    if signed.itemsize > unsigned.itemsize:
        return signed
    # a signed type wide enough for both, as PyTorch does for uint8 + int8 -> int16
    wider = {1: dtypes.int16, 2: dtypes.int32, 4: dtypes.int64, 8: dtypes.int64}
    return wider[unsigned.itemsize]


def promote_types(a: DType, b: DType) -> DType:
    """The result dtype of an op on two tensors of dtypes a and b, as PyTorch computes it."""
    if a == b:
        return a
    ca, cb = _category(a), _category(b)
    if ca != cb:
        return a if ca > cb else b
    if ca == 1:
        return _promote_ints(a, b)
    if {a, b} == {dtypes.float16, dtypes.bfloat16}:
        return dtypes.float32
    if {a, b} == set(dtypes.fp8s):  # PyTorch refuses to promote fp8; tinygrad's lattice meets them at half
        return dtypes.float16
    return max(a, b, key=lambda d: d.itemsize)


def least_upper_dtype(*ds: DType) -> DType:
    """The dtype every one of `ds` promotes to (tinygrad's name; promote_types over all of them)."""
    if not ds:
        raise TypeError("least_upper_dtype: needs at least one dtype")
    return functools.reduce(promote_types, ds)


def result_type_with_scalar(tensor_dtype: DType, scalar: Any) -> DType:
    """The dtype of `tensor op scalar`: a Python scalar only lifts the kind (bool < int < float)."""
    scalar_dtype = dtypes.from_py(scalar)
    if _category(scalar_dtype) > _category(tensor_dtype):
        return scalar_dtype
    return tensor_dtype


def _truncate(dtype: DType, value: Any) -> Any:
    """Round or wrap a Python number to what `dtype` can hold (int overflow wraps, as in C)."""
    if dtype == dtypes.bool:
        return bool(value)
    if dtypes.is_int(dtype):
        value = int(value)
        bits = 8 * dtype.itemsize
        value &= (1 << bits) - 1
        if not dtypes.is_unsigned(dtype) and value >= 1 << (bits - 1):
            value -= 1 << bits
        return value
    value = float(value)
    if dtype == dtypes.float64 or math.isnan(value) or (math.isinf(value) and dtype not in dtypes.fp8s):
        return value
    if (bits := STORED_AS_BITS.get(dtype)) is not None:
        return bits.decode(bits.encode(value))
    try:
        return struct.unpack(dtype.fmt, struct.pack(dtype.fmt, value))[0]
    except OverflowError:
        return math.copysign(math.inf, value)


class Truncate(dict):
    """`truncate[dtype](value)` (tinygrad's form: a dict keyed by dtype) or `truncate(dtype, value)`: a Python
    number rounded or wrapped to what `dtype` holds."""

    def __call__(self, dtype: DType, value: Any) -> Any:
        return _truncate(dtype, value)


def float_to_bfloat16(value: float) -> int:
    """The 16 bits of a bfloat16, rounded to nearest even from a float32."""
    bits = struct.unpack("I", struct.pack("f", value))[0] if abs(value) < 3.5e38 or math.isinf(value) else None
    if bits is None:
        bits = 0x7F800000 | (0x80000000 if value < 0 else 0)
    if math.isnan(value):
        return 0x7FC0
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF


def bfloat16_to_float(bits: int) -> float:
    return struct.unpack("f", struct.pack("I", (bits & 0xFFFF) << 16))[0]


@dataclass(frozen=True)
class BitFormat:
    """A float dtype Python's struct cannot pack: stored as raw bits of an unsigned integer, converted in Python."""

    storage: str  # struct format of the bits
    encode: Callable[[float], int]
    decode: Callable[[int], float]


STORED_AS_BITS: dict[DType, BitFormat] = {
    dtypes.bfloat16: BitFormat("H", float_to_bfloat16, bfloat16_to_float),
    dtypes.fp8e4m3: BitFormat("B", E4M3.encode, E4M3.decode),
    dtypes.fp8e5m2: BitFormat("B", E5M2.encode, E5M2.decode),
}
FP8_FORMATS = {dtypes.fp8e4m3: E4M3, dtypes.fp8e5m2: E5M2}

truncate = Truncate({d: functools.partial(_truncate, d) for d in ALL_DTYPES + dtypes.fp8s})


def pack_values(values: list[Any], dtype: DType) -> bytes:
    """Python scalars as the bytes of a `dtype` buffer."""
    if (bits := STORED_AS_BITS.get(dtype)) is not None:
        return struct.pack(f"<{len(values)}{bits.storage}", *(bits.encode(float(v)) for v in values))
    fmt = f"<{len(values)}{dtype.fmt}"
    try:  # values the format holds as they are (ints in range, floats not past the largest): packed at C speed
        return struct.pack(fmt, *values)
    except (struct.error, OverflowError):  # a float for an int, an int that wraps, a float past the largest
        return struct.pack(fmt, *(_truncate(dtype, v) for v in values))


def unpack_values(raw: bytes | bytearray, dtype: DType) -> list[Any]:
    """The Python scalars a `dtype` buffer's bytes hold."""
    if (bits := STORED_AS_BITS.get(dtype)) is not None:
        return [bits.decode(v) for v in struct.unpack(f"<{len(raw) // dtype.itemsize}{bits.storage}", raw)]
    return list(struct.unpack(f"<{len(raw) // dtype.itemsize}{dtype.fmt}", raw))


def typed_view(raw: bytearray, dtype: DType, shape: tuple[int, ...]) -> memoryview:
    """The bytes of a `dtype` tensor of `shape` as a memoryview of its elements, as tinygrad's Tensor.data() gives
    them: its format is the dtype's struct character; float16, bfloat16 and fp8, which a memoryview cannot hold, come
    as their raw bits ('H' or 'B'). A shape with a 0 in it is an empty 1-D view (a memoryview cannot have one)."""
    bits = STORED_AS_BITS.get(dtype)
    fmt = "H" if dtype == dtypes.float16 else bits.storage if bits is not None else dtype.fmt
    return memoryview(raw).cast(fmt) if 0 in shape else memoryview(raw).cast(fmt, shape)
