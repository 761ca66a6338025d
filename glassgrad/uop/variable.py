"""Symbolic sizes: tinygrad's Variable, a named int in [min, max] that a call binds to a value.

A Tensor's shape may hold a bound variable, or a sum of one and ints (`t[:, :i]`, `cache[:, :pos+1]`). Kernels are
built for the variable, not its value, so one compiled program serves every value:
- layout: a buffer, and every view's strides, give a symbolic dim the room of its largest value (`SymDim`, an int
  whose value is that maximum and which names the expression), so no stride or offset depends on the value;
- loops: the lowerer runs a symbolic dim's loop to the expression, whose variables become the kernel's int
  parameters (`kernel_vars`), each call passing the values bound in it.
Only elements below a symbolic dim's current size are ever computed or read, so the room above them is never seen.
"""

from __future__ import annotations

from collections.abc import Iterable

from glassgrad.dtype import dtypes
from glassgrad.uop.ops import GroupOp, Ops, UOp, render_sint
from glassgrad.uop.rewrite import graph_rewrite
from glassgrad.uop.symbolic import bounds, symbolic

sint = int | UOp  # a size: an int, or an int expression of bound variables


Variable = UOp.variable  # tinygrad's name: Variable(name, min, max)


def unbound(x: UOp) -> UOp:
    """The expression with each bound variable replaced by the variable itself."""
    binds = {n: n.src[0] for n in x.toposort() if n.op is Ops.BIND}
    return x.substitute(binds) if binds else x


def sym_bounds(x: sint) -> tuple[int, int]:
    """(smallest, largest) value a size can take over its variables' ranges."""
    if not isinstance(x, UOp):
        return x, x
    low, high = bounds(graph_rewrite(unbound(x), symbolic))
    return int(low), int(high)


def sym_value(x: sint) -> int:
    """The value of a size with its variables at their bound values; an unbound variable is an error."""
    if not isinstance(x, UOp):
        return x
    free = [n.arg[0] for n in unbound_vars(x)]
    if free:
        raise UnboundVariableError(f"the size {render_sint(x)} has no value: Variable {', '.join(free)} is not bound "
                                   "(use Variable(...).bind(value) in the shape)")  # fmt: skip
    binds = {n: UOp.const(dtypes.int, n.unbind()[1]) for n in x.toposort() if n.op is Ops.BIND}
    value = graph_rewrite(x.substitute(binds), symbolic)
    if value.op is not Ops.CONST:
        raise ValueError(f"the size {render_sint(x)} does not evaluate to an int")
    return value.arg


def unbound_vars(x: UOp) -> list[UOp]:
    """The variables of an expression that no BIND gives a value."""
    bound = {n.src[0] for n in x.toposort() if n.op is Ops.BIND}
    return [n for n in x.toposort() if n.op is Ops.DEFINE_VAR and n not in bound]


class UnboundVariableError(ValueError):
    """A Variable with no value reached a place that needs one (a realize, a value read back)."""


class SymDim(int):
    """A symbolic size inside a kernel: as an int, the most it can be (the room it takes in a buffer and its views);
    `expr` is its expression of DEFINE_VARs, the loop bound a kernel runs to. Arithmetic gives plain ints (strides,
    offsets: layout); two SymDims are equal only where their expressions are."""

    expr: UOp

    def __new__(cls, expr: UOp) -> SymDim:
        dim = super().__new__(cls, sym_bounds(expr)[1])
        dim.expr = expr
        return dim

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SymDim) and other.expr is self.expr

    def __ne__(self, other: object) -> bool:
        return not self == other

    def __hash__(self) -> int:
        return hash((int(self), self.expr))

    def __repr__(self) -> str:
        names = sorted({f"{v.arg[0]}[{v.arg[1]}..{v.arg[2]}]" for v in self.expr.toposort() if v.op is Ops.DEFINE_VAR})
        return f"sym({render_sint(self.expr)} <= {int(self)}; {', '.join(names)})"

    def __str__(self) -> str:  # in a kernel's name (a C identifier): i, ip1 for i+1
        return render_sint(self.expr).replace("+", "p").replace("-", "m").replace("*", "x").strip("()")

    def __reduce__(self):
        return SymDim, (self.expr,)


