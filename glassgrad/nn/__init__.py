"""Neural-network layers with PyTorch's parameter names and default initialisation, so state dicts map one to one."""

from __future__ import annotations

import math

from glassgrad.backward_targets import parameter
from glassgrad.dtype import dtypes
from glassgrad.helpers import prod
from glassgrad.mixin.scatter_add import take_along
from glassgrad.nn import datasets, optim, parallel, state  # noqa: F401  (tinygrad: nn.datasets, nn.optim, nn.state)
from glassgrad.tensor import Tensor
from glassgrad.tensor_checks import checked_index


def _uniform(shape: tuple[int, ...], bound: float) -> Tensor:
    """U(-bound, bound): PyTorch's default for weights (kaiming_uniform with a=sqrt(5)) and biases of these layers."""
    return parameter(Tensor.uniform(*shape, low=-bound, high=bound).contiguous())


def _weight_and_bias(shape: tuple[int, ...], fan_in: int, bias: bool) -> tuple[Tensor, Tensor | None]:
    """A layer's weight of `shape` and its bias (one per output: shape[0]), both U(-1/sqrt(fan_in), 1/sqrt(fan_in))."""
    bound = 1 / math.sqrt(fan_in) if fan_in else 0.0
    return _uniform(shape, bound), _uniform((shape[0],), bound) if bias else None


def _filled(shape: tuple[int, ...], value: float, dtype: str | None = None,
            requires_grad: bool | None = None) -> Tensor:  # fmt: skip
    """A tensor of `value` (dtypes.default_float unless `dtype` says) in a buffer of its own. Tensor.full(...)
    .contiguous() is not enough: equal lazy graphs are one interned node, so two such tensors of one shape (a weight
    and a running_var) would share a buffer."""
    dtype = dtype or dtypes.default_float
    filled = Tensor.empty(*shape, dtype=dtype, requires_grad=requires_grad).assign(Tensor.full(shape, value, dtype))
    return parameter(filled) if requires_grad is None else filled  # running statistics say False: no parameters


def _tuple(value: int | tuple[int, ...], n: int) -> tuple[int, ...]:
    return (value,) * n if isinstance(value, int) else tuple(value)


