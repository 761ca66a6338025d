"""glassgrad: a small, lazy deep-learning framework you can read end to end."""

from glassgrad import amp, backends, nn  # noqa: E402  (after Tensor: nn is built on it)
from glassgrad.autocast import autocast
from glassgrad.backends.cuda import get_float32_matmul_precision, set_float32_matmul_precision
from glassgrad.disk_cache import cache_dir
from glassgrad.dtype import dtypes
from glassgrad.engine.jit import TinyJit
from glassgrad.function import function
from glassgrad.helpers import VIZ, Context, getenv
from glassgrad.runtime.counters import GlobalCounters
from glassgrad.runtime.device import Device
from glassgrad.tensor import Tensor
from glassgrad.uop.variable import Variable

if VIZ:  # record every rewrite and kernel from here on, and serve the page at exit; without VIZ viz/ is not imported
    from glassgrad import viz

    viz.start()

__all__ = [
    "Context",
    "Device",
    "GlobalCounters",
    "Tensor",
    "TinyJit",
    "Variable",
    "amp",
    "autocast",
    "backends",
    "cache_dir",
    "dtypes",
    "function",
    "get_float32_matmul_precision",
    "getenv",
    "nn",
    "set_float32_matmul_precision",
]
