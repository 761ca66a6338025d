"""Exception classes that are PyTorch's and glassgrad's at once.

glassgrad reports a bad argument as a ValueError and a bad dtype as a TypeError, in the user's words; PyTorch raises
RuntimeError for most of these, and IndexError for a dimension that is not there. Each class here is both, so code
written for either library catches it: `except RuntimeError` as with PyTorch, `except ValueError` as before.
"""

from __future__ import annotations


class ArgumentError(ValueError, RuntimeError):
    """Arguments that do not fit together (shapes that do not match or broadcast, sizes, options): PyTorch's
    RuntimeError."""


class EmptyReductionError(ValueError, IndexError, RuntimeError):
    """A reduction with no identity (max, argmax, ..) over no elements: PyTorch raises IndexError for a dimension
    it names and RuntimeError for all of them."""


class DtypeError(TypeError, NotImplementedError):
    """A dtype the op does not take: PyTorch's RuntimeError, or its subclass NotImplementedError (a bitwise op of
    floats), which this is."""


class UnknownDtypeError(TypeError, AttributeError):
    """A dtype name that names no dtype: PyTorch's TypeError, and tinygrad's AttributeError (dtypes has no such
    attribute)."""


class UnsupportedModeError(ArgumentError, NotImplementedError):
    """An option value (a padding or resizing mode) the op does not have: PyTorch's NotImplementedError."""


class DimensionError(ArgumentError, IndexError):
    """A tensor without the dimension the op needs (cat of 0-d tensors): PyTorch's RuntimeError, tinygrad's
    IndexError."""


class ListAndTensorsError(ArgumentError, TypeError):
    """Tensors given as a list and one by one at once (Tensor.cat([a, b], c)): PyTorch's TypeError (it reads the
    second argument as dim), tinygrad's ValueError."""