def shadow(x: sint) -> int:
    """A Tensor-level size as a kernel sees it: an int, or the SymDim of a symbolic one (its variables unbound)."""
    if not isinstance(x, UOp):
        return x
    if free := unbound_vars(x):
        raise UnboundVariableError(f"realize: Variable {', '.join(v.arg[0] for v in free)} in the shape is not bound; "
                                   "bind it to this call's value with .bind(value)")  # fmt: skip
    expr = graph_rewrite(unbound(x), symbolic)
    return expr.arg if expr.op is Ops.CONST else SymDim(expr)


def shadow_arg(arg):
    """A movement op's arg (sizes, or pairs of them) with each symbolic size as its SymDim."""
    if isinstance(arg, tuple):
        return tuple(shadow_arg(a) for a in arg)
    return shadow(arg) if isinstance(arg, UOp) else arg


def size_expr(size: int, dtype=dtypes.int) -> UOp:
    """A loop bound as a node: the constant, or a SymDim's expression (its variables are kernel parameters)."""
    if isinstance(size, SymDim):
        return size.expr if size.expr.dtype == dtype else size.expr.cast(dtype)
    return UOp.const(dtype, size)


def values_bound(sizes: Iterable[UOp], where: str, error: type[Exception] = ValueError) -> dict[UOp, int]:
    """Each Variable bound in these sizes, with its value (the bound value itself, not the graph's use of it); one
    bound to two values raises `error`, naming the variable, both values and `where` ("in one realize")."""
    found: dict[UOp, int] = {}
    for bind in (n for size in sizes for n in size.toposort() if n.op is Ops.BIND):
        var, value = bind.src[0], bind.src[1].arg
        if found.setdefault(var, value) != value:
            raise error(f"Variable {var.arg[0]} is bound to both {found[var]} and {value} {where}")
    return found


def kernel_vars(program: list[UOp] | tuple[UOp, ...]) -> list[UOp]:
    """A kernel's variables in the order of its int parameters (by name, after the buffers)."""
    return sorted({u for u in program if u.op is Ops.DEFINE_VAR}, key=lambda v: v.arg[0])


def _rebound_arg(arg, vals: dict[UOp, int]):
    if isinstance(arg, tuple):
        new = tuple(_rebound_arg(a, vals) for a in arg)
        return arg if all(a is b for a, b in zip(new, arg)) else new
    if not isinstance(arg, UOp):
        return arg
    binds = {n: n.src[0].bind(vals[n.src[0]]) for n in arg.toposort() if n.op is Ops.BIND and n.src[0] in vals}
    return arg.substitute(binds) if binds else arg


def rebind(root: UOp, vals: dict[UOp, int]) -> UOp:
    """The graph with each bound variable of its sizes bound to its value in `vals` instead (a TinyJit replay's)."""
    new: dict[UOp, UOp] = {}
    for node in root.toposort():
        src = tuple(new[s] for s in node.src)
        arg = _rebound_arg(node.arg, vals) if node.op in GroupOp.Movement else node.arg
        new[node] = node if src == node.src and arg is node.arg else UOp(node.op, node.dtype, src, arg)
    return new[root]


def sym_infer(x: sint, var_vals: dict) -> int:
    """tinygrad's name: the value of a size given its variables' values (keyed by the Variable or by its name; a
    bound variable not among them has its bound value)."""
    if not isinstance(x, UOp):
        return x
    values = {n.src[0].arg[0]: n.src[1].arg for n in x.toposort() if n.op is Ops.BIND}
    values |= {k if isinstance(k, str) else k.arg[0]: v for k, v in var_vals.items()}
    free = unbound(x)
    variables = [n for n in free.toposort() if n.op is Ops.DEFINE_VAR]
    if missing := [v.arg[0] for v in variables if v.arg[0] not in values]:
        raise UnboundVariableError(f"sym_infer: no value for Variable {', '.join(missing)} in {render_sint(x)}")
    value = graph_rewrite(free.substitute({v: UOp.const(dtypes.int, values[v.arg[0]]) for v in variables}), symbolic)
    return value.arg
