"""Movement ops, indexing, joins, reductions and matmul. Each builder returns a Spec or None (nothing fits)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from glassgrad import dtypes

from .program import Gen, Spec
from .reference import CARRIED, TORCH, Undefined, cast, is_float, is_int, order, unorder, wrap


def _axes(g: Gen, nd: int, k: int | None = None) -> tuple[int, ...]:
    k = g.rng.randint(1, nd) if k is None else k
    return tuple(sorted(g.rng.sample(range(nd), k)))


def _neg(g: Gen, axis: int, nd: int) -> int:
    """The same axis, counted from the end half of the time."""
    return axis - nd if g.rng.random() < 0.5 else axis


# ---- movement ----
def reshape(g: Gen, _n: str) -> Spec | None:
    a = g.pick()
    n = math.prod(a.shape)
    shape: list[int] = []
    rest = n
    for _ in range(g.rng.randint(0, 4)):
        divisors = [d for d in range(1, min(rest, 8) + 1) if rest % d == 0] if rest else [0, 1, 2]
        d = g.rng.choice(divisors)
        shape.append(d)
        rest = rest // d if d else rest
    if rest != 1 or not shape or n == 0:
        shape.append(rest if n else 0)
    if n == 0 and 0 not in shape:
        shape.append(0)
    if n and g.rng.random() < 0.3:
        shape[g.rng.randrange(len(shape))] = -1
    if math.prod(s for s in shape if s != -1) == 0 and n:
        return None
    return Spec(f"{a.name}.reshape{_tuple(shape)}", (a.name,), lambda t: t.reshape(shape), keeps_exact=True)


def _tuple(xs) -> str:
    xs = tuple(xs)
    return f"({xs[0]},)" if len(xs) == 1 else str(xs)


def permute(g: Gen, _n: str) -> Spec | None:
    a = g.pick(lambda v: len(v.shape) >= 2)
    if a is None:
        return None
    order_ = list(range(len(a.shape)))
    g.rng.shuffle(order_)
    if g.rng.random() < 0.3:
        d0, d1 = g.rng.sample(range(len(a.shape)), 2)
        return Spec(f"{a.name}.transpose({d0}, {d1})", (a.name,), lambda t: t.transpose(d0, d1), keeps_exact=True)
    return Spec(f"{a.name}.permute{_tuple(order_)}", (a.name,), lambda t: t.permute(*order_), keeps_exact=True)


def expand(g: Gen, _n: str) -> Spec | None:
    a = g.pick()
    shape = [g.rng.choice((1, 2, 3, 4)) if s == 1 else s for s in a.shape]
    shape = [g.rng.choice((1, 2, 3))] * g.rng.randint(0, 2 if a.shape else 3) + shape
    shown = [-1 if s == o and g.rng.random() < 0.3 else s for s, o in zip(shape[len(shape) - len(a.shape) :], a.shape)]
    shown = shape[: len(shape) - len(a.shape)] + shown
    return Spec(f"{a.name}.expand{_tuple(shown)}", (a.name,), lambda t: t.expand(*shape), keeps_exact=True)


def pad(g: Gen, _n: str) -> Spec | None:
    a = g.pick(lambda v: len(v.shape) >= 1)
    if a is None:
        return None
    k = g.rng.randint(1, len(a.shape))
    flat = tuple(g.rng.choice((0, 0, 1, 2, 3)) for _ in range(2 * k))
    value = g.rng.choice((None, None, 1, -2.5)) if a.dtype != dtypes.bool else None
    if value is not None and not is_float(a.dtype):
        value = int(value) if not dtypes.is_unsigned(a.dtype) and a.dtype not in CARRIED else 1
    code = f"{a.name}.pad({flat}" + (f", value={value})" if value is not None else ")")
    if a.dtype in CARRIED:
        ref = lambda t: F.pad(t, flat, value=value or 0)  # noqa: E731
        return Spec(code, (a.name,), ref, a.dtype, keeps_exact=True)
    return Spec(code, (a.name,), lambda t: F.pad(t, flat, value=value or 0), keeps_exact=True)


def shrink(g: Gen, _n: str) -> Spec | None:
    a = g.pick(lambda v: len(v.shape) >= 1)
    if a is None:
        return None
    arg = []
    for s in a.shape:
        lo = g.rng.randint(0, s)
        arg.append(None if g.rng.random() < 0.3 else (lo, g.rng.randint(lo, s)))
    sl = tuple(slice(None) if r is None else slice(*r) for r in arg)
    return Spec(f"{a.name}.shrink({tuple(arg)})", (a.name,), lambda t: t[sl], keeps_exact=True)


def flip(g: Gen, _n: str) -> Spec | None:
    a = g.pick(lambda v: len(v.shape) >= 1)
    if a is None:
        return None
    axes = tuple(_neg(g, x, len(a.shape)) for x in _axes(g, len(a.shape)))
    return Spec(f"{a.name}.flip{_tuple(axes)}", (a.name,), lambda t: t.flip(axes), keeps_exact=True)


def squeeze(g: Gen, name: str) -> Spec | None:
    a = g.pick()
    nd = len(a.shape)
    if name == "unsqueeze":
        d = g.rng.randint(-nd - 1, nd)
        return Spec(f"{a.name}.unsqueeze({d})", (a.name,), lambda t: t.unsqueeze(d), keeps_exact=True)
    if name == "flatten":
        if nd < 1:
            return None
        s = g.rng.randint(0, nd - 1)
        e = g.rng.randint(s, nd - 1)
        return Spec(f"{a.name}.flatten({s}, {e})", (a.name,), lambda t: t.flatten(s, e), keeps_exact=True)
    ones = [i for i, s in enumerate(a.shape) if s == 1]
    if ones and g.rng.random() < 0.6:
        d = g.rng.choice(ones)
        return Spec(f"{a.name}.squeeze({d})", (a.name,), lambda t: t.squeeze(d), keeps_exact=True)
    return Spec(f"{a.name}.squeeze()", (a.name,), lambda t: t.squeeze(), keeps_exact=True)


# ---- indexing ----
def _slice(g: Gen, n: int) -> slice:
    """A random slice of a dimension of size n: any start and stop (past the ends too), any nonzero step."""
    step = g.rng.choice((None, None, 1, 2, 3, -1, -2))
    start = g.rng.choice((None, 0, 1, -1, -2, n, n + 2))
    stop = g.rng.choice((None, None, n, 1, -1, 2, n + 3, -n - 2))
    return slice(start, stop, step)


def _basic_ref(t: torch.Tensor, items: list) -> torch.Tensor:
    """Basic indexing as Python defines it, with negative steps (PyTorch has none): each slice an index_select."""
    dim = 0
    for it in items:
        if it is None:
            t = t.unsqueeze(dim)
            dim += 1
        elif isinstance(it, int):
            t = t.select(dim, it)
        else:
            idx = torch.tensor(list(range(*it.indices(t.shape[dim]))), dtype=torch.int64)
            t = t.index_select(dim, idx)
            dim += 1
    return t


def _render(it) -> str:
    if it is None:
        return "None"
    if it is Ellipsis:
        return "..."
    if isinstance(it, slice):
        show = lambda x: "" if x is None else str(x)  # noqa: E731
        return f"{show(it.start)}:{show(it.stop)}" + (f":{it.step}" if it.step is not None else "")
    return str(it)


def getitem(g: Gen, _n: str) -> Spec | None:
    """x[ints, slices (any step), None, ...]."""
    a = g.pick(lambda v: len(v.shape) >= 1)
    if a is None:
        return None
    items: list = []
    for s in a.shape[: g.rng.randint(1, len(a.shape))]:
        if g.rng.random() < 0.15:
            items.append(None)
        items.append(g.rng.randint(-s, s - 1) if s and g.rng.random() < 0.3 else _slice(g, s))
    shown = list(items)
    if g.rng.random() < 0.2:  # an Ellipsis before the last item: the items then index the last dims
        shown = [Ellipsis] + shown
        rest = len(a.shape) - sum(1 for it in items if it is not None)
        items = [slice(None)] * rest + items
    code = f"{a.name}[{', '.join(_render(it) for it in shown)}]"
    return Spec(code, (a.name,), lambda t: _basic_ref(t, items), _kept(a.dtype), keeps_exact=True)


def _index_code(g: Gen, values: list[int], shape: tuple[int, ...]) -> str:
    """An int32 index tensor (or a Python list) of `values` in `shape`, on the program's device."""
    nested = torch.tensor(values, dtype=torch.int64).reshape(shape).tolist()
    if g.rng.random() < 0.3 and len(shape) == 1:
        return str(nested)
    return f"Tensor({nested}, dtype=dtypes.int32, device=D)" + (f".reshape{_tuple(shape)}" if 0 in shape else "")


