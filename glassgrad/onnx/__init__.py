"""Run ONNX models with glassgrad: `OnnxRunner(path)({"input": array}) -> {"output": Tensor}`.

Needs the optional `onnx` package (pip install onnx) to parse model files. The operators live in ops_*.py, one
family per file; registry.py holds the table and the calling convention.
"""

from glassgrad.onnx import (  # noqa: F401  (fill OPS)
    ops_attention,
    ops_control,
    ops_math,
    ops_nn,
    ops_recurrent,
    ops_reduce,
    ops_resize,
    ops_sample,
    ops_shape,
)
from glassgrad.onnx.loader import OnnxError, OnnxUnsupported, load_model
from glassgrad.onnx.registry import OPS
from glassgrad.onnx.runner import OnnxRunner

__all__ = ["OPS", "OnnxError", "OnnxRunner", "OnnxUnsupported", "load_model"]
