"""bert_jax's encoders as Flax NNX modules (`bert_jax.weights.nnx`): the NNX module computes
what the linen model computes on the same parameters, keeps the parameters' logical axis
names, fine-tunes with `nnx.Optimizer`, and docs/nnx.md's example runs as written."""

from __future__ import annotations

import os
import re

import flax.linen as nn
import jax
import numpy as np
import optax
import pytest
from flax import nnx

from bert_jax.models.config import BertConfig
from bert_jax.models.encoder import BertModel
from bert_jax.models.heads import BertForPreTraining, BertForSequenceClassification
from bert_jax.tokenization import WordPieceTokenizer
from bert_jax.weights import nnx as bert_nnx
from bert_jax.weights import pretrained

from helpers import REPO
from helpers.hub_server import bert_files

# The shape of the guide's model (tests/helpers/hub_server.py's), so that the tests share the
# programs JAX compiles for each operation.
CONFIG = BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                    intermediate_size=32, max_position_embeddings=64)
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(59)]
RNG = np.random.default_rng(0)
IDS = RNG.integers(5, CONFIG.vocab_size, (3, 12))
MASK = (np.arange(12) < np.array([[12], [7], [3]])).astype(np.int32)  # padded rows


def random_params(module) -> dict:
    shapes = nn.unbox(jax.eval_shape(module.init, jax.random.key(0), IDS, MASK))["params"]
    rng = np.random.default_rng(1)
    return jax.tree.map(lambda s: 0.05 * rng.standard_normal(s.shape, np.float32), shapes)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """A pretraining model (encoder with pooler, MLM and NSP heads) on disk."""
    path = tmp_path_factory.mktemp("nnx") / "model"
    pretrained.save(path, CONFIG, random_params(BertForPreTraining(CONFIG)),
                    tokenizer=WordPieceTokenizer(VOCAB))
    return path


def params_of(module) -> dict:
    return nnx.state(module, nnx.Param).to_pure_dict()


@pytest.mark.parametrize("scan_layers", [False, True])
def test_the_encoder_computes_what_the_linen_model_computes(model_dir, scan_layers):
    model = pretrained.load(model_dir)
    model.config = model.config.replace(scan_layers=scan_layers)
    module = bert_nnx.nnx_module(model)
    assert isinstance(module, nnx.Module)
    out = module(IDS, MASK)
    ref = BertModel(CONFIG).apply({"params": model.params["bert"]}, IDS, MASK)
    np.testing.assert_allclose(out.sequence_output, ref.sequence_output, rtol=0, atol=1e-6)
    np.testing.assert_allclose(out.pooled_output, ref.pooled_output, rtol=0, atol=1e-6)
    # The parameters keep their logical axis names, for sharding.
    specs = nnx.get_partition_spec(nnx.state(module, nnx.Param))
    names = specs["embeddings"]["word_embeddings"]["embedding"].get_value()
    assert tuple(names) == ("vocab", "embed")


def test_a_classifier_on_the_pretrained_encoder(model_dir, tmp_path):
    module = bert_nnx.nnx_module(model_dir, num_labels=3, seed=2)
    params = params_of(module)
    saved = pretrained.load(model_dir).params["bert"]
    jax.tree.map(np.testing.assert_array_equal, params["bert"], saved)
    assert params["classifier"]["kernel"].shape == (CONFIG.hidden_size, 3)
    linen = BertForSequenceClassification(CONFIG, 3)
    np.testing.assert_allclose(module(IDS, MASK), linen.apply({"params": params}, IDS, MASK),
                               rtol=0, atol=1e-6)
    # A fine-tuned classifier keeps its head; another label count gets a new one.
    tuned = tmp_path / "tuned"
    pretrained.save(tuned, CONFIG, jax.tree.map(np.asarray, params),
                    tokenizer=WordPieceTokenizer(VOCAB))
    again = params_of(bert_nnx.nnx_module(tuned, num_labels=3, seed=5))
    jax.tree.map(np.testing.assert_array_equal, again, params)
    other = params_of(bert_nnx.nnx_module(tuned, num_labels=2))
    assert other["classifier"]["kernel"].shape == (CONFIG.hidden_size, 2)


@pytest.mark.long
def test_a_few_nnx_optimizer_steps_lower_the_loss(model_dir):
    module = bert_nnx.nnx_module(model_dir, num_labels=2)
    start = params_of(module)
    optimizer = nnx.Optimizer(module, optax.adamw(1e-2), wrt=nnx.Param)
    labels = np.array([0, 1, 1])

    @nnx.jit
    def step(module, optimizer):
        def loss_fn(module):
            # Dropout off: its masks would double the compile time (the guide has it on).
            logits = module(IDS, MASK)
            return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()

        loss, grads = nnx.value_and_grad(loss_fn)(module)
        optimizer.update(module, grads)
        return loss

    losses = [float(step(module, optimizer)) for _ in range(10)]
    assert losses[-1] < losses[0] - 0.03, losses
    assert int(optimizer.step[...]) == 10
    # Every parameter trained, the encoder's as well as the head's, but the key biases, whose
    # gradient is zero (attention's softmax is blind to them).
    still = {jax.tree_util.keystr(path) for path, leaf in jax.tree_util.tree_leaves_with_path(
        jax.tree.map(lambda a, b: np.abs(a - b).max() < 1e-4, params_of(module), start))
        if leaf}
    assert still == {f"['bert']['encoder']['layer_{i}']['attention']['key']['bias']"
                     for i in range(2)}
    # Dropout draws from the module's stream: each training call masks differently.
    first, second = (module(IDS, MASK, deterministic=False) for _ in range(2))
    assert np.abs(first - second).max() > 1e-5


def python_blocks(text: str) -> list[tuple[int, str]]:
    """(line of the opening fence, code) of each ```python block, in order."""
    return [(text.count("\n", 0, m.start()) + 1, m.group(1))
            for m in re.finditer(r"^```python\n(.*?)^```$", text, re.S | re.M)]


@pytest.mark.long
def test_the_guide_runs(tmp_path, monkeypatch, capsys):
    """docs/nnx.md's blocks, in order, in one namespace, offline; the model it reads,
    `make demo`'s runs/demo/pretrain, is a small random BERT converted there."""
    with open(os.path.join(REPO, "docs", "nnx.md"), encoding="utf-8") as f:
        blocks = python_blocks(f.read())
    assert len(blocks) == 2, "docs/nnx.md lost its examples"
    (tmp_path / "hf").mkdir()
    for name, content in bert_files().items():
        (tmp_path / "hf" / name).write_bytes(content)
    pretrained.convert_hf_dir(str(tmp_path / "hf"), str(tmp_path / "runs" / "demo" / "pretrain"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    namespace = {"__name__": "__main__"}
    for line, code in blocks:
        exec(compile(code, f"docs/nnx.md, block at line {line}", "exec"), namespace)
    assert namespace["logits"].shape == (4, 2)
    assert np.all(np.isfinite(namespace["logits"]))
    assert "2 " in capsys.readouterr().out  # the third step's loss was printed
