"""Elementwise ops: unary math and activations, binary ops with broadcasting and Python scalars, comparisons,
where, clamp and casts between every dtype. Each builder returns a Spec (glassgrad source + reference) or None."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from glassgrad import dtypes
from glassgrad.dtype import ALL_DTYPES, result_type_with_scalar

from .program import Gen, Spec, Value
from .reference import (
    CARRIED,
    RTOL,
    TORCH,
    Undefined,
    cast,
    is_float,
    is_int,
    order,
    promote,
    udiv,
    unorder,
    ushr,
    wrap,
)

# name -> (glassgrad source after the dot, reference on a float tensor, keeps exact, discontinuous)
UNARY = {
    "exp": ("exp()", torch.exp), "exp2": ("exp2()", torch.exp2), "log": ("log()", torch.log),
    "log2": ("log2()", torch.log2), "sqrt": ("sqrt()", torch.sqrt), "rsqrt": ("rsqrt()", torch.rsqrt),
    "sin": ("sin()", torch.sin), "cos": ("cos()", torch.cos), "tan": ("tan()", torch.tan),
    "asin": ("asin()", torch.asin), "acos": ("acos()", torch.acos), "atan": ("atan()", torch.atan),
    "sinh": ("sinh()", torch.sinh), "cosh": ("cosh()", torch.cosh), "tanh": ("tanh()", torch.tanh),
    "asinh": ("asinh()", torch.asinh), "acosh": ("acosh()", torch.acosh), "atanh": ("atanh()", torch.atanh),
    "erf": ("erf()", torch.erf), "sigmoid": ("sigmoid()", torch.sigmoid),
    "reciprocal": ("reciprocal()", torch.reciprocal),
}  # fmt: skip


def _gelu(t: torch.Tensor) -> torch.Tensor:
    """PyTorch's gelu, but inf at inf: its CPU kernel gives NaN there (inf * Phi(inf) is inf * 1)."""
    return torch.where(t == torch.inf, t, F.gelu(t))


def _at_nan_passing(f):
    """f (hardtanh, relu6) with PyTorch's gradient at NaN of its scalar path, g, everywhere: its vectorized CPU kernel
    (a tensor of 16 elements or more) gives 0 there. glassgrad's, as the scalar one's, passes g."""
    return lambda t: torch.where(torch.isnan(t), t, f(t))


# activations: floats only in PyTorch
ACTIVATIONS = {
    "relu": ("relu()", F.relu), "relu6": ("relu6()", _at_nan_passing(F.relu6)), "gelu": ("gelu()", _gelu),
    "gelu_tanh": ("gelu(approximate='tanh')", lambda t: F.gelu(t, approximate="tanh")), "silu": ("silu()", F.silu),
    "softplus": ("softplus()", F.softplus), "mish": ("mish()", F.mish), "logsigmoid": ("logsigmoid()", F.logsigmoid),
    "elu": ("elu()", F.elu), "celu": ("celu(0.5)", lambda t: F.celu(t, 0.5)), "selu": ("selu()", F.selu),
    "leaky_relu": ("leaky_relu(0.1)", lambda t: F.leaky_relu(t, 0.1)),
    "hardtanh": ("hardtanh()", _at_nan_passing(F.hardtanh)),
    "hardsigmoid": ("hardsigmoid()", F.hardsigmoid), "hardswish": ("hardswish()", F.hardswish),
    "softsign": ("softsign()", F.softsign),
}  # fmt: skip
# exact in, exact out; the integer meaning beside the float one
EXACT_UNARY = {"neg": "neg()", "abs": "abs()", "square": "square()"}
ROUNDING = {"floor": "floor()", "ceil": "ceil()", "round": "round()", "trunc": "trunc()", "sign": "sign()"}
PREDICATES = {"isnan": "isnan()", "isinf": "isinf()", "isfinite": "isfinite()", "logical_not": "logical_not()"}


POLES = ("log", "log2", "rsqrt", "reciprocal")  # unary ops that blow up at 0


def _near_zero(v: Value) -> bool:
    """A computed float value with an element within rounding of 0 (where 1 / x turns on its last bits)."""
    if v.exact or not is_float(v.dtype):
        return False
    return bool((v.ref.detach().double().abs() < 1e-6).any())


