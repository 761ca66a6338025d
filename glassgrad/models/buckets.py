"""Padded shapes for inference over texts of any length: a few buckets of lengths and batch sizes, each compiled once.

glassgrad compiles a kernel per concrete shape, so a model run on every length a text happens to have would compile
a new set of kernels for most calls. Padding a batch's length and size up to a bucket bounds the shapes one model
ever sees (32 lengths up to 512, 10 batch sizes up to 32), and a call whose lengths were all seen before compiles
nothing. Symbolic shapes (a Variable for the length, bound per call) are the other way: GPT-2's decode uses them
(models/gpt2.py); the encoder keeps this bucketing, which issue 22 allows, until a symbolic start and a mean over a
symbolic axis are supported.
"""

from __future__ import annotations

from dataclasses import dataclass


def bucket(size: int, smallest_step: int, steps_per_octave: int, limit: int) -> int:
    """`size` rounded up to a multiple of max(smallest_step, the power of two >= size / steps_per_octave), at most
    `limit` (unless size is past it): between two powers of two, steps_per_octave sizes, so padding stays a fraction."""
    step = max(smallest_step, (1 << max(0, (size - 1).bit_length())) // steps_per_octave)
    return min(-(-size // step) * step, max(limit, size))


def length_bucket(length: int, limit: int) -> int:
    """8, 16, .., 128, then 144, .., 256, then 288, .., 512: 32 lengths (past 64, under an eighth is padding)."""
    return bucket(length, 8, 16, limit)


def batch_bucket(rows: int, limit: int) -> int:
    """1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, .. (under a third is padding), and `limit`, the batch size asked for."""
    return bucket(rows, 1, 4, limit)


@dataclass(frozen=True)
class Batch:
    """The positions of some inputs, run together as `rows` rows of `length` tokens (padding included)."""

    indices: list[int]
    rows: int
    length: int


def batches_by_length(lengths: list[int], batch_size: int, max_length: int) -> list[Batch]:
    """sentence-transformers' batching, longest first, batch_size inputs a batch (so inputs of similar length share
    one and little is padding), each batch padded to the buckets of its longest input and of its size."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])  # stable: equal lengths keep the input order
    batches = []
    for start in range(0, len(order), batch_size):
        chunk = order[start : start + batch_size]
        length = length_bucket(lengths[chunk[0]], max_length)
        batches.append(Batch(chunk, batch_bucket(len(chunk), batch_size), length))
    return batches
