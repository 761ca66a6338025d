"""Tensor methods of autograd: which tensors require grad, which are leaves, backward() and gradient().

As in PyTorch, a leaf is a tensor with no autograd history: one the user made, or one computed from tensors that
did not require grad (or under no_grad). Only float tensors can require grad. backward() differentiates the graph
that built the tensor (gradient.py's rules) and accumulates into the .grad of each leaf that requires grad; it lets
that graph go unless retain_graph=True, so a second backward() through it raises, as PyTorch's does.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from glassgrad.backward_targets import backward_targets
from glassgrad.dtype import dtypes
from glassgrad.engine.lazy import current, current_map, live_tensors
from glassgrad.errors import ArgumentError
from glassgrad.gradient import compute_gradient, keeps_forward_values, substitute_keeping_rules
from glassgrad.uop.ops import Ops, UOp, fresh_unique

if TYPE_CHECKING:
    from glassgrad.tensor import Tensor


class AutogradMixin:
    """Tensor methods of autograd."""

    _requires_grad: bool | None  # None: not asked (an optimizer may set it), as in tinygrad
    _is_leaf: bool  # no autograd history: backward() gives its gradient to .grad
    _autograd_uop: UOp | None  # the graph that built this tensor, kept for backward() after realize
    _graph_freed = False  # backward() ran without retain_graph: realizing this tensor keeps no graph for autograd
    _is_parameter = False  # a layer's weight or bias (backward_targets.parameter): PyTorch's nn.Parameter
    _grad_hooks: tuple[Callable[[Tensor], object], ...] = ()  # called after backward() fills .grad

    @property
    def requires_grad(self: Tensor) -> bool | None:
        """Whether backward() computes gradients through this tensor."""
        return self._requires_grad

    @requires_grad.setter
    def requires_grad(self: Tensor, value: bool | None) -> None:
        if not self._is_leaf:
            raise RuntimeError("you can only change requires_grad flags of leaf variables (this tensor was computed "
                               "from tensors that require grad); to use a computed value without gradient, use "
                               ".detach()")  # fmt: skip
        self._set_requires_grad(value)

    @property
    def is_leaf(self) -> bool:
        """Whether this tensor has no autograd history (it was not computed from a tensor that requires grad)."""
        return self._is_leaf

    def requires_grad_(self: Tensor, requires_grad: bool | None = True) -> Tensor:
        """Set requires_grad on a leaf (a tensor with no autograd history); returns the tensor."""
        if not self._is_leaf and requires_grad:  # already requires grad through its history, as in PyTorch
            return self
        self.requires_grad = requires_grad
        return self

    def _set_requires_grad(self: Tensor, value: bool | None) -> None:
        if value and not dtypes.is_float(self.dtype):
            raise RuntimeError(f"only Tensors of floating point dtype can require gradients, got {self.dtype}; "
                               "cast to a float dtype first")  # fmt: skip
        if value and self._is_leaf and not _owns_its_node(self.uop):
            # gradients find a tensor by its node: an interned one (the constant 2.0, a view of another tensor) would
            # collect the gradient of every other use of that node, so the leaf gets a node of its own
            self._set_uop(UOp(Ops.CONTIGUOUS, self.dtype, (self.uop, fresh_unique())))
        self._requires_grad = value

    def _autograd_root(self: Tensor) -> UOp:
        """The graph to differentiate: the one that built this tensor, even if it (or a tensor it was built
        from) was realized since: a realized tensor's node is replaced by the graph that computed it."""
        root = self._autograd_uop if self._autograd_uop is not None else self.uop
        built = {t.uop: t._autograd_uop for t in live_tensors() if t._autograd_uop is not None}
        for _ in range(len(built)):  # a graph that stands in may itself contain realized tensors
            expanded = substitute_keeping_rules(root, built) if built else root
            if expanded is root:
                break
            root = expanded
        return root

    def gradient(self: Tensor, *targets: Tensor, gradient: Tensor | None = None) -> list[Tensor]:
        """d(self)/d(target) for each target, whether or not it was marked requires_grad."""
        root = self._autograd_root()
        names = self._names_of(root, targets)
        for t, found in zip(targets, names):
            if not found:
                raise ArgumentError(f"gradient: a target of shape {t.shape} is not part of the graph of this tensor")
        grads = self._gradients(root, names, gradient)
        return [g if g is not None else t.zeros_like() for t, g in zip(targets, grads)]

    def backward(self: Tensor, gradient: Tensor | None = None, retain_graph: bool = False) -> Tensor:
        """Accumulate d(self)/d(leaf) into .grad of every leaf tensor with requires_grad=True in the graph (where none
        has, of every float tensor that did not say requires_grad=False, as tinygrad: backward_targets.py).
        As in PyTorch, the graph is let go afterwards (so realizing this tensor frees what the forward pass kept)
        unless retain_graph=True; a second backward() through it then raises."""
        if self._graph_freed:
            raise RuntimeError("backward: trying to backward through the graph a second time: the first backward() "
                               "let go of the values it kept; pass retain_graph=True to the first backward() to call "
                               "it again")  # fmt: skip
        root = self._autograd_root()
        leaves = backward_targets(self, root, self._names_of)  # PyTorch's rule, or tinygrad 0.14's where nothing asked
        ran: list[UOp] = []
        filled = []
        for (t, _), g in zip(leaves, self._gradients(root, [found for _, found in leaves], gradient, "backward", ran)):
            if g is not None:
                t.grad = g if t.grad is None else t.grad + g
                filled.append(t)
        for t in filled:  # once every .grad is filled: a hook may read the others' (DistributedDataParallel does)
            for hook in t._grad_hooks:
                hook(t)
        # as in PyTorch, a graph whose rules keep no forward values (sums, adds, views) can be walked again
        if not retain_graph and keeps_forward_values(ran):
            self._autograd_uop, self._graph_freed = None, True
        return self

    def register_post_accumulate_grad_hook(self: Tensor, hook: Callable[[Tensor], object]) -> None:
        """Call hook(self) after each backward() that accumulates into this leaf's .grad (PyTorch's)."""
        if not self._is_leaf:
            raise RuntimeError("register_post_accumulate_grad_hook: post accumulate grad hooks cannot be registered on "
                               "non-leaf tensors")  # fmt: skip
        self._grad_hooks = (*self._grad_hooks, hook)

    def _names_of(self: Tensor, root: UOp, tensors: Sequence[Tensor]) -> list[list[UOp]]:
        """For each tensor, the nodes of the autograd graph `root` that stand for it.

        The graph may have been built before some of its nodes (or the tensors) were realized: both sides are
        compared as they stand now."""
        by_current: dict[UOp, list[UOp]] = {}
        for original, now in current_map(root).items():
            by_current.setdefault(now, []).append(original)
        return [by_current.get(current(t.uop), []) for t in tensors]

    def _gradients(self: Tensor, root: UOp, names: list[list[UOp]], gradient: Tensor | None, op: str = "gradient",
                   ran: list[UOp] | None = None) -> list[Tensor | None]:  # fmt: skip
        seed = self._seed_gradient(gradient, op)
        grads = compute_gradient(root, seed, {node for found in names for node in found}, ran)
        out: list[Tensor | None] = []
        for found in names:
            parts = [type(self)(grads[node]) for node in found if node in grads]
            out.append(functools.reduce(lambda a, b: a + b, parts) if parts else None)
        return out

    def _seed_gradient(self: Tensor, gradient: Tensor | None, op: str) -> Tensor:
        if gradient is None:
            if self.numel() != 1:
                raise RuntimeError(f"{op}: the output has shape {self.shape}; an implicit gradient needs a scalar or "
                                   "one-element output, so pass gradient= of the same shape")  # fmt: skip
            return type(self).ones(self.shape, dtype=self.dtype, device=self.device)
        if gradient.shape != self.shape:
            raise ArgumentError(f"{op}: gradient has shape {gradient.shape} but the output has shape {self.shape}")
        return gradient.cast(self.dtype)


def _owns_its_node(node: UOp) -> bool:
    """Whether no other tensor can be built as this node: a buffer of its own (data taken from the host, an assign's
    target, a contiguous copy), maybe reshaped; not a constant, a computed value or a view of another tensor."""
    while node.op is Ops.RESHAPE:
        node = node.src[0]
    if node.op is Ops.MULTI:  # a sharded tensor: its shards
        return all(_owns_its_node(s) for s in node.src)
    if node.op in (Ops.CAST, Ops.COPY):  # data from the host: its PYTHON buffer, copied and converted
        node = node.src[0]
    return node.op in (Ops.BUFFER, Ops.ASSIGN, Ops.CONTIGUOUS)
