"""Run a program in glassgrad, compare with the reference, and shrink a failing one to the first value that fails.

Checks, in order: every step's shape and dtype (known before anything runs), the values of the outputs (exact for
ints and bools; for floats within a tolerance of the dtype, NaN equal to NaN, infinities by sign), then the gradients
of a random weighted sum of the float outputs with respect to every float input. A step that PyTorch rejects where
glassgrad must reject it too (integer division by zero, an index out of range) must raise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from glassgrad import dtypes

from .program import Program, Value
from .reference import NUMPY, RTOL, is_float, to_numpy

GRAD_SCALE = 10  # gradients go through more ops: looser by this factor


@dataclass
class Failure:
    kind: str  # what failed and in which op: "value:mod[uint8]", "crash", "missing-error:gather", ...
    message: str
    program: Program
    outputs: list[str]
    grads: bool

    leaves: list[str] | None = None

    def touches(self) -> set[str]:
        """The ops and features of the steps and inputs the failing values depend on."""
        need = _needed(self.program, self.outputs)
        steps = [s for s in self.program.steps if s.out in need]
        inputs = [i for i in self.program.inputs if i.name in need]
        found = {s.op for s in steps} | {f for s in steps for f in s.features} | {f for i in inputs for f in i.features}
        return found | ({"nonfinite-grad"} if self.grads and not _finite(self.program, need) else set())

    def reproducer(self) -> str:
        return render(self.program, self.outputs, self.grads, self.message, self.leaves)


# ---- rendering ----
def _literal(x) -> str:
    if isinstance(x, float):
        return "math.nan" if math.isnan(x) else ("math.inf" if x > 0 else "-math.inf") if math.isinf(x) else repr(x)
    if isinstance(x, list):
        return "[" + ", ".join(_literal(y) for y in x) + "]"
    return repr(x)


def _input_code(inp) -> str:
    a = inp.stored
    data = _literal(a.tolist() if a.dtype != np.bool_ else a.astype(bool).tolist())
    grad = ", requires_grad=True" if inp.grad else ""
    shape = "" if 0 not in a.shape else f".reshape{a.shape}"
    return f"{inp.name} = Tensor({data}, dtype=dtypes.{inp.dtype.name}, device=D{grad}){shape}"


def weights(program: Program, name: str) -> np.ndarray:
    """The fixed random weights of an output in the gradient's loss."""
    rng = np.random.default_rng((program.seed, int(name[1:])))
    return rng.uniform(-1, 1, program.values[name].shape).astype(np.float32)


def loss_cast(program: Program, name: str) -> str:
    """The float dtype an output enters the loss in: float64 stays float64. Cast to float32, its gradient rounds to
    float32, and where glassgrad's interning makes two outputs one node (x ** True and x.squeeze() are both x) their
    float32 gradients add before the cast back to float64, PyTorch's two after it."""
    return "double" if program.values[name].dtype == dtypes.float64 else "float"


def grad_outputs(program: Program, outputs: list[str]) -> list[str]:
    values = program.values  # a step that must raise has no value
    return [o for o in outputs if o in values and is_float(values[o].dtype) and values[o].ref.requires_grad]


def render(program: Program, outputs: list[str], grads: bool, note: str = "", leaves: list[str] | None = None) -> str:
    """The glassgrad program as a self-contained Python script (what runs is what is printed)."""
    lines = ["import math", "from glassgrad import Tensor, dtypes", f'D = "{program.device}"']
    leaf_of = {}
    needed = _needed(program, outputs)
    for inp in program.inputs:
        if inp.name in needed:
            lines.append(_input_code(inp))
    for name, v in program.values.items():
        if name in needed and hasattr(v, "leaf"):
            inp = program.inputs[[i.name for i in program.inputs].index(_input_of(program, name))]
            leaf_of[name] = inp.name
            lines.append(f"{name} = {inp.name}{inp.view}")
    for step in program.steps:
        if step.out in needed:
            lines.append(f"{step.out} = {step.code}")
    lines.append(f"outs = [{', '.join(outputs)}]")
    lines.append("outs[0].realize(*outs[1:])")
    gouts = grad_outputs(program, outputs) if grads else []
    if gouts:
        terms = []
        for o in gouts:
            w = weights(program, o)
            shape = "" if 0 not in w.shape else f".reshape{w.shape}"
            lines.append(f"w{o[1:]} = Tensor({_literal(w.tolist())}, device=D){shape}")
            terms.append(f"({o}.{loss_cast(program, o)}() * w{o[1:]}).sum()")
        lines.append(f"loss = {' + '.join(terms)}")
        leaves = leaves or [i.name for i in program.inputs if i.grad and i.name in needed]
        lines.append(f"grads = loss.gradient({', '.join(leaves)})")
        lines.append("grads[0].realize(*grads[1:])")
    if note:
        lines.append("# " + note.replace("\n", "\n# "))
    return "\n".join(lines)