def _float_math(v: Value, f):
    """A float op on any dtype: ints and bools become float32 first (as PyTorch's exp(int) is float32)."""
    if is_float(v.dtype) or v.dtype not in CARRIED:
        return f
    return lambda t: f(cast(t, v.dtype, dtypes.float32))


def unary(g: Gen, name: str) -> Spec | None:
    if name in ACTIVATIONS:
        v = g.pick(lambda v: is_float(v.dtype))
        return v and Spec(f"{v.name}.{ACTIVATIONS[name][0]}", (v.name,), ACTIVATIONS[name][1])
    v = g.pick(lambda v: v.dtype != dtypes.bool or g.rng.random() < 0.2)
    if v is None:
        return None
    d = v.dtype
    if name in UNARY:
        if name in POLES and _near_zero(v):
            return None  # 1 / x of a computed x near 0: the sign of a rounded-away zero decides +-inf
        if name in ("sin", "cos", "tan") and not v.exact and bool((v.ref.detach().double().abs() > 8).any()):
            return None  # far from 0 a rounding of the argument moves the result by as much: exact inputs only there
        tol = 2e-6 if name == "erf" else 0.0  # erf is "within 2e-7 of float32's erf" (docs), for float64 too
        return Spec(f"{v.name}.{UNARY[name][0]}", (v.name,), _float_math(v, UNARY[name][1]), tol=tol)
    if name in EXACT_UNARY:
        if d in CARRIED:  # unsigned: abs is the value, neg and square wrap
            f = {"neg": lambda t: -t, "abs": lambda t: t, "square": lambda t: t * t}[name]
            return Spec(f"{v.name}.{EXACT_UNARY[name]}", (v.name,), f, d, keeps_exact=True)
        # square is x * x (docs): its gradient g * x + g * x stays finite where torch.square's (2 * x) * g overflows
        # first (x = -3e38, g = -0.0065: 3.9e36 against inf, seed 4818), and PyTorch's x * x agrees with it
        f = {"neg": torch.neg, "abs": torch.abs, "square": lambda t: t * t}[name]
        if name == "square" and d == dtypes.bool:  # PyTorch makes it int64; glassgrad keeps the dtype (docs)
            f = lambda t: t & t  # noqa: E731
        return Spec(f"{v.name}.{EXACT_UNARY[name]}", (v.name,), f, keeps_exact=name != "square")
    if name in ROUNDING:
        if d in CARRIED:
            f = (lambda t: (t != 0).long()) if name == "sign" else (lambda t: t)
            return Spec(f"{v.name}.{ROUNDING[name]}", (v.name,), f, d, keeps_exact=True, needs_exact=True)
        f = {"floor": torch.floor, "ceil": torch.ceil, "round": torch.round, "trunc": torch.trunc, "sign": torch.sign}
        return Spec(f"{v.name}.{ROUNDING[name]}", (v.name,), f[name], keeps_exact=True, needs_exact=True)
    f = {"isnan": torch.isnan, "isinf": torch.isinf, "isfinite": torch.isfinite, "logical_not": torch.logical_not}
    # isinf/isfinite of a computed value flip where one side overflows and the other just does not: exact only
    return Spec(f"{v.name}.{PREDICATES[name]}", (v.name,), f[name], needs_exact=name != "isnan")


def _exact_divmod(f):
    """torch.floor_divide or torch.remainder of floats, computed in float64 and rounded once to the result's dtype.
    PyTorch's vectorized CPU fmod (which both use) gives NaN where x / y overflows the dtype (3e38 % 0.5 in float32),
    where its scalar path, C's fmod and glassgrad give the exact remainder; float64 holds that quotient for the
    smaller dtypes, and a float64 one past its range is left out. (PyTorch rounds each step of a float16 or bfloat16
    floor division to that dtype: within the tolerance of these, the same whole number below 2**7.)"""

    def ref(a: torch.Tensor | float, b: torch.Tensor | float) -> torch.Tensor:
        dtype = torch.result_type(a, b)
        if not dtype.is_floating_point:
            return f(a, b)
        # a Python number (x % 0.5, 0.5 % x) takes the result's dtype, as in PyTorch
        a, b = (v.to(dtype) if isinstance(v, torch.Tensor) else torch.tensor(v, dtype=dtype) for v in (a, b))
        if dtype == torch.float64:
            x, y = torch.broadcast_tensors(a.detach(), b.detach())
            if bool((torch.isfinite(x) & torch.isfinite(y) & (y != 0) & torch.isinf(x / y)).any()):
                raise Undefined("a float64 quotient past float64's range (PyTorch's vectorized fmod gives NaN)")
            return f(a, b)
        return f(a.double(), b.double()).to(dtype)

    return ref


