"""Decode steps of a small GPT-2-shaped model: glassgrad (TinyJit) vs NumPy, PyTorch (eager) and tinygrad 0.14 (CPU).

Run: python bench/gpt2.py
     LAYERS=4 WIDTH=256 HEADS=4 VOCAB=1000 CTX=128 PROMPT=8 SEED=0 python bench/gpt2.py   (the defaults)
     FRAMEWORKS=numpy,torch,glassgrad,tinygrad python bench/gpt2.py
     NUM_CPU_THREADS=1 python bench/gpt2.py   (threads: glassgrad and tinygrad read it, PyTorch's set_num_threads is
                                               set to it; NumPy's BLAS reads OMP_NUM_THREADS; default: their own)

All four run the same weights (glassgrad's seeded GPT-2 initialization, std 0.2 so that greedy decoding varies)
and decode greedily from the same prompt until the context is full, one token per step through a key-value cache.
glassgrad and tinygrad run the very same model code, glassgrad/models/gpt2.py, tinygrad's copy with its import
switched to tinygrad. Its cache is an n_ctx buffer per layer; a step writes and attends over its first pos+1
entries, a symbolic length (a Variable bound to pos), so TinyJit replays one captured step for every position.
NumPy and PyTorch write into a preallocated cache and attend over its first pos+1 entries (eager, so shapes may
change). A step runs from handing over the token to having the logits as Python
floats. The median is over the steps after the first two (glassgrad and tinygrad compile on step 1 and capture on
step 2); tokens/s is one over it, and the ratio divides glassgrad's median step by each framework's
(above 1: glassgrad is slower).
"""

from __future__ import annotations

import importlib.util
import os
import statistics
import sys
import time
import types
from collections.abc import Callable

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import numpy as np  # noqa: E402

from bench.common import header, tinygrad_cpu  # noqa: E402
from glassgrad import getenv  # noqa: E402
from glassgrad.models import gpt2  # noqa: E402

FRAMEWORKS = ("numpy", "torch", "glassgrad", "tinygrad")
CFG = gpt2.GPT2Config(vocab_size=getenv("VOCAB", 1000), n_ctx=getenv("CTX", 128), n_embd=getenv("WIDTH", 256),
                      n_layer=getenv("LAYERS", 4), n_head=getenv("HEADS", 4))  # fmt: skip
PROMPT, SEED = getenv("PROMPT", 8), getenv("SEED", 0)


def random_weights(cfg: gpt2.GPT2Config, seed: int) -> dict[str, np.ndarray]:
    """glassgrad's seeded initialization of the model, as NumPy arrays by parameter name."""
    from glassgrad import nn

    model = gpt2.GPT2(cfg).init_weights(seed, std=0.2)
    return {name: t.numpy() for name, t in nn.state.get_state_dict(model).items()}


