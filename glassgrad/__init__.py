"""glassgrad: a small, lazy deep-learning framework you can read end to end."""

from glassgrad import nn  # noqa: E402  (after Tensor: nn is built on it)
from glassgrad.dtype import dtypes
from glassgrad.engine.counters import GlobalCounters
from glassgrad.engine.jit import TinyJit
from glassgrad.function import function
from glassgrad.helpers import Context, getenv
from glassgrad.runtime.device import Device
from glassgrad.tensor import Tensor

__all__ = ["Context", "Device", "GlobalCounters", "Tensor", "TinyJit", "dtypes", "function", "getenv", "nn"]