class Linear:
    """y = x @ weight.T + bias, weight of shape (out_features, in_features)."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True):
        self.weight, self.bias = _weight_and_bias((out_features, in_features), in_features, bias)

    def __call__(self, x: Tensor) -> Tensor:
        return x.linear(self.weight, self.bias)


class _ConvNd:
    """Convolution over the last len(kernel_size) dimensions, weight (out, in/groups, *kernel)."""

    dims = 2

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int | tuple[int, ...], stride=1,
                 padding: int | tuple[int, ...] | str = 0, dilation=1, groups: int = 1, bias: bool = True):  # fmt: skip
        if in_channels % groups or out_channels % groups:
            raise ValueError(f"{type(self).__name__}: in_channels ({in_channels}) and out_channels ({out_channels}) "
                             f"must be divisible by groups ({groups})")  # fmt: skip
        self.kernel_size = _tuple(kernel_size, self.dims)
        self.stride, self.padding, self.dilation, self.groups = stride, padding, dilation, groups
        strided = set(_tuple(stride, 1)) != {1}
        if isinstance(padding, str) and (padding not in ("same", "valid") or (padding == "same" and strided)):
            raise ValueError(f"{type(self).__name__}: padding must be 'same' (with stride 1) or 'valid' or numbers, "
                             f"got padding={padding!r} with stride={stride!r}")  # fmt: skip
        fan_in = in_channels // groups * prod(self.kernel_size)
        self.weight, self.bias = _weight_and_bias(
            (out_channels, in_channels // groups, *self.kernel_size), fan_in, bias
        )

    def __call__(self, x: Tensor) -> Tensor:
        conv = (Tensor.conv1d, Tensor.conv2d, Tensor.conv3d)[self.dims - 1]
        return conv(x, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)


def _of_dims(base: type, name: str, dims: int, doc: str) -> type:
    """The layer class `name`: `base` over the last `dims` dims (Conv2d is _ConvNd with dims = 2)."""
    return type(name, (base,), {"dims": dims, "__doc__": doc, "__module__": __name__})


Conv1d = _of_dims(_ConvNd, "Conv1d", 1, "1-d convolution, as torch.nn.Conv1d.")
Conv2d = _of_dims(_ConvNd, "Conv2d", 2, "2-d convolution, as torch.nn.Conv2d.")
Conv3d = _of_dims(_ConvNd, "Conv3d", 3, "3-d convolution, as torch.nn.Conv3d.")


class _ConvTransposeNd:
    """Transposed convolution over the last len(kernel_size) dims, weight (in, out/groups, *kernel)."""

    dims = 2

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int | tuple[int, ...], stride=1, padding=0,
                 output_padding=0, groups: int = 1, bias: bool = True, dilation=1):  # fmt: skip
        self.kernel_size = _tuple(kernel_size, self.dims)
        self.stride, self.padding, self.output_padding = stride, padding, output_padding
        self.groups, self.dilation = groups, dilation
        # PyTorch computes fan_in from the weight's dim 1 (out/groups) for transposed convolutions
        fan_in = out_channels // groups * prod(self.kernel_size)
        bound = 1 / math.sqrt(fan_in) if fan_in else 0.0
        self.weight = _uniform((in_channels, out_channels // groups, *self.kernel_size), bound)
        self.bias = _uniform((out_channels,), bound) if bias else None  # out_channels is the weight's dim 1 here

    def __call__(self, x: Tensor) -> Tensor:
        conv = (Tensor.conv_transpose1d, Tensor.conv_transpose2d, Tensor.conv_transpose3d)[self.dims - 1]
        return conv(x, self.weight, self.bias, self.stride, self.padding, self.output_padding, self.groups,
                    self.dilation)  # fmt: skip


ConvTranspose1d = _of_dims(_ConvTransposeNd, "ConvTranspose1d", 1, "Transposed 1-d convolution, weight (in, "
                           "out/groups, k) as torch.nn.ConvTranspose1d.")  # fmt: skip
ConvTranspose2d = _of_dims(_ConvTransposeNd, "ConvTranspose2d", 2, "Transposed 2-d convolution, weight (in, "
                           "out/groups, kh, kw) as torch.nn.ConvTranspose2d.")  # fmt: skip
ConvTranspose3d = _of_dims(_ConvTransposeNd, "ConvTranspose3d", 3, "Transposed 3-d convolution, weight (in, "
                           "out/groups, kd, kh, kw) as torch.nn.ConvTranspose3d.")  # fmt: skip


class BatchNorm:
    """Batch normalization over dim 1; running statistics are updated in training mode (Tensor.training)."""

    def __init__(self, num_features: int | None = None, eps: float = 1e-5, momentum: float = 0.1, affine: bool = True,
                 track_running_stats: bool = True, *, sz: int | None = None):  # fmt: skip
        if (num_features is None) == (sz is None):
            raise TypeError("BatchNorm: pass the number of features once, as num_features (or tinygrad's sz)")
        num_features = sz if num_features is None else num_features
        self.eps, self.momentum, self.track_running_stats = eps, momentum, track_running_stats
        self.weight = _filled((num_features,), 1.0) if affine else None
        self.bias = _filled((num_features,), 0.0) if affine else None
        self.running_mean = _filled((num_features,), 0.0, requires_grad=False)
        self.running_var = _filled((num_features,), 1.0, requires_grad=False)
        self.num_batches_tracked = _filled((), 0, "int64", requires_grad=False)  # 0-d, as torch's

    def __call__(self, x: Tensor) -> Tensor:
        if x.ndim < 2 or x.shape[1] != self.running_mean.shape[0]:
            raise ValueError(f"BatchNorm: input of shape {x.shape} should have {self.running_mean.shape[0]} "
                             "channels in dimension 1")  # fmt: skip
        update = Tensor.training and self.track_running_stats
        if update:
            self.num_batches_tracked.assign(self.num_batches_tracked + 1)
        # batch statistics while training (or with no running ones); Tensor.batch_norm updates the running ones
        running = (self.running_mean, self.running_var) if self.track_running_stats else (None, None)
        return x.batch_norm(*running, self.weight, self.bias, training=Tensor.training or not self.track_running_stats,
                            momentum=self.momentum, eps=self.eps)  # fmt: skip


BatchNorm1d = BatchNorm2d = BatchNorm3d = BatchNorm


class LayerNorm:
    """Normalize over the last len(normalized_shape) dimensions, then scale and shift (elementwise_affine)."""

    def __init__(self, normalized_shape: int | tuple[int, ...], eps: float = 1e-5, elementwise_affine: bool = True,
                 bias: bool = True):  # fmt: skip
        self.normalized_shape = _tuple(normalized_shape, 1)
        self.eps = eps
        self.weight = _filled(self.normalized_shape, 1.0) if elementwise_affine else None
        self.bias = _filled(self.normalized_shape, 0.0) if elementwise_affine and bias else None

    def __call__(self, x: Tensor) -> Tensor:
        if x.shape[-len(self.normalized_shape) :] != self.normalized_shape:
            raise ValueError(f"LayerNorm: input of shape {x.shape} does not end in {self.normalized_shape}")
        axes = tuple(range(-len(self.normalized_shape), 0))
        x = x.layernorm(axis=axes, eps=self.eps)
        if self.weight is not None:
            x = x * self.weight
        return x + self.bias if self.bias is not None else x


class LayerNorm2d(LayerNorm):
    """LayerNorm over the channels of an (N, C, H, W) tensor."""

    def __call__(self, x: Tensor) -> Tensor:
        return super().__call__(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class RMSNorm:
    """x / sqrt(mean(x**2) + eps) * weight over the last dimensions, as torch.nn.RMSNorm."""

    def __init__(self, normalized_shape: int | tuple[int, ...], eps: float | None = None,
                 elementwise_affine: bool = True):  # fmt: skip
        self.normalized_shape, self.eps = _tuple(normalized_shape, 1), eps
        self.weight = _filled(self.normalized_shape, 1.0) if elementwise_affine else None

    def __call__(self, x: Tensor) -> Tensor:
        return x.rms_norm(self.normalized_shape, self.weight, self.eps)


class GroupNorm:
    """Normalize groups of channels of an (N, C, ...) tensor, then scale and shift per channel."""

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True):
        if num_channels % num_groups:
            raise ValueError(f"GroupNorm: num_channels ({num_channels}) must be divisible by num_groups ({num_groups})")
        self.num_groups, self.eps = num_groups, eps
        self.weight = _filled((num_channels,), 1.0) if affine else None
        self.bias = _filled((num_channels,), 0.0) if affine else None

    def __call__(self, x: Tensor) -> Tensor:
        return x.group_norm(self.num_groups, self.weight, self.bias, self.eps)


class InstanceNorm:
    """Normalize each channel of each sample over its spatial dimensions (affine off by default, as PyTorch)."""

    def __init__(self, num_features: int, eps: float = 1e-5, affine: bool = False):
        self.eps = eps
        self.weight = _filled((num_features,), 1.0) if affine else None
        self.bias = _filled((num_features,), 0.0) if affine else None

    def __call__(self, x: Tensor) -> Tensor:
        return x.group_norm(x.shape[1], self.weight, self.bias, self.eps)


InstanceNorm1d = InstanceNorm2d = InstanceNorm3d = InstanceNorm


class Embedding:
    """A lookup table: row i of weight (num_embeddings, embedding_dim) for each index i."""

    def __init__(self, num_embeddings: int, embedding_dim: int):
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.weight = parameter(Tensor.randn(num_embeddings, embedding_dim).contiguous())

    def __call__(self, idx: Tensor) -> Tensor:
        if idx.dtype.name not in ("int", "long", "char", "short", "uchar", "ushort", "uint", "ulong"):
            raise TypeError(f"Embedding: indices must be integers, got {idx.dtype}")
        # one load per value; the gradient adds each index's row of it into the table's (a scatter-add)
        rows, width = self.num_embeddings, self.embedding_dim
        idx = checked_index(idx, rows, f"Embedding: index {{value}} is outside the table's rows 0..{rows - 1}")
        each = idx.reshape(-1, 1).expand(idx.numel(), width)
        return take_along(self.weight, 0, each).reshape(*idx.shape, width)


class LSTMCell:
    """One step of an LSTM, as torch.nn.LSTMCell: returns (h, c)."""

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True):
        bound = 1 / math.sqrt(hidden_size)
        self.hidden_size = hidden_size
        self.weight_ih = _uniform((4 * hidden_size, input_size), bound)
        self.weight_hh = _uniform((4 * hidden_size, hidden_size), bound)
        self.bias_ih = _uniform((4 * hidden_size,), bound) if bias else None
        self.bias_hh = _uniform((4 * hidden_size,), bound) if bias else None

    def __call__(self, x: Tensor, hc: tuple[Tensor, Tensor] | None = None) -> tuple[Tensor, Tensor]:
        if hc is None:
            zeros = Tensor.zeros(*x.shape[:-1], self.hidden_size, device=x.device)
            hc = (zeros, zeros)
        h, c = hc
        gates = x.linear(self.weight_ih, self.bias_ih) + h.linear(self.weight_hh, self.bias_hh)
        i, f, g, o = gates.chunk(4, -1)
        c = f.sigmoid() * c + i.sigmoid() * g.tanh()
        return o.sigmoid() * c.tanh(), c
