"""Tensor methods for normalization: layer, RMS, group, batch and instance norms."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from glassgrad.autocast import float32_under_autocast
from glassgrad.dtype import dtypes
from glassgrad.errors import ArgumentError
from glassgrad.helpers import prod
from glassgrad.mixin.arguments import _nn_tensor, _param_of_shape

if TYPE_CHECKING:
    from glassgrad.tensor import Tensor


# The gap between 1.0 and the next float up (torch.finfo(dtype).eps): rms_norm's default eps.
_MACHINE_EPSILON = {dtypes.float16: 2.0**-10, dtypes.bfloat16: 2.0**-7, dtypes.float32: 2.0**-23,
                    dtypes.float64: 2.0**-52}  # fmt: skip


def _trailing_shape(x: Tensor, normalized_shape: int | Sequence[int], op: str) -> tuple[int, ...]:
    """torch's `normalized_shape`: the last dimensions of the input, over which the statistics are taken."""
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    if not shape or len(shape) > x.ndim or x.shape[x.ndim - len(shape) :] != shape:
        raise ArgumentError(f"{op}: normalized_shape {shape} must be the last dimensions of the input, "
                            f"whose shape is {x.shape}")  # fmt: skip
    return shape


def _standardized(x: Tensor, axes: tuple[int, ...], eps: float) -> tuple[Tensor, Tensor, Tensor]:
    """(x - mean) / sqrt(var + eps) over `axes` with the biased variance; also the mean and variance (kept dims)."""
    mean = x.mean(axes, keepdim=True)
    centered = x - mean
    var = (centered * centered).mean(axes, keepdim=True)
    return centered * (var + eps).rsqrt(), mean, var


def _scale_and_shift(x: Tensor, weight: Tensor | None, bias: Tensor | None, shape: tuple[int, ...]) -> Tensor:
    """x * weight + bias, each parameter read through `shape` so that it broadcasts against x."""
    if weight is not None:
        x = x * weight.reshape(shape)
    return x + bias.reshape(shape) if bias is not None else x


def _running_stats_start(x: Tensor, op: str, args: tuple, momentum: float, eps: float, batch_stats: bool,
                         flag: str) -> tuple[tuple, Tensor | None]:  # fmt: skip
    """The shared start of batch_norm and instance_norm: the checked per-channel arguments, and, when batch
    statistics are off, the result normalized by the running statistics (None otherwise)."""
    running_mean, running_var, weight, bias = args
    args = _per_channel_args(x, op, running_mean=running_mean, running_var=running_var, weight=weight, bias=bias)
    _check_momentum(momentum, op)
    if batch_stats:
        return args, None
    running_mean, running_var, weight, bias = args
    if running_mean is None or running_var is None:
        raise ArgumentError(f"{op}: running_mean and running_var are required when {flag}")
    return args, x.batchnorm(weight, bias, running_mean, (running_var + eps).rsqrt())


def _per_channel_args(x: Tensor, op: str, **tensors: Any) -> list[Tensor | None]:
    """Check that x is (N, C, *) and that each per-channel tensor is None or of shape (C,); return them in order."""
    if x.ndim < 2:
        raise ArgumentError(f"{op}: input needs shape (N, C, *), got {x.shape}")
    return [_param_of_shape(value, x, (x.shape[1],), op, name) for name, value in tensors.items()]


def _channel_view(x: Tensor) -> tuple[int, ...]:
    """The shape (1, C, 1, ...) that lines a per-channel parameter up with an (N, C, ...) input."""
    return (1, x.shape[1]) + (1,) * (x.ndim - 2)


def _update_running_stat(stat: Tensor | None, batch_value: Tensor, momentum: float) -> None:
    """running = (1 - momentum) * running + momentum * batch_value, written into the running tensor (lazily)."""
    if stat is not None:
        stat.assign(stat * (1 - momentum) + batch_value.detach().cast(stat.dtype) * momentum)


def _check_momentum(momentum: Any, op: str) -> None:
    if isinstance(momentum, bool) or not isinstance(momentum, (int, float)):
        raise TypeError(f"{op}: momentum must be a number, got {momentum!r}")