# binary ops: glassgrad source pattern, PyTorch function on native dtypes, meaning on a carrier dtype
ARITH = {
    "add": ("{a} + {b}", torch.add, lambda a, b, d: a + b),
    "sub": ("{a} - {b}", torch.sub, lambda a, b, d: a - b),
    "mul": ("{a} * {b}", torch.mul, lambda a, b, d: a * b),
    "div": ("{a} / {b}", torch.div, None),
    "floordiv": ("{a} // {b}", _exact_divmod(torch.floor_divide), lambda a, b, d: udiv(a, b, d, mod=False)),
    "mod": ("{a} % {b}", _exact_divmod(torch.remainder), lambda a, b, d: udiv(a, b, d, mod=True)),
    "pow": ("{a} ** {b}", torch.pow, lambda a, b, d: a**b),
    "maximum": ("{a}.maximum({b})", torch.maximum, lambda a, b, d: unorder(torch.maximum(order(a, d), order(b, d)), d)),
    "minimum": ("{a}.minimum({b})", torch.minimum, lambda a, b, d: unorder(torch.minimum(order(a, d), order(b, d)), d)),
    "bitwise_and": ("{a} & {b}", torch.bitwise_and, lambda a, b, d: a & b),
    "bitwise_or": ("{a} | {b}", torch.bitwise_or, lambda a, b, d: a | b),
    "bitwise_xor": ("{a} ^ {b}", torch.bitwise_xor, lambda a, b, d: a ^ b),
}  # fmt: skip
COMPARE = {
    "lt": ("{a} < {b}", torch.lt), "gt": ("{a} > {b}", torch.gt), "le": ("{a} <= {b}", torch.le),
    "ge": ("{a} >= {b}", torch.ge), "eq": ("{a} == {b}", torch.eq), "ne": ("{a} != {b}", torch.ne),
    "logical_and": ("{a}.logical_and({b})", torch.logical_and), "logical_or": ("{a}.logical_or({b})", torch.logical_or),
    "logical_xor": ("{a}.logical_xor({b})", torch.logical_xor),
}  # fmt: skip
BITWISE = ("bitwise_and", "bitwise_or", "bitwise_xor")
LOGICAL = ("logical_and", "logical_or", "logical_xor")
INT_DIV = ("floordiv", "mod")


def _broadcast_partner(g: Gen, a: Value, kinds: str, nonzero: bool = False) -> Value:
    """Another value whose shape broadcasts with a's: one from before, or a new input with some dims set to 1."""
    other = g.pick(lambda v: v is not a and _broadcasts(v.shape, a.shape))
    if other is not None and g.rng.random() < 0.5 and not nonzero:
        return other
    shape = tuple(1 if g.rng.random() < 0.3 else s for s in a.shape)
    if shape and g.rng.random() < 0.3:
        shape = shape[g.rng.randint(1, len(shape)) :]
    elif g.rng.random() < 0.15:
        shape = (g.rng.choice((1, 2)),) + shape
    dtype = a.dtype if g.rng.random() < 0.6 else g.dtype(kinds)
    return g.add_input(shape, dtype, nonzero=nonzero)


def _broadcasts(s: tuple[int, ...], t: tuple[int, ...]) -> bool:
    return all(x == y or x == 1 or y == 1 for x, y in zip(reversed(s), reversed(t)))


def _carried_binary(f, da, db, dtype):
    """A binary op in the promoted carrier dtype: both sides cast to it first (PyTorch has no such op)."""
    return lambda x, y: f(cast(x, da, dtype), cast(y, db, dtype), dtype)