def advanced(g: Gen, _n: str) -> Spec | None:
    """x[index tensor or list] and x[:, index]: PyTorch's advanced indexing, negative indices counting from the end."""
    a = g.pick(lambda v: len(v.shape) >= 1)
    if a is None:
        return None
    dim = g.rng.randint(0, min(1, len(a.shape) - 1))
    n = a.shape[dim]
    shape = g.shape(g.rng.choice((1, 1, 2)))
    oob = g.rng.random() < 0.1  # now and then an index out of range: glassgrad must raise IndexError as PyTorch
    if oob and 0 in a.shape:
        return None  # PyTorch checks no index into an empty tensor (glassgrad does: both fine)
    hi = n + 2 if oob or n == 0 else n
    values = [g.rng.randint(-hi, hi - 1) if hi else 0 for _ in range(math.prod(shape))]
    code_idx = _index_code(g, values, shape)
    if code_idx.startswith("["):
        shape = (len(values),)
    idx = torch.tensor(values, dtype=torch.int64).reshape(shape)
    lead = ":, " * dim
    ref = (lambda t: t[idx]) if dim == 0 else (lambda t: t[:, idx])
    return Spec(f"{a.name}[{lead}{code_idx}]", (a.name,), ref, _kept(a.dtype),
                keeps_exact=True, errors=(IndexError,))  # fmt: skip