class NormMixin:
    """Tensor methods for normalization."""

    @float32_under_autocast
    def layernorm(self: Tensor, axis: int | Sequence[int] = -1, eps: float = 1e-5) -> Tensor:
        """Normalize to zero mean and unit variance over `axis`, without scale or shift (tinygrad's layernorm)."""
        axes = tuple(self._axis(a, "layernorm") for a in ((axis,) if isinstance(axis, int) else axis))
        return _standardized(self._float_input(), axes, eps)[0]

    @float32_under_autocast
    def layer_norm(self: Tensor, normalized_shape: int | Sequence[int], weight: Tensor | None = None,
                   bias: Tensor | None = None, eps: float = 1e-5) -> Tensor:  # fmt: skip
        """torch's layer_norm: normalize over the last dims `normalized_shape`, then scale by weight and add bias."""
        shape = _trailing_shape(self, normalized_shape, "layer_norm")
        weight = _param_of_shape(weight, self, shape, "layer_norm", "weight")
        bias = _param_of_shape(bias, self, shape, "layer_norm", "bias")
        out = self.layernorm(tuple(range(-len(shape), 0)), eps)
        return _scale_and_shift(out, weight, bias, shape)

    @float32_under_autocast
    def rms_norm(self: Tensor, normalized_shape: int | Sequence[int], weight: Tensor | None = None,
                 eps: float | None = None) -> Tensor:  # fmt: skip
        """torch's rms_norm: x / sqrt(mean(x**2) + eps) over the last dims, times weight (eps: the dtype's epsilon)."""
        shape = _trailing_shape(self, normalized_shape, "rms_norm")
        weight = _param_of_shape(weight, self, shape, "rms_norm", "weight")
        x = self._float_input()
        eps = _MACHINE_EPSILON[x.dtype] if eps is None else eps
        out = x * ((x * x).mean(tuple(range(-len(shape), 0)), keepdim=True) + eps).rsqrt()
        return _scale_and_shift(out, weight, None, shape)

    @float32_under_autocast
    def group_norm(self: Tensor, num_groups: int, weight: Tensor | None = None, bias: Tensor | None = None,
                   eps: float = 1e-5) -> Tensor:  # fmt: skip
        """torch's group_norm: normalize each group of C/num_groups channels of an (N, C, *) input, per sample."""
        weight, bias = _per_channel_args(self, "group_norm", weight=weight, bias=bias)
        n, channels = self.shape[:2]
        if isinstance(num_groups, bool) or not isinstance(num_groups, int) or num_groups <= 0 or channels % num_groups:
            raise ArgumentError(f"group_norm: num_groups={num_groups!r} must be a positive int that divides the "
                                f"{channels} channels of the input {self.shape}")  # fmt: skip
        grouped = self._float_input().reshape(n, num_groups, self.numel() // max(n * num_groups, 1))
        out = _standardized(grouped, (2,), eps)[0].reshape(self.shape)
        return _scale_and_shift(out, weight, bias, _channel_view(self))

    def batchnorm(self: Tensor, weight: Tensor | None, bias: Tensor | None, mean: Tensor, invstd: Tensor,
                  axis: int | Sequence[int] = 1) -> Tensor:  # fmt: skip
        """(x - mean) * invstd * weight + bias with statistics given per channel along `axis` (tinygrad's batchnorm)."""
        axes = tuple(self._axis(a, "batchnorm") for a in ((axis,) if isinstance(axis, int) else axis))
        channels = tuple(self.shape[a] for a in axes)
        view = tuple(s if i in axes else 1 for i, s in enumerate(self.shape))

        def per_channel(value: Any, name: str) -> Tensor | None:
            t = _nn_tensor(value, self, "batchnorm", name)
            if t is None or t.shape == channels:
                return t if t is None else t.reshape(view)
            if t.ndim == self.ndim and all(s in (1, v) for s, v in zip(t.shape, view, strict=True)):
                return t  # already laid out to broadcast against the input
            raise ArgumentError(f"batchnorm: {name} has shape {t.shape} but the input {self.shape} with axis={axis} "
                                f"needs {channels} (or {view})")  # fmt: skip

        weight, bias = per_channel(weight, "weight"), per_channel(bias, "bias")
        mean, invstd = per_channel(mean, "mean"), per_channel(invstd, "invstd")
        if mean is None or invstd is None:
            raise ArgumentError("batchnorm: mean and invstd are required; weight and bias may be None")
        x = self._float_input() - mean
        if weight is not None:
            x = x * weight
        x = x * invstd
        return x + bias if bias is not None else x

    def batch_norm(self: Tensor, running_mean: Tensor | None, running_var: Tensor | None,
                   weight: Tensor | None = None, bias: Tensor | None = None, training: bool = False,
                   momentum: float = 0.1, eps: float = 1e-5) -> Tensor:  # fmt: skip
        """torch's batch_norm over (N, C, *): batch statistics when training, assigning the running ones (lazily)."""
        (running_mean, running_var, weight, bias), from_running = _running_stats_start(
            self, "batch_norm", (running_mean, running_var, weight, bias), momentum, eps, training, "training=False"
        )
        if from_running is not None:
            return from_running
        count = self.numel() // self.shape[1] if self.shape[1] else 0
        if count <= 1:
            raise ArgumentError(f"batch_norm: expected more than 1 value per channel when training, got {self.shape}")
        axes = (0, *range(2, self.ndim))
        _, mean, var = _standardized(self._float_input(), axes, eps)
        _update_running_stat(running_mean, mean.reshape(self.shape[1]), momentum)
        _update_running_stat(running_var, var.reshape(self.shape[1]) * (count / (count - 1)), momentum)
        return self.batchnorm(weight, bias, mean, (var + eps).rsqrt())

    def instance_norm(self: Tensor, running_mean: Tensor | None = None, running_var: Tensor | None = None,
                      weight: Tensor | None = None, bias: Tensor | None = None, use_input_stats: bool = True,
                      momentum: float = 0.1, eps: float = 1e-5) -> Tensor:  # fmt: skip
        """torch's instance_norm: normalize each channel of each sample of an (N, C, *) input over its positions."""
        (running_mean, running_var, weight, bias), from_running = _running_stats_start(
            self,
            "instance_norm",
            (running_mean, running_var, weight, bias),
            momentum,
            eps,
            use_input_stats,
            "use_input_stats=False",
        )
        if from_running is not None:
            return from_running
        count = prod(self.shape[2:])
        if count <= 1:
            raise ArgumentError(f"instance_norm: expected more than 1 spatial element per channel, got {self.shape}")
        out, mean, var = _standardized(self._float_input(), tuple(range(2, self.ndim)), eps)
        _update_running_stat(running_mean, mean.mean(0).reshape(self.shape[1]), momentum)
        _update_running_stat(running_var, (var * (count / (count - 1))).mean(0).reshape(self.shape[1]), momentum)
        return _scale_and_shift(out, weight, bias, _channel_view(self))
