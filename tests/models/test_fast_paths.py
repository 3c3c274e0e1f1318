"""The accelerator fast paths, checked on CPU: gather-free position and token-type
embeddings, fused vs einsum attention, the dropout RNG implementation, the
compilation cache setting and the fast pretraining variants."""

import os
import shutil
import subprocess
import sys

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bert_jax.host import compile_cache
from bert_jax.models.config import BertConfig, ConfigError
from bert_jax.models.encoder import BertModel
from bert_jax.models.heads import BertForPreTraining
from bert_jax.models.losses import pretraining_loss
from bert_jax.pretrain import job
from bert_jax.pretrain import steps as pretrain_steps
from bert_jax.train import sharding
from bert_jax.train.config_loader import load_config
from bert_jax.train.model_config import run_bert_config
from bert_jax.train.optim import make_optimizer
from bert_jax.train.train_state import StatePlan, make_key
from bert_jax.weights import pretrained

from helpers import REPO

CONFIG = BertConfig(vocab_size=120, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                    intermediate_size=64, max_position_embeddings=64, initializer_range=0.3,
                    attention_probs_dropout_prob=0.0)
FUSED = CONFIG.replace(attention_impl="fused")


def random_ids(shape, seed=0):
    return np.random.default_rng(seed).integers(1, CONFIG.vocab_size, shape).astype(np.int32)


def padded_batch():
    ids = random_ids((3, 12))
    mask = np.array([[1] * 12, [1] * 7 + [0] * 5, [1] * 3 + [0] * 9], np.int32)
    segments = np.array([[0] * 6 + [1] * 6, [0] * 4 + [1] * 3 + [0] * 5, [0] * 12], np.int32)
    return dict(input_ids=ids * mask, input_mask=mask, segment_ids=segments)


def packed_batch():
    example_ids = np.array([[1] * 5 + [2] * 4 + [3] * 2 + [0], [1] * 9 + [0] * 3], np.int32)
    positions = np.array([list(range(5)) + list(range(4)) + [0, 1, 0], list(range(9)) + [0] * 3],
                         np.int32)
    mask = (example_ids > 0).astype(np.int32)
    return dict(input_ids=random_ids((2, 12), 1) * mask, input_mask=mask,
                segment_ids=np.zeros((2, 12), np.int32), position_ids=positions,
                example_ids=example_ids)


@pytest.fixture(scope="module")
def params():
    """BertModel(CONFIG)'s parameters (FUSED's too: attention_impl changes none), initialised
    once: an initialisation costs seconds of CPU, as much as most tests here."""
    return nn.unbox(BertModel(CONFIG).init(jax.random.key(0), padded_batch()["input_ids"])
                    ["params"])


def outputs_and_grads(config, batch, params):
    model = BertModel(config)
    weights = np.random.default_rng(3).normal(size=(12, config.hidden_size)).astype(np.float32)

    def loss(params):
        out = model.apply({"params": params}, **batch)
        real = batch["input_mask"][..., None]
        return jnp.sum(out.sequence_output * weights * real) + jnp.sum(out.pooled_output), out

    # jitted: op-by-op differentiation of the whole model costs several times more
    (_, out), grads = jax.jit(jax.value_and_grad(loss, has_aux=True))(params)
    return out, grads


@pytest.mark.parametrize("make_batch", [padded_batch,
                                        pytest.param(packed_batch, marks=pytest.mark.slow)])
def test_fused_and_einsum_attention_agree_in_outputs_and_gradients(make_batch, params):
    batch = make_batch()
    einsum_out, einsum_grads = outputs_and_grads(CONFIG, batch, params)
    fused_out, fused_grads = outputs_and_grads(FUSED, batch, params)
    real = batch["input_mask"][..., None].astype(bool)
    np.testing.assert_allclose(np.where(real, fused_out.sequence_output, 0),
                               np.where(real, einsum_out.sequence_output, 0), atol=2e-5)
    np.testing.assert_allclose(fused_out.pooled_output, einsum_out.pooled_output, atol=2e-5)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4),
                 fused_grads, einsum_grads)


def test_fused_attention_gets_lengths_for_padded_rows_and_a_mask_for_packed_ones(monkeypatch,
                                                                                   params):
    calls = []
    original = jax.nn.dot_product_attention

    def spy(*args, **kwargs):
        calls.append(kwargs)
        return original(*args, **kwargs)

    monkeypatch.setattr(jax.nn, "dot_product_attention", spy)
    padded = padded_batch()
    BertModel(FUSED).apply({"params": params}, **padded)
    # Lengths, no dense mask: the form cuDNN takes (it rejects a [B, 1, 1, L] mask).
    assert calls[-1]["mask"] is None
    np.testing.assert_array_equal(calls[-1]["key_value_seq_lengths"], [12, 7, 3])
    assert calls[-1]["implementation"] == "xla"  # cuDNN only on GPU
    BertModel(FUSED).apply({"params": params}, **packed_batch())
    assert calls[-1]["key_value_seq_lengths"] is None
    assert calls[-1]["mask"].shape == (2, 1, 12, 12)


