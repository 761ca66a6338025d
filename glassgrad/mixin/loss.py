"""Tensor methods for losses: cross entropy, negative log likelihood, binary cross entropy, MSE, L1, Huber."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from glassgrad.autocast import float32_under_autocast
from glassgrad.dtype import dtypes
from glassgrad.errors import ArgumentError, DtypeError
from glassgrad.mixin.arguments import _nn_tensor, _param_of_shape, _required_tensor
from glassgrad.mixin.small_tensors import _arange
from glassgrad.shape import broadcast_shape
from glassgrad.tensor_checks import checked_index

if TYPE_CHECKING:
    from glassgrad.tensor import Tensor


_LOSS_REDUCTIONS = ("mean", "sum", "none")


def _check_reduction(reduction: str, op: str) -> None:
    if reduction not in _LOSS_REDUCTIONS:
        raise ArgumentError(f"{op}: reduction must be one of {_LOSS_REDUCTIONS}, got {reduction!r}")


def _reduced(loss: Tensor, reduction: str) -> Tensor:
    """The loss per element ('none'), summed ('sum') or averaged over every element ('mean')."""
    if reduction == "none":
        return loss
    return loss.sum() if reduction == "sum" else loss.mean()


def _loss_target(x: Tensor, target: Any, Y: Any, op: str) -> Tensor:
    """The target, given as torch's `target` or tinygrad's `Y` (exactly one of them)."""
    if (target is None) == (Y is None):
        raise TypeError(f"{op}: pass the target once, as `target` (or tinygrad's name `Y`)")
    return _nn_tensor(target if Y is None else Y, x, op, "target")


def _elementwise_loss_operands(x: Tensor, target: Any, weight: Any, op: str) -> tuple[Tensor, Tensor | None]:
    """The difference x - target (a tensor on x's device, broadcast as torch does) and the optional weight, which must
    have x's shape."""
    target = _required_tensor(target, x, op, "target")
    broadcast_shape(x.shape, target.shape, op)
    weight = _nn_tensor(weight, x, op, "weight")
    if weight is not None and weight.shape != x.shape:
        raise ArgumentError(f"{op}: weight has shape {weight.shape} but must have the input's shape {x.shape}")
    return x._float_input() - target, weight


def _weighted_reduced(loss: Tensor, weight: Tensor | None, reduction: str) -> Tensor:
    """mse_loss's and l1_loss's reduction: a weighted mean divides by the sum of the weights."""
    if weight is None:
        return _reduced(loss, reduction)
    loss = loss * weight
    return loss.sum() / weight.sum() if reduction == "mean" else _reduced(loss, reduction)


def _index_target(x: Tensor, target: Tensor, class_dim: int, op: str) -> Tensor:
    """Class-index targets: integers with the input's shape less its class dimension."""
    expected = x.shape[:class_dim] + x.shape[class_dim + 1 :]
    if target.shape != expected:
        raise ArgumentError(f"{op}: target has shape {target.shape} but input {x.shape} needs class indices of shape "
                            f"{expected}")  # fmt: skip
    if not dtypes.is_int(target.dtype):  # RuntimeError, as PyTorch's "expected target dtype to be Long"
        raise RuntimeError(f"{op}: class-index targets must be an integer dtype, got {target.dtype} (class "
                           f"probabilities take the input's shape {x.shape})")  # fmt: skip
    return target if target.dtype in (dtypes.int32, dtypes.int64) else target.cast(dtypes.int32)


def _class_index_loss(logp: Tensor, target: Tensor, class_dim: int, weight: Tensor | None, ignore_index: int,
                      reduction: str, label_smoothing: float, op: str) -> Tensor:  # fmt: skip
    """-log p(target class), with torch's class weights, ignore_index and label smoothing, reduced.

    The target class is picked by a one-hot mask (target == arange(C)) and a masked sum, so the loss fuses into the
    kernels of log_softmax and one reduction; 'mean' divides by the total weight of the targets that count.
    """
    n_classes = logp.shape[class_dim]
    class_shape = (n_classes,) + (1,) * (logp.ndim - class_dim - 1)
    message = f"{op}: target {{value}} is not a class in 0..{n_classes - 1} (nor ignore_index={ignore_index})"
    target = checked_index(target, n_classes, message, allowed=ignore_index).unsqueeze(class_dim)
    counted = target != ignore_index
    picked = (target == _arange(n_classes, logp).reshape(class_shape)) & counted
    weighted = logp * weight.reshape(class_shape) if weight is not None else logp
    terms = picked.where(weighted, 0.0)
    if label_smoothing:  # (1 - e) * -log p(target) + e * mean over classes of -log p
        terms = terms * (1 - label_smoothing) + counted.where(weighted, 0.0) * (label_smoothing / n_classes)
    if reduction == "none":
        return -terms.sum(class_dim)
    if reduction == "sum":
        return -terms.sum()
    total_weight = picked.where(weight.reshape(class_shape), 0.0).sum() if weight is not None else counted.sum()
    return -terms.sum() / total_weight


def _check_same_shape(x: Tensor, target: Tensor, op: str) -> None:
    if target.shape != x.shape:
        raise ArgumentError(f"{op}: target has shape {target.shape} but must have the input's shape {x.shape}")


def _broadcast_weight(value: Any, x: Tensor, op: str, name: str) -> Tensor | None:
    """An optional weight that must broadcast to the input's shape."""
    t = _nn_tensor(value, x, op, name)
    if t is not None and broadcast_shape(t.shape, x.shape, f"{op}: {name}") != x.shape:
        raise ArgumentError(f"{op}: {name} of shape {t.shape} must broadcast to the input's shape {x.shape}")
    return t


class LossMixin:
    """Tensor methods for losses."""

    @float32_under_autocast
    def cross_entropy(self: Tensor, target: Tensor | None = None, weight: Tensor | None = None,
                      ignore_index: int = -100, reduction: str = "mean", label_smoothing: float = 0.0, *,
                      Y: Tensor | None = None) -> Tensor:  # fmt: skip
        """torch's cross_entropy of logits (N, C, *) against class indices (N, *) or class probabilities (N, C, *)."""
        op = "cross_entropy"
        target = _loss_target(self, target, Y, op)
        _check_reduction(reduction, op)
        if not 0.0 <= label_smoothing <= 1.0:
            raise ArgumentError(f"{op}: label_smoothing must be between 0 and 1, got {label_smoothing}")
        if self.ndim == 0:
            raise ArgumentError(f"{op}: input needs shape (C,) or (N, C, *), got a 0-d tensor")
        class_dim = 0 if self.ndim == 1 else 1
        n_classes = self.shape[class_dim]
        weight = _param_of_shape(weight, self, (n_classes,), op, "weight")
        logp = self.log_softmax(class_dim)
        if target.shape != self.shape or not dtypes.is_float(target.dtype):
            target = _index_target(self, target, class_dim, op)
            return _class_index_loss(logp, target, class_dim, weight, ignore_index, reduction, label_smoothing, op)
        probs = target * (1 - label_smoothing) + label_smoothing / n_classes if label_smoothing else target
        if weight is not None:
            logp = logp * weight.reshape((n_classes,) + (1,) * (self.ndim - class_dim - 1))
        loss = -(logp * probs).sum(class_dim)
        return _reduced(loss, reduction)

    @float32_under_autocast
    def nll_loss(self: Tensor, target: Tensor | None = None, weight: Tensor | None = None, ignore_index: int = -100,
                 reduction: str = "mean", *, Y: Tensor | None = None) -> Tensor:  # fmt: skip
        """torch's nll_loss: -input[n, target[n]] for log-probabilities (N, C, *) and class indices (N, *)."""
        op = "nll_loss"
        target = _loss_target(self, target, Y, op)
        _check_reduction(reduction, op)
        if self.ndim == 0:
            raise ArgumentError(f"{op}: input needs shape (C,) or (N, C, *), got a 0-d tensor")
        class_dim = 0 if self.ndim == 1 else 1
        weight = _param_of_shape(weight, self, (self.shape[class_dim],), op, "weight")
        target = _index_target(self, target, class_dim, op)
        return _class_index_loss(self._float_input(), target, class_dim, weight, ignore_index, reduction, 0.0, op)

    @float32_under_autocast
    def sparse_categorical_crossentropy(self: Tensor, Y: Tensor, ignore_index: int = -1, label_smoothing: float = 0.0,
                                        reduction: str = "mean") -> Tensor:  # fmt: skip
        """tinygrad's cross entropy of logits (..., C) (classes last) against class indices Y (...)."""
        op = "sparse_categorical_crossentropy"
        _check_reduction(reduction, op)
        if not 0.0 <= label_smoothing <= 1.0:
            raise ArgumentError(f"{op}: label_smoothing must be between 0 and 1, got {label_smoothing}")
        if self.ndim == 0:
            raise ArgumentError(f"{op}: input needs shape (..., C) with the classes last, got a 0-d tensor")
        Y = _nn_tensor(Y, self, op, "Y")
        if Y.shape != self.shape[:-1]:
            raise ArgumentError(f"{op}: Y has shape {Y.shape} but input {self.shape} needs class indices of shape "
                                f"{self.shape[:-1]}")  # fmt: skip
        if Y.dtype == dtypes.bool:
            raise DtypeError(f"{op}: Y must hold class indices (integers, or whole floats), got {Y.dtype}")
        class_dim = self.ndim - 1
        return _class_index_loss(self.log_softmax(class_dim), Y, class_dim, None, ignore_index, reduction,
                                 label_smoothing, op)  # fmt: skip

    def binary_crossentropy(self: Tensor, target: Tensor | None = None, weight: Tensor | None = None,
                            reduction: str = "mean", *, Y: Tensor | None = None) -> Tensor:  # fmt: skip
        """torch's binary_cross_entropy of probabilities: -(y log x + (1 - y) log(1 - x)), logs clamped at -100."""
        op = "binary_crossentropy"
        target = _loss_target(self, target, Y, op)
        _check_reduction(reduction, op)
        _check_same_shape(self, target, op)
        weight = _broadcast_weight(weight, self, op, "weight")
        x = self._float_input()
        loss = -(target * x.log().maximum(-100.0) + (1 - target) * (1 - x).log().maximum(-100.0))
        return _reduced(loss * weight if weight is not None else loss, reduction)

    @float32_under_autocast
    def binary_crossentropy_logits(self: Tensor, target: Tensor | None = None, weight: Tensor | None = None,
                                   reduction: str = "mean", pos_weight: Tensor | None = None, *,
                                   Y: Tensor | None = None) -> Tensor:  # fmt: skip
        """torch's binary_cross_entropy_with_logits: binary cross entropy of sigmoid(x), computed stably."""
        op = "binary_crossentropy_logits"
        target = _loss_target(self, target, Y, op)
        _check_reduction(reduction, op)
        _check_same_shape(self, target, op)
        weight = _broadcast_weight(weight, self, op, "weight")
        pos_weight = _broadcast_weight(pos_weight, self, op, "pos_weight")
        x = self._float_input()
        # -log(sigmoid(x)) = log(1 + exp(-|x|)) + max(-x, 0), which never overflows
        neg_log_sigmoid = (1 + (-x.abs()).exp()).log() + (-x).maximum(0)
        positive = neg_log_sigmoid if pos_weight is None else neg_log_sigmoid * (1 + (pos_weight - 1) * target)
        loss = (1 - target) * x + positive
        return _reduced(loss * weight if weight is not None else loss, reduction)

    def binary_cross_entropy(self: Tensor, target: Tensor, weight: Tensor | None = None,
                             reduction: str = "mean") -> Tensor:  # fmt: skip
        """torch's name for binary_crossentropy."""
        return self.binary_crossentropy(target, weight, reduction)

    @float32_under_autocast
    def binary_cross_entropy_with_logits(self: Tensor, target: Tensor, weight: Tensor | None = None,
                                         reduction: str = "mean",
                                         pos_weight: Tensor | None = None) -> Tensor:  # fmt: skip
        """torch's name for binary_crossentropy_logits."""
        return self.binary_crossentropy_logits(target, weight, reduction, pos_weight)

    @float32_under_autocast
    def mse_loss(self: Tensor, target: Tensor, reduction: str = "mean", weight: Tensor | None = None) -> Tensor:
        """torch's mse_loss: (x - target)**2, reduced (a weighted mean divides by the sum of the weights)."""
        _check_reduction(reduction, "mse_loss")
        diff, weight = _elementwise_loss_operands(self, target, weight, "mse_loss")
        return _weighted_reduced(diff * diff, weight, reduction)

    @float32_under_autocast
    def l1_loss(self: Tensor, target: Tensor, reduction: str = "mean", weight: Tensor | None = None) -> Tensor:
        """torch's l1_loss: |x - target|, reduced (a weighted mean divides by the sum of the weights)."""
        _check_reduction(reduction, "l1_loss")
        diff, weight = _elementwise_loss_operands(self, target, weight, "l1_loss")
        return _weighted_reduced(diff.abs(), weight, reduction)

    @float32_under_autocast
    def smooth_l1_loss(self: Tensor, target: Tensor, reduction: str = "mean", beta: float = 1.0) -> Tensor:
        """torch's smooth_l1_loss: 0.5 d**2 / beta where |d| < beta, else |d| - 0.5 beta."""
        _check_reduction(reduction, "smooth_l1_loss")
        if beta < 0:
            raise ArgumentError(f"smooth_l1_loss: beta must be non-negative, got {beta}")
        diff, _ = _elementwise_loss_operands(self, target, None, "smooth_l1_loss")
        d = diff.abs()
        loss = d if beta == 0 else (d < beta).where(0.5 * diff * diff / beta, d - 0.5 * beta)
        return _reduced(loss, reduction)

    @float32_under_autocast
    def huber_loss(self: Tensor, target: Tensor, reduction: str = "mean", delta: float = 1.0,
                   weight: Tensor | None = None) -> Tensor:  # fmt: skip
        """torch's huber_loss: 0.5 d**2 where |d| < delta, else delta * (|d| - 0.5 delta); a weighted mean is a mean."""
        _check_reduction(reduction, "huber_loss")
        if delta <= 0:
            raise ArgumentError(f"huber_loss: delta must be positive, got {delta}")
        diff, weight = _elementwise_loss_operands(self, target, weight, "huber_loss")
        d = diff.abs()
        loss = (d < delta).where(0.5 * diff * diff, delta * (d - 0.5 * delta))
        return _reduced(loss * weight if weight is not None else loss, reduction)
