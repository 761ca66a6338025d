"""BERT's WordPiece tokenizer, read from a vocab.txt: text -> token ids, as Hugging Face's BertTokenizer does it.

Three steps: normalize the text (drop control characters, space out CJK characters, lowercase and strip accents),
split it into words at whitespace and punctuation, then cut each word greedily into the longest pieces the
vocabulary holds ("playing" -> "play", "##ing"). A word no pieces spell becomes [UNK].
"""

from __future__ import annotations

import functools
import string
import unicodedata

MAX_WORD_CHARS = 100  # a longer word is [UNK] (max_input_chars_per_word)


@functools.cache
def _normal_form(ch: str) -> str:
    """What normalize makes of one character before accents and case: nothing for a control character, a space for
    whitespace, a CJK ideograph spaced out, else itself (remembered per character: texts repeat few characters)."""
    if ch in "\0\ufffd" or _is_control(ch):
        return ""
    return f" {ch} " if _is_cjk(ch) else " " if ch.isspace() else ch


@functools.cache
def _splits_words(ch: str) -> bool:
    """Whether `ch` ends a word: whitespace, or punctuation (a word of its own)."""
    return ch.isspace() or _is_punctuation(ch)


def _is_control(ch: str) -> bool:
    return ch not in "\t\n\r" and unicodedata.category(ch).startswith("C")


def _is_punctuation(ch: str) -> bool:
    # ASCII symbols count too, as in BERT: "$", "^" and "`" are not in Unicode's P* categories
    return ch in string.punctuation or unicodedata.category(ch).startswith("P")


def _is_cjk(ch: str) -> bool:
    """A CJK ideograph: BERT treats each one as a word of its own."""
    cp = ord(ch)
    blocks = ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F), (0x2B740, 0x2B81F),
              (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F))  # fmt: skip
    return any(lo <= cp <= hi for lo, hi in blocks)


class WordPieceTokenizer:
    """Text to BERT token ids: [CLS] pieces [SEP], cut to max_length tokens in all."""

    def __init__(self, vocab: list[str], lowercase: bool = True, max_length: int = 512,
                 strip_accents: bool | None = None):  # fmt: skip
        if max_length < 2:
            raise ValueError(f"WordPieceTokenizer: max_length {max_length} leaves no room for [CLS] and [SEP]")
        self.vocab = {token: i for i, token in enumerate(vocab)}
        self.lowercase, self.max_length = lowercase, max_length
        self.strip_accents = lowercase if strip_accents is None else strip_accents  # BERT's default goes with case
        for special in ("[CLS]", "[SEP]", "[UNK]", "[PAD]"):
            if special not in self.vocab:
                raise ValueError(f"WordPieceTokenizer: the vocabulary has no {special} token")
        self.cls, self.sep, self.unk, self.pad = (self.vocab[t] for t in ("[CLS]", "[SEP]", "[UNK]", "[PAD]"))

    @classmethod
    def from_file(cls, vocab_path: str, lowercase: bool = True, max_length: int = 512,
                  strip_accents: bool | None = None) -> WordPieceTokenizer:  # fmt: skip
        """Read a vocab.txt: one token a line, its id the line number."""
        with open(vocab_path, encoding="utf-8") as f:
            return cls([line.rstrip("\n") for line in f], lowercase, max_length, strip_accents)

    def normalize(self, text: str) -> str:
        """Drop control characters, make every whitespace a space, space out CJK; strip accents and lowercase."""
        text = "".join(map(_normal_form, text))
        if self.strip_accents and not text.isascii():  # "Café" -> "Cafe": split letters from their marks, drop them
            text = "".join(c for c in unicodedata.normalize("NFD", text) if unicodedata.category(c) != "Mn")
        return text.lower() if self.lowercase else text

    def split_words(self, text: str) -> list[str]:
        """Words split at whitespace; each punctuation character is a word of its own."""
        words, current = [], ""
        for ch in text:
            if _splits_words(ch):
                if current:
                    words.append(current)
                current = ""
                if not ch.isspace():
                    words.append(ch)
            else:
                current += ch
        return words + [current] if current else words

    def word_pieces(self, word: str) -> list[int]:
        """The ids of the longest vocabulary pieces that spell `word`, left to right; [UNK] if none do."""
        if len(word) > MAX_WORD_CHARS:
            return [self.unk]
        pieces, start = [], 0
        while start < len(word):
            for end in range(len(word), start, -1):
                piece = word[start:end] if start == 0 else "##" + word[start:end]
                if piece in self.vocab:
                    pieces.append(self.vocab[piece])
                    start = end
                    break
            else:
                return [self.unk]
        return pieces

    def encode(self, text: str) -> list[int]:
        """Token ids of one text: [CLS], its word pieces (cut to fit max_length), [SEP]."""
        if not isinstance(text, str):
            raise TypeError(f"WordPieceTokenizer.encode: expected a str, got {type(text).__name__}")
        ids = [i for word in self.split_words(self.normalize(text)) for i in self.word_pieces(word)]
        return [self.cls, *ids[: self.max_length - 2], self.sep]
