"""A BERT encoder and the sentence-transformers recipe around it: token ids -> mean-pooled, L2-normalized embeddings.

SentenceEncoder.load(folder) reads a sentence-transformers model folder (all-MiniLM-L6-v2, say): config.json,
model.safetensors (or pytorch_model.bin), vocab.txt and the pooling settings. Nothing is downloaded.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass

from glassgrad import Tensor, nn
from glassgrad.models.buckets import batch_bucket, batches_by_length, length_bucket
from glassgrad.models.wordpiece import WordPieceTokenizer
from glassgrad.nn.state import load_state_dict, safe_load, torch_load


@dataclass(frozen=True)
class BertConfig:
    """The sizes of a BERT model, as its config.json names them."""

    vocab_size: int = 30522
    hidden_size: int = 384
    num_hidden_layers: int = 6
    num_attention_heads: int = 12
    intermediate_size: int = 1536
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12

    @classmethod
    def from_json(cls, path: str) -> BertConfig:
        """The fields of config.json this model uses; it must describe a BERT with GELU and absolute positions."""
        with open(path) as f:
            raw = json.load(f)
        if raw.get("hidden_act", "gelu") != "gelu" or raw.get("position_embedding_type", "absolute") != "absolute":
            raise ValueError(f"{path}: only BERT with hidden_act 'gelu' and absolute position embeddings is supported")
        return cls(**{k: raw[k] for k in cls.__dataclass_fields__ if k in raw})


class BertLayer:
    """Self-attention, then a GELU feed-forward network; each adds to its input and is layer-normalized after."""

    def __init__(self, cfg: BertConfig):
        d, eps = cfg.hidden_size, cfg.layer_norm_eps
        self.heads = cfg.num_attention_heads
        self.query, self.key, self.value, self.attn_out = (nn.Linear(d, d) for _ in range(4))
        self.attn_norm = nn.LayerNorm(d, eps=eps)
        self.ffn_in, self.ffn_out = nn.Linear(d, cfg.intermediate_size), nn.Linear(cfg.intermediate_size, d)
        self.ffn_norm = nn.LayerNorm(d, eps=eps)

    def __call__(self, x: Tensor, mask: Tensor) -> Tensor:
        batch, length, d = x.shape
        # (batch, length, d) -> (batch, heads, length, d // heads)
        q, k, v = (f(x).reshape(batch, length, self.heads, d // self.heads).transpose(1, 2)
                   for f in (self.query, self.key, self.value))  # fmt: skip
        attended = q.scaled_dot_product_attention(k, v, attn_mask=mask).transpose(1, 2).reshape(batch, length, d)
        x = self.attn_norm(x + self.attn_out(attended))
        hidden = self.ffn_in(x).gelu(approximate="none")  # gets its own buffer: fused, each output column recomputes it
        return self.ffn_norm(x + self.ffn_out(hidden))


class Bert:
    """BERT: word + position + token-type embeddings, layer-normalized, then num_hidden_layers BertLayers."""

    def __init__(self, cfg: BertConfig):
        self.word = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.position = nn.Embedding(cfg.max_position_embeddings, cfg.hidden_size)
        self.token_type = nn.Embedding(cfg.type_vocab_size, cfg.hidden_size)
        self.embed_norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.layers = [BertLayer(cfg) for _ in range(cfg.num_hidden_layers)]
        self.max_length = cfg.max_position_embeddings

    def __call__(self, ids: Tensor, attention_mask: Tensor) -> Tensor:
        """Token states (batch, length, hidden) for ids (batch, length); attention_mask is 1 at real tokens."""
        if ids.ndim != 2 or attention_mask.shape != ids.shape:
            raise ValueError(f"Bert: ids {ids.shape} and attention_mask {attention_mask.shape} must both be "
                             "(batch, length)")  # fmt: skip
        if ids.shape[1] > self.max_length:
            raise ValueError(f"Bert: {ids.shape[1]} tokens exceed the {self.max_length} positions the model has")
        positions = Tensor.arange(ids.shape[1]).reshape(1, -1)
        x = self.embed_norm(self.word(ids) + self.position(positions) + self.token_type(ids.zeros_like()))
        mask = (attention_mask == 1).reshape(ids.shape[0], 1, 1, ids.shape[1])  # every query attends to real keys
        for layer in self.layers:
            x = layer(x, mask)
        return x


# Hugging Face's parameter names -> ours (prefixes "embeddings." and "encoder.layer.N." are handled around these)
HF_NAMES = {
    "embeddings.word_embeddings": "word", "embeddings.position_embeddings": "position",
    "embeddings.token_type_embeddings": "token_type", "embeddings.LayerNorm": "embed_norm",
    "attention.self.query": "query", "attention.self.key": "key", "attention.self.value": "value",
    "attention.output.dense": "attn_out", "attention.output.LayerNorm": "attn_norm",
    "intermediate.dense": "ffn_in", "output.dense": "ffn_out", "output.LayerNorm": "ffn_norm",
}  # fmt: skip
HF_UNUSED = ("embeddings.position_ids", "pooler.")  # a constant buffer, and the [CLS] pooler sentence models skip


def from_hf_names(weights: dict[str, Tensor]) -> dict[str, Tensor]:
    """A Hugging Face BertModel state dict renamed for Bert (the "bert." prefix of task models is dropped too)."""
    renamed = {}
    for name, tensor in weights.items():
        name = name.removeprefix("bert.")
        if name.startswith(HF_UNUSED):
            continue
        prefix = ""
        if name.startswith("encoder.layer."):
            index, name = name.removeprefix("encoder.layer.").split(".", 1)
            prefix = f"layers.{index}."
        module, param = name.rsplit(".", 1)
        if module not in HF_NAMES:
            raise KeyError(f"from_hf_names: unexpected BERT parameter {name!r}")
        renamed[f"{prefix}{HF_NAMES[module]}.{param}"] = tensor
    return renamed


def _read_json(folder: str, name: str, default: dict) -> dict:
    path = os.path.join(folder, name)
    if not os.path.exists(path):
        return default
    with open(path) as f:
        return json.load(f)


def _load_weights(folder: str) -> dict[str, Tensor]:
    for name, reader in (("model.safetensors", safe_load), ("pytorch_model.bin", torch_load)):
        if os.path.exists(path := os.path.join(folder, name)):
            return reader(path)
    raise FileNotFoundError(f"SentenceEncoder: {folder} holds neither model.safetensors nor pytorch_model.bin")


def _tokenizer(folder: str, default_length: int) -> WordPieceTokenizer:
    """The folder's vocab.txt with its settings: casing and accents from tokenizer_config.json, and the length
    sentence-transformers cuts texts to from sentence_bert_config.json."""
    settings = _read_json(folder, "tokenizer_config.json", {})
    lowercase, strip_accents = settings.get("do_lower_case", True), settings.get("strip_accents")
    max_length = _read_json(folder, "sentence_bert_config.json", {}).get("max_seq_length", default_length)
    return WordPieceTokenizer.from_file(os.path.join(folder, "vocab.txt"), lowercase, max_length, strip_accents)


class SentenceEncoder:
    """A sentence-transformers model: tokenize, run BERT, average the real tokens' states, scale to length 1."""

    def __init__(self, bert: Bert, tokenizer: WordPieceTokenizer, normalize: bool = True):
        self.bert, self.tokenizer, self.normalize = bert, tokenizer, normalize

    @classmethod
    def load(cls, folder: str) -> SentenceEncoder:
        """The model in a sentence-transformers folder; its pooling must be the mean of the tokens."""
        pooling = _read_json(folder, "1_Pooling/config.json", {"pooling_mode_mean_tokens": True})
        modes = sorted(k for k, v in pooling.items() if k.startswith("pooling_mode_") and v)
        if modes != ["pooling_mode_mean_tokens"]:
            raise ValueError(f"SentenceEncoder: {folder} pools with {modes}; only pooling_mode_mean_tokens works")
        cfg = BertConfig.from_json(os.path.join(folder, "config.json"))
        bert = Bert(cfg)
        load_state_dict(bert, from_hf_names(_load_weights(folder)))
        tokenizer = _tokenizer(folder, default_length=cfg.max_position_embeddings)
        modules = _read_json(folder, "modules.json", [])
        normalize = any(m.get("type", "").endswith(".Normalize") for m in modules) if modules else True
        return cls(bert, tokenizer, normalize)

    def embed_ids(self, ids: list[list[int]]) -> list[list[float]]:
        """Embeddings of token-id lists run as one batch, padded to the bucket of its longest list and of its size
        (models/buckets.py): the padding rows and tokens are masked out, and a shape seen before compiles nothing."""
        if not ids:
            return []
        rows, length = batch_bucket(len(ids), len(ids)), length_bucket(max(map(len, ids)), self.bert.max_length)
        return self._embed_padded(ids, rows, length)

    def _embed_padded(self, ids: list[list[int]], rows: int, length: int) -> list[list[float]]:
        """The embeddings of `ids` run as `rows` rows of `length` tokens."""
        pad = self.tokenizer.pad
        filler = [[pad]] * (rows - len(ids))  # a padding row: one token counted as real, so no softmax is over nothing
        padded = [seq + [pad] * (length - len(seq)) for seq in ids + filler]
        mask = [[1] * len(seq) + [0] * (length - len(seq)) for seq in ids + filler]
        return self.embed(Tensor(padded), Tensor(mask)).tolist()[: len(ids)]

    def embed(self, ids: Tensor, mask: Tensor) -> Tensor:
        """Embeddings (batch, hidden) of padded token ids (batch, length); mask is 1 at real tokens, 0 at padding."""
        states = self.bert(ids, mask)
        weights = mask.unsqueeze(-1).float()
        pooled = (states * weights).sum(1) / weights.sum(1).maximum(1e-9)  # the mean over real tokens only
        if not self.normalize:
            return pooled
        return pooled / (pooled * pooled).sum(-1, keepdim=True).sqrt().maximum(1e-12)

    def encode(self, sentences: list[str], batch_size: int = 32) -> list[list[float]]:
        """One embedding per sentence, in order, batched as sentence-transformers batches (longest first, batch_size
        a batch, each padded and masked) with lengths and batch sizes padded to buckets (models/buckets.py)."""
        if isinstance(sentences, str):
            raise TypeError("SentenceEncoder.encode: pass a list of sentences, not one str")
        ids = [self.tokenizer.encode(s) for s in sentences]
        out: list[list[float]] = [[] for _ in ids]
        for batch in batches_by_length([len(seq) for seq in ids], batch_size, self.bert.max_length):
            embedded = self._embed_padded([ids[i] for i in batch.indices], batch.rows, batch.length)
            for i, row in zip(batch.indices, embedded):
                out[i] = row
        return out


def cosine(a: list[float], b: list[float]) -> float:
    """The cosine of the angle between two vectors."""
    dot = sum(x * y for x, y in zip(a, b))
    return dot / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))
