"""The ONNX loader end to end: models exported by torch.onnx.export match PyTorch to 1e-4 (eager and under
TinyJit), broken files and bad inputs are clear errors, and an unsupported operator is an error naming it."""

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")  # the optional dependency (in the test extra)
torch = pytest.importorskip("torch")

from onnx import TensorProto, helper  # noqa: E402

from glassgrad import Tensor, TinyJit, dtypes  # noqa: E402
from glassgrad.onnx import OnnxError, OnnxRunner, OnnxUnsupported  # noqa: E402

nn, F = torch.nn, torch.nn.functional


class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, stride=2, padding=1, groups=2), nn.BatchNorm2d(16), nn.SiLU(),
            nn.AvgPool2d(2, ceil_mode=True), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10),
        )  # fmt: skip

    def forward(self, x):
        return self.features(x).log_softmax(-1)


class Block(nn.Module):
    """Pre-norm causal self-attention and an MLP, as in GPT-2."""

    def __init__(self, dim: int = 32, heads: int = 4):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(approximate="tanh"), nn.Linear(4 * dim, dim))

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = (z.reshape(b, t, self.heads, -1).transpose(1, 2) for z in self.qkv(self.ln1(x)).split(d, dim=-1))
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(attended)
        return x + self.mlp(self.ln2(x))


class SmallTransformer(nn.Module):
    def __init__(self, vocab: int = 50, dim: int = 32, context: int = 12):
        super().__init__()
        self.embed, self.position = nn.Embedding(vocab, dim), nn.Parameter(torch.randn(context, dim) * 0.1)
        self.blocks = nn.Sequential(Block(dim), Block(dim))
        self.ln, self.head = nn.LayerNorm(dim), nn.Linear(dim, vocab)

    def forward(self, tokens):
        return self.head(self.ln(self.blocks(self.embed(tokens) + self.position[: tokens.shape[1]])))


def _randomize_batchnorm(model: nn.Module) -> nn.Module:
    """Non-trivial running statistics, so that the exported BatchNormalization is really tested."""
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 2.0)
    return model.eval()


def _export(model: nn.Module, example: torch.Tensor, tmp_path, dynamo: bool) -> str:
    path = str(tmp_path / f"model_{'dynamo' if dynamo else 'torchscript'}.onnx")
    with torch.no_grad():
        torch.onnx.export(model, (example,), path, dynamo=dynamo, input_names=["x"], output_names=["y"])
    return path


@pytest.fixture(scope="module")
def cnn():
    torch.manual_seed(0)
    return _randomize_batchnorm(SmallCNN())


@pytest.fixture(scope="module")
def transformer():
    torch.manual_seed(1)
    return SmallTransformer().eval()