def bool_mask(g: Gen, _n: str) -> Spec | None:
    """x[mask]: the elements where a bool mask of x's leading dims is true (a shape known only from the data)."""
    a = g.pick(lambda v: len(v.shape) >= 1)
    if a is None:
        return None
    k = g.rng.randint(1, len(a.shape))
    mask = g.pick(lambda v: v.dtype == dtypes.bool and v.shape == a.shape[:k])
    mask = mask or g.add_input(a.shape[:k], dtypes.bool)
    return Spec(f"{a.name}[{mask.name}]", (a.name, mask.name), lambda t, m: t[m], _kept(a.dtype), keeps_exact=True)


def gather(g: Gen, _n: str) -> Spec | None:
    a = g.pick(lambda v: len(v.shape) >= 1)
    if a is None:
        return None
    nd = len(a.shape)
    dim = g.rng.randrange(nd)
    shape = tuple(
        g.rng.randint(0 if s == 0 else 1, s) if i != dim else g.rng.randint(1, 4) for i, s in enumerate(a.shape)
    )
    n = a.shape[dim]
    oob = g.rng.random() < 0.1 or n == 0
    if oob and 0 in a.shape:
        return None  # PyTorch checks no index into an empty tensor (glassgrad does: both fine)
    values = [g.rng.randint(0, n + 1 if oob else n - 1) for _ in range(math.prod(shape))]
    idx = torch.tensor(values, dtype=torch.int64).reshape(shape)
    code = f"{a.name}.gather({_neg(g, dim, nd)}, {_index_code(g, values, shape)})"
    if code.endswith("])") and "Tensor(" not in code:
        return None
    return Spec(code, (a.name,), lambda t: t.gather(dim, idx), _kept(a.dtype),
                keeps_exact=True, errors=(RuntimeError, IndexError))  # fmt: skip