def binary(g: Gen, name: str) -> Spec | None:
    kinds = "i" if name in BITWISE else "fib"
    a = g.pick(lambda v: (is_int(v.dtype) or v.dtype == dtypes.bool) if name in BITWISE else True)
    if a is None:
        return None
    source = ARITH[name][0] if name in ARITH else COMPARE[name][0]
    int_div = name in INT_DIV and not is_float(a.dtype)
    nonzero = int_div and g.rng.random() < 0.85  # most divisors without zeros; the rest probe the division error
    if name == "pow" and a.dtype == dtypes.bool:
        return None  # glassgrad refuses bool ** n with a clear TypeError by design (PyTorch makes it an int64)
    if name == "pow" and not is_float(a.dtype):
        exps = (0, 1, 2, 3)  # PyTorch rejects an int to a negative int power; big ones just overflow
        s = g.rng.choice(exps)
        return _scalar_spec(a, s, source, name, reverse=False)
    if g.rng.random() < 0.35:  # a Python scalar on either side
        s = g.literal(a.dtype, nonzero=nonzero or name == "div" and not is_float(a.dtype))
        if name in BITWISE and not isinstance(s, (int, bool)):
            s = 3
        # only an operator takes the scalar on its left (a method needs a tensor there)
        reverse = g.rng.random() < 0.4 and source.startswith("{a} ") and not (int_div or name == "pow")
        if _near_zero(a) and ((name == "div" and reverse) or (name == "pow" and s < 0)):
            return None  # s / x and x ** -s of a computed x near 0: the sign of a rounded-away zero decides +-inf
        return _scalar_spec(a, s, source, name, reverse)
    b = _broadcast_partner(g, a, kinds, nonzero)
    if name == "pow" and not is_float(b.dtype):
        return None
    if name == "div" and _near_zero(b):
        return None  # x / y of a computed y near 0: the sign of a rounded-away zero decides +-inf
    code = source.format(a=a.name, b=b.name)
    comparison = name in COMPARE
    discontinuous = comparison or (name in INT_DIV and (is_float(a.dtype) or is_float(b.dtype)))
    if a.dtype in CARRIED or b.dtype in CARRIED:
        dtype = promote(a.dtype, b.dtype)
        if name in BITWISE and is_float(dtype):
            return None
        if comparison:
            cmp = COMPARE[name][1]
            f = lambda x, y, d: cmp(x, y) if name in LOGICAL else cmp(order(x, d), order(y, d))  # noqa: E731
            return Spec(code, (a.name, b.name), _carried_binary(f, a.dtype, b.dtype, dtype), needs_exact=True)
        if name == "div" or is_float(dtype):
            f = ARITH[name][1]
            fl = dtype if is_float(dtype) else dtypes.float32
            ref = lambda x, y: f(cast(x, a.dtype, fl), cast(y, b.dtype, fl))  # noqa: E731
            return Spec(code, (a.name, b.name), ref, needs_exact=discontinuous)
        ref = _carried_binary(ARITH[name][2], a.dtype, b.dtype, dtype)
        return Spec(
            code,
            (a.name, b.name),
            ref,
            dtype,
            errors=(ZeroDivisionError,),
            features=_features(name, a.ref, b.ref, dtype),
        )
    f = COMPARE[name][1] if comparison else ARITH[name][1]
    if (a.ref.ndim == 0) != (b.ref.ndim == 0):
        f = _by_dtype(f, a.dtype, b.dtype)
    feats = _features(name, a.ref, b.ref, promote(a.dtype, b.dtype))
    return Spec(code, (a.name, b.name), f, needs_exact=discontinuous, errors=(RuntimeError,) if int_div else (),
                keeps_exact=name in ("maximum", "minimum"), features=feats)  # fmt: skip


def _by_dtype(f, da, db):
    """PyTorch lets a 0-d tensor take the other side's dtype within a kind (bfloat16 // float32 0-d is bfloat16);
    glassgrad promotes by dtype alone, as tinygrad (dtype.promote_types): both sides are cast to that first."""
    d = promote(da, db)
    return lambda x, y: f(cast(x, da, d), cast(y, db, d))


