"""Which tensors backward() gives a gradient to: one rule for PyTorch scripts and tinygrad 0.14 scripts.

`requires_grad` has three values, as in tinygrad: True (asked for), False (never), None (not said: the default).
1. Where some leaf of the graph has requires_grad=True, those get .grad, as in PyTorch (an optimizer sets its
   parameters' None to True, so a training step fills only the parameters' gradients, never the data's); and so do
   the layer parameters of the graph that said nothing (nn's weights and biases, None as tinygrad's): they are
   PyTorch's nn.Parameter, which requires grad, so `x.requires_grad_(); nn.Linear(3, 2)(x).sum().backward()` fills
   weight.grad and bias.grad with or without an optimizer. A parameter set to requires_grad=False stays out.
2. Where none has, every float tensor of the graph whose requires_grad is None gets .grad, as tinygrad 0.14's
   backward() does (it has no requires_grad=True to ask with): `x = Tensor([1.0, 2.0]); (x * x).sum().backward()`
   fills x.grad. A Python number made a tensor (a CONST) is not one of them, as in tinygrad.
3. Where there is neither (or only the output itself), the graph has nothing to differentiate with respect to (only
   integers, constants, or tensors that said requires_grad=False): that is PyTorch's error, a RuntimeError.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from glassgrad.dtype import dtypes
from glassgrad.engine.lazy import live_tensors
from glassgrad.uop.ops import Ops, UOp

if TYPE_CHECKING:
    from glassgrad.tensor import Tensor

NamesOf = Callable[[UOp, Sequence["Tensor"]], list[list[UOp]]]


def backward_targets(output: Tensor, root: UOp, names_of: NamesOf) -> list[tuple[Tensor, list[UOp]]]:
    """The tensors backward() from `output` (whose graph is `root`) fills, each with the nodes of the graph that
    stand for it."""
    live = live_tensors()
    asked = [t for t in live if t._requires_grad and t._is_leaf]
    if found := _in_graph(root, asked, names_of):
        unsaid = [t for t in live if t._requires_grad is None and t._is_leaf and dtypes.is_float(t.dtype)]
        parameters = [t for t in unsaid if t._is_parameter]
        return found + _in_graph(root, parameters, names_of)
    unsaid = [t for t in live if t._requires_grad is None and dtypes.is_float(t.dtype) and t.uop.op is not Ops.CONST]
    found = _in_graph(root, unsaid, names_of)
    if any(t is not output for t, _ in found):  # the output alone is no input to differentiate with respect to
        return found
    raise RuntimeError(
        "backward: element 0 of tensors does not require grad and does not have a grad_fn: no tensor of this graph "
        "can have a gradient (none requires grad, and none is a float tensor that did not say requires_grad=False); "
        "make the inputs float tensors, or pass requires_grad=True"
    )


def parameter(t: Tensor) -> Tensor:
    """Mark `t` a layer's parameter (nn's weights and biases; PyTorch's nn.Parameter): where backward() fills the
    tensors asked with requires_grad=True, it fills this one too while its requires_grad is None (rule 1)."""
    t._is_parameter = True
    return t


def unasked_flag(parents: Sequence[Tensor]) -> bool | None:
    """requires_grad of a result that does not require grad: False where its inputs said False (a Python number's
    constant says nothing), as tinygrad's results keep it; else None."""
    said_no = [p._requires_grad is False for p in parents if p.uop.base.op is not Ops.CONST]
    return False if said_no and all(said_no) else None


def _in_graph(root: UOp, tensors: list[Tensor], names_of: NamesOf) -> list[tuple[Tensor, list[UOp]]]:
    return [(t, found) for t, found in zip(tensors, names_of(root, tensors)) if found]
