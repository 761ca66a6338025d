"""The GPT-2-shaped decoder (glassgrad/models/gpt2.py): its key-value cache against recomputing the whole prefix,
and its logits against the same model written in PyTorch (bench/gpt2.py's torch_gpt2) on the same weights."""

import collections
import random

import numpy as np
import pytest
import torch

from bench.gpt2 import numpy_logits, torch_gpt2
from glassgrad import Tensor, Variable, nn
from glassgrad.engine import realize
from glassgrad.models.gpt2 import GPT2, Generator, GPT2Config, choose

CFG = GPT2Config(vocab_size=97, n_ctx=20, n_embd=48, n_layer=2, n_head=3)  # odd sizes: 3 heads of 16
PROMPT = [5, 17, 3]


@pytest.fixture(scope="module")
def model():
    return GPT2(CFG).init_weights(seed=3, std=0.3)  # wide enough that greedy decoding does not repeat one token


@pytest.fixture(scope="module")
def torch_weights(model):
    return {name: torch.from_numpy(t.numpy()) for name, t in nn.state.get_state_dict(model).items()}


@pytest.fixture(scope="module")
def generated(model):
    """Twelve greedy tokens after PROMPT, decoded through the cache, and the Generator that made them."""
    gen = Generator(model)
    return gen.generate(PROMPT, 12), gen


def test_cached_greedy_tokens_match_recomputing_the_prefix(model, generated):
    tokens, _ = generated
    sequence = PROMPT + tokens
    full = model(Tensor([sequence])).numpy()[0]  # causal: row t depends on sequence[: t + 1] only
    recomputed = full[len(PROMPT) - 1 : -1].argmax(-1).tolist()
    assert tokens == recomputed
    assert len(set(tokens)) > 1  # the weights make a sequence worth comparing


def test_cached_logits_match_the_whole_sequence(model, generated):
    sequence = PROMPT + generated[0]
    full = model(Tensor([sequence])).numpy()[0]
    fresh = Generator(model)
    cached = np.array([fresh.logits(token, pos) for pos, token in enumerate(sequence)])
    np.testing.assert_allclose(cached, full, atol=1e-4, rtol=0)


def test_a_generator_reused_gives_the_same_tokens(model, generated):
    tokens, gen = generated
    assert gen.step.calls == 2 and gen.step.items  # the decode step was captured: later steps replay it
    assert gen.generate(PROMPT, 12) == tokens  # cache entries left from the first run are masked out


def test_logits_match_pytorch(model, torch_weights):
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, CFG.vocab_size, (2, 7))
    ours = model(Tensor(tokens.astype(np.int32))).numpy()
    with torch.no_grad():
        theirs = torch_gpt2(torch_weights, CFG, torch.from_numpy(tokens)).numpy()
    assert ours.shape == theirs.shape == (2, 7, CFG.vocab_size)
    np.testing.assert_allclose(ours, theirs, atol=1e-4, rtol=1e-4)


def test_pytorch_cached_steps_match_pytorch_whole_sequence(torch_weights):
    """bench/gpt2.py times torch_gpt2's cached path: it must compute what the whole-sequence path does."""
    tokens = torch.tensor([[4, 80, 11, 63, 2, 50]])
    cache = [torch.zeros(2, 1, CFG.n_head, CFG.n_ctx, CFG.n_embd // CFG.n_head) for _ in range(CFG.n_layer)]
    with torch.no_grad():
        full = torch_gpt2(torch_weights, CFG, tokens)[0]
        steps = torch.stack([torch_gpt2(torch_weights, CFG, tokens[:, p : p + 1], cache, p)[0, -1] for p in range(6)])
    torch.testing.assert_close(steps, full, atol=1e-5, rtol=1e-5)


def test_numpy_reference_matches_the_model(model):
    """bench/gpt2.py's NumPy decoder, step by step, against the model's whole-sequence logits."""
    weights = {name: t.numpy() for name, t in nn.state.get_state_dict(model).items()}
    sequence = [4, 80, 11, 63, 2, 50]
    logits = numpy_logits(weights, CFG)
    steps = np.array([logits(token, pos) for pos, token in enumerate(sequence)])
    np.testing.assert_allclose(steps, model(Tensor([sequence])).numpy()[0], atol=1e-4, rtol=1e-4)


def test_sampling_is_seeded(model):
    gen = Generator(model)
    first = gen.generate(PROMPT, 8, temperature=1.0, seed=7)
    assert gen.generate(PROMPT, 8, temperature=1.0, seed=7) == first
    assert gen.generate(PROMPT, 8, temperature=1.0, seed=8) != first


def test_choose_draws_from_the_softmax():
    rng = random.Random(0)
    counts = collections.Counter(choose([0.0, float(np.log(3.0))], 1.0, rng) for _ in range(4000))
    assert abs(counts[1] / 4000 - 0.75) < 0.03
    assert choose([0.5, 2.0, -1.0], 0.0, rng) == 1


def test_bad_calls_say_what_is_wrong(model):
    with pytest.raises(ValueError, match=r"tokens must be \(batch, length\)"):
        model(Tensor([1, 2, 3]))
    with pytest.raises(ValueError, match="a cache, a position and a bound start_pos Variable, or none"):
        model(Tensor([[1]]), pos=Tensor([0]))
    with pytest.raises(ValueError, match="a cache, a position and a bound start_pos Variable, or none"):
        model(Tensor([[1]]), model.new_cache(1), Tensor([0]))
    with pytest.raises(ValueError, match="one token per sequence"):
        model(Tensor([[1, 2]]), model.new_cache(1), Tensor([0]), Variable("start_pos", 0, 19).bind(0))
    with pytest.raises(ValueError, match="do not fit the context of 20"):
        model(Tensor([[1] * 21]))
    with pytest.raises(ValueError, match="exceed the context of 20"):
        Generator(model).generate(PROMPT, 18)
    with pytest.raises(ValueError, match="position 20 is outside the context 0..19"):
        Generator(model).logits(1, 20)
    with pytest.raises(ValueError, match="max_new_tokens must be 0 or more"):
        Generator(model).generate(PROMPT, -1)
    with pytest.raises(ValueError, match="at least one token"):
        Generator(model).generate([], 3)
    with pytest.raises(ValueError, match="not a multiple of n_head"):
        GPT2(GPT2Config(n_embd=50, n_head=4))


def test_decode_steps_compile_once_and_loop_to_the_position(model):
    """Every step after the capture replays the same kernels (none compiled), and the attention's kernels loop to
    start_pos + 1, a parameter, not over the whole context: a step's work grows with its position."""
    gen = Generator(model)
    gen.logits(PROMPT[0], 0)
    gen.logits(PROMPT[1], 1)  # the capture
    before = set(realize._kernels)
    steps = [gen.logits(t, pos) for pos, t in enumerate([PROMPT[2], 7, 11, 13], start=2)]
    assert set(realize._kernels) == before
    sources = [item.runner.spec.src for item in gen.step.items if hasattr(item.runner, "spec")]
    assert sum("var_start_pos" in src for src in sources) >= 2 * CFG.n_layer  # the cache's write, the attention
    whole = model(Tensor([[*PROMPT, 7, 11, 13]])).numpy()[0]
    np.testing.assert_allclose(np.array(steps), whole[2:], rtol=1e-4, atol=1e-4)
