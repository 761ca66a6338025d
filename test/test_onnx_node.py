"""The ONNX backend node tests, run through glassgrad.onnx on the CPU device.

The cases come from the installed `onnx` package (`onnx.backend.test.case.node`): each is a one-operator model, or
a function operator expanded into simpler ones (`..._expanded`), with inputs and the outputs of ONNX's reference
implementation. Each case in scope runs as one test and must match at the case's tolerance (rtol 1e-3, atol 1e-7;
for half-precision outputs a few units in the last place, see node_tests.LOOSER_RTOL), with the right dtype and
shape. KNOWN_FAILURES lists the in-scope cases that do not pass yet, each with its reason; they are strict xfails,
so one that starts passing fails the run until it is taken off the list.

Scope (node_tests.OUT_OF_SCOPE): every operator of the standard domain is in scope except training steps
(Adagrad, Adam, Momentum), strings, sequences and optionals, random numbers, quantization, the Scan loop (If and
Loop are in scope), classical ML (ai.onnx.ml), signal processing and image decoding (DFT, STFT, windows,
ImageDecoder), detection and data-dependent outputs (NonMaxSuppression, RoiAlign, Unique), and a few specialised or
new kernels (LinearAttention, FlexAttention). A case of
an operator in scope is still out of scope when it uses a data type glassgrad lacks (float8, float4, int4, int2,
strings), a sequence or optional value, a Scan in its expanded form, or training-mode dropout. Out-of-scope cases
are not run here; `python -m glassgrad.onnx.report` counts them by reason, and
test_out_of_scope_operators_are_errors_naming_them checks that running one is an error naming what glassgrad
lacks, never a silent result.
"""

import pytest

pytest.importorskip("onnx")  # the optional dependency (in the test extra)

from glassgrad.onnx.node_tests import collect_cases, run_case  # noqa: E402

CASES = collect_cases()
IN_SCOPE = [c for c in CASES if c.out_of_scope is None]

# in-scope cases that do not pass yet: name -> why
KNOWN_FAILURES: dict[str, str] = {}


def _param(case):
    marks = [pytest.mark.xfail(reason=KNOWN_FAILURES[case.name], strict=True)] if case.name in KNOWN_FAILURES else []
    return pytest.param(case, id=case.name, marks=marks)


@pytest.mark.parametrize("case", [_param(c) for c in IN_SCOPE])
def test_node_case(case):
    result = run_case(case, "CPU")
    assert result.status == "passed", f"{case.op}: {result.status}: {result.message}"


def test_known_failures_are_real_cases():
    names = {c.name for c in IN_SCOPE}
    assert not set(KNOWN_FAILURES) - names, "a known failure that is not an in-scope case: remove it"


def test_out_of_scope_operators_are_errors_naming_them():
    """One single-operator case of each out-of-scope reason and operator: an error saying what glassgrad lacks."""
    seen, checked = set(), 0
    for case in CASES:
        reason = case.out_of_scope
        if reason is None or len(case.model.graph.node) != 1 or (case.op, reason) in seen:
            continue
        seen.add((case.op, reason))
        result = run_case(case, "CPU")
        assert result.status == "unsupported", f"{case.name}: {result.status}: {result.message}"
        named = [case.op, "operator ", "data type", "strings", "list", "optional", "NoneType"]
        assert any(n in result.message for n in named), f"{case.name}: says not what is missing: {result.message}"
        checked += 1
    assert checked > 40
