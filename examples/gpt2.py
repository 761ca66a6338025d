"""Generate tokens with a GPT-2-shaped decoder (random, seeded weights) through its key-value cache and TinyJit.

python examples/gpt2.py                                # 4 layers, 256 wide, vocab 1000, context 128: 100 tokens
TOKENS=50 TEMPERATURE=0.8 SEED=1 python examples/gpt2.py
LAYERS=12 WIDTH=768 HEADS=12 VOCAB=50257 CTX=1024 python examples/gpt2.py   # GPT-2 small's shape
"""

from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from glassgrad import getenv  # noqa: E402
from glassgrad.models.gpt2 import GPT2, Generator, GPT2Config  # noqa: E402


def main() -> None:
    cfg = GPT2Config(vocab_size=getenv("VOCAB", 1000), n_ctx=getenv("CTX", 128), n_embd=getenv("WIDTH", 256),
                     n_layer=getenv("LAYERS", 4), n_head=getenv("HEADS", 4))  # fmt: skip
    seed, temperature = getenv("SEED", 0), float(os.environ.get("TEMPERATURE", "0"))
    prompt = [1, 2, 3, 4]
    new_tokens = min(getenv("TOKENS", 100), cfg.n_ctx - len(prompt))
    model = GPT2(cfg).init_weights(seed, std=0.2)  # wider than GPT-2's 0.02, so that greedy output varies
    generator = Generator(model)
    generator.generate(prompt, 2)  # the first two steps compile the decode step and capture it for TinyJit
    start = time.perf_counter()
    tokens = generator.generate(prompt, new_tokens, temperature, seed)
    steps = len(prompt) + new_tokens - 1  # the prompt goes through the same cached step, one token at a time
    elapsed = time.perf_counter() - start
    print(f"GPT-2 shape: {cfg.n_layer} layers, {cfg.n_embd} wide, {cfg.n_head} heads, vocab {cfg.vocab_size}, "
          f"context {cfg.n_ctx}; prompt {prompt}, temperature {temperature}")  # fmt: skip
    print(f"generated {len(tokens)} tokens: {tokens}")
    print(f"{steps} decode steps in {elapsed:.2f}s: {steps / elapsed:.1f} tokens/s")


if __name__ == "__main__":
    main()
