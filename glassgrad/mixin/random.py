"""Tensor methods for random tensors, initializers, sampling and dropout.

Random numbers come from a counter-based generator that kernels compute: element i of a call is a hash of
(seed, counter + i), and each call advances the counter by the elements it used. The seed and counter reach the
kernel as a small buffer, not as constants, so one compiled kernel serves every call, and every device computes the
same bits for the same seed.
"""

from __future__ import annotations

import functools
import math
import operator
from typing import TYPE_CHECKING, Any

from glassgrad.device_info import device_or_default
from glassgrad.dtype import DType, dtypes, to_dtype
from glassgrad.engine.threads import one_thread_at_a_time
from glassgrad.errors import ArgumentError, DtypeError
from glassgrad.helpers import prod
from glassgrad.mixin.small_tensors import _arange
from glassgrad.shape import shape_arg
from glassgrad.tensor_math import polynomial, zero_with_gradient

if TYPE_CHECKING:
    from glassgrad.tensor import Tensor

# How many random bits make a uniform float of each dtype: every value k * 2**-bits in [0, 1) is exact and equally
# likely, and none rounds up to 1.
UNIFORM_BITS = {dtypes.float16: 11, dtypes.bfloat16: 8, dtypes.float32: 24, dtypes.float64: 32}
FLOAT32_MAX = 3.4028234663852886e38

# The transforms from uniform to other distributions use only +, -, *, /, sqrt and bit operations, which every device
# rounds the same (correctly), and no libm function (exp2f, log2f, sinf differ in the last bit between C and Python):
# so the same seed gives the same bits on every device, not only the same uniforms.

# log(m) = 2 atanh(s) = s * (2 + 2/3 s^2 + 2/5 s^4 + ...), s = (m - 1)/(m + 1), |s| < 0.172 for m in [1/sqrt2, sqrt2]
LOG_BY_ATANH = tuple(2 / (2 * k + 1) for k in range(5))
# cos(2 pi a) = sum over k of (-1)^k (2 pi)^(2k) / (2k)! * a^(2k), for a in [0, 1/4]
COS_2PI_TAYLOR = tuple((-1) ** k * (2 * math.pi) ** (2 * k) / math.factorial(2 * k) for k in range(8))