def _input_of(program: Program, value_name: str) -> str:
    """The input whose view a leaf value is (values of inputs are made in input order)."""
    leaves = [n for n, v in program.values.items() if hasattr(v, "leaf")]
    return program.inputs[leaves.index(value_name)].name


def _needed(program: Program, outputs: list[str]) -> set[str]:
    """The values, steps and inputs that the outputs depend on."""
    need = set(outputs)
    for step in reversed(program.steps):
        if step.out in need:
            need |= set(step.args)
    for name in list(need):
        if hasattr(program.values.get(name), "leaf"):
            need.add(_input_of(program, name))
    return need


# ---- running ----
def check(program: Program, outputs: list[str] | None = None, grads: bool = True) -> Failure | None:
    """Run the program in glassgrad (in this process) and compare; the first disagreement, or None."""
    outputs = outputs if outputs is not None else program.outputs
    code = render(program, outputs, grads=False)
    ns: dict = {}
    expect = program.expect_error if program.expect_error and outputs == [program.steps[-1].out] else None
    try:
        exec(compile(code, f"<fuzz case {program.seed}>", "exec"), ns)
    except Exception as e:  # noqa: BLE001 - any exception glassgrad raises is a result to judge
        if expect:
            return None
        return _fail(program, outputs, grads, _exception_kind(e, program, outputs), f"{type(e).__name__}: {e}")
    if expect:
        op = program.steps[-1].op
        return _fail(
            program, outputs, grads, f"missing-error:{op}", f"PyTorch raises {expect}; glassgrad raised nothing"
        )
    for step in program.steps:
        if step.out in ns:
            got, want = ns[step.out], program.values[step.out]
            if tuple(got.shape) != want.shape or got.dtype != want.dtype:
                ours, theirs = f"{tuple(got.shape)} {got.dtype}", f"{want.shape} {want.dtype}"
                message = f"{step.out}: glassgrad {ours}, reference {theirs}"
                return _fail(program, [step.out], False, f"shape-dtype:{step.op}", message)
    for o in outputs:
        v = program.values[o]
        msg = compare(ns[o].numpy(), to_numpy(v.ref, v.dtype), v.dtype, v.tol)
        if msg:
            return _fail(program, [o], False, f"value:{_op_of(program, o)}", f"{o}: {msg}")
    if grads:
        return _check_grads(program, outputs, ns)
    return None


def _check_grads(program: Program, outputs: list[str], ns: dict) -> Failure | None:
    gouts = grad_outputs(program, outputs)
    leaves = [i for i in program.inputs if i.grad and i.name in _needed(program, outputs)]
    if not gouts or not leaves:
        return None
    if program.finite_grads_only and not _finite(program, _needed(program, outputs)):
        return None  # a known failure (known.py: nonfinite-grad) this run leaves out
    tleaves = [program.values[n].leaf for n, v in program.values.items() if hasattr(v, "leaf")]
    names = {i.name for i in leaves}
    tleaves = [t for t, i in zip(tleaves, program.inputs) if i.name in names]
    loss = sum((getattr(program.values[o].ref, loss_cast(program, o))() * torch.from_numpy(weights(program, o))).sum()
               for o in gouts)  # fmt: skip
    try:
        want = torch.autograd.grad(loss, tleaves, allow_unused=True, retain_graph=True)
    except RuntimeError as e:
        if "not implemented" in str(e):
            return None  # PyTorch defines no gradient here (floor_divide): nothing to compare with
        raise
    # the leaves PyTorch reaches through differentiable ops; glassgrad must reach the same ones
    keep = [i for i, w in enumerate(want) if w is not None]
    leaves, tleaves, want = [leaves[i] for i in keep], [tleaves[i] for i in keep], [want[i] for i in keep]
    if not leaves:
        return None
    code = render(program, outputs, grads=True, leaves=[i.name for i in leaves])
    try:
        exec(compile(code, f"<fuzz case {program.seed}>", "exec"), ns)
    except Exception as e:  # noqa: BLE001
        f = _fail(program, outputs, True, "grad-" + _exception_kind(e, program, outputs), f"{type(e).__name__}: {e}")
        f.leaves = [i.name for i in leaves]
        return f
    tol = max(program.values[o].tol for o in gouts)
    for inp, w, got in zip(leaves, want, ns["grads"]):
        # where PyTorch's gradient is NaN (0 * inf in its formula at an infinite input, a masked-off inf) glassgrad
        # may give a number; the other way round (NaN where PyTorch has a number) fails
        msg = compare(got.numpy(), to_numpy(w, inp.dtype), inp.dtype, tol * GRAD_SCALE, nan_is_any=True, gradient=True)
        if msg:
            f = _fail(program, outputs, True, f"grad:{'/'.join(_ops_between(program, outputs))}",
                      f"gradient of {inp.name}: {msg}")  # fmt: skip
            f.leaves = [i.name for i in leaves]
            return f
    return None