def _kept(d):
    """The dtype to claim for an op that keeps its input's: a carrier's (PyTorch only sees int64)."""
    return d if d in CARRIED else None


def masked_fill(g: Gen, _n: str) -> Spec | None:
    a = g.pick()
    mask = g.pick(
        lambda v: (
            v.dtype == dtypes.bool
            and all(x == y or x == 1 for x, y in zip(reversed(v.shape), reversed(a.shape)))
            and len(v.shape) <= len(a.shape)
        )
    )
    if mask is None:
        mask = g.add_input(tuple(1 if g.rng.random() < 0.3 else s for s in a.shape), dtypes.bool)
    value = g.literal(a.dtype)
    if a.dtype in CARRIED:
        value = abs(int(value))
        return Spec(f"{a.name}.masked_fill({mask.name}, {value})", (a.name, mask.name),
                    lambda t, m: t.masked_fill(m, value), a.dtype, keeps_exact=True)  # fmt: skip
    code = f"{a.name}.masked_fill({mask.name}, {value})"
    return Spec(code, (a.name, mask.name), lambda t, m: t.masked_fill(m, value), keeps_exact=True)


# ---- joins ----
def join(g: Gen, name: str) -> Spec | None:
    a = g.pick(lambda v: len(v.shape) >= 1 or name == "stack")
    if a is None:
        return None
    nd = len(a.shape)
    dim = g.rng.randint(0, nd if name == "stack" else nd - 1)
    shape = list(a.shape)
    if name == "cat":
        shape[dim] = g.rng.choice((0, 1, 2, 3))
    same = g.rng.random() < 0.7 or a.dtype in CARRIED
    b = g.add_input(tuple(shape), a.dtype if same else g.dtype("fib"))
    if a.dtype != b.dtype:  # PyTorch's cat promotes; glassgrad's docs do not say it does: same dtypes only
        return None
    ref = (lambda x, y: torch.cat([x, y], dim)) if name == "cat" else (lambda x, y: torch.stack([x, y], dim))
    code = f"{a.name}.{name}({b.name}, dim={_neg(g, dim, nd + (name == 'stack'))})"
    return Spec(code, (a.name, b.name), ref, _kept(a.dtype), keeps_exact=True)


# ---- reductions ----
def _accumulated(d):
    """sum/prod/cumsum's dtype: bools and small ints accumulate in 32 bits (docs/tensor.md; PyTorch: int64)."""
    if d == dtypes.bool or (is_int(d) and d.itemsize < 4):
        return dtypes.uint32 if dtypes.is_unsigned(d) else dtypes.int32
    return d