class RandomMixin:
    """Tensor methods for random tensors, initializers, sampling and dropout."""

    _seed: int
    _rng_states: dict[str, Tensor]

    @classmethod
    @one_thread_at_a_time
    def manual_seed(cls, seed: int = 0) -> None:
        """Make the random functions reproducible from `seed`."""
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise TypeError(f"manual_seed: the seed must be an int, got {type(seed).__name__} {seed!r}")
        cls._seed = seed
        for device, state in cls.__dict__.get("_rng_states", {}).items():  # in place: captured kernels read them
            state.assign(cls([cls._rng_key(), 0], device=device, dtype=dtypes.uint32)).realize()

    @classmethod
    def _rng_state(cls, device: str) -> Tensor:
        """The generator's (key, counter) on a device: a buffer, so that TinyJit's replays advance it too."""
        states = cls.__dict__.get("_rng_states")
        if states is None:
            states = cls._rng_states = {}
        if device not in states:
            states[device] = cls([cls._rng_key(), 0], device=device, dtype=dtypes.uint32).contiguous().realize()
        return states[device]

    @classmethod
    def _rng_key(cls) -> int:
        # the key mixes the seed with a constant, so that seed 0 does not begin with hash(0) ^ 0 = 0
        return (cls._seed ^ (cls._seed >> 32) ^ 0x9E3779B9) & 0xFFFFFFFF

    @classmethod
    @one_thread_at_a_time  # the state is read and advanced together: two threads must not draw the same numbers
    def _random_bits(cls, count: int, device: str) -> Tensor:
        """`count` uint32 values from a hash of (seed, counter): each call advances the counter (lazily, by assign)."""
        state = cls._rng_state(device)
        # the bits read a copy of the state: a kernel reading two draws (rand() @ rand()) would otherwise need the
        # state's old contents and the ones the first draw's assign wrote, both from the one buffer
        key = state.clone()
        counter = cls.arange(count, device=device, dtype=dtypes.uint32)
        bits = _mix32(_mix32(counter + key[1]) ^ key[0])
        state.assign(state + cls([0, count & 0xFFFFFFFF], device=device, dtype=dtypes.uint32))
        return bits

    @classmethod
    def rand(cls, *shape: int, dtype: DType | str | None = None, device: str | None = None,
             requires_grad: bool | None = None) -> Tensor:  # fmt: skip
        """Uniform random values in [0, 1)."""
        shape, dtype, device = _creator_args(shape, dtype, device, "rand")
        bits = UNIFORM_BITS[dtype]
        random = cls._random_bits(prod(shape), device)
        uniform = (random >> (32 - bits)).cast(_working_float(dtype)) * 2.0**-bits  # k * 2**-bits, exact
        return uniform.cast(dtype).reshape(shape).requires_grad_(requires_grad)

    @classmethod
    def randn(cls, *shape: int, dtype: DType | str | None = None, device: str | None = None,
              requires_grad: bool | None = None) -> Tensor:  # fmt: skip
        """Standard normal random values (Box-Muller in float32, the same bits on every device)."""
        shape, dtype, device = _creator_args(shape, dtype, device, "randn")
        pair = cls.rand(2, *shape, dtype=dtypes.float32, device=device)  # the transform reads float32 bits
        radius = _portable_log(1 - pair[0]).mul(-2).sqrt()  # 1 - u is in (0, 1]: the log is finite
        normal = radius * _portable_cos_2pi(pair[1])
        return normal.cast(dtype).requires_grad_(requires_grad)

    @classmethod
    def randint(cls, *args: Any, low: int | None = None, high: int | None = None, size: Any = None,
                dtype: DType | str = dtypes.int32, device: str | None = None,
                requires_grad: bool | None = None) -> Tensor:  # fmt: skip
        """Uniform random integers in [low, high): randint(*shape, low=0, high=10), or randint(low, high, size)."""
        if size is None and args and isinstance(args[-1], (tuple, list)):
            args, size = args[:-1], args[-1]
        if size is not None:  # PyTorch's form: the leading ints are (high,) or (low, high)
            if len(args) > 2 or not all(isinstance(a, int) for a in args):
                raise TypeError(f"randint: expected randint(high, size) or randint(low, high, size), got {args}")
            low, high = args if len(args) == 2 else (low, args[0] if args else high)
            args = tuple(size)
        low, high = 0 if low is None else low, 10 if high is None else high
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in (low, high)):
            raise TypeError(f"randint: low and high must be ints, got low={low!r} and high={high!r}")
        if high <= low:
            raise ArgumentError(f"randint: high ({high}) must be greater than low ({low})")
        if high - low > 2**32:
            raise ArgumentError(f"randint: the range [{low}, {high}) is wider than 2**32 values")
        shape = shape_arg(args, "randint")
        dtype = to_dtype(dtype)
        if requires_grad and not dtypes.is_float(dtype):
            raise ArgumentError(f"randint: only float tensors can require gradients, got dtype {dtype}")
        random = cls._random_bits(prod(shape), device_or_default(device))
        # floor(bits * range / 2**32) spreads 2**32 values evenly over the range (biased by at most range / 2**32)
        offset = (random.cast(dtypes.uint64) * (high - low)) >> 32
        return (offset.cast(dtypes.int64) + low).cast(dtype).reshape(shape).requires_grad_(requires_grad)

    @classmethod
    def normal(cls, *shape: int, mean: float = 0.0, std: float = 1.0, dtype: DType | str | None = None,
               device: str | None = None, requires_grad: bool | None = None) -> Tensor:  # fmt: skip
        """Normal random values with the given mean and standard deviation."""
        shape, dtype, device = _creator_args(shape, dtype, device, "normal")
        if std < 0:
            raise ArgumentError(f"normal: std must be >= 0, got {std}")
        values = cls.randn(*shape, dtype=_working_float(dtype), device=device) * std + mean
        return values.cast(dtype).requires_grad_(requires_grad)

    @classmethod
    def uniform(cls, *shape: int, low: float = 0.0, high: float = 1.0, dtype: DType | str | None = None,
                device: str | None = None, requires_grad: bool | None = None) -> Tensor:  # fmt: skip
        """Uniform random values in [low, high)."""
        shape, dtype, device = _creator_args(shape, dtype, device, "uniform")
        values = cls.rand(*shape, dtype=_working_float(dtype), device=device) * (high - low) + low
        return values.cast(dtype).requires_grad_(requires_grad)

    @classmethod
    def scaled_uniform(cls, *shape: int, dtype: DType | str | None = None, device: str | None = None,
                       requires_grad: bool | None = None) -> Tensor:  # fmt: skip
        """Uniform in [-1, 1) scaled by 1/sqrt(number of elements)."""
        shape = shape_arg(shape, "scaled_uniform")
        bound = max(prod(shape), 1) ** -0.5
        return cls.uniform(*shape, low=-bound, high=bound, dtype=dtype, device=device, requires_grad=requires_grad)

    @classmethod
    def glorot_uniform(cls, *shape: int, dtype: DType | str | None = None, device: str | None = None,
                       requires_grad: bool | None = None) -> Tensor:  # fmt: skip
        """Xavier/Glorot uniform: U(-b, b) with b = sqrt(6 / (fan_in + fan_out)), fans from shape[0] and shape[1:]."""
        shape = shape_arg(shape, "glorot_uniform")
        if not shape:
            raise ArgumentError("glorot_uniform: needs a shape with at least one dimension, got ()")
        bound = math.sqrt(6 / max(shape[0] + prod(shape[1:]), 1))
        return cls.uniform(*shape, low=-bound, high=bound, dtype=dtype, device=device, requires_grad=requires_grad)

    @classmethod
    def kaiming_uniform(cls, *shape: int, a: float = 0.01, dtype: DType | str | None = None, device: str | None = None,
                        requires_grad: bool | None = None) -> Tensor:  # fmt: skip
        """He/Kaiming uniform for leaky_relu(a): U(-b, b), b = sqrt(6 / ((1 + a^2) * prod(shape[1:])))."""
        bound = math.sqrt(3.0) * _kaiming_std(shape_arg(shape, "kaiming_uniform"), a, "kaiming_uniform")
        return cls.uniform(*shape, low=-bound, high=bound, dtype=dtype, device=device, requires_grad=requires_grad)

    @classmethod
    def kaiming_normal(cls, *shape: int, a: float = 0.01, dtype: DType | str | None = None, device: str | None = None,
                       requires_grad: bool | None = None) -> Tensor:  # fmt: skip
        """He/Kaiming normal for leaky_relu(a): N(0, 2 / ((1 + a^2) * fan_in)), fan_in = prod(shape[1:])."""
        std = _kaiming_std(shape_arg(shape, "kaiming_normal"), a, "kaiming_normal")
        return cls.normal(*shape, std=std, dtype=dtype, device=device, requires_grad=requires_grad)

    def multinomial(self: Tensor, num_samples: int = 1, replacement: bool = False) -> Tensor:
        """Sample category indices in proportion to the weights of each row (int32; bool or int weights as well)."""
        if self.ndim not in (1, 2):
            raise ArgumentError(f"multinomial: weights must be 1-D or 2-D, got shape {self.shape}")
        n = self.shape[-1]
        if n == 0:
            raise ArgumentError(f"multinomial: weights of shape {self.shape} have no categories to sample from")
        if not isinstance(num_samples, int) or isinstance(num_samples, bool) or num_samples < 1:
            raise ArgumentError(f"multinomial: num_samples must be a positive int, got {num_samples!r}")
        if not replacement and num_samples > n:
            raise ArgumentError(f"multinomial: cannot take {num_samples} samples from {n} categories without "
                                "replacement; pass replacement=True")  # fmt: skip
        weights = (self if self.ndim == 2 else self.unsqueeze(0)).detach().cast(dtypes.float32)
        rows = weights.shape[0]
        # an exponential race: category i "arrives" at E_i / w_i with E_i ~ Exp(1); the first arrival is distributed
        # as w / sum(w), and the order of arrivals is sampling without replacement
        if replacement:
            weights = weights.unsqueeze(1).expand(rows, num_samples, n)
        # categories of weight 0 (or so small that E/w overflows) come last, and after them the ones already taken
        arrival = (weights > 0).where(_exponential(weights) / weights, math.inf).minimum(FLOAT32_MAX)
        if replacement:
            samples = _first_index_of_min(arrival)
        else:
            picks = []
            for _ in range(num_samples):
                pick = _first_index_of_min(arrival)
                picks.append(pick)
                arrival = _arange(n, self).eq(pick.unsqueeze(-1)).where(math.inf, arrival)
            columns = [p.unsqueeze(-1).pad(((0, 0), (i, num_samples - 1 - i))) for i, p in enumerate(picks)]
            samples = functools.reduce(operator.add, columns)
        return samples if self.ndim == 2 else samples.reshape(num_samples)

    def dropout(self: Tensor, p: float = 0.5) -> Tensor:
        """While Tensor.training, zero each element with probability p and scale the rest by 1/(1-p)."""
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 <= p <= 1:
            raise ArgumentError(f"dropout: p must be a probability in [0, 1], got {p!r}")
        if not self.training or p == 0:
            return self
        if p == 1:
            return zero_with_gradient(self._float_input())
        keep = self.rand_like(dtype=dtypes.float32) >= p
        return keep.where(self * (1 / (1 - p)), 0)