@pytest.mark.parametrize("dynamo", [True, False], ids=["dynamo", "torchscript"])
def test_exported_cnn_matches_torch(cnn, tmp_path, dynamo):
    x = torch.randn(2, 3, 17, 15)  # odd sizes: ceil_mode pooling and stride-2 padding meet the edges
    runner = OnnxRunner(_export(cnn, x, tmp_path, dynamo))
    got = runner({runner.input_names[0]: x.numpy()})[runner.output_names[0]].numpy()
    np.testing.assert_allclose(got, cnn(x).detach().numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dynamo", [True, False], ids=["dynamo", "torchscript"])
def test_exported_transformer_matches_torch(transformer, tmp_path, dynamo):
    tokens = torch.randint(0, 50, (3, 12))
    runner = OnnxRunner(_export(transformer, tokens, tmp_path, dynamo))
    got = runner({runner.input_names[0]: tokens.numpy()})[runner.output_names[0]].numpy()
    np.testing.assert_allclose(got, transformer(tokens).detach().numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("which", ["cnn", "transformer"])
def test_tinyjit_replays_the_model_with_new_inputs(cnn, transformer, tmp_path, which):
    """The torchscript transformer export computes its mask from Shape/Slice/Expand: host values under capture."""
    model, make = (cnn, lambda g: torch.randn(2, 3, 16, 16, generator=g)) if which == "cnn" else \
        (transformer, lambda g: torch.randint(0, 50, (3, 12), generator=g))  # fmt: skip
    runner = OnnxRunner(_export(model, make(torch.Generator()), tmp_path, dynamo=which == "cnn"))
    name, out = runner.input_names[0], runner.output_names[0]
    step = TinyJit(lambda x: runner({name: x})[out])
    for seed in range(4):  # call 1 runs, call 2 captures, calls 3 and 4 replay the captured kernels
        x = make(torch.Generator().manual_seed(seed))
        got = step(Tensor(x.numpy())).numpy()
        np.testing.assert_allclose(got, model(x).detach().numpy(), rtol=1e-4, atol=1e-4)
    assert step.calls >= 2 and step.items, "the later calls replayed captured kernels"


def _tiny_model(op: str = "Add", inputs=("a", "b"), dtype=TensorProto.FLOAT, shape=(2, 3), opset=17, **attrs):
    node = helper.make_node(op, list(inputs), ["y"], name="the_node", **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(i, dtype, shape) for i in inputs],
                              [helper.make_tensor_value_info("y", dtype, shape)])  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def test_runs_on_every_device(device):
    a, b = np.random.default_rng(0).standard_normal((2, 2, 3)).astype(np.float32)
    runner = OnnxRunner(_tiny_model(), device=device)
    out = runner({"a": a, "b": b})["y"]
    assert out.device == device
    np.testing.assert_allclose(out.numpy(), a + b)


def test_shape_arithmetic_runs_without_compiling():
    """Shape -> Gather -> Concat -> Reshape: the shape values live on the PYTHON device, read without a kernel."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Constant", [], ["i"], value=helper.make_tensor("i", TensorProto.INT64, [1], [0])),
        helper.make_node("Gather", ["s", "i"], ["n"], axis=0),
        helper.make_node("Constant", [], ["m1"], value=helper.make_tensor("m1", TensorProto.INT64, [1], [-1])),
        helper.make_node("Concat", ["n", "m1"], ["shape"], axis=0),
        helper.make_node("Reshape", ["x", "shape"], ["y"]),
    ]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 2, 2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])])  # fmt: skip
    x = np.arange(12, dtype=np.float32).reshape(3, 2, 2)
    y = OnnxRunner(helper.make_model(graph))({"x": x})["y"]
    assert y.shape == (3, 4)
    np.testing.assert_array_equal(y.numpy(), x.reshape(3, 4))


def test_int64_bool_and_half_inputs_keep_their_dtypes():
    ints = np.array([[1, -2, 3], [4, 5, -6]], dtype=np.int64)
    out = OnnxRunner(_tiny_model("Mul", dtype=TensorProto.INT64))({"a": ints, "b": ints})["y"]
    assert out.dtype == dtypes.int64
    np.testing.assert_array_equal(out.numpy(), ints * ints)
    flags = np.array([[True, False, True], [False, False, True]])
    out = OnnxRunner(_tiny_model("Xor", dtype=TensorProto.BOOL))({"a": flags, "b": ~flags})["y"]
    assert out.dtype == dtypes.bool and out.numpy().all()
    halves = np.linspace(-2, 2, 6, dtype=np.float16).reshape(2, 3)
    out = OnnxRunner(_tiny_model("Sub", dtype=TensorProto.FLOAT16))({"a": halves, "b": halves / 2})["y"]
    assert out.dtype == dtypes.float16
    np.testing.assert_allclose(out.numpy(), halves - halves / 2)


def test_unsupported_operator_is_an_error_naming_it():
    with pytest.raises(OnnxUnsupported, match=r"operator Unique \(node 'the_node'\)"):
        OnnxRunner(_tiny_model("Unique", inputs=("a",)))({"a": np.zeros((2, 3), np.float32)})


def test_unsupported_attribute_is_an_error_naming_it():
    """Add-6's `broadcast` attribute (NumPy broadcasting replaced it in opset 7) is one glassgrad does not take."""
    with pytest.raises(OnnxUnsupported, match=r"Add \(node 'the_node'\): attribute 'broadcast'"):
        OnnxRunner(_tiny_model(opset=6, broadcast=1))(
            {"a": np.zeros((2, 3), np.float32), "b": np.zeros((2, 3), np.float32)}
        )


def test_other_domains_name_their_operator():
    model = _tiny_model("Binarizer", inputs=("a",), domain="ai.onnx.ml")
    model.opset_import.append(helper.make_opsetid("ai.onnx.ml", 3))
    with pytest.raises(OnnxUnsupported, match=r"ai\.onnx\.ml\.Binarizer"):
        OnnxRunner(model)({"a": np.zeros((2, 3), np.float32)})


def test_bad_inputs_are_clear_errors():
    runner = OnnxRunner(_tiny_model())
    a = np.zeros((2, 3), np.float32)
    with pytest.raises(OnnxError, match="missing input 'b'"):
        runner({"a": a})
    with pytest.raises(OnnxError, match="unknown input 'c'"):
        runner({"a": a, "b": a, "c": a})
    with pytest.raises(OnnxError, match=r"input 'b' must have dtype dtypes.float, got dtypes.long"):
        runner({"a": a, "b": np.zeros((2, 3), np.int64)})
    with pytest.raises(OnnxError, match=r"input 'b' must have shape \(2, 3\), got \(3, 2\)"):
        runner({"a": a, "b": np.zeros((3, 2), np.float32)})


def test_truncated_file_is_a_clear_error(cnn, tmp_path):
    raw = open(_export(cnn, torch.randn(1, 3, 8, 8), tmp_path, dynamo=False), "rb").read()
    for cut in (len(raw) // 2, len(raw) - 7, 20):
        path = tmp_path / f"cut_{cut}.onnx"
        path.write_bytes(raw[:cut])
        with pytest.raises(OnnxError, match="not a valid ONNX model"):
            OnnxRunner(str(path))


@pytest.mark.parametrize("content", [b"", b"\x00\x01garbage\xff" * 50, b"hello, this is not a model", b"\x08\x07"])
def test_garbage_file_is_a_clear_error(tmp_path, content):
    path = tmp_path / "garbage.onnx"
    path.write_bytes(content)
    with pytest.raises(OnnxError, match="not a valid ONNX model"):
        OnnxRunner(str(path))


def test_missing_file_and_wrong_type_are_clear_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="ONNX model file not found"):
        OnnxRunner(str(tmp_path / "nope.onnx"))
    with pytest.raises(TypeError, match="path, bytes or onnx.ModelProto"):
        OnnxRunner(42)


def test_a_graph_reading_an_undefined_value_is_a_clear_error():
    model = _tiny_model()
    model.graph.node[0].input[1] = "nowhere"
    with pytest.raises(OnnxError):
        OnnxRunner(model)({"a": np.zeros((2, 3), np.float32), "b": np.zeros((2, 3), np.float32)})


# ---- Tensor fixes the ONNX work needed ----


@pytest.mark.parametrize("source,target", [("PYTHON", "CPU"), ("CPU", "PYTHON")])
def test_copy_of_a_view_moves_only_the_view(source, target):
    """kernelize: a COPY of a shrunk/permuted view of a realized buffer packs the view before moving bytes."""
    data = np.arange(12, dtype=np.int64).reshape(3, 4)
    t = Tensor(data, device=source).realize()
    np.testing.assert_array_equal(t[1:2].to(target).numpy(), data[1:2])
    np.testing.assert_array_equal(t.T.to(target).numpy(), data.T)
    np.testing.assert_array_equal(t[:, ::2].to(target).numpy(), data[:, ::2])


@pytest.mark.parametrize("op", ["max", "min", "sum", "mean"])
def test_bfloat16_reductions_accumulate_in_float(op):
    """renderer: a bfloat16 accumulator was C's unsigned short, so max compared bit patterns and sums added them."""
    x = torch.linspace(-7, 3, 2 * 300).reshape(2, 300).bfloat16()
    got = getattr(Tensor(x.float().numpy()).cast(dtypes.bfloat16), op)(-1).float().numpy()
    want = getattr(x, op)(-1)
    np.testing.assert_allclose(got, (want.values if op in ("max", "min") else want).float().numpy(), rtol=2**-7)


@pytest.mark.parametrize("shape", [(1, 1), (2, 2), (3, 5, 5), (6, 6)])
def test_det_matches_numpy_with_pivoting_and_singular_matrices(shape):
    """Det pivots by tensor ops alone: random matrices, a permutation (needs a swap) and a singular one."""
    a = np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32)
    swap = np.eye(shape[-1], dtype=np.float32)[::-1].copy()
    singular = np.ones(shape[-2:], np.float32)
    for m in (a, swap, singular):
        y = OnnxRunner(_tiny_model("Det", inputs=("a",), shape=m.shape))({"a": m})["y"]
        np.testing.assert_allclose(y.numpy(), np.linalg.det(m), rtol=1e-4, atol=1e-5)


def test_lstm_over_a_long_sequence_matches_torch(tmp_path):
    """40 steps: each step's state is a buffer of its own, so the graph grows linearly with the sequence."""
    torch.manual_seed(3)
    lstm = nn.LSTM(4, 6, batch_first=True).eval()
    x = torch.randn(2, 40, 4)
    runner = OnnxRunner(_export(lstm, x, tmp_path, dynamo=False))
    got = runner({runner.input_names[0]: x.numpy()})[runner.output_names[0]].numpy()
    np.testing.assert_allclose(got, lstm(x)[0].detach().numpy(), rtol=1e-4, atol=1e-5)
