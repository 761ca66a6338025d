"""Automatic mixed precision, as torch.amp: `autocast` (glassgrad/autocast.py) and `GradScaler`.

float16's range ends at 65504 and its smallest step is 6e-8, so small gradients of a float16 model round to zero.
GradScaler multiplies the loss by a large scale before backward(), divides the gradients by it before the optimizer
uses them, and skips a step whose gradients overflowed (lowering the scale), growing the scale again after a run of
good steps. bfloat16 has float32's range and needs none of this.
"""

from __future__ import annotations

from typing import Any

from glassgrad.autocast import autocast, autocast_dtype, is_autocast_enabled
from glassgrad.dtype import dtypes
from glassgrad.nn.optim import Optimizer
from glassgrad.tensor import Tensor


class GradScaler:
    """Loss scaling for float16 training (torch.amp.GradScaler): scale(loss).backward(); step(opt); update()."""

    def __init__(self, device: str | None = None, init_scale: float = 2.0**16, growth_factor: float = 2.0,
                 backoff_factor: float = 0.5, growth_interval: int = 2000, enabled: bool = True) -> None:  # fmt: skip
        if growth_factor <= 1.0 or not 0.0 < backoff_factor < 1.0 or growth_interval < 1:
            raise ValueError(f"GradScaler: need growth_factor > 1, 0 < backoff_factor < 1 and growth_interval >= 1, "
                             f"got {growth_factor}, {backoff_factor}, {growth_interval}")  # fmt: skip
        self.device, self.enabled = device, enabled
        self._scale, self._growth_factor, self._backoff_factor = float(init_scale), growth_factor, backoff_factor
        self._growth_interval, self._good_steps = growth_interval, 0
        self._found_inf: dict[int, bool] = {}  # id(optimizer) -> whether its unscaled gradients overflowed

    def is_enabled(self) -> bool:
        """Whether this scaler scales (a disabled one passes everything through)."""
        return self.enabled

    def get_scale(self) -> float:
        """The factor the next scale() multiplies by (1.0 when disabled)."""
        return self._scale if self.enabled else 1.0

    def scale(self, outputs: Any) -> Any:
        """The loss (a Tensor, or a list/tuple of them) times the scale, to call backward() on."""
        if not self.enabled:
            return outputs
        if isinstance(outputs, (list, tuple)):
            return type(outputs)(self.scale(o) for o in outputs)
        if not isinstance(outputs, Tensor):
            raise TypeError(f"GradScaler.scale: expected a Tensor or a list of them, got {type(outputs).__name__}")
        return outputs * Tensor(self._scale, dtype=dtypes.float32, device=outputs.device)

    def unscale_(self, optimizer: Optimizer) -> None:
        """Divide the optimizer's gradients by the scale (once per step), noting whether any is inf or NaN."""
        if not self.enabled:
            return
        if id(optimizer) in self._found_inf:
            raise RuntimeError("GradScaler.unscale_: already called on this optimizer since the last update()")
        grads = [p for p in optimizer.params if p.grad is not None]
        if any(p.grad.dtype == dtypes.float16 for p in grads):  # unscaled, its small values would round to 0 again
            raise ValueError("GradScaler.unscale_: float16 gradients cannot be unscaled; keep the weights in float32 "
                             "and run the model under glassgrad.autocast(dtype=dtypes.float16)")  # fmt: skip
        bad = False
        for p in grads:
            p.grad = p.grad * (1.0 / self._scale)
        if grads:
            flags = Tensor.stack(*[p.grad.float().isfinite().logical_not().any() for p in grads])
            bad = bool(flags.any().item())  # a sync, as in PyTorch: the step's fate decides on the host
        self._found_inf[id(optimizer)] = bad

    def step(self, optimizer: Optimizer) -> bool:
        """Unscale (unless done) and run optimizer.step(), or skip it when a gradient overflowed; True if it ran."""
        if not self.enabled:
            optimizer.step()
            return True
        if id(optimizer) not in self._found_inf:
            self.unscale_(optimizer)
        if self._found_inf[id(optimizer)]:
            return False
        optimizer.step()
        return True

    def update(self, new_scale: float | None = None) -> None:
        """Back off the scale after an overflow, grow it after growth_interval good steps (or set `new_scale`)."""
        if not self.enabled:
            return
        if new_scale is not None:
            self._scale, self._good_steps = float(new_scale), 0
        elif any(self._found_inf.values()):
            self._scale, self._good_steps = self._scale * self._backoff_factor, 0
        elif self._found_inf:
            self._good_steps += 1
            if self._good_steps == self._growth_interval:
                self._scale, self._good_steps = self._scale * self._growth_factor, 0
        self._found_inf.clear()

    def state_dict(self) -> dict[str, float | int]:
        """The scale and the growth settings, as torch's GradScaler.state_dict()."""
        return {"scale": self._scale, "growth_factor": self._growth_factor, "backoff_factor": self._backoff_factor,
                "growth_interval": self._growth_interval, "_growth_tracker": self._good_steps}  # fmt: skip

    def load_state_dict(self, state: dict[str, float | int]) -> None:
        """Restore what state_dict() saved."""
        self._scale, self._growth_factor = float(state["scale"]), float(state["growth_factor"])
        self._backoff_factor, self._growth_interval = float(state["backoff_factor"]), int(state["growth_interval"])
        self._good_steps = int(state["_growth_tracker"])


__all__ = ["autocast", "autocast_dtype", "is_autocast_enabled", "GradScaler"]
