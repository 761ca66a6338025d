"""A random program: inputs of random shape, dtype and layout, then steps that each apply one op to earlier values.

The generator runs the reference (PyTorch) as it goes, on the real data, so every step it keeps is one whose result
PyTorch defines, with its shape and dtype known; a step PyTorch rejects is kept only where glassgrad must reject it
too (`Spec.errors`), and ends the program. The glassgrad side of each step is Python source, so the program that runs
is the reproducer that is printed.
"""

from __future__ import annotations

import math
import random
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from glassgrad import dtypes
from glassgrad.dtype import ALL_DTYPES, DType

from .reference import CARRIED, NUMPY, RTOL, Undefined, dtype_of, from_numpy, is_float, is_int, wrap

MAX_NUMEL = 2048  # a step whose result is bigger is dropped (expand, matmul and stack can grow fast)
SIZES = (1, 1, 2, 2, 3, 3, 4, 5, 7, 0)  # dims to pick from: 1 (broadcast), odd, and now and then 0
FLOAT_WEIGHTS = {dtypes.float32: 6, dtypes.float64: 1, dtypes.float16: 1.5, dtypes.bfloat16: 1}


@dataclass(eq=False)
class Value:
    """A value of the program as the reference knows it."""

    name: str
    ref: torch.Tensor  # the reference result (a carrier for uint16/32/64); part of torch's autograd graph
    dtype: DType
    exact: bool  # computed without rounding that could differ: a discontinuous op may read it
    tol: float = 0.0  # the relative tolerance of the least precise float dtype it was computed through

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.ref.shape)


@dataclass(eq=False)
class Input:
    """A leaf: a stored array and the view it is read through (a layout)."""

    name: str
    stored: np.ndarray
    dtype: DType
    view: str  # glassgrad source appended to the leaf, e.g. ".permute(1, 0)"
    ref_view: Callable[[torch.Tensor], torch.Tensor]
    grad: bool
    features: tuple[str, ...] = ()


@dataclass
class Spec:
    """One step as an op proposes it: glassgrad source over operand names, and the reference over their tensors."""

    code: str
    args: tuple[str, ...]
    ref: Callable[..., torch.Tensor]
    dtype: DType | None = None  # the result's dtype where it is a carrier (PyTorch cannot say)
    keeps_exact: bool = False  # exact operands give an exact result (movement, neg, casts, ...)
    needs_exact: bool = False  # discontinuous (floor, comparisons, argmax, float -> int): reads exact values only
    errors: tuple[type[BaseException], ...] = ()  # errors of PyTorch that glassgrad must raise too (then the step ends)
    features: tuple[str, ...] = ()
    tol: float = 0.0  # the least relative tolerance of the result (an op documented less accurate than its dtype)


@dataclass
class Step:
    out: str
    op: str
    code: str
    args: tuple[str, ...]
    ref: Callable[..., torch.Tensor]
    dtype: DType | None
    expect_error: str | None = None
    features: tuple[str, ...] = ()


@dataclass
class Program:
    seed: int
    device: str
    inputs: list[Input] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    values: dict[str, Value] = field(default_factory=dict)
    outputs: list[str] = field(default_factory=list)
    finite_grads_only: bool = False  # check gradients only where every value they pass through is finite

    @property
    def expect_error(self) -> str | None:
        return self.steps[-1].expect_error if self.steps else None

    def ops(self) -> list[str]:
        return [s.op for s in self.steps]


