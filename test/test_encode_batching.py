"""SentenceEncoder.encode's batches (glassgrad/models/bert.py, models/buckets.py): longest first, padded to buckets of
length and size, masked so that padding changes no embedding, and compiled once per bucket.

A small random BERT from Hugging Face's transformers is the reference: each sentence run alone, unpadded, mean-pooled
and normalized in PyTorch. (test_minilm.py compares all-MiniLM-L6-v2 with sentence-transformers.)
"""

import numpy as np
import pytest
import torch

from glassgrad import Device, Tensor
from glassgrad.engine import realize
from glassgrad.models.bert import Bert, BertConfig, SentenceEncoder, from_hf_names
from glassgrad.models.buckets import Batch, batch_bucket, batches_by_length, length_bucket
from glassgrad.models.wordpiece import WordPieceTokenizer
from glassgrad.nn.state import load_state_dict
from helpers import count_calls, require_module

WORDS = [f"w{i}" for i in range(60)]
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", *WORDS]
MAX_TOKENS = 96  # the tokenizer's cut; the model has 128 positions


def sentence(tokens: int, seed: int) -> str:
    """A sentence of `tokens` tokens with [CLS] and [SEP] (one word a token)."""
    rng = np.random.default_rng(seed)
    return " ".join(rng.choice(WORDS, tokens - 2))


@pytest.fixture(scope="module")
def models():
    """The same random BERT in PyTorch (transformers' BertModel) and in glassgrad, with a small vocabulary."""
    transformers = require_module("transformers", "pip install transformers")
    cfg = dict(vocab_size=len(VOCAB), hidden_size=24, num_hidden_layers=2, num_attention_heads=3,
               intermediate_size=40, max_position_embeddings=128)  # fmt: skip
    torch.manual_seed(0)
    theirs = transformers.BertModel(transformers.BertConfig(**cfg, initializer_range=0.3), add_pooling_layer=False)
    bert = Bert(BertConfig(**cfg))
    load_state_dict(bert, from_hf_names({k: Tensor(v.numpy()) for k, v in theirs.state_dict().items()}))
    return theirs.eval(), SentenceEncoder(bert, WordPieceTokenizer(VOCAB, max_length=MAX_TOKENS))


def reference(model, ids: list[int]) -> np.ndarray:
    """One sentence alone, no padding: the mean of its token states, normalized."""
    with torch.no_grad():
        states = model(input_ids=torch.tensor([ids])).last_hidden_state[0]
    return torch.nn.functional.normalize(states.mean(0), dim=0).numpy()


def check_encode(models, sentences: list[str], batch_size: int) -> list[list[float]]:
    theirs, encoder = models
    ours = encoder.encode(sentences, batch_size=batch_size)
    assert len(ours) == len(sentences)
    for text, row in zip(sentences, ours):
        expected = reference(theirs, encoder.tokenizer.encode(text))
        np.testing.assert_allclose(row, expected, atol=2e-6, err_msg=f"{len(text.split()) + 2} tokens")
    return ours


def test_buckets():
    assert [length_bucket(n, 512) for n in (1, 2, 8, 9, 63, 64, 65, 81, 128, 129, 250, 256, 257, 512)] == [
        8, 8, 8, 16, 64, 64, 72, 88, 128, 144, 256, 256, 288, 512]  # fmt: skip
    assert sorted({length_bucket(n, 512) for n in range(1, 513)}) == [*range(8, 129, 8), *range(144, 257, 16),
                                                                      *range(288, 513, 32)]  # fmt: skip
    assert [length_bucket(n, 100) for n in (90, 97, 100, 101)] == [96, 100, 100, 101]  # the model's positions cap it
    assert sorted({batch_bucket(n, 32) for n in range(1, 33)}) == [1, 2, 3, 4, 6, 8, 12, 16, 24, 32]
    assert sorted({batch_bucket(n, 20) for n in range(1, 21)}) == [1, 2, 3, 4, 6, 8, 12, 16, 20]


def test_batches_are_longest_first_and_padded_to_buckets():
    lengths = [5, 30, 7, 30, 12, 3, 70]
    assert batches_by_length(lengths, 3, 512) == [Batch([6, 1, 3], 3, 72), Batch([4, 2, 0], 3, 16), Batch([5], 1, 8)]
    assert batches_by_length(lengths, 4, 512) == [Batch([6, 1, 3, 4], 4, 72), Batch([2, 0, 5], 3, 8)]
    assert batches_by_length(lengths, 32, 64) == [Batch(list(np.argsort([-n for n in lengths], kind="stable")), 8, 70)]
    assert batches_by_length([], 32, 512) == []
    for bad in (0, -1, 2.0, True, None):
        with pytest.raises(ValueError, match="batch_size must be a positive int"):
            batches_by_length(lengths, bad, 512)


def test_padding_changes_no_embedding(models):
    """Mixed lengths in batches of 4: each batch padded in length and in rows (the last has 3 sentences)."""
    sentences = [sentence(n, seed) for seed, n in enumerate([5, 9, 17, 33, 50, 70, 12, 96, 3, 2, 64])]
    ours = check_encode(models, sentences, batch_size=4)
    one_at_a_time = [models[1].encode([s])[0] for s in sentences[:3]]
    np.testing.assert_allclose(ours[:3], one_at_a_time, atol=2e-6)


def test_an_empty_list_one_sentence_and_a_sentence_past_the_cut(models):
    assert models[1].encode([]) == []
    check_encode(models, ["w1 w2 w3"], batch_size=32)
    too_long = sentence(150, seed=7)
    assert len(models[1].tokenizer.encode(too_long)) == MAX_TOKENS
    check_encode(models, [too_long, "w4"], batch_size=32)  # cut to 96 tokens, as sentence-transformers cuts


def test_encode_checks_its_batch_size(models):
    with pytest.raises(ValueError, match="batch_size must be a positive int, got 0"):
        models[1].encode(["w1"], batch_size=0)


@pytest.fixture
def kernels_made(monkeypatch):
    """Counts of the kernels this process makes (lowered, or read from the program cache on disk) and compiles."""
    counts: dict[str, int] = {}
    count_calls(monkeypatch, counts, "made", realize, "_cached_spec")
    count_calls(monkeypatch, counts, "compiled", Device[Device.DEFAULT].compiler, "compile")
    return counts


def test_lengths_seen_before_compile_nothing(models, kernels_made):
    """Two batches of 4 (lengths bucketed to 72 and 16, 4 and 3 rows); then the same sentences, then others whose
    lengths fall in the same buckets: no kernel is made again."""
    first = [sentence(n, seed) for seed, n in enumerate([70, 66, 71, 72, 16, 9, 12])]
    check_encode(models, first, batch_size=4)
    assert kernels_made["made"] > 0, "the counter counted nothing"
    kernels_made.update(made=0, compiled=0)
    check_encode(models, first, batch_size=4)
    others = [sentence(n, seed) for seed, n in enumerate([65, 72, 69, 68, 10, 15, 14], start=100)]
    check_encode(models, others, batch_size=4)
    assert kernels_made == {"made": 0, "compiled": 0}, "a call of lengths seen before made or compiled a kernel"