def test_fused_training_needs_no_attention_dropout(params):
    batch = padded_batch()
    with_dropout = FUSED.replace(attention_probs_dropout_prob=0.1)
    model = BertModel(with_dropout)
    model.apply({"params": params}, **batch)  # inference is fine
    with pytest.raises(ConfigError, match="attention_impl.*attention_probs_dropout_prob"):
        model.apply({"params": params}, **batch, deterministic=False,
                    rngs={"dropout": jax.random.key(1)})
    out = BertModel(FUSED).apply({"params": params}, **batch, deterministic=False,
                                 rngs={"dropout": jax.random.key(1)})
    assert np.isfinite(out.sequence_output).all()


def test_output_attentions_with_fused_returns_the_einsum_probabilities(params):
    batch = padded_batch()
    probs = [BertModel(c, output_attentions=True).apply({"params": params}, **batch).attentions
             for c in (CONFIG, FUSED)]
    assert len(probs[1]) == CONFIG.num_hidden_layers
    jax.tree.map(np.testing.assert_array_equal, probs[1], probs[0])


def _scatter_count(params, position_ids):
    """Scatter-adds in the gradient of the embeddings (one per gathered table)."""
    batch = padded_batch()
    model = BertModel(CONFIG)
    loss = lambda p: jnp.sum(model.apply({"params": p}, **batch,
                                         position_ids=position_ids).sequence_output)
    return str(jax.make_jaxpr(jax.grad(loss))(params)).count("scatter-add")


def test_only_the_word_embeddings_are_gathered(params):
    # Position and token-type gradients are matmuls/sums, not scatters onto a few rows.
    assert _scatter_count(params, None) == 1
    assert _scatter_count(params, np.tile(np.arange(12, dtype=np.int32), (3, 1))) == 1


def test_the_pretraining_gradient_scatters_only_onto_the_word_embeddings():
    # The masked-position gather and the MLM/NSP label picks are one-hot products: their
    # gradients would otherwise be scatters over [B, L, H] and [B, P, V] (issue 30's GPU
    # figures: +5% seq/s on bert-base, H200).
    model = BertForPreTraining(CONFIG)
    batch = padded_batch()
    positions = np.array([[1, 2, 0], [3, 1, 0], [2, 4, 5]], np.int32)
    inputs = (batch["input_ids"], batch["input_mask"], batch["segment_ids"], positions)
    params = jax.eval_shape(model.init, jax.random.key(0), *inputs)["params"]  # traced only
    labels = {"masked_lm_ids": np.array([[5, 6, 0], [7, 8, 0], [9, 10, 11]], np.int32),
              "masked_lm_weights": np.array([[1, 1, 0], [1, 1, 0], [1, 1, 1]], np.float32),
              "next_sentence_labels": np.array([0, 1, 0], np.int32)}

    def loss(p):
        out = model.apply({"params": p}, *inputs)
        terms = pretraining_loss(out.mlm_logits, out.nsp_logits, labels)
        return terms["mlm_loss"][0] + terms["nsp_loss"][0]
    assert str(jax.make_jaxpr(jax.grad(loss))(params)).count("scatter-add") == 1


def test_explicit_position_ids_equal_the_default_positions(params):
    batch = padded_batch()
    model = BertModel(CONFIG)
    default = model.apply({"params": params}, **batch).sequence_output
    explicit = model.apply({"params": params}, **batch,
                           position_ids=np.tile(np.arange(12, dtype=np.int32), (3, 1)))
    np.testing.assert_array_equal(explicit.sequence_output, default)


# --- dropout RNG implementation ----------------------------------------------------------

