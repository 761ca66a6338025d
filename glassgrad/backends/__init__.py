"""PyTorch's `torch.backends` switches that glassgrad has too: `glassgrad.backends.cuda.matmul.allow_tf32`."""

from glassgrad.backends import cuda

__all__ = ["cuda"]