class Gen:
    """What an op's builder may use: the random source, the values so far, and ways to make more inputs."""

    def __init__(self, seed: int, device: str, exclude: frozenset[str]):
        self.rng = random.Random(seed)
        self.np = np.random.default_rng(seed)
        self.exclude = exclude
        self.program = Program(seed, device)
        self.specials = self.rng.random() < 0.3  # inf, nan, -0.0, extremes in a third of the programs

    # ---- picking ----
    def pick(self, pred: Callable[[Value], bool] = lambda v: True) -> Value | None:
        """A value satisfying `pred`, the recent ones likelier (so steps chain)."""
        values = [v for v in self.program.values.values() if pred(v)]
        if not values:
            return None
        return self.rng.choices(values, weights=[2.0**i for i in range(len(values))])[0]

    def dtype(self, kinds: str = "fib") -> DType:
        """A random dtype of the kinds asked: f(loat), i(nt), b(ool); floats likelier."""
        pool = [(d, FLOAT_WEIGHTS[d]) for d in FLOAT_WEIGHTS if "f" in kinds]
        pool += [(d, 0.5) for d in ALL_DTYPES if is_int(d) and "i" in kinds]
        pool += [(dtypes.bool, 0.6)] if "b" in kinds else []
        return self.rng.choices([d for d, _ in pool], weights=[w for _, w in pool])[0]

    def shape(self, ndim: int | None = None) -> tuple[int, ...]:
        ndim = self.rng.choice((0, 1, 1, 2, 2, 2, 3, 3, 4)) if ndim is None else ndim
        shape = tuple(self.rng.choice(SIZES) for _ in range(ndim))
        return shape if math.prod(shape) <= 64 else tuple(min(s, 3) for s in shape)

    def allowed(self, *features: str) -> bool:
        return not (set(features) & self.exclude)

    # ---- data ----
    def array(self, shape: tuple[int, ...], dtype: DType, nonzero: bool = False) -> np.ndarray:
        """Random values of `dtype`: small whole numbers for ints; the dtype's extremes sprinkled in now and then."""
        r, n = self.np, math.prod(shape)
        if dtype == dtypes.bool:
            return r.random(shape) < 0.5
        if is_int(dtype):
            lo, hi = dtypes.min(dtype), dtypes.max(dtype)
            a = r.integers(max(lo, -9), min(hi, 12), n, endpoint=True)
            a = [int(x) for x in a]
            if self.specials and n:
                for k in r.integers(0, n, max(1, n // 8)):
                    a[k] = self.rng.choice([lo, hi, lo + 1, hi - 1, -1 if lo < 0 else 1])
            a = np.array(a, dtype=NUMPY[dtype]).reshape(shape)
            return np.where(a == 0, 1, a).astype(NUMPY[dtype]) if nonzero else a
        a = r.uniform(-3, 3, n) * (r.random(n) < 0.9) + r.normal(0, 1, n) * 0.1
        if self.specials and n:
            k = r.integers(0, n, max(1, n // 6))
            big = {dtypes.float16: 6e4, dtypes.bfloat16: 3e38, dtypes.float32: 3e38, dtypes.float64: 1e300}[dtype]
            a[k] = r.choice([0.0, -0.0, math.inf, -math.inf, math.nan, big, -big, 1e-30, 1.0, -1.0], len(k))
        if nonzero:
            a = np.where(a == 0, 0.5, a)
        a = a.reshape(shape).astype(np.float32 if dtype == dtypes.bfloat16 else NUMPY[dtype])
        return from_numpy(a, dtype).float().numpy() if dtype == dtypes.bfloat16 else a  # bfloat16's values exactly

    def add_input(self, shape: tuple[int, ...], dtype: DType, layout: str | None = None,
                  nonzero: bool = False) -> Value:  # fmt: skip
        """A new leaf of `shape` read through a random layout; floats require grad."""
        layout = layout or self.rng.choice(("contiguous",) * 3 + ("transposed", "strided", "flipped", "expanded"))
        values = self.array(shape, dtype, nonzero)
        if not shape and is_float(dtype) and not self.allowed("const-leaf") and _round(float(values)):
            values = np.array(self.np.uniform(0.1, 0.9), dtype=values.dtype)  # a value no constant of glassgrad's has
        stored, view, ref_view = _layout(layout, values, self.rng)
        name = f"x{len(self.program.inputs)}"
        const = not shape and is_float(dtype) and _round(float(values))
        inp = Input(name, stored, dtype, view, ref_view, is_float(dtype), ("const-leaf",) if const else ())
        leaf = from_numpy(stored, dtype).requires_grad_(inp.grad)
        self.program.inputs.append(inp)
        v = Value(f"v{len(self.program.values)}", ref_view(leaf), dtype, True, RTOL.get(dtype, 0.0))
        self.program.values[v.name] = v
        v.leaf = leaf  # type: ignore[attr-defined]
        return v

    def new_name(self) -> str:
        return f"v{len(self.program.values)}"

    def literal(self, dtype: DType, nonzero: bool = False) -> int | float | bool:
        """A Python scalar for a binary op with a tensor of `dtype`, in its range."""
        if dtype == dtypes.bool or (self.rng.random() < 0.1 and not nonzero):
            return self.rng.choice((True, False)) if not nonzero else True
        if is_int(dtype) or self.rng.random() < 0.4:
            lo, hi = max(dtypes.min(dtype), -5) if is_int(dtype) else -5, 6
            x = self.rng.randint(lo, hi)
            return x if (x or not nonzero) else 3
        return self.rng.choice((0.5, -1.5, 2.0, 3.25, -0.0, 1e-3, 7.0)) if not nonzero else 2.5


def _round(x: float) -> bool:
    """A value glassgrad's own constants may have (0, 1, 0.5, inf, ...): a 0-d leaf of it is that interned CONST."""
    return not math.isfinite(x) or (abs(x) <= 1024 and (2 * x).is_integer())


def _layout(layout: str, values: np.ndarray, rng: random.Random):
    """(stored array, glassgrad suffix, reference view) so that stored read through the suffix gives `values`."""
    nd = values.ndim
    if layout == "transposed" and nd >= 2:
        order = tuple(reversed(range(nd)))
        return np.ascontiguousarray(values.transpose(order)), f".permute{order}", lambda t: t.permute(*order)
    if layout == "strided" and nd >= 1:  # every other element from the second, along one or two dims
        dims = set(rng.sample(range(nd), min(nd, rng.randint(1, 2))))
        stored = np.zeros(tuple(2 * s + 1 if i in dims else s for i, s in enumerate(values.shape)), values.dtype)
        items = tuple(slice(1, None, 2) if i in dims else slice(None) for i in range(nd))
        stored[items] = values
        idx = ", ".join("1::2" if i in dims else ":" for i in range(nd))
        return stored, f"[{idx}]", lambda t: t[items]
    if layout == "flipped" and nd >= 1:
        axes = tuple(sorted(rng.sample(range(nd), rng.randint(1, nd))))
        return np.ascontiguousarray(np.flip(values, axes)), f".flip{axes}", lambda t: t.flip(axes)
    if layout == "expanded" and nd >= 1 and 1 not in values.shape[:1]:
        # a size-1 stored dimension broadcast to the values' first dim: the values repeat along it
        values[...] = values[:1]
        stored = np.ascontiguousarray(values[:1])
        shape = values.shape
        return stored, f".expand{shape}", lambda t: t.expand(*shape)
    return values, "", lambda t: t


def run_step(gen: Gen, op: str, spec: Spec) -> bool:
    """Run the reference of a proposed step; keep it (True) if PyTorch defines it or it must raise."""
    prog = gen.program
    if not gen.allowed(op, *spec.features):
        return False
    operands = [prog.values[a] for a in spec.args]
    if spec.needs_exact and not all(v.exact or not is_float(v.dtype) for v in operands):
        return False
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # PyTorch's warnings (std of one element): the values say it all
            out = spec.ref(*[v.ref for v in operands])
    except Undefined:
        return False
    except spec.errors as e:
        feature = _error_feature(e)
        if feature is None or not gen.allowed(feature) or gen.rng.random() > 0.3:
            return False  # an error glassgrad need not share (bool // bool), or one left out or not chosen
        prog.steps.append(Step(gen.new_name(), op, spec.code, spec.args, spec.ref, spec.dtype, type(e).__name__,
                               spec.features + (feature,)))  # fmt: skip
        return True
    except (RuntimeError, TypeError, IndexError, ValueError):
        return False  # PyTorch rejects it (bool arithmetic, ...): a combination both need not define
    if out.numel() > MAX_NUMEL:
        return False
    claimed = spec.dtype
    if claimed is None and out.dtype == torch.int64 and len({v.dtype for v in operands}) == 1:
        claimed = operands[0].dtype  # a movement or indexing op keeps a carrier's dtype
    dtype = dtype_of(out, claimed)
    features = spec.features + _wraps(spec, operands, out, dtype)
    if not gen.allowed(*features):
        return False
    if dtype in CARRIED:
        out = wrap(out, dtype)
    exact = not is_float(dtype) or (spec.keeps_exact and all(v.exact for v in operands))
    name = gen.new_name()
    tol = max([v.tol for v in operands] + [RTOL.get(dtype, 0.0), spec.tol])
    prog.values[name] = Value(name, out, dtype, exact, tol)
    prog.steps.append(Step(name, op, spec.code, spec.args, spec.ref, spec.dtype, features=features))
    return True


def _error_feature(e: BaseException) -> str | None:
    """The user errors glassgrad must raise as PyTorch does: integer division by zero, an index out of range."""
    text = str(e)
    if isinstance(e, ZeroDivisionError) or "ZeroDivision" in text:
        return "int-div-zero"
    if isinstance(e, IndexError) or "out of bounds" in text:
        return "index-oob"
    return None


NARROW = (dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16)


def _wraps(spec: Spec, operands: list[Value], out: torch.Tensor, dtype: DType) -> tuple[str, ...]:
    """("narrow-int-wrap",) where an int op of fewer than 32 bits overflowed: its result is the wrapped one."""
    if dtype not in NARROW or any(is_float(v.dtype) for v in operands) or not operands:
        return ()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            wide = spec.ref(*[v.ref.long() for v in operands])
    except Exception:  # noqa: BLE001 - no wide twin (an op that wants its own dtype): nothing to compare
        return ()
    if wide.shape != out.shape or wide.dtype == torch.bool:
        return ()
    return ("narrow-int-wrap",) if bool((wide.long() != out.long()).any()) else ()