@pytest.mark.long
def test_rng_impl_sets_the_dropout_key_but_not_the_initial_weights():
    model = BertModel(CONFIG.replace(num_hidden_layers=1))  # one layer: three inits compiled
    init_fn = lambda key: model.init(key, jnp.zeros((1, 8), jnp.int32))["params"]
    tx, _ = make_optimizer(learning_rate=1e-3, num_train_steps=10, warmup_steps=1)
    partitioner = sharding.Partitioner(sharding.make_mesh({"data": -1}))
    states = {impl: StatePlan.build(init_fn, tx, partitioner, impl).create(3)
              for impl in ("threefry", "rbg", "unsafe_rbg")}
    assert states["threefry"].rng.shape == (2,) and states["rbg"].rng.shape == (4,)
    for impl, state in states.items():
        assert state.rng_impl == impl
        assert str(jax.random.key_impl(state.step_rng())) == str(
            jax.random.key_impl(make_key(0, impl)))
        jax.tree.map(np.testing.assert_array_equal, state.params, states["threefry"].params)
    # threefry keeps the stream runs had before rng_impl existed.
    legacy = jax.random.fold_in(jax.random.fold_in(jax.random.key(3), 1), 0)
    np.testing.assert_array_equal(jax.random.key_data(states["threefry"].step_rng()),
                                  jax.random.key_data(legacy))
    with pytest.raises(ValueError, match="rng_impl must be one of"):
        make_key(0, "philox")


SMALL_MODEL = ("{'preset': 'tiny', 'num_hidden_layers': 1, 'hidden_size': 32, "
               "'num_attention_heads': 2, 'intermediate_size': 64, "
               "'max_position_embeddings': 64}")


def small_pretrain_config(variant, input_files, **overrides):
    values = dict(model=SMALL_MODEL, input_files=repr(input_files), max_seq_length=32,
                  max_predictions_per_seq=5, global_batch_size=8, num_train_steps=4,
                  warmup_steps=1, log_every_steps=2, eval_every_steps=0,
                  checkpoint_every_steps=2, eval_fraction=0.1, mesh_shape="{'data': -1}")
    values.update(overrides)
    return load_config(os.path.join(REPO, "configs", "pretrain.py") + ":" + variant,
                       [f"{k}={v}" for k, v in values.items()])


@pytest.fixture(scope="module")
def text_corpus(tmp_path_factory):
    import glob
    import gzip

    from bert_jax.data import corpus
    directory = tmp_path_factory.mktemp("corpus")
    with gzip.open(sorted(glob.glob(corpus.DEFAULT_CORPUS))[0], "rt", encoding="utf-8") as f:
        (directory / "part.txt").write_text("".join(next(f) for _ in range(300)))
    return str(directory / "*.txt")


@pytest.mark.slow
def test_pretraining_with_rbg_dropout_resumes_exactly(tmp_path, text_corpus):
    config = lambda: small_pretrain_config("tiny", text_corpus, rng_impl="rbg")
    straight, resumed = str(tmp_path / "straight"), str(tmp_path / "resumed")
    job.train_and_evaluate(config(), straight)
    job.train_and_evaluate(config(), resumed)
    shutil.rmtree(os.path.join(resumed, "checkpoints", "4"))
    job.train_and_evaluate(config(), resumed)  # resumes at step 2
    final = lambda w: pretrained.load_pretrained_from_workdir(w).params
    jax.tree.map(np.testing.assert_array_equal, final(resumed), final(straight))
    # and rbg did draw other dropout masks than threefry would have
    threefry = str(tmp_path / "threefry")
    job.train_and_evaluate(small_pretrain_config("tiny", text_corpus), threefry)
    assert not all(np.array_equal(a, b) for a, b in zip(
        jax.tree.leaves(final(threefry)), jax.tree.leaves(final(straight))))


# --- fast pretraining variants -------------------------------------------------------------

@pytest.mark.long
@pytest.mark.parametrize("variant", ["gpu_base"] + [
    pytest.param(v, marks=pytest.mark.slow)
    for v in ("gpu_large", "gpu_large_512", "tpu_base", "tpu_large", "gpu_large,faithful")])
def test_fast_variants_load_and_run_a_step_when_shrunk(variant):
    config = load_config(os.path.join(REPO, "configs", "pretrain.py") + ":" + variant,
                         [f"model={SMALL_MODEL}", "global_batch_size=8"])
    faithful = variant.endswith("faithful")
    assert config.compute_dtype == "bfloat16"
    assert (config.attention_impl, config.rng_impl) == (
        ("einsum", "threefry") if faithful else ("fused", "unsafe_rbg"))
    bert_config = run_bert_config(config, config.model, 100)
    assert bert_config.attention_probs_dropout_prob == (0.1 if faithful else 0.0)
    length, predictions = min(config.max_seq_length, 64), min(config.max_predictions_per_seq, 20)
    partitioner = sharding.Partitioner.from_config(config)
    model = BertForPreTraining(bert_config)
    tx, _ = make_optimizer(learning_rate=1e-3, num_train_steps=10, warmup_steps=1,
                           optimizer=config.optimizer)
    init_fn = lambda key: model.init(
        key, *pretrain_steps.dummy_inputs(1, length, predictions))["params"]
    plan = StatePlan.build(init_fn, tx, partitioner, config.rng_impl)
    state = plan.create(0)
    step, _ = pretrain_steps.jit_steps(pretrain_steps.BertPretraining(model, partitioner.rules),
                                       tx, partitioner, plan.shardings)
    rng = np.random.default_rng(0)
    batch = {"input_ids": rng.integers(1, 100, (8, length)).astype(np.int32),
             "input_mask": np.ones((8, length), np.int32),
             "segment_ids": np.zeros((8, length), np.int32),
             "masked_lm_positions": np.tile(np.arange(predictions, dtype=np.int32), (8, 1)),
             "masked_lm_ids": rng.integers(1, 100, (8, predictions)).astype(np.int32),
             "masked_lm_weights": np.ones((8, predictions), np.float32),
             "next_sentence_labels": np.zeros(8, np.int32)}
    with jax.set_mesh(partitioner.mesh):
        state, metrics = step(state, partitioner.global_batch(batch))
    assert np.isfinite(float(metrics["loss"])) and int(state.step) == 1