def _finite(program: Program, names: set[str]) -> bool:
    """Every float value of `names` is finite."""
    values = [v for n, v in program.values.items() if n in names and is_float(v.dtype)]
    return all(bool(torch.isfinite(v.ref).all()) for v in values)


def _op_of(program: Program, name: str) -> str:
    step = next((s for s in program.steps if s.out == name), None)
    if step is None:
        return "input"
    dts = sorted({program.values[a].dtype.name for a in step.args if a in program.values})
    return f"{step.op}[{','.join(dts)}]"


def _ops_between(program: Program, outputs: list[str]) -> list[str]:
    need = _needed(program, outputs)
    return sorted({s.op for s in program.steps if s.out in need})


def _exception_kind(e: Exception, program: Program, outputs: list[str]) -> str:
    text = str(e)
    if "failed to compile" in text:
        return "compile-error"
    return f"exception:{type(e).__name__}:{'/'.join(_ops_between(program, outputs))}"


def _fail(program, outputs, grads, kind, message) -> Failure:
    return Failure(kind, message, program, outputs, grads)


def compare(got: np.ndarray, want: np.ndarray, dtype, rtol: float, nan_is_any: bool = False,
            gradient: bool = False) -> str | None:  # fmt: skip
    """None where they agree (floats within rtol, relative to each value and to the output's size), else what differs
    and where (the first few places)."""
    if got.shape != want.shape:
        return f"shape {got.shape} != reference {want.shape}"
    if not is_float(dtype):
        bad = got != want.astype(NUMPY[dtype]) if dtype != dtypes.bfloat16 else got != want
    else:
        g, w = got.astype(np.float64), want.astype(np.float64)
        finite = np.isfinite(w)
        atol = rtol * max(1.0, float(np.abs(w[finite]).max(initial=0)) ** 0.5)
        with np.errstate(all="ignore"):
            close = np.abs(g - w) <= atol + rtol * np.abs(w)
        bad = ~np.where(finite, close, (g == w) | (np.isnan(w) & (np.isnan(g) | nan_is_any)))
        # at the edge of the range, one side overflows where the other (rounding its intermediates another way) just
        # does not: x * 6 / 6 is inf in PyTorch and 3e38 in glassgrad's x * (6 / 6); a huge finite value of the same
        # sign stands for inf there (the range of float16 where the path went through it)
        edge = 2.0**10 if rtol >= RTOL[dtypes.float16] else float(np.finfo(np.float64 if dtype == dtypes.float64
                                                                            else np.float32).max) / 64  # fmt: skip
        with np.errstate(all="ignore"):
            huge = (np.abs(np.where(np.isinf(w), g, w)) >= edge) & (np.sign(g) == np.sign(w))
        bad &= ~(huge & (np.isinf(w) != np.isinf(g)))
        if gradient:
            # a gradient at the edge of the range is a sum (over a broadcast, a gather, a matmul) whose terms add past
            # it: its partial sums overflow to +inf or -inf by the order of its terms, PyTorch's or glassgrad's (3.3e38
            # exactly was inf in PyTorch's order, -inf in glassgrad's); one overflowed and both at the edge, either
            # sign stands
            with np.errstate(all="ignore"):
                bad &= ~((np.isinf(g) | np.isinf(w)) & (np.abs(g) >= edge) & (np.abs(w) >= edge))
    if not bad.any():
        return None
    where = np.argwhere(bad)[:3]
    places = "; ".join(f"at {tuple(int(i) for i in p)}: {got[tuple(p)]!r} vs {want[tuple(p)]!r}" for p in where)
    return f"{int(bad.sum())} of {bad.size} differ ({places}); glassgrad {_short(got)}, reference {_short(want)}"


def _short(a: np.ndarray) -> str:
    text = np.array2string(a.reshape(-1)[:12], precision=6, separator=", ")
    return text + (" ..." if a.size > 12 else "")


def shrink(failure: Failure) -> Failure:
    """The earliest single value whose check fails the same way (its graph alone, no unrelated steps)."""
    program = failure.program
    check_kind = failure.kind.split(":")[0]
    if check_kind in ("missing-error",):
        return failure
    candidates = [s.out for s in program.steps if s.out in _needed(program, failure.outputs)]
    for name in candidates:
        for grads in (False, True) if failure.grads else (False,):
            if grads and not grad_outputs(program, [name]):
                continue
            f = check(program, [name], grads)
            if f is not None and f.kind.split(":")[0] == check_kind:
                return f
    return failure


__all__ = ["Failure", "check", "shrink", "render", "compare", "Value"]