def reduce(g: Gen, name: str) -> Spec | None:
    floats_only = name in ("var", "std", "softmax", "log_softmax", "logsumexp")
    a = g.pick(lambda v: is_float(v.dtype) or not floats_only)
    if a is None:
        return None
    nd, d = len(a.shape), a.dtype
    single = name in ("argmax", "argmin", "cumsum", "softmax", "log_softmax")
    if single:
        axis = (
            _neg(g, g.rng.randrange(nd), nd)
            if nd and (g.rng.random() < 0.8 or name in ("cumsum", "softmax", "log_softmax"))
            else None
        )
    else:
        axis = None if not nd or g.rng.random() < 0.25 else _axes(g, nd, g.rng.randint(1, min(2, nd)))
        axis = axis[0] if isinstance(axis, tuple) and len(axis) == 1 and g.rng.random() < 0.5 else axis
    keepdim = g.rng.random() < 0.3 and name not in ("cumsum", "softmax", "log_softmax")
    dims = None if axis is None else axis
    args = [] if axis is None else [f"{axis}"]
    if keepdim:
        args.append("keepdim=True")
    extra = ""
    if name in ("var", "std") and g.rng.random() < 0.5:
        extra = ", correction=0"
    code = f"{a.name}.{name}({', '.join(args)}{extra})".replace("(, ", "(")
    kd = dict(keepdim=keepdim) if name not in ("cumsum", "softmax", "log_softmax") else {}
    allax = tuple(range(nd))
    full = allax if dims is None else dims
    if name in ("sum", "prod", "cumsum"):
        acc = _accumulated(d)
        along = (full if name == "sum" else dims or 0) if nd else ()
        f = {"sum": lambda t: t.sum(full, **kd) if nd else t, "prod": lambda t: _prod(t, full, keepdim),
             "cumsum": lambda t: t.cumsum(dims or 0) if nd else t}[name]  # fmt: skip
        f = _order_free(f, along) if name != "prod" else f
        wide = dtypes.int64 if is_int(acc) else acc  # ints accumulate in int64 and wrap to acc's width at the end
        if name == "prod" and d in (dtypes.float16, dtypes.bfloat16):
            wide = dtypes.float32  # as glassgrad's (docs), rounded once: PyTorch's rounds each step (60000 * -1.5: inf)
        ref = lambda t: cast(f(cast(t, d, wide)), wide, acc)  # noqa: E731
        feats = ("prod-zero-overflow",) if name == "prod" and is_float(d) and _zero_and_overflow(a.ref, d) else ()
        return Spec(code, (a.name,), ref, acc, keeps_exact=not is_float(d), features=feats)
    if name in ("max", "min"):
        if 0 in [a.shape[i] for i in (full if isinstance(full, tuple) else (full,))]:
            return None  # glassgrad raises ValueError where PyTorch raises IndexError: both refuse
        f = torch.amax if name == "max" else torch.amin
        ref = lambda t: unorder(f(order(t, d), full, **kd), d) if nd else t  # noqa: E731
        return Spec(code, (a.name,), ref, d if d in CARRIED else None, keeps_exact=True)
    if name in ("argmax", "argmin"):
        if 0 in a.shape:
            return None
        f = torch.argmax if name == "argmax" else torch.argmin
        ref = lambda t: f(_nan_key(order(t, d), name), dims, **kd).to(torch.int32)  # noqa: E731
        return Spec(code, (a.name,), ref, needs_exact=True)
    if name in ("any", "all"):
        f = torch.any if name == "any" else torch.all  # PyTorch gives uint8 for uint8 input; glassgrad bool (docs)
        return Spec(code, (a.name,), lambda t: (f(t, full, **kd) if nd else t) != 0, needs_exact=True)
    if name == "mean":
        fl = d if is_float(d) else dtypes.float32  # integer inputs give float32 (docs/tensor.md; PyTorch refuses)
        mean = _order_free(lambda t: t.mean(full, **kd) if nd else t, full if nd else ())
        return Spec(code, (a.name,), lambda t: mean(cast(t, d, fl)))
    if name in ("var", "std"):
        corr = 0 if extra else 1
        f = torch.var if name == "var" else torch.std
        if name == "std" and nd and _nearly_constant(a.ref, full):
            return None  # std's gradient there is 0/0: each side rounds (x - mean) / std its own way
        x = a.ref.detach().double()  # an inf, or a value whose square overflows the dtype (or nearly)
        extreme = not bool(torch.isfinite(x).all()) or bool((x.abs() > torch.finfo(TORCH[d]).max ** 0.5 / 16).any())
        feats = ("var-extreme",) if extreme else ()
        return Spec(code, (a.name,), lambda t: f(t, full, correction=corr, **kd) if nd else f(t, correction=corr),
                    features=feats)  # fmt: skip
    if name == "logsumexp":
        # a 0-d tensor's is log(exp(x)) in PyTorch too, not x: its gradient at -inf is NaN (exp(-inf - -inf))
        return Spec(code, (a.name,), lambda t: torch.logsumexp(t, full if nd else (), **kd))
    f = torch.softmax if name == "softmax" else torch.log_softmax
    return Spec(code, (a.name,), lambda t: f(t, dims if dims is not None else -1) if nd else f(t, 0))