def _features(name: str, x: torch.Tensor, y: torch.Tensor, dtype) -> tuple[str, ...]:
    """Named corners of a step (x op y in `dtype`) that a run may leave out (known.py names the CI's)."""
    if name not in INT_DIV:
        return ()
    if not is_float(dtype):
        lo = dtypes.min(dtype)
        return ("int-min-div",) if lo < 0 and bool(((x == lo) & (y == -1)).any()) else ()
    x, y = torch.broadcast_tensors(x.detach().double(), y.detach().double())
    if not bool((torch.isfinite(x) & torch.isfinite(y) & (y != 0)).all()):
        return ("float-divmod-special",)
    # glassgrad rounds x * (1 / y) to the dtype before the floor: it misses where x / y is within a rounding of a
    # whole number, and x - floor(x / y) * y loses |x / y| roundings of y
    q, eps = x / y, torch.finfo(TORCH[dtype]).eps
    near = (q != 0) & ((q - q.round()).abs() <= 4 * eps * q.abs().clamp(min=1))
    near |= q.abs() * eps > RTOL[dtype] / 4
    return ("float-divmod-rounding",) if bool(near.any()) else ()


def _scalar_spec(a: Value, s, source: str, name: str, reverse: bool) -> Spec:
    """`a op s` (or `s op a`): the scalar takes a's dtype unless it needs a wider kind, as in PyTorch."""
    code = source.format(a=s, b=a.name) if reverse else source.format(a=a.name, b=s)
    comparison = name in COMPARE
    dtype = result_type_with_scalar(a.dtype, s) if not comparison else dtypes.bool
    f = COMPARE[name][1] if comparison else ARITH[name][1]
    int_div = name in INT_DIV and is_int(dtype)
    discontinuous = comparison or (name in INT_DIV and is_float(dtype))
    # PyTorch makes bool + 1 an int64; glassgrad's default int is int32 (docs/tensor.md): the values agree
    to_default = a.dtype == dtypes.bool and isinstance(s, int) and not isinstance(s, bool) and not comparison
    sides = (torch.tensor(s), a.ref) if reverse else (a.ref, torch.tensor(s))
    feats = _features(name, *sides, dtype)
    if a.dtype in CARRIED:
        fl = dtype if is_float(dtype) else dtypes.float32 if name == "div" or isinstance(s, float) else None
        if fl is not None:  # the scalar's kind (or true division) lifts both sides to a float
            st, conv = torch.tensor(s, dtype=TORCH[fl]), lambda t: cast(t, a.dtype, fl)
        elif name in LOGICAL:  # truth values: nonzero either way, no order key (it makes 0 nonzero)
            st, conv = _carrier_scalar(int(s), a.dtype), lambda t: t
        else:  # the scalar wraps to a's width, as glassgrad's truncate and C convert it; order keys compare
            st, conv = order(_carrier_scalar(int(s), a.dtype), a.dtype), lambda t: order(t, a.dtype)
        if comparison or fl is not None:
            ref = (lambda t: f(st, conv(t))) if reverse else (lambda t: f(conv(t), st))
            return Spec(code, (a.name,), ref, needs_exact=discontinuous, features=feats)
        op, st = ARITH[name][2], _carrier_scalar(int(s), a.dtype)
        ref = (lambda t: op(st, t, a.dtype)) if reverse else (lambda t: op(t, st, a.dtype))
        return Spec(code, (a.name,), ref, a.dtype, errors=(ZeroDivisionError,), features=feats)
    if name in ("maximum", "minimum"):
        ref = lambda t: f(t, torch.tensor(s, dtype=TORCH[dtype]))  # noqa: E731
    else:
        ref = (lambda t: f(s, t)) if reverse else (lambda t: f(t, s))
    if to_default:
        inner, ref = ref, lambda t: inner(t).to(torch.int32)
    keeps = name in ("maximum", "minimum") or (
        name in ("add", "sub", "mul") and s in (0, 1, -1, 2, 0.5) and is_float(dtype)
    )
    return Spec(code, (a.name,), ref, needs_exact=discontinuous, keeps_exact=keeps,
                errors=(RuntimeError,) if int_div else (), features=feats)  # fmt: skip


def _carrier_scalar(s: int, d) -> torch.Tensor:
    """A Python int as a carrier of dtype d holds it: wrapped to d's width, uint64 as its int64 bit pattern."""
    v = s & ((1 << (8 * d.itemsize)) - 1)
    return torch.tensor(v - (1 << 64) if v >= 1 << 63 else v, dtype=torch.int64)


