"""The IR: UOp nodes, their ops, pattern matching, symbolic simplification and views."""

from glassgrad.uop.ops import GroupOp, Ops, UOp
from glassgrad.uop.variable import Variable, sym_infer

__all__ = ["GroupOp", "Ops", "UOp", "Variable", "sym_infer"]
