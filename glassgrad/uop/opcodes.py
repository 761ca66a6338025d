"""Ops, every kind of UOp, and GroupOp, the sets of them that rules and passes treat alike."""

from __future__ import annotations

import enum


class _OpsType(type):
    """The metaclass of Ops: what it keeps of enum.Enum's (each `enum.auto()` of the class body a member, an instance
    with a `name` and a `value`; `Ops["ADD"]`, `Ops(value)`, iteration, len). Not enum.EnumType: on Python 3.11 that
    has a __getattr__, which sends every read of `Ops.ADD` through a slow path (140 ns against 25 for a plain class
    attribute; an eager op's realize reads ~25, codegen millions)."""

    def __new__(mcs, name: str, bases: tuple, namespace: dict) -> _OpsType:
        names = [key for key, value in namespace.items() if isinstance(value, enum.auto)]
        body = {key: value for key, value in namespace.items() if key not in names}
        cls = super().__new__(mcs, name, bases, {**body, "__slots__": ("name", "value")})
        cls._members = {}
        for value, key in enumerate(names, start=1):
            member = object.__new__(cls)
            member.name, member.value = key, value
            type.__setattr__(cls, key, member)
            cls._members[key] = member
        cls._by_value = {member.value: member for member in cls._members.values()}
        return cls

    def __getitem__(cls, name: str) -> Ops:
        return cls._members[name]

    def __call__(cls, value: int) -> Ops:
        return cls._by_value[value]

    def __iter__(cls):
        return iter(cls._members.values())

    def __len__(cls) -> int:
        return len(cls._members)


class Ops(metaclass=_OpsType):
    """Every kind of UOp, grouped as in docs/architecture.md (members compare and hash by identity)."""

    # buffers and data
    UNIQUE = enum.auto()
    DEVICE = enum.auto()
    BUFFER = enum.auto()
    CONST = enum.auto()
    COPY = enum.auto()
    ASSIGN = enum.auto()
    CONTIGUOUS = enum.auto()
    DETACH = enum.auto()
    VIEW = enum.auto()
    ARANGE = enum.auto()  # the index of each element, 0 .. n-1: the one source of position-dependent values
    KERNEL = enum.auto()
    CHECK = enum.auto()  # a value that must meet a condition (uop/check.py), tested where a kernel computes it
    DEFINE_VAR = enum.auto()  # a symbolic int, arg (name, min, max): a kernel's int parameter (uop/variable.py)
    BIND = enum.auto()  # BIND(DEFINE_VAR, CONST): a variable with the value it has in this call
    # several devices (uop/multi.py): MULTI(shard on each device), arg the axis split across them (None: copies);
    # MSELECT(x), arg (i, axis): the i-th shard of x split along axis, on x's i-th device
    MULTI = enum.auto()
    MSELECT = enum.auto()
    # elementwise, one input
    NEG = enum.auto()
    EXP2 = enum.auto()
    LOG2 = enum.auto()
    SIN = enum.auto()
    SQRT = enum.auto()
    RECIP = enum.auto()
    CAST = enum.auto()
    BITCAST = enum.auto()
    TRUNC = enum.auto()
    # elementwise, two inputs
    ADD = enum.auto()
    MUL = enum.auto()
    IDIV = enum.auto()
    MOD = enum.auto()
    MAX = enum.auto()
    CMPLT = enum.auto()
    CMPNE = enum.auto()
    AND = enum.auto()
    OR = enum.auto()
    XOR = enum.auto()
    SHL = enum.auto()
    SHR = enum.auto()
    # elementwise, three inputs
    WHERE = enum.auto()
    MULACC = enum.auto()
    # reduce
    REDUCE_AXIS = enum.auto()
    # scatter: SCATTER_ADD(base, index, src), arg the axis: base with each src element added at the position along the
    # axis that index gives (index and src of one shape; not larger than base along the other axes)
    SCATTER_ADD = enum.auto()
    # fused attention: ATTENTION(q, k, v[, mask]), arg (scale, causal): softmax(q @ k.T * scale + mask) @ v of every
    # row and the row's logsumexp, packed flat in float32 (mixin/fused_attention.py); its kernel the renderer writes
    ATTENTION = enum.auto()
    # movement (zero-copy)
    RESHAPE = enum.auto()
    PERMUTE = enum.auto()
    EXPAND = enum.auto()
    PAD = enum.auto()
    SHRINK = enum.auto()
    FLIP = enum.auto()
    # kernel and program
    SINK = enum.auto()
    STORE = enum.auto()
    LOAD = enum.auto()
    INDEX = enum.auto()
    RANGE = enum.auto()
    ENDRANGE = enum.auto()
    REDUCE = enum.auto()
    DEFINE_GLOBAL = enum.auto()
    DEFINE_ACC = enum.auto()
    SPECIAL = enum.auto()
    VECTORIZE = enum.auto()
    GEP = enum.auto()

    def __repr__(self) -> str:
        return f"Ops.{self.name}"

    __str__ = __repr__  # (as an Enum member prints)

    def __reduce__(self):  # unpickled as the same member
        return getattr, (Ops, self.name)

    def __setattr__(self, name: str, value) -> None:
        if hasattr(self, "value"):  # (set once, as the class is made)
            raise AttributeError(f"{self!r}.{name}: an op is immutable")
        object.__setattr__(self, name, value)


class GroupOp:
    """Sets of Ops that rules and passes treat alike."""

    Unary = frozenset({Ops.NEG, Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.RECIP, Ops.TRUNC})
    Binary = frozenset({Ops.ADD, Ops.MUL, Ops.IDIV, Ops.MOD, Ops.MAX, Ops.CMPLT, Ops.CMPNE, Ops.AND, Ops.OR, Ops.XOR,
                        Ops.SHL, Ops.SHR})  # fmt: skip
    Ternary = frozenset({Ops.WHERE, Ops.MULACC})
    ALU = Unary | Binary | Ternary
    Elementwise = ALU | {Ops.CAST, Ops.BITCAST, Ops.CHECK}  # CHECK: the identity, with a test on the side
    Movement = frozenset({Ops.RESHAPE, Ops.PERMUTE, Ops.EXPAND, Ops.PAD, Ops.SHRINK, Ops.FLIP})
    Commutative = frozenset({Ops.ADD, Ops.MUL, Ops.MAX, Ops.CMPNE, Ops.AND, Ops.OR, Ops.XOR})
    Comparison = frozenset({Ops.CMPLT, Ops.CMPNE})
