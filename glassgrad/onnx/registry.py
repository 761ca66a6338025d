"""The operator table: `@onnx_op("Name")` registers a function that maps one ONNX node onto Tensor methods.

An operator function takes the node's context first, then the node's inputs in order (None for an omitted
optional input), then its attributes as keyword-only arguments with the ONNX defaults. It returns a Tensor or a
tuple of Tensors, one per output.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from glassgrad.onnx.loader import OnnxError, OnnxUnsupported
from glassgrad.tensor import Tensor

OPS: dict[str, Callable[..., Any]] = {}


def onnx_op(*names: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register the decorated function as the implementation of the ONNX operators `names`."""

    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        for name in names:
            OPS[name] = fn
        return fn

    return register


@dataclass
class OpContext:
    """What an operator may need beside its inputs: its name, the model's opset and the device to run on."""

    op: str
    node: str
    opset: int
    device: str  # the runner's device: where tensors an operator creates from nothing go
    runner: Any = None  # the OnnxRunner, for operators that run subgraphs (If)
    outputs: int = 1  # how many outputs the node names (Split's count; MaxPool's optional Indices)
    scope: dict = field(default_factory=dict)  # the values computed so far, which subgraphs (If, Loop) can read

    def error(self, message: str, unsupported: bool = False) -> OnnxError:
        cls = OnnxUnsupported if unsupported else OnnxError
        return cls(f"{self.op} (node {self.node!r}): {message}")

    def values(self, t: Tensor | None) -> list | None:
        """A small input whose values decide shapes (a Reshape's shape, a Slice's starts) as a Python list."""
        if t is None:
            return None
        values = t.tolist()
        return values if isinstance(values, list) else [values]

    def ints(self, t: Tensor | None) -> list[int] | None:
        values = self.values(t)
        return None if values is None else [int(v) for v in _flat(values)]

    def scalar(self, t: Tensor | None, default: Any = None) -> Any:
        """A one-element input as a Python number."""
        if t is None:
            return default
        if t.numel() != 1:
            raise self.error(f"expected a single value, got shape {t.shape}")
        return t.reshape(()).item()


def _flat(values: Any) -> list:
    return [v for x in values for v in _flat(x)] if isinstance(values, list) else [values]


@functools.cache
def _parameters(fn: Callable[..., Any]) -> list[inspect.Parameter]:
    return list(inspect.signature(fn).parameters.values())[1:]  # after the context


def call_op(ctx: OpContext, inputs: Sequence[Tensor | None], attrs: dict[str, Any]) -> tuple[Tensor | None, ...]:
    """Run one node's operator; an operator or attribute glassgrad lacks is an error naming it and the node."""
    fn = OPS.get(ctx.op)
    if fn is None:
        raise OnnxUnsupported(f"operator {ctx.op} (node {ctx.node!r}) is not supported by glassgrad")
    params = _parameters(fn)
    keyword = {p.name for p in params if p.kind == p.KEYWORD_ONLY}
    if unknown := sorted(set(attrs) - keyword):
        raise ctx.error(f"attribute {', '.join(map(repr, unknown))} is not supported", unsupported=True)
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if not any(p.kind == p.VAR_POSITIONAL for p in params) and len(inputs) > len(positional):
        raise ctx.error(f"takes at most {len(positional)} inputs, got {len(inputs)}", unsupported=True)
    out = fn(ctx, *inputs, **attrs)
    return out if isinstance(out, tuple) else (out,)