def _order_free(f, axes):
    """f, refusing (Undefined) a t with a sum over `axes` whose positive and negative terms both add up past the
    range glassgrad accumulates in (float32 for 16-bit floats): its partial sums overflow to +inf or -inf by the
    order of its terms, and the sum is +-inf or NaN by that order, PyTorch's pairwise one or glassgrad's."""

    def ref(t: torch.Tensor) -> torch.Tensor:
        if t.is_floating_point() and axes != () and _overflow_decides(t.detach().double(), axes, t.dtype):
            raise Undefined("a sum whose partial sums overflow both ways, as its terms' order decides")
        return f(t)

    return ref


def _overflow_decides(terms: torch.Tensor, axes, dtype: torch.dtype) -> bool:
    """Some sum over `axes` of the float64 `terms` has positive and negative parts both past `dtype`'s accumulator
    range, not both from an infinite term (inf - inf is NaN in any order)."""
    big = torch.finfo(torch.float64 if dtype == torch.float64 else torch.float32).max
    up, down = terms.clamp(min=0).sum(axes), (-terms).clamp(min=0).sum(axes)
    infinite_both_ways = (terms == math.inf).any(axes) & (terms == -math.inf).any(axes)
    return bool(((up >= big) & (down >= big) & ~infinite_both_ways).any())


def _nearly_constant(t: torch.Tensor, axes) -> bool:
    """Some slice along `axes` has a variance that is zero or lost in rounding."""
    x = t.detach().double()
    if x.numel() == 0:
        return False
    var = x.var(axes, correction=0)
    return bool((var <= 1e-6 * (x.square().mean(axes) + 1e-30)).any())


def _zero_and_overflow(t: torch.Tensor, d) -> bool:
    """Values with a zero whose other values' product is not finite in d (an inf, a NaN, or an overflow)."""
    x = t.detach().double().reshape(-1)
    if not bool((x == 0).any()):
        return False
    rest = x[x != 0].abs()
    return not bool(torch.isfinite(rest).all()) or float(rest.log2().sum()) >= math.log2(torch.finfo(TORCH[d]).max)


def _prod(t: torch.Tensor, axes, keepdim: bool) -> torch.Tensor:
    """The product over `axes`, each slice its own torch.prod over every element. PyTorch's gradient of prod(dim)
    takes its formula by whether any element of the whole input is 0, so a zero in one slice turns another's
    inf / inf = NaN into the product of the others; of one slice it takes it by that slice, as glassgrad's does.
    With two zeros in a slice PyTorch multiplies cumulative products in order, where an overflow before a zero
    gives inf * 0 = NaN and one after it 0: such a slice is left out. A 0-d tensor's is itself (gradient 1)."""
    if t.ndim == 0:
        return t
    axes = sorted({a % t.ndim for a in (axes if isinstance(axes, tuple) else (axes,))})
    kept = [d for d in range(t.ndim) if d not in axes]
    m, n = math.prod(t.shape[d] for d in kept), math.prod(t.shape[d] for d in axes)
    rows = t.permute(*kept, *axes).reshape(m, n)
    if t.is_floating_point() and any(_order_decides(r) for r in rows.detach()):
        raise Undefined("a slice of prod whose partial products pass the range in some orders only")
    out = torch.stack([r.prod() for r in rows]) if m else rows.prod(1)
    return out.reshape(
        [1 if d in axes else t.shape[d] for d in range(t.ndim)] if keepdim else [t.shape[d] for d in kept]
    )


