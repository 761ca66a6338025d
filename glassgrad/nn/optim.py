"""Optimizers and learning-rate schedules. A step updates parameters in place with assign, so it fuses and TinyJit
can capture it; the learning rate and step count live in tensors for the same reason."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from glassgrad.dtype import dtypes
from glassgrad.tensor import Tensor

if TYPE_CHECKING:
    from glassgrad.uop.ops import UOp


class Optimizer:
    """Holds parameters and their state; subclasses say how one parameter changes in `_update`."""

    def __init__(self, params: list[Tensor], lr: float):
        params = list(params)
        if not params:
            raise ValueError(f"{type(self).__name__}: got no parameters to optimize")
        for p in params:
            if not isinstance(p, Tensor):
                raise TypeError(f"{type(self).__name__}: parameters must be Tensors, got {type(p).__name__}")
            if p.requires_grad is None and dtypes.is_float(p.dtype):  # an integer tensor (a counter) has no gradient
                p.requires_grad_(True)
        self.params = params
        device = params[0].device
        # 0-d, as numbers are: an update keeps its parameter's shape, a 0-d one's too
        self.lr = Tensor(float(lr), device=device, dtype=dtypes.float32).contiguous().realize()
        self.step_count = Tensor(0, device=device, dtype=dtypes.int32).contiguous().realize()

    def zero_grad(self) -> None:
        """Forget the gradients of the last backward pass."""
        for p in self.params:
            p.grad = None

    def state(self) -> list[Tensor]:
        """The tensors this optimizer keeps between steps (for realizing and saving)."""
        return [self.lr, self.step_count]

    def step(self) -> None:
        """Update every parameter that has a gradient, then run the update (one fused schedule). As in PyTorch, a
        parameter without one (no backward() reached it yet) is left alone; with none at all, nothing changes."""
        if grads := [p.grad for p in self.params if p.grad is not None]:
            # a gradient reads the old values of other parameters: compute them all before any is overwritten
            Tensor.realize(*grads)
            Tensor.realize(*self.schedule_step())

    def schedule_step(self) -> list[Tensor]:
        """The step as lazy assigns, and the tensors to realize to run it (tinygrad's form): `loss.realize(
        *opt.schedule_step())` computes the loss, the gradients and the update in one schedule. Each assign reads
        the values from before the step, whatever order the kernels run in (an assign runs after every kernel that
        reads what it overwrites)."""
        if not any(p.grad is not None for p in self.params):
            return []
        self.step_count.assign(self.step_count + 1)
        for i, p in enumerate(self.params):
            if p.grad is None:
                continue
            if p.grad.shape != p.shape:
                raise ValueError(f"{type(self).__name__}: gradient of shape {p.grad.shape} for a parameter of "
                                 f"shape {p.shape}")  # fmt: skip
            p.assign(self._update(i, p.detach(), p.grad.detach().cast(p.dtype)).cast(p.dtype))
        return [*self.params, *self.state()]

    def _update(self, i: int, p: Tensor, g: Tensor) -> Tensor:
        raise NotImplementedError

    def _zeros_like_params(self) -> list[Tensor]:
        return [p.zeros_like().contiguous().realize() for p in self.params]  # split across devices as p is


class SGD(Optimizer):
    """Stochastic gradient descent with PyTorch's momentum, dampening, nesterov and weight_decay."""

    def __init__(self, params: list[Tensor], lr: float = 0.001, momentum: float = 0.0, dampening: float = 0.0,
                 weight_decay: float = 0.0, nesterov: bool = False):  # fmt: skip
        super().__init__(params, lr)
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("SGD: nesterov needs momentum > 0 and dampening = 0")
        self.momentum, self.dampening, self.weight_decay, self.nesterov = momentum, dampening, weight_decay, nesterov
        self.buffers = self._zeros_like_params() if momentum else []

    def state(self) -> list[Tensor]:
        return super().state() + self.buffers

    def _update(self, i: int, p: Tensor, g: Tensor) -> Tensor:
        if self.weight_decay:
            g = g + self.weight_decay * p
        if self.momentum:
            buf = self.buffers[i]
            # the first step starts the momentum buffer at the gradient itself, as PyTorch does
            first = self.step_count == 1
            buf.assign(first.where(g, self.momentum * buf + (1 - self.dampening) * g))
            g = g + self.momentum * buf if self.nesterov else buf
        return p - self.lr * g


class Muon(SGD):
    """SGD whose (Nesterov) momentum update is orthogonalized by Newton-Schulz iterations before it is applied, with
    decoupled weight decay (Keller Jordan's Muon; tinygrad's defaults). torch.optim.Muon's step for a matrix that is
    not taller than wide; a tensor of more or fewer dimensions is treated as the matrix (shape[0], rest)."""

    def __init__(self, params: list[Tensor], lr: float = 0.001, momentum: float = 0.95, weight_decay: float = 0.1,
                 ns_steps: int = 5, ns_coefficients: tuple[float, float, float] = (3.4445, -4.775, 2.0315),
                 nesterov: bool = True):  # fmt: skip
        super().__init__(params, lr, momentum, 0.0, 0.0, nesterov)
        self.muon_weight_decay, self.ns_steps, self.ns_coefficients = weight_decay, ns_steps, ns_coefficients

    def _update(self, i: int, p: Tensor, g: Tensor) -> Tensor:
        if self.momentum:
            buf = self.buffers[i]
            buf.assign(self.momentum * buf + g)
            g = g + self.momentum * buf if self.nesterov else buf
        direction = orthogonalized(g.reshape(g.shape[0] if g.ndim else 1, -1), self.ns_steps, self.ns_coefficients)
        return p * (1 - self.lr * self.muon_weight_decay) - self.lr * direction.reshape(p.shape)


def orthogonalized(g: Tensor, steps: int, coefficients: tuple[float, float, float], eps: float = 1e-7) -> Tensor:
    """Newton-Schulz iterations toward the orthogonal factor of a matrix (U V^T of its SVD), on g / ||g||: each step
    X <- a X + (b A + c A A) X with A = X X^T, on the wide orientation (fewer rows than columns)."""
    if g.shape[0] > g.shape[1]:
        return orthogonalized(g.T, steps, coefficients, eps).T
    a, b, c = coefficients
    x = g / (g.square().sum().sqrt() + eps)
    for _ in range(steps):
        gram = x @ x.T
        x = a * x + (b * gram + c * (gram @ gram)) @ x
    return x


class LARS(SGD):
    """SGD whose step for each parameter is scaled by a trust ratio ||p|| / ||g|| (You et al., 2017)."""

    def __init__(self, params: list[Tensor], lr: float = 0.001, momentum: float = 0.9, weight_decay: float = 0.0,
                 trust_coefficient: float = 0.001, nesterov: bool = False):  # fmt: skip
        super().__init__(params, lr, momentum, 0.0, 0.0, nesterov)
        self.lars_weight_decay, self.trust_coefficient = weight_decay, trust_coefficient

    def _update(self, i: int, p: Tensor, g: Tensor) -> Tensor:
        p_norm, g_norm = p.square().sum().sqrt(), g.square().sum().sqrt()
        ratio = self.trust_coefficient * p_norm / (g_norm + self.lars_weight_decay * p_norm)
        trust = ((p_norm > 0) & (g_norm > 0)).where(ratio, 1.0)
        return super()._update(i, p, (g + self.lars_weight_decay * p) * trust)


class LAMB(Optimizer):
    """Adam with a per-parameter trust ratio ||p|| / ||update|| (You et al., 2019); adam=True skips the ratio."""

    def __init__(self, params: list[Tensor], lr: float = 0.001, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-6,
                 weight_decay: float = 0.0, adam: bool = False):  # fmt: skip
        super().__init__(params, lr)
        self.b1, self.b2, self.eps, self.weight_decay, self.adam = b1, b2, eps, weight_decay, adam
        self.m, self.v = self._zeros_like_params(), self._zeros_like_params()
        self._corrections: tuple[UOp, Tensor, Tensor] | None = None  # the step count's node, and this step's

    def state(self) -> list[Tensor]:
        return super().state() + self.m + self.v

    def schedule_step(self) -> list[Tensor]:
        try:
            return super().schedule_step()
        finally:  # dropped: kept, they would be lazy readers of the step count that the next step overwrites
            self._corrections = None

    def _bias_corrections(self) -> tuple[Tensor, Tensor]:
        """1 - b1^t and 1 - b2^t for this step's t, built once a step (a power's graph is large) for every parameter."""
        if self._corrections is None or self._corrections[0] is not self.step_count.uop:
            t = self.step_count.cast(dtypes.float32)
            first, second = 1 - Tensor.full_like(t, self.b1).pow(t), 1 - Tensor.full_like(t, self.b2).pow(t)
            self._corrections = (self.step_count.uop, first, second)
        return self._corrections[1:]

    def _adam_direction(self, i: int, g: Tensor) -> Tensor:
        """The bias-corrected Adam step direction m_hat / (sqrt(v_hat) + eps)."""
        m, v = self.m[i], self.v[i]
        m.assign(self.b1 * m + (1 - self.b1) * g)
        v.assign(self.b2 * v + (1 - self.b2) * g * g)
        first, second = self._bias_corrections()
        return (m / first) / ((v / second).sqrt() + self.eps)

    def _update(self, i: int, p: Tensor, g: Tensor) -> Tensor:
        update = self._adam_direction(i, g) + self.weight_decay * p
        if self.adam:
            return p - self.lr * update
        p_norm, u_norm = p.square().sum().sqrt(), update.square().sum().sqrt()
        trust = ((p_norm > 0) & (u_norm > 0)).where(p_norm / u_norm, 1.0)
        return p - self.lr * trust * update


class Adam(LAMB):
    """Adam (Kingma and Ba) with PyTorch's defaults; weight_decay adds weight_decay * p to the gradient."""

    def __init__(self, params: list[Tensor], lr: float = 0.001, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.0, b1: float | None = None,
                 b2: float | None = None):  # fmt: skip
        b1, b2 = (betas[0] if b1 is None else b1), (betas[1] if b2 is None else b2)
        super().__init__(params, lr, b1, b2, eps, 0.0, adam=True)
        self.l2 = weight_decay

    def _update(self, i: int, p: Tensor, g: Tensor) -> Tensor:
        return p - self.lr * self._adam_direction(i, g + self.l2 * p if self.l2 else g)


class AdamW(LAMB):
    """Adam with decoupled weight decay (Loshchilov and Hutter), PyTorch's defaults."""

    def __init__(self, params: list[Tensor], lr: float = 0.001, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.01):  # fmt: skip
        super().__init__(params, lr, betas[0], betas[1], eps, 0.0, adam=True)
        self.decoupled_weight_decay = weight_decay

    def _update(self, i: int, p: Tensor, g: Tensor) -> Tensor:
        decayed = p * (1 - self.lr * self.decoupled_weight_decay)
        return decayed - self.lr * self._adam_direction(i, g)


# ---- learning-rate schedules: each step() writes the next rate into the optimizer's lr tensor ----


class LRScheduler:
    """Base of the schedules: epoch counts step() calls; get_lr() says the rate for the current epoch."""

    def __init__(self, optimizer: Optimizer):
        self.optimizer = optimizer
        self.base_lr = optimizer.lr.item()
        self.epoch = 0
        self._set(self.get_lr())

    def get_lr(self) -> float:
        raise NotImplementedError

    def _set(self, lr: float) -> None:
        self.optimizer.lr.assign(Tensor(lr, device=self.optimizer.lr.device, dtype=dtypes.float32)).realize()

    def step(self) -> None:
        """Move to the next epoch (or step) and update the optimizer's learning rate."""
        self.epoch += 1
        self._set(self.get_lr())


class StepLR(LRScheduler):
    """Multiply the rate by gamma every step_size steps."""

    def __init__(self, optimizer: Optimizer, step_size: int, gamma: float = 0.1):
        self.step_size, self.gamma = step_size, gamma
        super().__init__(optimizer)

    def get_lr(self) -> float:
        return self.base_lr * self.gamma ** (self.epoch // self.step_size)


class CosineAnnealingLR(LRScheduler):
    """Cosine decay from the initial rate to eta_min over T_max steps, then back up over the next T_max (as torch)."""

    def __init__(self, optimizer: Optimizer, T_max: int, eta_min: float = 0.0):
        self.T_max, self.eta_min = T_max, eta_min
        super().__init__(optimizer)

    def get_lr(self) -> float:
        return self.eta_min + (self.base_lr - self.eta_min) * (1 + math.cos(math.pi * self.epoch / self.T_max)) / 2


class OneCycleLR(LRScheduler):
    """Warm up from max_lr/div_factor to max_lr, then cosine-anneal to max_lr/(div_factor*final_div_factor)."""

    def __init__(self, optimizer: Optimizer, max_lr: float, total_steps: int, pct_start: float = 0.3,
                 div_factor: float = 25.0, final_div_factor: float = 1e4):  # fmt: skip
        self.max_lr, self.total_steps = max_lr, total_steps
        self.initial_lr = max_lr / div_factor
        self.final_lr = self.initial_lr / final_div_factor
        self.peak_step = pct_start * total_steps - 1  # torch's phase boundary: max_lr is reached here
        super().__init__(optimizer)

    @staticmethod
    def _cosine(start: float, end: float, fraction: float) -> float:
        return end + (start - end) * (1 + math.cos(math.pi * fraction)) / 2

    def get_lr(self) -> float:
        if self.epoch <= self.peak_step and self.peak_step > 0:
            return self._cosine(self.initial_lr, self.max_lr, self.epoch / self.peak_step)
        remaining = self.total_steps - 1 - self.peak_step
        fraction = (self.epoch - self.peak_step) / remaining if remaining > 0 else 1.0
        return self._cosine(self.max_lr, self.final_lr, min(1.0, fraction))


class OptimizerGroup(Optimizer):
    """Several optimizers stepped as one (tinygrad's): each keeps its own parameters, settings and state."""

    def __init__(self, *optimizers: Optimizer):  # pylint: disable=super-init-not-called
        if not optimizers or not all(isinstance(o, Optimizer) for o in optimizers):
            raise TypeError("OptimizerGroup: expected one or more optimizers, got "
                            f"{[type(o).__name__ for o in optimizers]}")  # fmt: skip
        self.optimizers = optimizers
        self.params = [p for o in optimizers for p in o.params]

    def __getitem__(self, i: int) -> Optimizer:
        return self.optimizers[i]

    def zero_grad(self) -> None:
        for o in self.optimizers:
            o.zero_grad()

    def state(self) -> list[Tensor]:
        return [t for o in self.optimizers for t in o.state()]

    def schedule_step(self) -> list[Tensor]:
        return [t for o in self.optimizers for t in o.schedule_step()]
