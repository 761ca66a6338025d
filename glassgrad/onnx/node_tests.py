"""The ONNX backend node tests: the cases the `onnx` package builds with its reference implementation, run here.

Each case is a one-operator model (or a function operator expanded into simpler ones, named `..._expanded`) with
inputs and the reference outputs. `run_case` runs one through OnnxRunner and compares at the case's tolerances;
`SCOPE` says which operators a framework of glassgrad's kind should support, and why the others are left out.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

from glassgrad.dtype import dtypes
from glassgrad.onnx.loader import ONNX_DTYPES, OnnxUnsupported, import_onnx
from glassgrad.onnx.runner import OnnxRunner
from glassgrad.tensor import Tensor

# Operators outside the scope of a tensor framework like glassgrad, by reason. Every other operator of the
# standard domain is in scope: its cases count toward the pass rate.
OUT_OF_SCOPE: dict[str, tuple[str, ...]] = {
    "training (optimizer steps)": ("Adagrad", "Adam", "Momentum", "Gradient"),
    "strings": ("StringConcat", "StringNormalizer", "StringSplit", "RegexFullMatch", "LabelEncoder",
                "TfIdfVectorizer"),
    "sequences and optionals": ("SequenceAt", "SequenceConstruct", "SequenceEmpty", "SequenceErase",
                                "SequenceInsert", "SequenceLength", "SequenceMap", "SplitToSequence",
                                "ConcatFromSequence", "Optional", "OptionalGetElement", "OptionalHasElement"),
    "random numbers (no fixed output)": ("Bernoulli", "RandomNormal", "RandomNormalLike", "RandomUniform",
                                         "RandomUniformLike", "Multinomial"),
    "quantization (int8/float8/int4 types)": ("QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear",
                                              "QLinearConv", "QLinearMatMul", "ConvInteger", "MatMulInteger"),
    "control flow (subgraphs)": ("If", "Loop", "Scan"),
    "classical ML (ai.onnx.ml)": ("ArrayFeatureExtractor", "Binarizer", "TreeEnsemble", "TreeEnsembleClassifier",
                                  "TreeEnsembleRegressor", "OneHotEncoder", "Imputer", "Normalizer", "Scaler"),
    "signal processing and images": ("DFT", "STFT", "BlackmanWindow", "HammingWindow", "HannWindow",
                                     "MelWeightMatrix", "ImageDecoder"),
    "detection and data-dependent outputs": ("NonMaxSuppression", "RoiAlign", "Unique"),
    "recurrent layers (sequence loops)": ("RNN", "GRU", "LSTM"),
    "specialised or new kernels": ("DeformConv", "CausalConvWithState", "LinearAttention", "FlexAttention",
                                   "TensorScatter", "Det", "Col2Im", "GridSample", "AffineGrid"),
}  # fmt: skip
EXCLUDED = {op: reason for reason, ops in OUT_OF_SCOPE.items() for op in ops}


@dataclass
class NodeCase:
    name: str
    op: str
    model: object
    inputs: list
    outputs: list
    rtol: float
    atol: float

    @property
    def in_scope(self) -> bool:
        return self.op not in EXCLUDED


@dataclass
class CaseResult:
    case: NodeCase
    status: str  # "passed", "failed" or "unsupported"
    message: str = ""
    seconds: float = 0.0


def collect_cases() -> list[NodeCase]:
    """Every node test case the installed `onnx` package generates, each tagged with the operator it tests."""
    import_onnx()
    import warnings

    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():  # the generators divide by zero on purpose (inf and nan cases)
        warnings.simplefilter("ignore")
        raw = [c for c in collect_testcases(None) if c.kind == "node"]
    tested = {c.name: c.model.graph.node[0].op_type for c in raw if len(c.model.graph.node) == 1}
    cases = []
    for c in raw:
        parent = re.sub(r"_expanded(_ver\d+)?$", "", c.name)
        op = tested.get(parent) or c.model.graph.node[-1].op_type
        (inputs, outputs), = c.data_sets  # fmt: skip
        cases.append(NodeCase(c.name, op, c.model, list(inputs), list(outputs), c.rtol, c.atol))
    return cases


def _as_numpy(t: Tensor):
    return (t.cast(dtypes.float32) if t.dtype == dtypes.bfloat16 else t).numpy()


def _expected_dtype(array) -> object:
    import numpy as np

    return np.dtype(np.float32) if array.dtype.name == "bfloat16" else array.dtype


def run_case(case: NodeCase, device: str = "CPU") -> CaseResult:
    """Run one case and compare every output with the reference (dtype, shape, values at the case's tolerance)."""
    import numpy as np

    start = time.perf_counter()
    try:
        runner = OnnxRunner(case.model, device)
        for i, value in enumerate(case.inputs):
            if not isinstance(value, np.ndarray):
                raise OnnxUnsupported(f"input {i} is a {type(value).__name__}; glassgrad takes tensor inputs only")
        got = runner(dict(zip(runner.input_names, case.inputs)))
        outs = [got[name] for name in runner.output_names]
        Tensor.realize(*outs)  # one realize for all outputs: one schedule, shared kernels
        for name, out, want in zip(runner.output_names, outs, case.outputs):
            actual = _as_numpy(out)
            expected = np.asarray(want).astype(np.float32) if want.dtype.name == "bfloat16" else np.asarray(want)
            if actual.dtype != _expected_dtype(want):
                raise AssertionError(f"output {name!r}: dtype {actual.dtype}, expected {expected.dtype}")
            if actual.shape != expected.shape:
                raise AssertionError(f"output {name!r}: shape {actual.shape}, expected {expected.shape}")
            np.testing.assert_allclose(actual, expected, rtol=case.rtol, atol=case.atol, err_msg=f"output {name!r}")
    except OnnxUnsupported as e:
        return CaseResult(case, "unsupported", str(e), time.perf_counter() - start)
    except Exception as e:
        first = str(e).strip().splitlines()
        return CaseResult(case, "failed", f"{type(e).__name__}: {' '.join(first[:6])}", time.perf_counter() - start)
    return CaseResult(case, "passed", "", time.perf_counter() - start)


__all__ = ["ONNX_DTYPES", "CaseResult", "NodeCase", "collect_cases", "run_case"]