# ---- helpers for the methods above ----


def _mix32(x: Tensor) -> Tensor:
    """A 32-bit integer hash (murmur3's finalizer): every input bit affects every output bit."""
    x = x ^ (x >> 16)
    x = x * 0x85EBCA6B
    x = x ^ (x >> 13)
    x = x * 0xC2B2AE35
    return x ^ (x >> 16)


def _creator_args(shape: Any, dtype: DType | str | None, device: str | None,
                  op: str) -> tuple[tuple[int, ...], DType, str]:  # fmt: skip
    """The checked shape, float dtype and device of a random creator."""
    dtype = to_dtype(dtype) if dtype is not None else dtypes.default_float
    if not dtypes.is_float(dtype):
        raise DtypeError(f"{op}: makes floats; dtype {dtype} is not a float dtype (use randint for integers)")
    return shape_arg(shape, op), dtype, device_or_default(device)


def _working_float(dtype: DType) -> DType:
    """The dtype random values of `dtype` are computed in: float64 for float64, else float32, whatever the default
    float is (a 16-bit one would round every step of a transform, and the portable log reads float32 bits)."""
    return dtypes.float64 if dtype == dtypes.float64 else dtypes.float32


def _kaiming_std(shape: tuple[int, ...], a: float, op: str) -> float:
    if not shape:
        raise ArgumentError(f"{op}: needs a shape with at least one dimension, got ()")
    return math.sqrt(2 / (1 + a * a)) / math.sqrt(max(prod(shape[1:]), 1))


