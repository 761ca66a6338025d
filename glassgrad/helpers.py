"""Small utilities shared across glassgrad: environment flags, Context, and math on shapes."""

from __future__ import annotations

import contextlib
import functools
import os
import pathlib
import sys
import weakref
from collections.abc import Iterable
from typing import Any

from glassgrad.progress import tqdm, trange  # noqa: F401  (tinygrad's import path: glassgrad.helpers.trange)


class KeyedRef(weakref.ref):
    """A weak reference that remembers a key (its referent's entry in a dict of live objects, dropped by the
    callback): one callback serves every entry, where a closure per object would be made on a hot path."""

    __slots__ = ("key",)


@functools.cache
def _env_int(key: str, default: int) -> int:
    return int(os.environ.get(key, default))


class ContextVar:
    """A named integer flag read once from the environment and changeable with `Context`."""

    registry: dict[str, ContextVar] = {}

    def __init__(self, key: str, default: int = 0):
        self.key, self.value = key, _env_int(key, default)
        ContextVar.registry[key] = self

    def __bool__(self) -> bool:
        return bool(self.value)

    def __ge__(self, other: int) -> bool:
        return self.value >= other

    def __gt__(self, other: int) -> bool:
        return self.value > other

    def __le__(self, other: int) -> bool:
        return self.value <= other

    def __lt__(self, other: int) -> bool:
        return self.value < other

    def __int__(self) -> int:
        return self.value


DEBUG = ContextVar("DEBUG", 0)
NOOPT = ContextVar("NOOPT", 0)
BEAM = ContextVar("BEAM", 0)
TF32 = ContextVar("TF32", 0)  # 1: float32 contractions may run on the tensor cores as TF32 (glassgrad.backends)
JIT = ContextVar("JIT", 1)  # 0: TinyJit runs its function eagerly, every call
VIZ = ContextVar("VIZ", 0)
PROGRESS = ContextVar("PROGRESS", 1)  # 0: no "compiling N kernels" line on stderr when a realize waits on compiles
FUSED_ATTENTION = ContextVar("FUSED_ATTENTION", 1)  # 0: scaled_dot_product_attention never asks for a fused kernel
# (mixin/fused_attention.py): the ordinary ops, on every device
TRAINING = ContextVar("TRAINING", 0)  # Tensor.training: dropout drops, batchnorm uses and updates batch statistics

L2_BUDGET = 1 << 20  # bytes of one operand a kernel may keep in cache: half of a 2 MiB L2 (the CPU kernels' tiles, a
# large matmul's packed panels, a batch summed in parts)


def host_cache_bytes(level: int = 2, default: int = 2 << 20) -> int:
    """Bytes of the host's data cache of one core at `level`, as Linux's sysfs reports it; `default` elsewhere."""
    units = {"K": 1 << 10, "M": 1 << 20}
    for index in sorted(pathlib.Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        try:
            if int((index / "level").read_text()) == level and (index / "type").read_text().strip() != "Instruction":
                size = (index / "size").read_text().strip()
                return int(size[:-1]) * units[size[-1]] if size[-1] in units else int(size)
        except (OSError, ValueError):
            continue
    return default


def getenv(key: str, default: Any = 0) -> Any:
    """Read an environment variable, converted to the type of `default`."""
    value = os.environ.get(key)
    return default if value is None else type(default)(value)


class Context(contextlib.ContextDecorator):
    """Set flags such as DEBUG, NOOPT or TRAINING for a block, `with Context(DEBUG=2): ...`, or for every call of a
    function, `@Context(TRAINING=1)`; the old values come back after it."""

    def __init__(self, **flags: int):
        if unknown := sorted(set(flags) - set(ContextVar.registry)):
            raise KeyError(f"Context: unknown flag(s) {unknown}; the flags are {sorted(ContextVar.registry)}")
        self.flags, self._saved = flags, []  # a stack: a decorated function may call itself

    def __enter__(self) -> None:
        self._saved.append({key: ContextVar.registry[key].value for key in self.flags})
        for key, value in self.flags.items():
            ContextVar.registry[key].value = value

    def __exit__(self, *exc: Any) -> None:
        for key, value in self._saved.pop().items():
            ContextVar.registry[key].value = value


def prod(xs: Iterable[int]) -> int:
    """Product of a sequence of ints (1 for an empty one)."""
    result = 1
    for x in xs:
        result *= x
    return result


def strides_for_shape(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Row-major strides of a contiguous array, with stride 0 on size-1 dimensions."""
    strides, acc = [], 1
    for size in reversed(shape):
        strides.append(acc if size != 1 else 0)
        acc *= size
    return tuple(reversed(strides))


COLORS = {"black": 30, "red": 31, "green": 32, "yellow": 33, "blue": 34, "magenta": 35, "cyan": 36, "white": 37}


def use_color() -> bool:
    """Color only on a terminal, and not when NO_COLOR is set to something (no-color.org)."""
    return not os.environ.get("NO_COLOR") and sys.stdout.isatty()


def colored(text: str, color: str | None, bright: bool = False) -> str:
    """Wrap text in an ANSI color when printing to a terminal (NO_COLOR=1 turns it off)."""
    if color is None or not use_color():
        return text
    return f"\u001b[{COLORS[color] + 60 * bright}m{text}\u001b[0m"


class TrainingSwitch(type):
    """The metaclass part of Tensor.training: reading or setting it on the class reads or sets the TRAINING flag, so
    `Tensor.train()`, `Tensor.training = True` and `Context(TRAINING=1)` are one switch."""

    @property
    def training(cls) -> bool:
        return bool(TRAINING)

    @training.setter
    def training(cls, value: bool) -> None:
        TRAINING.value = int(bool(value))


# Tensor.training as an instance reads it: the same flag
training_flag = property(lambda self: bool(TRAINING), doc="Whether dropout and batchnorm train (the TRAINING flag).")
