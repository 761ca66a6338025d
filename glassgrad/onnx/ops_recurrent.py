"""Recurrent layers: RNN, GRU and LSTM, unrolled over the time steps as one lazy graph.

The input projection of every step is one matmul up front; each step then adds its recurrent projection and
applies the gates. Weights are stacked per direction: W (directions, gates * hidden, input), R (directions,
gates * hidden, hidden), B (directions, 2 * gates * hidden: the input biases, then the recurrent ones).
"""

from __future__ import annotations

from collections.abc import Callable

from glassgrad.onnx.registry import OpContext, onnx_op
from glassgrad.tensor import Tensor

# activation name -> function of (x, alpha, beta); alpha and beta come from activation_alpha/activation_beta
ACTIVATIONS: dict[str, tuple[Callable[[Tensor, float, float], Tensor], float, float]] = {
    "Sigmoid": (lambda x, a, b: x.sigmoid(), 0.0, 0.0),
    "Tanh": (lambda x, a, b: x.tanh(), 0.0, 0.0),
    "Relu": (lambda x, a, b: x.relu(), 0.0, 0.0),
    "LeakyRelu": (lambda x, a, b: x.leaky_relu(a), 0.01, 0.0),
    "ThresholdedRelu": (lambda x, a, b: (x > a).where(x, 0), 1.0, 0.0),
    "ScaledTanh": (lambda x, a, b: (x * b).tanh() * a, 1.0, 1.0),
    "HardSigmoid": (lambda x, a, b: (x * a + b).clip(0, 1), 0.2, 0.5),
    "Elu": (lambda x, a, b: x.elu(a), 1.0, 0.0),
    "Softsign": (lambda x, a, b: x.softsign(), 0.0, 0.0),
    "Softplus": (lambda x, a, b: x.softplus(), 0.0, 0.0),
    "Affine": (lambda x, a, b: x * a + b, 1.0, 0.0),
}


def _activations(ctx: OpContext, names, alphas, betas, default: list[str], directions: int) -> list[Callable]:
    """The activation functions in order, with their alpha and beta (given, or each function's default)."""
    names = list(names) if names else default * directions
    alphas, betas = list(alphas or []), list(betas or [])
    out = []
    for name in names:
        if name not in ACTIVATIONS:
            raise ctx.error(f"activation {name!r} is not supported", unsupported=True)
        fn, alpha, beta = ACTIVATIONS[name]
        takes = name in ("LeakyRelu", "ThresholdedRelu", "ScaledTanh", "HardSigmoid", "Elu", "Affine")
        a = alphas.pop(0) if takes and alphas else alpha
        b = betas.pop(0) if name in ("ScaledTanh", "HardSigmoid", "Affine") and betas else beta
        out.append(lambda x, fn=fn, a=a, b=b: fn(x, a, b))
    return out


def _run(ctx: OpContext, kind: str, x: Tensor, w: Tensor, r: Tensor, b: Tensor | None, sequence_lens: Tensor | None,
         initial_h: Tensor | None, initial_c: Tensor | None, p: Tensor | None,
         attrs: dict) -> tuple[Tensor, ...]:  # fmt: skip
    gates = {"RNN": 1, "GRU": 3, "LSTM": 4}[kind]
    hidden, layout, clip = attrs["hidden_size"], attrs["layout"], attrs["clip"]
    direction = attrs["direction"]
    directions = 2 if direction == "bidirectional" else 1
    default = {"RNN": ["Tanh"], "GRU": ["Sigmoid", "Tanh"], "LSTM": ["Sigmoid", "Tanh", "Tanh"]}[kind]
    acts = _activations(ctx, attrs["activations"], attrs["activation_alpha"], attrs["activation_beta"], default,
                        directions)  # fmt: skip
    per_direction = len(acts) // directions
    if layout:  # (batch, seq, ...) -> (seq, batch, ...)
        x = x.transpose(0, 1)
        initial_h = None if initial_h is None else initial_h.transpose(0, 1)
        initial_c = None if initial_c is None else initial_c.transpose(0, 1)
    steps, batch = x.shape[0], x.shape[1]
    if sequence_lens is not None and any(n != steps for n in ctx.ints(sequence_lens)):
        raise ctx.error("sequence_lens shorter than the input is not supported", unsupported=True)
    if kind == "LSTM" and attrs.get("input_forget"):
        raise ctx.error("input_forget=1 is not supported", unsupported=True)
    ys, last_h, last_c = [], [], []
    for d in range(directions):
        f = acts[d * per_direction : (d + 1) * per_direction]
        bias = b[d] if b is not None else Tensor.zeros(2 * gates * hidden, dtype=x.dtype, device=x.device)
        wb, rb = bias[: gates * hidden], bias[gates * hidden :]
        projected = x.matmul(w[d].T) + wb  # (seq, batch, gates * hidden)
        h = initial_h[d] if initial_h is not None else Tensor.zeros(batch, hidden, dtype=x.dtype, device=x.device)
        c = initial_c[d] if initial_c is not None else Tensor.zeros(batch, hidden, dtype=x.dtype, device=x.device)
        peep = p[d] if p is not None else None
        reverse = direction == "reverse" or d == 1
        outs: list[Tensor] = [None] * steps  # type: ignore[list-item]
        for t in reversed(range(steps)) if reverse else range(steps):
            h, c = _step(kind, f, projected[t], h, c, r[d], rb, peep, hidden, clip, attrs)
            # a buffer per step: fused, each step would inline the earlier ones several times over
            h, c = h.contiguous(), c.contiguous() if kind == "LSTM" else c
            outs[t] = h
        ys.append(Tensor.stack(*outs))
        last_h.append(h)
        last_c.append(c)
    y = Tensor.stack(*ys, dim=1)  # (seq, directions, batch, hidden)
    y_h, y_c = Tensor.stack(*last_h), Tensor.stack(*last_c)
    if layout:
        y, y_h, y_c = y.permute(2, 0, 1, 3), y_h.transpose(0, 1), y_c.transpose(0, 1)
    return (y, y_h, y_c) if kind == "LSTM" else (y, y_h)


