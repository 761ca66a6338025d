"""OnnxRunner: an ONNX graph run node by node as lazy glassgrad Tensor ops.

Values that decide shapes (the outputs of Shape and Size, small integer constants and initializers) live on the
PYTHON device, so a Reshape whose shape comes from Shape -> Gather -> Concat reads it without compiling a kernel;
they move to the run device as soon as they meet a tensor there.
"""

from __future__ import annotations

from typing import Any

from glassgrad.dtype import dtypes
from glassgrad.onnx.loader import (
    OnnxError,
    OnnxUnsupported,
    array_to_tensor,
    attribute_value,
    import_onnx,
    load_model,
    onnx_dtype,
    tensor_from_proto,
)
from glassgrad.onnx.registry import OpContext, call_op
from glassgrad.runtime.device import Device
from glassgrad.tensor import Tensor

HOST = "PYTHON"  # where shape arithmetic runs: interpreted, no compiler
HOST_MAX_ELEMENTS = 64


def _on_host(t: Tensor) -> Tensor:
    """Integer values small enough to be shape arithmetic go to the host device."""
    small_int = t.dtype != dtypes.bool and dtypes.is_int(t.dtype) and t.numel() <= HOST_MAX_ELEMENTS
    return t.to(HOST) if small_int else t


class OnnxRunner:
    """Run an ONNX model: `OnnxRunner(path_or_bytes_or_ModelProto)(inputs) -> {output name: Tensor}`.

    Inputs are a dict of name -> Tensor or NumPy array. The outputs are lazy Tensors on `device` (default:
    Device.DEFAULT); call realize() or numpy() on them. Wrap the call in TinyJit when the input shapes are fixed.
    """

    def __init__(self, model: Any, device: str | None = None):
        onnx = import_onnx()
        model = load_model(model)
        if model.functions:  # model-local functions: inline them so every node is a standard operator
            model = onnx.inliner.inline_local_functions(model)
        self.model, self.graph = model, model.graph
        self.device = device or Device.DEFAULT
        # a model of other domains only (ai.onnx.ml, training) still names its operators in the unsupported error
        standard = [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")]
        self.opset = standard[0] if standard else onnx.defs.onnx_opset_version()
        self.weights = {i.name: _on_host(tensor_from_proto(i, self.device)) for i in self.graph.initializer}
        if self.weights:
            Tensor.realize(*self.weights.values())  # copied to the device once, not on every call
        self.input_names = [i.name for i in self.graph.input if i.name not in self.weights]
        self.output_names = [o.name for o in self.graph.output]

    def __call__(self, inputs: dict[str, Any] | None = None, debug: bool = False) -> dict[str, Tensor]:
        """The graph's outputs for `inputs` (name -> Tensor or array), as lazy Tensors on the runner's device."""
        inputs = dict(inputs or {})
        if unknown := sorted(set(inputs) - set(self.input_names)):
            raise OnnxError(f"unknown input {', '.join(map(repr, unknown))}; the model's inputs are {self.input_names}")
        values: dict[str, Tensor | None] = {"": None, **self.weights}
        for spec in self.graph.input:
            if spec.name in self.weights:
                continue
            if spec.name not in inputs:
                raise OnnxError(f"missing input {spec.name!r}; the model's inputs are {self.input_names}")
            values[spec.name] = self._checked_input(spec, inputs[spec.name])
        values = self.run_graph(self.graph, values, debug)
        return {name: self._output(values, name) for name in self.output_names}

    def _output(self, values: dict[str, Tensor | None], name: str) -> Tensor:
        if values.get(name) is None:
            raise OnnxError(f"output {name!r} is not produced by any node")
        return values[name].to(self.device)

    def _checked_input(self, spec, value: Any) -> Tensor:
        """An input as a Tensor on the device, checked against the type and static shape the model declares."""
        t = value.to(self.device) if isinstance(value, Tensor) else array_to_tensor(value, self.device)
        kind = spec.type.WhichOneof("value")
        if kind != "tensor_type":
            raise OnnxUnsupported(f"input {spec.name!r} is a {kind}; glassgrad supports tensor inputs only")
        want = onnx_dtype(spec.type.tensor_type.elem_type, f"input {spec.name!r}")
        if t.dtype != want:
            raise OnnxError(f"input {spec.name!r} must have dtype {want}, got {t.dtype}")
        if spec.type.tensor_type.HasField("shape"):
            dims = spec.type.tensor_type.shape.dim
            fixed = [d.dim_value if d.HasField("dim_value") else None for d in dims]
            if len(fixed) != t.ndim or any(f is not None and f != s for f, s in zip(fixed, t.shape)):
                declared = tuple(f if f is not None else "?" for f in fixed)
                raise OnnxError(f"input {spec.name!r} must have shape {declared}, got {t.shape}")
        return t

    def run_graph(self, graph, values: dict[str, Tensor | None], debug: bool = False) -> dict[str, Tensor | None]:
        """Run `graph`'s nodes in order over `values` (name -> Tensor), adding each node's outputs to them."""
        values = dict(values)
        for number, node in enumerate(graph.node):
            name = node.name or f"#{number} {node.op_type}"
            if node.domain not in ("", "ai.onnx"):
                raise OnnxUnsupported(f"operator {node.domain}.{node.op_type} (node {name!r}) is not supported "
                                      f"by glassgrad: only the standard ONNX domain is")  # fmt: skip
            for i in node.input:
                if i not in values:
                    raise OnnxError(f"node {name!r} ({node.op_type}) reads {i!r}, which nothing before it produces")
            ctx = OpContext(node.op_type, name, self.opset, self.device, self, len(node.output), values)
            attrs = {a.name: attribute_value(a, self.device) for a in node.attribute}
            args = _same_device([values[i] for i in node.input], self.device)
            try:
                outs = call_op(ctx, args, attrs)
            except OnnxError:
                raise
            except Exception as e:
                raise OnnxError(f"{node.op_type} (node {name!r}) failed: {type(e).__name__}: {e}") from e
            for out_name, out in zip(node.output, outs):
                if out_name:
                    values[out_name] = out
            if debug:
                shapes = [(o, tuple(values[o].shape)) for o in node.output if o and values.get(o) is not None]
                print(f"{number:4d} {node.op_type:20s} {name:30s} -> {shapes}")
        return values


def _same_device(args: list[Tensor | None], device: str) -> list[Tensor | None]:
    """Inputs on mixed devices all move to the run device (host values join the tensors they meet)."""
    devices = {a.device for a in args if a is not None}
    if len(devices) <= 1:
        return args
    return [a.to(device) if a is not None and a.device != device else a for a in args]
