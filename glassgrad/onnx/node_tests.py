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
from glassgrad.onnx.loader import ONNX_DTYPES, OnnxUnsupported, import_onnx, onnx_dtype
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
    "control flow: Scan (If and Loop are in scope)": ("Scan",),
    "classical ML (ai.onnx.ml)": ("ArrayFeatureExtractor", "Binarizer", "TreeEnsemble", "TreeEnsembleClassifier",
                                  "TreeEnsembleRegressor", "OneHotEncoder", "Imputer", "Normalizer", "Scaler"),
    "signal processing and images": ("DFT", "STFT", "BlackmanWindow", "HammingWindow", "HannWindow",
                                     "MelWeightMatrix", "ImageDecoder"),
    "detection and data-dependent outputs": ("NonMaxSuppression", "RoiAlign", "Unique"),
    "specialised or new kernels": ("LinearAttention", "FlexAttention"),
}  # fmt: skip
# Half-precision outputs: the reference rounds after every NumPy step, glassgrad computes half math in float32 and
# rounds once, so the two differ by a few units in the last place. bfloat16: 2 ULPs, as the onnx backend runner;
# float16: 4 ULPs (2**-8), our choice for the same reason.
LOOSER_RTOL = {"bfloat16": 2**-6, "float16": 2**-8}
EXCLUDED = {op: reason for reason, ops in OUT_OF_SCOPE.items() for op in ops}


LACKING_TYPES = "data types glassgrad lacks (float8, float4, int4, int2, strings)"
SEQUENCES = "sequences and optionals"
CONTROL_FLOW = EXCLUDED["Scan"]
RANDOM = "random numbers (no fixed output)"


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
    def out_of_scope(self) -> str | None:
        """Why this case is outside what glassgrad should support, or None: its operator, or (for an operator in
        scope) a data type glassgrad lacks, a sequence or optional value, a Scan in its expanded form, or
        training-mode dropout (random)."""
        if self.op in EXCLUDED:
            return EXCLUDED[self.op]
        onnx = import_onnx()
        values = list(self.inputs) + list(self.outputs)
        if any(isinstance(v, list) or v is None for v in values):
            return SEQUENCES
        graph = self.model.graph
        if any(i.type.WhichOneof("value") != "tensor_type" for i in list(graph.input) + list(graph.output)):
            return SEQUENCES
        types = [i.type.tensor_type.elem_type for i in list(graph.input) + list(graph.output)]
        types += [a.i for n in graph.node if n.op_type == "Cast" for a in n.attribute if a.name == "to"]
        types += [v.data_type for v in values if isinstance(v, onnx.TensorProto)]
        if any(t not in ONNX_DTYPES for t in types):
            return LACKING_TYPES
        if any(n.op_type == "Scan" for n in graph.node):
            return CONTROL_FLOW
        if self.op == "Dropout" and len(self.inputs) == 3 and self.inputs[2] and self.inputs[1] != 0:
            return RANDOM
        return None


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


def _array(value, where: str):
    """A case's input or output as a NumPy array; sequences, optionals and types glassgrad lacks are unsupported."""
    import numpy as np

    onnx = import_onnx()
    if isinstance(value, onnx.TensorProto):
        onnx_dtype(value.data_type, where)  # an error naming a type glassgrad does not have
        return onnx.numpy_helper.to_array(value)
    if isinstance(value, (np.ndarray, np.generic)):
        if value.dtype == object:
            raise OnnxUnsupported(f"{where} holds strings; glassgrad has numeric tensors only")
        return np.asarray(value)
    raise OnnxUnsupported(f"{where} is a {type(value).__name__}; glassgrad takes tensor inputs only")


def run_case(case: NodeCase, device: str = "CPU") -> CaseResult:
    """Run one case and compare every output with the reference (dtype, shape, values at the case's tolerance)."""
    import numpy as np

    start = time.perf_counter()
    try:
        runner = OnnxRunner(case.model, device)
        arrays = [_array(value, f"input {i}") for i, value in enumerate(case.inputs)]
        got = runner(dict(zip(runner.input_names, arrays)))
        outs = [got[name] for name in runner.output_names]
        Tensor.realize(*outs)  # one realize for all outputs: one schedule, shared kernels
        for name, out, want in zip(runner.output_names, outs, [_array(o, "output") for o in case.outputs]):
            actual = _as_numpy(out)
            expected = np.asarray(want).astype(np.float32) if want.dtype.name == "bfloat16" else np.asarray(want)
            if actual.dtype != _expected_dtype(want):
                raise AssertionError(f"output {name!r}: dtype {actual.dtype}, expected {expected.dtype}")
            if actual.shape != expected.shape:
                raise AssertionError(f"output {name!r}: shape {actual.shape}, expected {expected.shape}")
            rtol = max(case.rtol, LOOSER_RTOL.get(want.dtype.name, 0.0))
            np.testing.assert_allclose(actual, expected, rtol=rtol, atol=case.atol, err_msg=f"output {name!r}")
    except OnnxUnsupported as e:
        return CaseResult(case, "unsupported", str(e), time.perf_counter() - start)
    except Exception as e:
        first = str(e).strip().splitlines()
        return CaseResult(case, "failed", f"{type(e).__name__}: {' '.join(first[:6])}", time.perf_counter() - start)
    return CaseResult(case, "passed", "", time.perf_counter() - start)
