"""Reverse-mode differentiation over the UOp graph: one derivative rule per primitive op.

Every composed Tensor op (softmax, matmul, conv2d, ...) is built from these primitives, so its
gradient follows from the table below by the chain rule. A composed op whose derived gradient would
be much slower than a formula for it (the convolution), or NaN at the edges of its domain where the formula is not
(pow, the inverse functions), may give that formula with custom_gradient.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING

from glassgrad.dtype import dtypes
from glassgrad.mixin.fused_attention import attention_gradient
from glassgrad.uop.multi import resharded, select, with_zeros
from glassgrad.uop.ops import GroupOp, Ops, UOp

if TYPE_CHECKING:
    from glassgrad.tensor import Tensor

Grads = tuple["Tensor | None", ...]


def _reduce_grad(g: Tensor, node: UOp, x: Tensor, out: Tensor) -> Grads:
    """Sum: every input gets the output's gradient. Max: the largest inputs share it. Prod: the others' product."""
    op, axes = node.arg
    g = g.expand(x.shape)
    if op is Ops.ADD:
        return (g,)
    if op is Ops.MUL:
        return (g * _product_of_others(x, out.expand(x.shape), axes),)
    if _has_reduction(x.uop):
        # a value made by a reduction may round differently in each kernel that computes it (the order of its sum):
        # compared with a max computed elsewhere, no input would equal it (and 0 / 0 ties give NaN). One buffer of
        # x, and its max taken again from that buffer, agree exactly.
        x = x.contiguous()
        out = x.max(axes, keepdim=True)
    is_max = x.eq(out.expand(x.shape)).cast(g.dtype)
    ties = is_max.sum(axes, keepdim=True).expand(x.shape)
    return (g * is_max / ties,)


def _has_reduction(node: UOp) -> bool:
    return any(n.op is Ops.REDUCE_AXIS for n in node.toposort(enter=lambda n: n.op is not Ops.BUFFER))


def _product_of_others(x: Tensor, out: Tensor, axes: tuple[int, ...]) -> Tensor:
    """For each x_i, the product of the other elements it was multiplied with: out / x_i where none is zero (as
    PyTorch); where one is, the product of the rest at that zero and 0 elsewhere; 0 everywhere with two or more."""
    is_zero = x.eq(0)
    zeros = is_zero.sum(axes, keepdim=True).expand(x.shape)
    nonzero_product = is_zero.where(1, x)._reduce(Ops.MUL, axes, True, "prod").expand(x.shape)
    at_a_zero = (zeros.eq(1) & is_zero).where(nonzero_product, 0)
    return zeros.eq(0).where(out / x, at_a_zero)


def _expanded_axes(small: tuple[int, ...], big: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(i for i, (a, b) in enumerate(zip(small, big)) if a != b)


def _unexpand(g: Tensor, x: Tensor) -> Grads:
    """The gradient of a broadcast is the sum over the broadcast dimensions."""
    return (g.sum(_expanded_axes(x.shape, g.shape), keepdim=True),)


def _unpad(g: Tensor, node: UOp) -> Grads:
    return (g.shrink(tuple((before, before + s) for (before, _), s in zip(node.arg, node.src[0].shape))),)


def _unshrink(g: Tensor, node: UOp) -> Grads:
    return (g.pad(tuple((start, s - end) for (start, end), s in zip(node.arg, node.src[0].shape))),)


def _unpermute(g: Tensor, node: UOp) -> Grads:
    inverse = [0] * len(node.arg)
    for i, axis in enumerate(node.arg):
        inverse[axis] = i
    return (g.permute(inverse),)


def _max_grad(g: Tensor, x: Tensor, y: Tensor) -> Grads:
    """d max(x, y): all to the larger one, half each at a tie, and all to both where one is NaN (as PyTorch's maximum).
    Chosen with where, not multiplied by a 0/1 mask: the side not taken gets 0 even where g is inf or NaN."""

    def share(a: Tensor, b: Tensor) -> Tensor:
        return (a < b).where(0.0, a.eq(b).where(g * 0.5, g))

    return (share(x, y), share(y, x))


def _where_grad(g: Tensor, cond: Tensor) -> Grads:
    return (None, cond.where(g, 0.0), cond.where(0.0, g))


# d(output)/d(each input) times the incoming gradient g; `x`, `y` are the inputs and `out` the output.
# Each entry takes (g, node, *inputs as Tensors, out as Tensor) and returns one gradient per input.
DERIVATIVES: dict[Ops, Callable[..., Grads]] = {
    Ops.ADD: lambda g, node, x, y, out: (g, g),
    Ops.MUL: lambda g, node, x, y, out: (g * y, g * x),
    Ops.NEG: lambda g, node, x, out: (-g,),
    Ops.EXP2: lambda g, node, x, out: (g * out * math.log(2),),
    Ops.LOG2: lambda g, node, x, out: (g / (x * math.log(2)),),
    Ops.SIN: lambda g, node, x, out: (g * x.cos(),),
    Ops.SQRT: lambda g, node, x, out: (g / (out * 2),),
    Ops.RECIP: lambda g, node, x, out: (-g * out * out,),
    Ops.MAX: lambda g, node, x, y, out: _max_grad(g, x, y),
    Ops.WHERE: lambda g, node, c, x, y, out: _where_grad(g, c),
    Ops.TRUNC: lambda g, node, x, out: (g.zeros_like(),),  # 0 even where g is inf or NaN, as PyTorch's floor
    Ops.MOD: lambda g, node, x, y, out: (g, -g * x.div(y, rounding_mode="trunc")),  # fmod of floats: x - trunc(x/y) y
    Ops.CAST: lambda g, node, x, out: (g.cast(x.dtype),),
    Ops.CHECK: lambda g, node, x, out: (g,),
    Ops.CONTIGUOUS: lambda g, node, x, *unique_and_out: (g, None),
    Ops.COPY: lambda g, node, x, dev, out: (g.to(x.device), None),
    Ops.REDUCE_AXIS: lambda g, node, x, out: _reduce_grad(g, node, x, out),
    # base's gradient is g; src's is g read at the places each element was added to
    Ops.SCATTER_ADD: lambda g, node, base, index, src, out: (g, None, g._take_along(node.arg, index)),
    Ops.ATTENTION: attention_gradient,  # from the saved logsumexps (mixin/fused_attention.py)
    Ops.RESHAPE: lambda g, node, x, out: (g.reshape(x.shape),),
    Ops.PERMUTE: lambda g, node, x, out: _unpermute(g, node),
    Ops.EXPAND: lambda g, node, x, out: _unexpand(g, x),
    Ops.PAD: lambda g, node, x, out: _unpad(g, node),
    Ops.SHRINK: lambda g, node, x, out: _unshrink(g, node),
    Ops.FLIP: lambda g, node, x, out: (g.flip(*[i for i, f in enumerate(node.arg) if f]),),
    # several devices: each shard gets its part of g, or the first copy all of it (the copies are one value); a
    # selected shard's g is its part of the whole, zeros elsewhere
    Ops.MULTI: lambda g, node, *shards: tuple(
        type(g)(select(g.uop, i, node.arg)) if node.arg is not None or i == 0 else None for i in range(len(node.src))
    ),
    Ops.MSELECT: lambda g, node, x, out: (type(g)(with_zeros(g.uop, node.arg[0], x.device, node.arg[1])),),
}

# Rules that read nothing of the forward pass but the incoming gradient (and shapes). PyTorch keeps no tensors for
# these, so it lets a graph made only of them (and of sums, and products with numbers) be walked backward again.
USES_ONLY_THE_GRADIENT = {Ops.ADD, Ops.NEG, Ops.TRUNC, Ops.CAST, Ops.CONTIGUOUS, Ops.COPY, Ops.RESHAPE, Ops.PERMUTE,
                          Ops.EXPAND, Ops.PAD, Ops.SHRINK, Ops.FLIP, Ops.MULTI, Ops.MSELECT}  # fmt: skip

# Ops whose output does not change smoothly with their inputs: no gradient flows through them.
NO_GRADIENT = {Ops.CMPLT, Ops.CMPNE, Ops.AND, Ops.OR, Ops.XOR, Ops.SHL, Ops.SHR, Ops.IDIV, Ops.DETACH,
               Ops.BITCAST, Ops.ARANGE, Ops.CONST, Ops.BUFFER, Ops.DEVICE, Ops.UNIQUE, Ops.ASSIGN}  # fmt: skip


# Composed ops whose gradient is better written by hand than derived from their primitives (a convolution's input
# gradient is a transposed convolution; derived, it is a sum over every sliding window that reads each input, a
# col2im; pow's derived gradient is 0 * inf at a base of 0). Keyed by the op's output node: its inputs, and the rule
# giving one gradient per input.
_CUSTOM: weakref.WeakKeyDictionary[UOp, tuple[tuple[UOp, ...], Callable[..., Grads]]] = weakref.WeakKeyDictionary()


def custom_gradient(out: Tensor, inputs: tuple[Tensor, ...], rule: Callable[..., Grads]) -> Tensor:
    """Let backward give `out`'s gradient to `inputs` as rule(g, *inputs), one per input (None for none), instead of
    deriving it through the primitives that compute `out`; returns `out`.

    The rule must be exact: `out`'s node may also be built elsewhere from the same inputs (hash-consing). Where
    autograd substitutes a realized tensor below the node, the rule moves to the node built in its place
    (substitute_keeping_rules)."""
    _CUSTOM[out.uop] = (tuple(t.uop for t in inputs), rule)
    return out


def _custom_rule(node: UOp, targets: set[UOp]) -> tuple[tuple[UOp, ...], Callable[..., Grads]] | None:
    """The hand-written rule of `node`, unless a wanted target lies between it and its inputs (only the primitives
    reach that one)."""
    found = _CUSTOM.get(node)
    if found is None:
        return None
    inputs = found[0]
    inside = node.toposort(enter=lambda n: n not in inputs)
    return None if any(n in targets and n is not node and n not in inputs for n in inside) else found


def substitute_keeping_rules(root: UOp, mapping: dict[UOp, UOp]) -> UOp:
    """root.substitute(mapping), with the hand-written rule of each output built again (custom_gradient) carried to
    the new node, over the new nodes of its inputs."""

    def carry(old: UOp, new: UOp, done: dict[UOp, UOp]) -> None:
        if (found := _CUSTOM.get(old)) is not None and all(i in done for i in found[0]):
            _CUSTOM[new] = (tuple(done[i] for i in found[0]), found[1])

    return root.substitute(mapping, carry)


def keeps_forward_values(ran: list[UOp]) -> bool:
    """Whether one of the rules that ran (compute_gradient's `ran`) reads values of the forward pass: PyTorch's
    would keep them, and let them go after backward() without retain_graph."""
    return any(_keeps_forward_values(node) for node in ran)


def _keeps_forward_values(node: UOp) -> bool:
    if node in _CUSTOM:  # a hand-written rule (a convolution's) reads the inputs
        return True
    if node.op in USES_ONLY_THE_GRADIENT:
        return False
    if node.op is Ops.REDUCE_AXIS and node.arg[0] is Ops.ADD:
        return False
    return node.op is not Ops.MUL or not any(_is_number(s) for s in node.src)  # times a number (a mean): none


def _is_number(node: UOp) -> bool:
    while node.op in (Ops.RECIP, Ops.CAST) or node.op in GroupOp.Movement:
        node = node.src[0]
    return node.op is Ops.CONST


def _on_path(root: UOp, targets: set[UOp]) -> set[UOp]:
    """The nodes from which some target can be reached: only these need gradients."""
    on_path: set[UOp] = set()
    for node in root.toposort():
        if node in targets or any(s in on_path for s in node.src):
            on_path.add(node)
    return on_path


def compute_gradient(root: UOp, root_grad: Tensor, targets: set[UOp], ran: list[UOp] | None = None) -> dict[UOp, UOp]:
    """d(root)/d(target) for each target reached from root, as lazy UOp graphs; `ran`, if given, collects the nodes
    whose rules ran. The rules work on Tensors of root_grad's class."""
    Tensor = type(root_grad)  # noqa: N806  (the class the rules' tensors are made of)
    on_path = _on_path(root, targets)
    grads: dict[UOp, Tensor] = {root: root_grad}
    blocked_cast: UOp | None = None
    for node in reversed(root.toposort()):
        if node not in grads or node.op in NO_GRADIENT:
            continue
        if node.op not in DERIVATIVES:
            raise NotImplementedError(f"gradient: no derivative rule for {node.op}")
        g = grads[node]
        if node.op is Ops.CAST and not dtypes.is_float(node.src[0].dtype):
            if node.src[0] in on_path:
                blocked_cast = node  # no gradient flows through an integer or bool value
            continue
        if (custom := _custom_rule(node, targets)) is not None:
            sources, rule = custom
            local_grads = rule(g, *(Tensor(s) for s in sources))
        else:
            sources = node.src
            local_grads = DERIVATIVES[node.op](g, node, *(Tensor(s) for s in sources), Tensor(node))
        if ran is not None:
            ran.append(node)
        for src, src_grad in zip(sources, local_grads):
            if src_grad is None or src not in on_path:
                continue
            grads[src] = grads[src] + src_grad if src in grads else src_grad
    if blocked_cast is not None and not any(t in grads for t in targets):
        raise TypeError(f"backward: the graph casts from {blocked_cast.src[0].dtype} to {blocked_cast.dtype} between a "
                        "tensor that requires grad and the output; gradients cannot flow through an integer or bool "
                        "value (cast to a float dtype instead)")  # fmt: skip
    # a tensor split over devices gets its gradient split the same way
    return {t: resharded(grads[t].uop, t.arg) if t.op is Ops.MULTI else grads[t].uop for t in targets if t in grads}
