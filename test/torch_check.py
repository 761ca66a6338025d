"""One way to compare glassgrad with PyTorch: forward values and the gradients of f(x).sum(), on the same inputs."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch

from glassgrad import Tensor, dtypes

# How an input is laid out: contiguous, or read through a non-trivial view of a bigger or permuted buffer.
LAYOUTS = ("contiguous", "transposed", "strided")


def _make(array: np.ndarray, layout: str, requires_grad: bool, device: str) -> tuple[torch.Tensor, Tensor]:
    """The same values as a torch leaf and a glassgrad leaf, both read through the view `layout` asks for."""
    if layout == "contiguous":
        stored, view = array, lambda x: x
    elif layout == "transposed":
        # (np.ascontiguousarray makes a 0-d array 1-d: reshape it back)
        stored = np.ascontiguousarray(array.transpose(tuple(reversed(range(array.ndim))))).reshape(array.shape[::-1])
        view = lambda x: x.permute(*reversed(range(x.ndim))) if x.ndim else x  # noqa: E731
    elif layout == "strided":
        stored = np.zeros(tuple(2 * s for s in array.shape), array.dtype)
        stored[tuple(slice(None, None, 2) for _ in array.shape)] = array
        view = lambda x: x[tuple(slice(None, None, 2) for _ in array.shape)]  # noqa: E731
    else:
        raise ValueError(f"unknown layout {layout!r}")
    torch_leaf = torch.tensor(stored, requires_grad=requires_grad)
    ours_leaf = Tensor(stored, device=device, requires_grad=requires_grad)
    return (torch_leaf, view(torch_leaf)), (ours_leaf, view(ours_leaf))


def check_op(
    shapes: Sequence[tuple[int, ...]],
    torch_fn: Callable[..., torch.Tensor],
    ours: Callable[..., Tensor] | None = None,
    *,
    low: float = -2.0,
    high: float = 2.0,
    dtype=np.float32,
    layout: str = "contiguous",
    grad: bool = True,
    atol: float = 1e-5,
    rtol: float = 1e-5,
    grad_atol: float | None = None,
    grad_rtol: float | None = None,
    device: str | None = None,  # the default device
    seed: int = 0,
    inputs: Sequence[np.ndarray] | None = None,
) -> None:
    """Run `torch_fn` and `ours` (the same function when None) on the same random inputs of `shapes`.

    Checks the forward values, then, for float inputs when `grad` is set, the gradients of out.sum() with
    respect to every input.
    """
    ours = ours or torch_fn
    rng = np.random.default_rng(seed)
    arrays = list(inputs) if inputs is not None else [rng.uniform(low, high, s).astype(dtype) for s in shapes]
    floating = [np.issubdtype(a.dtype, np.floating) for a in arrays]
    made = [_make(a, layout, grad and f, device) for a, f in zip(arrays, floating)]
    torch_out = torch_fn(*[t for (_, t), _ in made])
    our_out = ours(*[o for _, (_, o) in made])
    _compare("forward", our_out, torch_out, atol, rtol)
    if not grad or not any(floating) or not torch_out.requires_grad:
        return
    torch_out.sum().backward() if torch_out.numel() else None
    our_out.sum().backward() if our_out.numel() else None
    for i, (((t_leaf, _), (o_leaf, _)), f) in enumerate(zip(made, floating)):
        if not f or t_leaf.grad is None:
            continue
        assert o_leaf.grad is not None, f"input {i}: torch has a gradient, glassgrad has none"
        _compare(f"gradient of input {i}", o_leaf.grad, t_leaf.grad, grad_atol or atol * 10, grad_rtol or rtol * 10)


def _compare(what: str, ours: Tensor, theirs: torch.Tensor, atol: float, rtol: float) -> None:
    expected = theirs.detach().numpy()
    assert tuple(ours.shape) == tuple(expected.shape), f"{what}: shape {ours.shape} != torch's {tuple(expected.shape)}"
    got = ours.numpy()
    if np.issubdtype(expected.dtype, np.floating):
        np.testing.assert_allclose(got, expected, atol=atol, rtol=rtol, equal_nan=True, err_msg=what)
    else:
        np.testing.assert_array_equal(got, expected, err_msg=what)


def weighted(fn: Callable) -> Callable:
    """fn(*xs) times fixed random weights of the output's shape (floats only): the gradient of the weighted sum says
    where each output element came from (the gradient of a plain sum only counts how often an input was picked)."""

    def both(*xs):
        out = fn(*xs)
        if out.numel() == 0 or out.dtype in (torch.bool, dtypes.bool) or not (
                out.is_floating_point() if isinstance(out, torch.Tensor) else dtypes.is_float(out.dtype)):  # fmt: skip
            return out
        w = np.random.default_rng(7).uniform(0.5, 1.5, tuple(out.shape)).astype(np.float32)
        return out * (torch.tensor(w) if isinstance(out, torch.Tensor) else Tensor(w, device=out.device))

    return both