def torch_gpt2(w: dict, cfg: gpt2.GPT2Config, tokens, cache: list | None = None, pos: int | None = None):
    """The same model in PyTorch, as functions of the weights w: logits (batch, length, vocab).

    Without a cache: whole sequences, causal attention. With a cache (per layer a (2, batch, heads, n_ctx, head
    size) tensor) and pos: tokens (batch, 1) at position pos, attending to cached positions 0..pos.
    """
    import torch
    import torch.nn.functional as F

    batch, length = tokens.shape
    width, heads, eps = cfg.n_embd, cfg.n_head, cfg.layer_norm_eps
    device = tokens.device
    positions = torch.arange(length, device=device) if pos is None else torch.tensor([pos], device=device)
    x = w["wte.weight"][tokens] + w["wpe.weight"][positions]
    for i in range(cfg.n_layer):
        p = lambda name: w[f"h.{i}.{name}"]  # noqa: B023 (used inside the iteration that made it)
        h = F.layer_norm(x, (width,), p("ln_1.weight"), p("ln_1.bias"), eps)
        qkv = F.linear(h, p("attn.c_attn.weight"), p("attn.c_attn.bias"))
        q, k, v = qkv.view(batch, length, 3, heads, width // heads).permute(2, 0, 3, 1, 4)
        if cache is None:
            attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            cache[i][:, :, :, pos] = torch.stack((k[:, :, 0], v[:, :, 0]))
            attended = F.scaled_dot_product_attention(q, cache[i][0, :, :, : pos + 1], cache[i][1, :, :, : pos + 1])
        x = x + F.linear(attended.transpose(1, 2).reshape(batch, length, width), p("attn.c_proj.weight"),
                         p("attn.c_proj.bias"))  # fmt: skip
        h = F.layer_norm(x, (width,), p("ln_2.weight"), p("ln_2.bias"), eps)
        h = F.gelu(F.linear(h, p("mlp.c_fc.weight"), p("mlp.c_fc.bias")), approximate="tanh")
        x = x + F.linear(h, p("mlp.c_proj.weight"), p("mlp.c_proj.bias"))
    return F.layer_norm(x, (width,), w["ln_f.weight"], w["ln_f.bias"], eps) @ w["wte.weight"].T


def numpy_logits(weights: dict[str, np.ndarray], cfg: gpt2.GPT2Config) -> Callable[[int, int], list[float]]:
    """logits(token, pos) for NumPy: the same decoder, one token at a time through its own cache."""
    width, heads, eps = cfg.n_embd, cfg.n_head, cfg.layer_norm_eps
    cache = [np.zeros((2, heads, cfg.n_ctx, width // heads), np.float32) for _ in range(cfg.n_layer)]

    def layer_norm(x: np.ndarray, name: str) -> np.ndarray:
        normalized = (x - x.mean()) / np.sqrt(x.var() + eps)
        return normalized * weights[f"{name}.weight"] + weights[f"{name}.bias"]

    def linear(x: np.ndarray, name: str) -> np.ndarray:
        return weights[f"{name}.weight"] @ x + weights[f"{name}.bias"]

    def logits(token: int, pos: int) -> list[float]:
        x = weights["wte.weight"][token] + weights["wpe.weight"][pos]
        for i, kv in enumerate(cache):
            q, k, v = linear(layer_norm(x, f"h.{i}.ln_1"), f"h.{i}.attn.c_attn").reshape(3, heads, -1)
            kv[:, :, pos] = k, v
            scores = np.einsum("hd,hsd->hs", q, kv[0, :, : pos + 1]) / np.sqrt(q.shape[-1])
            attention = np.exp(scores - scores.max(-1, keepdims=True))
            attention /= attention.sum(-1, keepdims=True)
            x = x + linear(np.einsum("hs,hsd->hd", attention, kv[1, :, : pos + 1]).reshape(-1), f"h.{i}.attn.c_proj")
            h = linear(layer_norm(x, f"h.{i}.ln_2"), f"h.{i}.mlp.c_fc")
            h = 0.5 * h * (1 + np.tanh(np.sqrt(2 / np.pi) * (h + 0.044715 * h**3)))
            x = x + linear(h, f"h.{i}.mlp.c_proj")
        return (weights["wte.weight"] @ layer_norm(x, "ln_f")).tolist()

    return logits


def torch_logits(weights: dict[str, np.ndarray], cfg: gpt2.GPT2Config) -> Callable[[int, int], list[float]]:
    """logits(token, pos) for PyTorch, keeping its own cache."""
    import torch

    if threads := os.environ.get("NUM_CPU_THREADS"):
        torch.set_num_threads(int(threads))
    w = {name: torch.from_numpy(a) for name, a in weights.items()}
    cache = [torch.zeros(2, 1, cfg.n_head, cfg.n_ctx, cfg.n_embd // cfg.n_head) for _ in range(cfg.n_layer)]

    def logits(token: int, pos: int) -> list[float]:
        with torch.inference_mode():
            return torch_gpt2(w, cfg, torch.tensor([[token]]), cache, pos)[0, -1].tolist()

    return logits


def gpt2_on_tinygrad() -> types.ModuleType:
    """glassgrad/models/gpt2.py run by tinygrad: the same source, imported from tinygrad instead of glassgrad."""
    tinygrad_cpu()  # tinygrad reads its device from DEV when imported
    with open(gpt2.__file__) as f:
        source = f.read().replace("from glassgrad import", "from tinygrad import")
    module = types.ModuleType("gpt2_on_tinygrad")
    sys.modules[module.__name__] = module  # dataclasses look their module up there
    exec(compile(source, gpt2.__file__, "exec"), module.__dict__)
    return module


def model_logits(module: types.ModuleType, weights: dict[str, np.ndarray],
                 cfg: gpt2.GPT2Config = CFG) -> Callable[[int, int], list[float]]:  # fmt: skip
    """logits(token, pos) of module's Generator (glassgrad's gpt2 module, or its tinygrad copy) on these weights."""
    model = module.GPT2(cfg)
    module.nn.state.load_state_dict(model, {name: module.Tensor(a) for name, a in weights.items()})
    return module.Generator(model).logits


def timed(logits: Callable[[int, int], list[float]], times: list[float]) -> Callable[[int, int], list[float]]:
    """logits, noting each call's seconds in times."""

    def run(token: int, pos: int) -> list[float]:
        start = time.perf_counter()
        out = logits(token, pos)
        times.append(time.perf_counter() - start)
        return out

    return run


def decode(name: str, weights: dict[str, np.ndarray], prompt: list[int]) -> tuple[list[int], list[float]]:
    """The greedy tokens of one framework, and each step's seconds."""
    makers = {
        "numpy": lambda: numpy_logits(weights, CFG),
        "torch": lambda: torch_logits(weights, CFG),
        "glassgrad": lambda: model_logits(gpt2, weights),
        "tinygrad": lambda: model_logits(gpt2_on_tinygrad(), weights),
    }
    times: list[float] = []
    tokens = gpt2.generate(timed(makers[name](), times), prompt, CFG.n_ctx - len(prompt))
    return tokens, times


def installed(name: str) -> bool:
    return name in ("glassgrad", "numpy") or importlib.util.find_spec(name) is not None


def main() -> None:
    names = [n.strip() for n in os.environ.get("FRAMEWORKS", ",".join(FRAMEWORKS)).split(",") if n.strip()]
    if unknown := [n for n in names if n not in FRAMEWORKS]:
        raise SystemExit(f"FRAMEWORKS: unknown {', '.join(unknown)}; choose from {', '.join(FRAMEWORKS)}")
    if not 1 <= PROMPT <= CFG.n_ctx - 3:
        raise SystemExit(f"PROMPT={PROMPT}: needs 1 to CTX-3 tokens, so that steps are left to time")
    threads = os.environ.get("NUM_CPU_THREADS", "default")
    header(f"gpt2: decode steps of a {CFG.n_layer}-layer, {CFG.n_embd}-wide GPT-2 (vocab {CFG.vocab_size}, "
           f"context {CFG.n_ctx}), batch 1, greedy, median over steps 3..{CFG.n_ctx - 1}, "
           f"threads: {threads}")  # fmt: skip
    weights = random_weights(CFG, SEED)
    prompt = np.random.default_rng(SEED).integers(0, CFG.vocab_size, PROMPT).tolist()
    results: dict[str, tuple[list[int], list[float]]] = {}
    for name in names:
        if not installed(name):
            print(f"# {name} not installed: skipped")
            continue
        results[name] = decode(name, weights, prompt)
        print(f"# {name}: {sum(results[name][1]):.1f}s for {len(results[name][1])} steps", flush=True)
    medians = {name: statistics.median(times[2:]) for name, (_, times) in results.items()}
    print(f"{'framework':<12} {'first step s':>12} {'median step ms':>14} {'tokens/s':>9} {'glassgrad time / its':>20} "
          f"{'same tokens as glassgrad':>24}")  # fmt: skip
    for name, (tokens, times) in results.items():
        ratio = f"{medians['glassgrad'] / medians[name]:.2f}x" if "glassgrad" in medians else "-"
        same = str(tokens == results["glassgrad"][0]) if "glassgrad" in results else "-"
        print(f"{name:<12} {times[0]:12.2f} {medians[name] * 1000:14.2f} {1 / medians[name]:9.1f} {ratio:>20} "
              f"{same:>24}")  # fmt: skip


if __name__ == "__main__":
    main()