def _exponential(like: Tensor) -> Tensor:
    """Exp(1) random values of like's shape and device: -log(1 - u) for u uniform in [0, 1)."""
    return -_portable_log(1 - type(like).rand(*like.shape, dtype=dtypes.float32, device=like.device))


def _portable_log(v: Tensor) -> Tensor:
    """Natural log of positive normal float32 values, to within 1e-6."""
    bits = v.bitcast(dtypes.uint32)
    exponent = (bits >> 23).cast(dtypes.int32) - 127
    mantissa = ((bits & 0x7FFFFF) | 0x3F800000).bitcast(
        dtypes.float32
    )  # v = mantissa * 2**exponent, mantissa in [1, 2)
    high = mantissa > math.sqrt(2)
    m, e = high.where(mantissa * 0.5, mantissa), high.where(exponent + 1, exponent).cast(dtypes.float32)
    s = (m - 1) / (m + 1)
    return e * math.log(2) + s * polynomial(s * s, LOG_BY_ATANH)


def _portable_cos_2pi(u: Tensor) -> Tensor:
    """cos(2 pi u) for u in [0, 1], to within 2e-7."""
    a = (u < 0.5).where(u, 1 - u)  # cos(2 pi u) = cos(2 pi (1 - u)), a in [0, 1/2]
    far = a > 0.25
    c = polynomial(far.where(0.5 - a, a).square(), COS_2PI_TAYLOR)  # cos(2 pi a) = -cos(2 pi (1/2 - a))
    return far.where(-c, c)


def _first_index_of_min(x: Tensor) -> Tensor:
    """The index of the first smallest value along the last axis (int32)."""
    n = x.shape[-1]
    is_min = x.eq(x.min(-1, keepdim=True))
    return is_min.where(_arange(n, x), n).min(-1)