def _order_decides(row: torch.Tensor) -> bool:
    """Partial products that may pass the dtype's range, by the order of the multiplications: with two or more
    zeros (inf * 0 = NaN before the last zero, 0 after it), or where the product of the nonzero values is finite
    but its large factors together are not. The order is each side's own (PyTorch's vectorized lanes give
    3e38 * 0.5 * 2 (3e38 in lane 0, 2 in lane 8) as inf, glassgrad's lanes -1.19 * 0.35 * -3e38 * -2.5 ... as inf
    where PyTorch's sequential short product is 3.05e38), and the gradient, prod / x, is inf or a number with it."""
    rest = row[row != 0].double().abs()
    logs = rest.log2()
    limit = math.log2(torch.finfo(row.dtype).max)
    growth = float(logs.clamp(min=0).sum())  # the largest any partial product can be, as a power of 2
    if growth < limit:
        return False
    return len(row) - len(rest) >= 2 or (bool(torch.isfinite(rest).all()) and float(logs.sum()) < limit)


def _nan_key(t: torch.Tensor, name: str) -> torch.Tensor:
    """argmax counts NaN as the largest and argmin as the smallest (docs/tensor.md, as PyTorch)."""
    if not t.is_floating_point():
        return t
    return t.double().nan_to_num(math.inf if name == "argmax" else -math.inf, posinf=1e308, neginf=-1e308)


# ---- matmul ----
def matmul(g: Gen, _n: str) -> Spec | None:
    a = g.pick(lambda v: 1 <= len(v.shape) <= 3 and v.dtype != dtypes.bool)
    if a is None:
        return None
    k = a.shape[-1]
    bshape = g.rng.choice(((k,), (k, g.rng.choice((1, 2, 3, 5))), (g.rng.choice((1, 2)), k, 3)))
    b = g.add_input(bshape, a.dtype)
    if a.dtype in CARRIED:
        return Spec(f"{a.name} @ {b.name}", (a.name, b.name), lambda x, y: wrap(x @ y, a.dtype), a.dtype)
    if is_int(a.dtype):
        dt = TORCH[a.dtype]  # PyTorch's CPU matmul of small ints: through int64, wrapped back to the dtype
        return Spec(f"{a.name} @ {b.name}", (a.name, b.name), lambda x, y: (x.long() @ y.long()).to(dt))
    return Spec(f"{a.name} @ {b.name}", (a.name, b.name), _matmul_order_free)


def _matmul_order_free(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """x @ y, refusing (Undefined) a dot product whose terms overflow both ways (_order_free): PyTorch's multiply-adds
    never round a product to inf, glassgrad's may, and their orders differ."""
    a = x.detach().double() if x.ndim > 1 else x.detach().double().unsqueeze(0)
    b = y.detach().double() if y.ndim > 1 else y.detach().double().unsqueeze(-1)
    if _overflow_decides(a.unsqueeze(-1) * b.unsqueeze(-3), -2, x.dtype):
        raise Undefined("a dot product whose partial sums overflow both ways, as its terms' order decides")
    return x @ y


REDUCTIONS = ("sum", "prod", "max", "min", "mean", "var", "std", "argmax", "argmin", "cumsum", "softmax",
              "log_softmax", "logsumexp", "any", "all")  # fmt: skip


def builders() -> dict[str, tuple[str, object]]:
    """op name -> (family, builder)."""
    table = {n: ("movement", f) for n, f in [("reshape", reshape), ("permute", permute), ("expand", expand),
             ("pad", pad), ("shrink", shrink), ("flip", flip)]}  # fmt: skip
    table |= {n: ("movement", squeeze) for n in ("squeeze", "unsqueeze", "flatten")}
    table |= {"getitem": ("index", getitem), "advanced_index": ("index", advanced), "bool_mask": ("index", bool_mask),
              "gather": ("index", gather),
              "masked_fill": ("index", masked_fill), "cat": ("join", join), "stack": ("join", join)}  # fmt: skip
    table |= {n: ("reduce", reduce) for n in REDUCTIONS}
    table["matmul"] = ("matmul", matmul)
    return table
