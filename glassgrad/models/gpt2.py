"""A GPT-2-shaped decoder with a key-value cache, for generating text one token at a time.

GPT-2: token and position embeddings, n_layer blocks (causal self-attention, then a tanh-GELU MLP, each with a
LayerNorm before it and a residual around it), a final LayerNorm and a language-model head tied to the token
embedding. Linear weights are stored (out, in) as nn.Linear stores them (Hugging Face's GPT-2 stores them
transposed, as Conv1D).

The cache (Generator holds it, not the model, so the model's state dict stays its weights): one realized buffer of
keys and values per layer, for all n_ctx positions. A decode step at position pos takes it twice: as `pos`, a
one-element int Tensor (the position embedding, and where to write), and as `start_pos`, a Variable bound to pos
(a symbolic size). It writes the new token's key and value into the cache's first start_pos + 1 entries with
assign and attends over exactly those: the kernels loop to start_pos + 1, an int they take as a parameter, so
TinyJit captures one step and replays it for every position, and a token costs one token's pass through the model
plus attention over the pos + 1 cached positions, not n_ctx.

The file uses only Tensor API that tinygrad shares: bench/gpt2.py runs it under tinygrad by switching the import.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from glassgrad import Tensor, TinyJit, Variable, nn


@dataclass(frozen=True)
class GPT2Config:
    """The sizes of a GPT-2-shaped model (the defaults: a small one for examples and benchmarks)."""

    vocab_size: int = 1000  # tokens the embedding and the head know
    n_ctx: int = 128  # the longest sequence: positions the position embedding has
    n_embd: int = 256  # the width of every layer
    n_layer: int = 4  # transformer blocks
    n_head: int = 4  # attention heads (n_embd splits among them)
    layer_norm_eps: float = 1e-5


class Attention:
    """Causal multi-head self-attention; given a cache and a position, it also writes and reads the cache."""

    def __init__(self, cfg: GPT2Config):
        if cfg.n_embd % cfg.n_head:
            raise ValueError(f"GPT2Config: n_embd {cfg.n_embd} is not a multiple of n_head {cfg.n_head}")
        self.n_head = cfg.n_head
        self.c_attn = nn.Linear(cfg.n_embd, 3 * cfg.n_embd)  # query, key and value in one matmul
        self.c_proj = nn.Linear(cfg.n_embd, cfg.n_embd)

    def __call__(self, x: Tensor, causal: bool, cache_kv: Tensor | None = None, pos: Tensor | None = None,
                 start_pos: Any = None) -> Tensor:  # fmt: skip
        batch, length, width = x.shape
        # (batch, length, 3 * width) -> (3, batch, heads, length, head size)
        qkv = self.c_attn(x).reshape(batch, length, 3, self.n_head, width // self.n_head).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        if cache_kv is not None:
            k, v = remember(cache_kv, k, v, pos, start_pos)
        out = q.scaled_dot_product_attention(k, v, is_causal=causal)  # (the fused kernel skips the keys after a row)
        return self.c_proj(out.transpose(1, 2).reshape(batch, length, width))


def remember(cache_kv: Tensor, k: Tensor, v: Tensor, pos: Tensor, start_pos: Any) -> tuple[Tensor, Tensor]:
    """Write one token's key and value (batch, heads, 1, head size) at position pos of cache_kv; return the keys and
    values of positions 0..pos (start_pos: pos as a bound Variable, the symbolic length start_pos + 1)."""
    seen = cache_kv[:, :, :, : start_pos + 1]
    here = (Tensor.arange(cache_kv.shape[3])[: start_pos + 1] == pos).reshape(1, 1, 1, start_pos + 1, 1)
    seen.assign(here.where(Tensor.stack(k, v), seen))
    return seen[0], seen[1]


class MLP:
    """Widen four times, tanh-GELU, project back."""

    def __init__(self, cfg: GPT2Config):
        self.c_fc, self.c_proj = nn.Linear(cfg.n_embd, 4 * cfg.n_embd), nn.Linear(4 * cfg.n_embd, cfg.n_embd)

    def __call__(self, x: Tensor) -> Tensor:
        # the GELU gets a buffer of its own (the scheduler's rule for costly values a matmul would recompute)
        return self.c_proj(self.c_fc(x).gelu(approximate="tanh"))


class Block:
    """x + attention(LayerNorm(x)), then x + MLP(LayerNorm(x))."""

    def __init__(self, cfg: GPT2Config):
        self.ln_1, self.attn = nn.LayerNorm(cfg.n_embd, eps=cfg.layer_norm_eps), Attention(cfg)
        self.ln_2, self.mlp = nn.LayerNorm(cfg.n_embd, eps=cfg.layer_norm_eps), MLP(cfg)

    def __call__(self, x: Tensor, causal: bool, cache_kv: Tensor | None = None, pos: Tensor | None = None,
                 start_pos: Any = None) -> Tensor:  # fmt: skip
        x = x + self.attn(self.ln_1(x), causal, cache_kv, pos, start_pos)
        return x + self.mlp(self.ln_2(x))


class GPT2:
    """The decoder: model(tokens) runs whole sequences; model(token, cache, pos) one token through a cache."""

    def __init__(self, cfg: GPT2Config = GPT2Config()):
        self.cfg = cfg
        self.wte, self.wpe = nn.Embedding(cfg.vocab_size, cfg.n_embd), nn.Embedding(cfg.n_ctx, cfg.n_embd)
        self.h = [Block(cfg) for _ in range(cfg.n_layer)]
        self.ln_f = nn.LayerNorm(cfg.n_embd, eps=cfg.layer_norm_eps)

    def init_weights(self, seed: int = 0, std: float = 0.02) -> GPT2:
        """GPT-2's initialization, seeded: weights normal(0, std), biases 0, LayerNorms 1 and 0; realized."""
        Tensor.manual_seed(seed)
        for name, t in nn.state.get_state_dict(self).items():
            if ".ln_" in name or name.startswith("ln_f."):
                t.assign(Tensor.ones(*t.shape) if name.endswith("weight") else Tensor.zeros(*t.shape))
            else:
                t.assign(Tensor.zeros(*t.shape) if name.endswith("bias") else Tensor.normal(*t.shape, std=std))
        Tensor.realize(*nn.state.get_parameters(self))
        return self

    def new_cache(self, batch: int = 1) -> list[Tensor]:
        """An empty key-value cache: one realized (2, batch, heads, n_ctx, head size) buffer per layer."""
        cfg = self.cfg
        shape = (2, batch, cfg.n_head, cfg.n_ctx, cfg.n_embd // cfg.n_head)
        return [Tensor.zeros(*shape).contiguous().realize() for _ in range(cfg.n_layer)]

    def __call__(self, tokens: Tensor, cache: list[Tensor] | None = None, pos: Tensor | None = None,
                 start_pos: Any = None) -> Tensor:  # fmt: skip
        """Logits (batch, length, vocab) for tokens (batch, length).

        Without a cache: whole sequences from position 0, each token attending to those before it.
        With a cache (new_cache), pos (a one-element int Tensor) and start_pos (Variable("start_pos", 0, n_ctx - 1)
        bound to the same position): tokens is (batch, 1), the token at position pos; it writes its keys and values
        into the cache and attends to the cache's positions 0..pos.
        """
        if tokens.ndim != 2:
            raise ValueError(f"GPT2: tokens must be (batch, length), got shape {tokens.shape}")
        if not (cache is None) == (pos is None) == (start_pos is None):
            raise ValueError("GPT2: pass a cache, a position and a bound start_pos Variable, or none of them")
        length = tokens.shape[1]
        positions = Tensor.arange(length, device=tokens.device)  # on the tokens' device, or devices (Tensor.shard)
        if cache is None:
            if length > self.cfg.n_ctx:
                raise ValueError(f"GPT2: {length} tokens do not fit the context of {self.cfg.n_ctx}")
            query_pos = positions
        else:
            if length != 1 or len(cache) != self.cfg.n_layer or cache[0].shape[1] != tokens.shape[0]:
                raise ValueError(f"GPT2: a cached step takes one token per sequence of the cache's batch "
                                 f"({cache[0].shape[1]}), got tokens of shape {tokens.shape}")  # fmt: skip
            query_pos = pos.reshape(1)
        # causal: a query sees keys up to its position (one cached query sees all start_pos + 1 keys it attends to)
        causal = cache is None
        x = self.wte(tokens) + self.wpe(query_pos)
        for i, block in enumerate(self.h):
            x = block(x, causal, None if cache is None else cache[i], pos, start_pos)
        return self.ln_f(x) @ self.wte.weight.T  # the head shares the token embedding's weights


class Generator:
    """Generates from a GPT2 one token at a time: it owns the key-value cache and the TinyJit-captured step."""

    def __init__(self, model: GPT2):
        self.model, self.cache = model, model.new_cache(batch=1)
        self.step = TinyJit(self._step)

    def _step(self, token: Tensor, pos: Tensor, start_pos: Any) -> Tensor:
        return self.model(token, self.cache, pos, start_pos)[:, -1, :].realize()

    def logits(self, token: int, pos: int) -> list[float]:
        """The next-token logits after `token` at position `pos` (the cache must hold positions 0..pos-1)."""
        if not 0 <= pos < self.model.cfg.n_ctx:
            raise ValueError(f"Generator.logits: position {pos} is outside the context 0..{self.model.cfg.n_ctx - 1}")
        start_pos = Variable("start_pos", 0, self.model.cfg.n_ctx - 1).bind(pos)
        return self.step(Tensor([[token]]), Tensor([pos]), start_pos).tolist()[0]

    def generate(self, prompt: list[int], max_new_tokens: int, temperature: float = 0.0, seed: int = 0) -> list[int]:
        """The max_new_tokens tokens after prompt: greedy at temperature 0, else sampled from softmax(logits / T)."""
        if len(prompt) + max_new_tokens > self.model.cfg.n_ctx:
            raise ValueError(f"Generator.generate: {len(prompt)} prompt + {max_new_tokens} new tokens exceed the "
                             f"context of {self.model.cfg.n_ctx}")  # fmt: skip
        return generate(self.logits, prompt, max_new_tokens, temperature, seed)


def generate(logits: Callable[[int, int], list[float]], prompt: list[int], max_new_tokens: int,
             temperature: float = 0.0, seed: int = 0) -> list[int]:  # fmt: skip
    """Decode with any logits(token, pos) function that keeps its own cache; the prompt goes in token by token."""
    if not prompt:
        raise ValueError("generate: the prompt needs at least one token")
    if max_new_tokens < 0:
        raise ValueError(f"generate: max_new_tokens must be 0 or more, got {max_new_tokens}")
    rng, tokens = random.Random(seed), list(prompt)
    for pos in range(len(prompt) + max_new_tokens - 1):
        next_logits = logits(tokens[pos], pos)
        if pos >= len(prompt) - 1:
            tokens.append(choose(next_logits, temperature, rng))
    return tokens[len(prompt) :]


def choose(logits: list[float], temperature: float, rng: random.Random) -> int:
    """The next token: the argmax at temperature 0, else a draw from softmax(logits / temperature)."""
    if temperature == 0:
        return max(range(len(logits)), key=logits.__getitem__)
    top = max(logits)
    weights = [math.exp((x - top) / temperature) for x in logits]
    return rng.choices(range(len(logits)), weights)[0]