def shift(g: Gen, name: str) -> Spec | None:
    """<< and >> by a Python int below the width (a shift by the width or more is undefined in C)."""
    a = g.pick(lambda v: is_int(v.dtype))
    if a is None:
        return None
    n = g.rng.randint(0, 8 * a.dtype.itemsize - 1)
    if name == "lshift":
        if not (a.dtype in CARRIED or dtypes.is_unsigned(a.dtype)) and bool((a.ref < 0).any()):
            return None  # C leaves a negative value shifted left undefined
        ref = (lambda t: t << n) if a.dtype not in CARRIED else (lambda t: wrap(t << n, a.dtype))
        return Spec(f"{a.name} << {n}", (a.name,), ref, a.dtype if a.dtype in CARRIED else None)
    ref = (lambda t: t >> n) if a.dtype not in CARRIED else (lambda t: ushr(t, n, a.dtype))
    return Spec(f"{a.name} >> {n}", (a.name,), ref, a.dtype if a.dtype in CARRIED else None)


def where(g: Gen, _name: str) -> Spec | None:
    """cond.where(a, b): cond a bool value or a comparison of an exact one; b a value or a scalar."""
    a = g.pick()
    if a is None:
        return None
    cond = g.pick(lambda v: v.dtype == dtypes.bool and _broadcasts(v.shape, a.shape))
    if cond is None:
        cond = g.add_input(tuple(1 if g.rng.random() < 0.3 else s for s in a.shape), dtypes.bool)
    if g.rng.random() < 0.3:
        s = g.literal(a.dtype)
        dtype = result_type_with_scalar(a.dtype, s)
        code = f"{cond.name}.where({a.name}, {s})"
        if a.dtype in CARRIED:
            return Spec(
                code,
                (cond.name, a.name),
                lambda c, t: torch.where(c, t, wrap(torch.tensor(int(s)), a.dtype)),
                a.dtype,
                keeps_exact=True,
            )
        ref = lambda c, t: torch.where(c, t, torch.tensor(s, dtype=TORCH[dtype])).to(TORCH[dtype])  # noqa: E731
        return Spec(code, (cond.name, a.name), ref, keeps_exact=True)
    b = _broadcast_partner(g, a, "fib")
    code = f"{cond.name}.where({a.name}, {b.name})"
    dtype = promote(a.dtype, b.dtype)  # cast first: glassgrad promotes 0-d tensors by dtype too (see _by_dtype)
    ref = lambda c, x, y: torch.where(c, cast(x, a.dtype, dtype), cast(y, b.dtype, dtype))  # noqa: E731
    return Spec(code, (cond.name, a.name, b.name), ref, dtype if dtype in CARRIED else None, keeps_exact=True)


def clamp(g: Gen, _name: str) -> Spec | None:
    a = g.pick(lambda v: v.dtype != dtypes.bool and v.dtype not in CARRIED)
    if a is None:
        return None
    lo, hi = sorted((g.literal(a.dtype), g.literal(a.dtype)))
    lo, hi = (None, hi) if g.rng.random() < 0.25 else (lo, None) if g.rng.random() < 0.25 else (lo, hi)
    if isinstance(lo, bool) or isinstance(hi, bool):
        return None
    return Spec(f"{a.name}.clamp({lo}, {hi})", (a.name,), lambda t: torch.clamp(t, lo, hi), keeps_exact=True)


def cast_op(g: Gen, _name: str) -> Spec | None:
    """x.cast(any dtype): float -> int only of exact values in range (out of range is undefined in C and PyTorch)."""
    a = g.pick()
    if a is None:
        return None
    dst = g.rng.choice(ALL_DTYPES)
    needs = is_float(a.dtype) and not is_float(dst)
    return Spec(f"{a.name}.cast(dtypes.{dst.name})", (a.name,), lambda t: cast(t, a.dtype, dst), dst,
                keeps_exact=True, needs_exact=needs)  # fmt: skip


def builders() -> dict[str, tuple[str, object]]:
    """op name -> (family, builder)."""
    table: dict[str, tuple[str, object]] = {}
    for n in list(UNARY) + list(EXACT_UNARY) + list(ROUNDING) + list(PREDICATES):
        table[n] = ("unary", unary)
    for n in ACTIVATIONS:
        table[n] = ("activation", unary)
    for n in ARITH:
        table[n] = ("binary", binary)
    for n in COMPARE:
        table[n] = ("compare", binary)
    table |= {"lshift": ("binary", shift), "rshift": ("binary", shift), "where": ("where", where),
              "clamp": ("unary", clamp), "cast": ("cast", cast_op)}  # fmt: skip
    return table