def test_fused_attention_with_attention_dropout_is_refused_before_training():
    config = load_config(os.path.join(REPO, "configs", "pretrain.py") + ":gpu_base",
                         [f"model={SMALL_MODEL}", "attention_probs_dropout_prob=0.1"])
    with pytest.raises(ConfigError, match="attention_probs_dropout_prob=0.1"):
        run_bert_config(config, config.model, 100)


def test_finetune_passes_attention_impl_to_the_model():
    from bert_jax.finetune.model_source import resolve_model
    config = load_config(os.path.join(REPO, "configs", "finetune.py"),
                         ["model=tiny", "attention_impl=fused",
                          "attention_probs_dropout_prob=0.0"])
    assert resolve_model(config).config.attention_impl == "fused"
    default = load_config(os.path.join(REPO, "configs", "finetune.py"), ["model=tiny"])
    assert resolve_model(default).config.attention_impl == "einsum"


# --- compilation cache and imports ----------------------------------------------------------

def test_compilation_cache_directory_defaults_and_overrides(tmp_path):
    env = {"HOME": str(tmp_path)}
    assert compile_cache.configure(env) == str(
        tmp_path / ".cache" / "bert_jax" / "jax_compilation_cache")
    assert env["JAX_COMPILATION_CACHE_DIR"] == compile_cache.configure({"HOME": str(tmp_path)})
    assert compile_cache.configure({"BERT_JAX_CACHE_DIR": "/x/cache"}) == \
        "/x/cache/jax_compilation_cache"
    off = {"BERT_JAX_CACHE_DIR": "/x", "BERT_JAX_COMPILATION_CACHE": "off"}
    assert compile_cache.configure(off) is None and "JAX_COMPILATION_CACHE_DIR" not in off
    assert compile_cache.configure({"JAX_COMPILATION_CACHE_DIR": "/jax",
                                    "BERT_JAX_CACHE_DIR": "/x"}) == "/jax"


def test_train_step_and_bench_imports_need_no_tensorflow():
    # GPU machines often have no tensorflow: the step, model and bench must not import it.
    code = ("import sys; import bench_pretrain; "
            "import bert_jax.pretrain.job, bert_jax.models.heads, bert_jax.train.sharding, "
            "bert_jax.train.optim, "
            "bert_jax.train.perf, bert_jax.cli; "
            "bench_pretrain.jax_model_config; from bert_jax.pretrain.steps import jit_steps; "
            "bad = [m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'tensorboard')]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True,
                   env={**os.environ, "PYTHONPATH": os.pathsep.join(
                       [REPO, os.path.join(REPO, "bench")])})


def test_embed_with_fused_attention_gives_the_einsum_vectors(monkeypatch):
    from bert_jax.serve.embed import embed_texts
    from bert_jax.tokenization import DEFAULT_VOCAB
    from bert_jax.weights import pretrained
    config = CONFIG.replace(vocab_size=8192)
    params = BertModel(config).init(jax.random.key(0), jnp.zeros((1, 8), jnp.int32))["params"]
    model = pretrained.Pretrained(config, {"bert": jax.device_get(nn.unbox(params))}, None,
                                  DEFAULT_VOCAB)
    texts = ["a short one", "a somewhat longer line of text to embed here", "x"]
    einsum = embed_texts(model, texts, pooling="mean", batch_size=2, max_seq_length=32)
    calls = []
    original = jax.nn.dot_product_attention
    monkeypatch.setattr(jax.nn, "dot_product_attention",
                        lambda *a, **k: calls.append(k) or original(*a, **k))
    fused = embed_texts(model, texts, pooling="mean", batch_size=2, max_seq_length=32,
                        attention_impl="fused")
    assert calls  # the fused path was traced
    np.testing.assert_allclose(fused, einsum, atol=1e-5)
