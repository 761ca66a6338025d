"""Ops, the kinds of UOp: what it keeps of enum.Enum, and the plain class attribute reads it has instead of
enum.EnumType's (whose __getattr__ sent every `Ops.ADD` on Python 3.11 through a slow path)."""

import copy
import pickle

import pytest

from glassgrad.dtype import dtypes
from glassgrad.uop.opcodes import GroupOp, Ops
from glassgrad.uop.ops import UOp


def test_members_as_an_enum_has_them():
    names = [op.name for op in Ops]
    assert len(Ops) == len(names) == len(set(names)) > 50
    assert [op.value for op in Ops] == list(range(1, len(Ops) + 1))
    for op in Ops:
        assert isinstance(op, Ops) and Ops[op.name] is op and Ops(op.value) is op and getattr(Ops, op.name) is op
    assert (repr(Ops.ADD), str(Ops.ADD), f"{Ops.ADD}", Ops.ADD.name) == ("Ops.ADD", "Ops.ADD", "Ops.ADD", "ADD")
    assert Ops.ADD != Ops.MUL and len({Ops.ADD, Ops.ADD, Ops.MUL}) == 2
    assert Ops.ADD in GroupOp.Binary and Ops.ADD in GroupOp.Commutative and Ops.RESHAPE not in GroupOp.ALU


def test_unknown_names_and_values_raise():
    with pytest.raises(KeyError):
        Ops["NOT_AN_OP"]
    with pytest.raises(KeyError):
        Ops(0)
    with pytest.raises(AttributeError):
        Ops.NOT_AN_OP  # noqa: B018


def test_members_are_immutable_singletons():
    with pytest.raises(AttributeError, match="immutable"):
        Ops.ADD.name = "MUL"
    assert Ops.ADD.name == "ADD"
    assert pickle.loads(pickle.dumps(Ops.ADD)) is Ops.ADD
    assert copy.copy(Ops.ADD) is Ops.ADD and copy.deepcopy(Ops.ADD) is Ops.ADD


def test_pickled_graph_is_the_same_interned_node():
    node = UOp(Ops.ADD, dtypes.int32, (UOp.const(dtypes.int32, 1),) * 2)
    assert pickle.loads(pickle.dumps(node)) is node


def test_class_attribute_reads_take_no_getattr_hook():
    # the hook (enum.EnumType's on Python 3.11) makes each read of a member a call through __getattribute__
    assert not any("__getattr__" in vars(meta) for meta in type(Ops).__mro__)
