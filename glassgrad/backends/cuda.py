"""float32 contractions on the tensor cores as TF32, as PyTorch's switches say: off unless the user allows it.

`glassgrad.backends.cuda.matmul.allow_tf32 = True` (like `torch.backends.cuda.matmul.allow_tf32`), or
`glassgrad.set_float32_matmul_precision("high")` (like `torch.set_float32_matmul_precision`), or TF32=1 in the
environment, or `Context(TF32=1)` for a block, lets every float32 matrix product, batched or not, with whatever
prologue and epilogue it fuses (codegen/tensor_cores.py), multiply on the tensor cores with TF32's 10-bit mantissa
(rounded to nearest) and accumulate in float32. It is off by default: then float32 products run in float32 on the SIMT
units. The switch is read when a kernel is compiled; kernels compiled under each setting are kept apart.
"""

from __future__ import annotations

from glassgrad.helpers import TF32

PRECISIONS = ("highest", "high", "medium")  # PyTorch's names: "highest" is float32, the others allow TF32


class Matmul:
    """`glassgrad.backends.cuda.matmul`: the switch for matrix products."""

    @property
    def allow_tf32(self) -> bool:
        """Whether float32 matrix products may run on the tensor cores as TF32 (default False)."""
        return bool(TF32.value)

    @allow_tf32.setter
    def allow_tf32(self, allowed: bool) -> None:
        TF32.value = int(bool(allowed))


matmul = Matmul()


def set_float32_matmul_precision(precision: str) -> None:
    """ "highest": float32 matrix products in float32; "high" or "medium": on the tensor cores as TF32."""
    if precision not in PRECISIONS:
        raise ValueError(f"set_float32_matmul_precision: precision must be one of {PRECISIONS}, got {precision!r}")
    matmul.allow_tf32 = precision != "highest"


def get_float32_matmul_precision() -> str:
    """ "high" where TF32 is allowed, else "highest"."""
    return "high" if matmul.allow_tf32 else "highest"