def _clipped(t: Tensor, clip: float | None) -> Tensor:
    return t if clip is None else t.clip(-clip, clip)


def _step(kind: str, f: list[Callable], xw: Tensor, h: Tensor, c: Tensor, r: Tensor, rb: Tensor, peep: Tensor | None,
          hidden: int, clip: float | None, attrs: dict) -> tuple[Tensor, Tensor]:  # fmt: skip
    """One time step: the new hidden state (and, for LSTM, the new cell state)."""
    part = lambda t, i: t[..., i * hidden : (i + 1) * hidden]
    if kind == "RNN":
        return f[0](_clipped(xw + h.matmul(r.T) + rb, clip)), c
    if kind == "GRU":  # gates z, r, h
        hr = h.matmul(r.T)
        z = f[0](_clipped(part(xw, 0) + part(hr, 0) + part(rb, 0), clip))
        reset = f[0](_clipped(part(xw, 1) + part(hr, 1) + part(rb, 1), clip))
        if attrs["linear_before_reset"]:
            candidate = part(xw, 2) + reset * (part(hr, 2) + part(rb, 2))
        else:
            candidate = part(xw, 2) + (reset * h).matmul(part(r.T, 2)) + part(rb, 2)
        new = f[1](_clipped(candidate, clip))
        return (1 - z) * new + z * h, c
    # LSTM: gates i, o, f, c; peepholes p = [i, o, f]
    g = xw + h.matmul(r.T) + rb
    pi, po, pf = (part(peep, k) for k in range(3)) if peep is not None else (0, 0, 0)
    i = f[0](_clipped(part(g, 0) + pi * c, clip))
    forget = f[0](_clipped(part(g, 2) + pf * c, clip))
    cell = forget * c + i * f[1](_clipped(part(g, 3), clip))
    o = f[0](_clipped(part(g, 1) + po * cell, clip))
    return o * f[2](cell), cell


def _recurrent(kind: str):
    def op(ctx: OpContext, x: Tensor, w: Tensor, r: Tensor, b: Tensor | None = None,
           sequence_lens: Tensor | None = None, initial_h: Tensor | None = None, initial_c: Tensor | None = None,
           p: Tensor | None = None, *, hidden_size: int, activation_alpha=None, activation_beta=None,
           activations=None, clip: float | None = None, direction: str = "forward", layout: int = 0,
           input_forget: int = 0, linear_before_reset: int = 0) -> tuple[Tensor, ...]:  # fmt: skip
        attrs = dict(hidden_size=hidden_size, activation_alpha=activation_alpha, activation_beta=activation_beta,
                     activations=activations, clip=clip, direction=direction, layout=layout,
                     input_forget=input_forget, linear_before_reset=linear_before_reset)  # fmt: skip
        return _run(ctx, kind, x, w, r, b, sequence_lens, initial_h, initial_c, p, attrs)

    op.__name__ = kind.lower()
    return op


for _kind in ("RNN", "GRU", "LSTM"):
    onnx_op(_kind)(_recurrent(_kind))
