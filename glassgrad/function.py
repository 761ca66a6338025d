"""`function`: tinygrad's decorator that makes a function (or method) of tensors one unit of the graph.

In tinygrad the body becomes a CALL node, scheduled as a unit and differentiated through. glassgrad's graph is built
lazily anyway, so calling the body builds the same graph a unit would contain: values and gradients are the same,
and its kernels fuse with the surrounding work as tinygrad's unit (not precompiled) does. `precompile=True` gives
each output a buffer of its own, as tinygrad compiles a precompiled body into kernels of its own. Tensors the body
reads from outside (a model's weights) are read as they are at each call, so `allow_implicit` changes nothing. Under
TinyJit (as in tinygrad's MNIST example) the body's graph is built only while capturing.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from glassgrad.tensor import Tensor


class function:  # noqa: N801  (tinygrad's name)
    """`@function` or `@function(precompile=True)` over a function or method whose results are Tensors."""

    def __init__(self, fn: Callable[..., Any] | None = None, *, precompile: bool = False,
                 precompile_backward: bool = False, allow_implicit: bool = True,
                 grad_fxn: Callable | None = None):  # fmt: skip
        if grad_fxn is not None:
            raise NotImplementedError("function: grad_fxn (a gradient written over UOps) has no glassgrad form; "
                                      "glassgrad differentiates the body itself")  # fmt: skip
        self.fn, self.precompile = fn, precompile
        self.name = getattr(fn, "__qualname__", type(fn).__name__) if fn is not None else "function"
        if fn is not None:
            functools.update_wrapper(self, fn)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.fn is None:  # @function(...): this call gives the function to wrap
            (fn,) = args
            return function(fn, precompile=self.precompile)
        out = self.fn(*args, **kwargs)
        outputs = out if isinstance(out, tuple) else (out,)
        if not outputs or not all(isinstance(o, Tensor) for o in outputs):
            raise TypeError(f"function {self.name}: must return a Tensor or a tuple of Tensors, got "
                            f"{type(out).__name__}")  # fmt: skip
        if self.precompile:
            outputs = tuple(o.contiguous() for o in outputs)
        return outputs if isinstance(out, tuple) else outputs[0]

    def __get__(self, obj: Any, objtype: type | None = None) -> Any:
        """As a method: bound to its instance."""
        return self if obj is None else functools.partial(self.__call__, obj)
