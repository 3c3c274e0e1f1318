"""Model behaviour that needs no reference implementation: padding, packing,
scanned layers, remat, bf16, presets and config files."""

import json

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bert_jax.models import layer_layout
from bert_jax.models.config import BertConfig, ConfigError
from bert_jax.models.encoder import BertModel
from bert_jax.models.heads import (
    BertForMultipleChoice,
    BertForPreTraining,
    BertForQuestionAnswering,
    BertForSequenceClassification,
    BertForTokenClassification,
)
from bert_jax.models.presets import PRESETS, preset
from bert_jax.weights.config_json import read_config_file, to_google_dict, to_hf_dict

CONFIG = BertConfig(vocab_size=120, hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
                    intermediate_size=64, max_position_embeddings=64,
                    initializer_range=0.3)  # large weights so that differences show


def init(model, *args):
    return nn.unbox(model.init(jax.random.key(0), *args)["params"])


def shapes(model, *args):
    """`init`'s parameter shapes, traced without computing (or compiling) anything."""
    return nn.unbox(jax.eval_shape(model.init, jax.random.key(0), *args)["params"])


@pytest.fixture(scope="module")
def encoder_params():
    """BertModel(CONFIG)'s parameters (the same whatever the inputs' shape), initialised
    once: an initialisation costs seconds of CPU, as much as the test that needs it."""
    return init(BertModel(CONFIG), random_ids((2, 10)))


def random_ids(shape, seed=0):
    return np.random.default_rng(seed).integers(1, CONFIG.vocab_size, shape).astype(np.int32)


def test_real_token_outputs_do_not_depend_on_padding(encoder_params):
    ids = random_ids((2, 10))
    mask = np.array([[1] * 10, [1] * 6 + [0] * 4], np.int32)
    model = BertModel(CONFIG)
    params = encoder_params
    short = model.apply({"params": params}, ids, mask)
    pad = lambda x: np.pad(x, ((0, 0), (0, 30)))
    long = model.apply({"params": params}, pad(ids * mask), pad(mask))
    for row, n in enumerate((10, 6)):
        np.testing.assert_allclose(long.sequence_output[row, :n], short.sequence_output[row, :n],
                                   atol=1e-5)
    np.testing.assert_allclose(long.pooled_output, short.pooled_output, atol=1e-5)


def test_packed_examples_do_not_attend_to_each_other(encoder_params):
    a, b = random_ids((1, 7), 1), random_ids((1, 5), 2)
    model = BertModel(CONFIG)
    params = encoder_params
    alone = [model.apply({"params": params}, x).sequence_output[0] for x in (a, b)]
    packed = np.concatenate([a, b, np.zeros((1, 4), np.int32)], axis=1)
    example_ids = np.array([[1] * 7 + [2] * 5 + [0] * 4], np.int32)
    positions = np.array([list(range(7)) + list(range(5)) + [0] * 4], np.int32)
    out = model.apply({"params": params}, packed, (example_ids > 0).astype(np.int32),
                      position_ids=positions, example_ids=example_ids).sequence_output[0]
    np.testing.assert_allclose(out[:7], alone[0], atol=1e-5)
    np.testing.assert_allclose(out[7:12], alone[1], atol=1e-5)


def test_scanned_and_unrolled_encoders_agree_and_convert():
    ids = random_ids((2, 9))
    unrolled = BertForPreTraining(CONFIG)
    scanned = BertForPreTraining(CONFIG.replace(scan_layers=True))
    params = init(unrolled, ids)
    scanned_params = layer_layout.to_scanned(params)
    assert jax.tree.map(jnp.shape, scanned_params) == jax.tree.map(jnp.shape,
                                                                    shapes(scanned, ids))
    a = unrolled.apply({"params": params}, ids)
    b = scanned.apply({"params": scanned_params}, ids)
    np.testing.assert_allclose(a.mlm_logits, b.mlm_logits, atol=1e-5)
    np.testing.assert_allclose(a.nsp_logits, b.nsp_logits, atol=1e-5)
    back = layer_layout.to_unscanned(scanned_params)
    assert jax.tree.all(jax.tree.map(np.array_equal, back, params))


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["full", "dots", "dots_with_no_batch_dims"])
def test_remat_gives_the_same_gradients(policy):
    ids = random_ids((2, 8))
    # A random projection: sum(x**2) of a LayerNorm output has a near-zero gradient.
    weights = np.random.default_rng(1).normal(size=(2, 8, CONFIG.hidden_size))
    params = init(BertModel(CONFIG), ids)

    def grads(config, p):
        loss = lambda q: jnp.sum(BertModel(config).apply({"params": q}, ids).sequence_output
                                 * weights)
        return jax.grad(loss)(p)

    for scan in (False, True):
        p = layer_layout.match_layout(params, scan)
        expected = grads(CONFIG.replace(scan_layers=scan), p)
        got = grads(CONFIG.replace(scan_layers=scan, remat_policy=policy), p)
        jax.tree.map(lambda x, y: np.testing.assert_allclose(x, y, rtol=1e-4, atol=1e-4),
                     got, expected)


def test_dropout_only_when_not_deterministic(encoder_params):
    ids = random_ids((2, 8))
    model = BertModel(CONFIG)
    params = encoder_params
    run = lambda det, seed: model.apply({"params": params}, ids, deterministic=det,
                                        rngs={"dropout": jax.random.key(seed)}).sequence_output
    np.testing.assert_array_equal(run(True, 0), run(True, 1))
    assert not np.allclose(run(False, 0), run(False, 1))


@pytest.mark.long
def test_bfloat16_compute_keeps_float32_params():
    """bf16 compute against fp32 on the same (large, CONFIG's) weights with padded rows:
    the error on real tokens' logits is measured against the logits' spread (bf16 gives
    ~1% RMS, 5% at worst). Letting padding be attended in bf16 gives ~50% RMS and fails;
    with BERT's 0.02 init (logits ~0.1) the same break stayed under the old atol=0.05."""
    ids = random_ids((3, 16))
    mask = (np.arange(16)[None] < np.array([16, 9, 4])[:, None]).astype(np.int32)
    ids = ids * mask
    model = BertForPreTraining(CONFIG.replace(dtype="bfloat16"))
    params = init(model, ids)
    assert {x.dtype for x in jax.tree.leaves(params)} == {np.dtype("float32")}
    out = model.apply({"params": params}, ids, mask)
    assert out.encoder.sequence_output.dtype == jnp.bfloat16
    ref = BertForPreTraining(CONFIG).apply({"params": params}, ids, mask)
    real = mask.astype(bool)
    want = np.asarray(ref.mlm_logits)[real]
    error = np.asarray(out.mlm_logits.astype(np.float32))[real] - want
    scale = want.std()
    assert scale > 0.5  # logits of order one, so the relative bounds mean something
    assert np.sqrt(np.mean(error ** 2)) < 0.03 * scale
    assert np.abs(error).max() < 0.15 * scale


def test_task_heads_shapes_and_encoder_subtree():
    # Shapes only: traced (jax.eval_shape), as the model would be, with nothing computed.
    ids = random_ids((3, 8))
    apply = lambda model, params, x: jax.eval_shape(model.apply, {"params": params}, x)
    cases = [
        (BertForSequenceClassification(CONFIG, 5), (3, 5)),
        (BertForTokenClassification(CONFIG, 7), (3, 8, 7)),
    ]
    for model, shape in cases:
        params = shapes(model, ids)
        assert "bert" in params and "classifier" in params
        assert apply(model, params, ids).shape == shape
    qa = BertForQuestionAnswering(CONFIG)
    start, end = apply(qa, shapes(qa, ids), ids)
    assert start.shape == end.shape == (3, 8)
    mc = BertForMultipleChoice(CONFIG)
    choices = random_ids((2, 4, 8))
    assert apply(mc, shapes(mc, choices), choices).shape == (2, 4)


def test_mean_pooling_classifier_reads_the_mean_of_real_tokens():
    model = BertForSequenceClassification(CONFIG, 2, pooling="mean")
    ids = jnp.array([[2, 5, 6, 7, 3, 0, 0], [2, 9, 3, 11, 12, 3, 0]], jnp.int32)
    mask = (ids != 0).astype(jnp.int32)
    segments = jnp.array([[0] * 7, [0, 0, 0, 1, 1, 1, 0]], jnp.int32)
    params = init(model, ids, mask, segments)
    assert "pooler" not in params["bert"]
    logits = model.apply({"params": params}, ids, mask, segments)
    states = BertModel(CONFIG, add_pooling_layer=False).apply(
        {"params": params["bert"]}, ids, mask, segments).sequence_output
    means = np.stack([np.asarray(states[i])[np.asarray(mask[i]) == 1].mean(0) for i in (0, 1)])
    kernel, bias = params["classifier"]["kernel"], params["classifier"]["bias"]
    np.testing.assert_allclose(logits, means @ kernel + bias, atol=1e-5)


POOLED_IDS = random_ids((3, 10))
POOLED_MASK = (np.arange(10)[None] < np.array([10, 7, 4])[:, None]).astype(np.int32)
POOLED_SEGMENTS = (np.arange(10)[None] >= 3).astype(np.int32) * POOLED_MASK
POOLED_CASES = [
    (BertForSequenceClassification, {"num_labels": 3}, (POOLED_IDS, POOLED_MASK, POOLED_SEGMENTS)),
    (BertForMultipleChoice, {}, (POOLED_IDS[None], POOLED_MASK[None], POOLED_SEGMENTS[None]))]


@pytest.fixture(scope="module")
def head_params():
    """Each pooled-only case's head parameters (attention_impl changes none of them),
    initialised once for both attention implementations."""
    return [init(head(CONFIG, **kwargs), *inputs) for head, kwargs, inputs in POOLED_CASES]


@pytest.mark.long
@pytest.mark.parametrize("attention_impl", ["einsum", "fused"])
def test_pooled_only_last_layer_gives_the_full_models_logits_and_gradients(
        attention_impl, head_params, encoder_params):
    """The classifier's last layer computes [CLS] alone: same logits and gradients as
    every position, with padding and with packed rows' masks; multiple choice too."""
    config = CONFIG.replace(attention_impl=attention_impl)
    ids, mask = POOLED_IDS, POOLED_MASK
    for (head, kwargs, inputs), params in zip(POOLED_CASES, head_params):

        def loss_and_grads(every_position):
            model = head(config, every_position=every_position, **kwargs)
            loss = lambda p: jnp.sum(jnp.sin(model.apply({"params": p}, *inputs)))
            # jitted: op-by-op differentiation of the whole model costs several times more
            return jax.jit(jax.value_and_grad(loss))(params)

        (fast, fast_grads), (full, full_grads) = loss_and_grads(False), loss_and_grads(True)
        np.testing.assert_allclose(fast, full, rtol=1e-5)
        jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-5, rtol=1e-4),
                     fast_grads, full_grads)
    # The last layer does run on one position, and a packed row's mask is cut to [CLS]'s row.
    model = BertModel(config, pooled_only=True)
    params = encoder_params
    out = model.apply({"params": params}, ids, mask)
    assert out.sequence_output.shape == (3, 1, CONFIG.hidden_size)
    example_ids = np.array([[1] * 6 + [2] * 4] * 3, np.int32)
    full, fast = (BertModel(CONFIG, pooled_only=p).apply(
        {"params": params}, ids, example_ids=example_ids).pooled_output for p in (False, True))
    np.testing.assert_allclose(fast, full, atol=1e-5)


def test_initialisation_follows_bert():
    params = init(BertForPreTraining(CONFIG.replace(initializer_range=0.02)), random_ids((1, 4)))
    kernel = params["bert"]["encoder"]["layer_0"]["intermediate"]["kernel"]
    assert abs(float(np.std(kernel)) - 0.0176) < 0.002  # 0.02 truncated at 2 sigma
    assert np.max(np.abs(kernel)) <= 0.04 + 1e-6
    assert not np.any(params["bert"]["encoder"]["layer_0"]["intermediate"]["bias"])
    np.testing.assert_array_equal(params["bert"]["embeddings"]["layer_norm"]["scale"], 1.0)
    assert not np.any(params["mlm"]["output_bias"])


def test_presets():
    small = [name for name in PRESETS if name.startswith("bert-L")]
    assert len(small) == 24
    mini = preset("bert-L4-H256")
    assert (mini.num_hidden_layers, mini.hidden_size, mini.num_attention_heads,
            mini.intermediate_size) == (4, 256, 4, 1024)
    large = preset("bert-large")
    assert (large.num_hidden_layers, large.hidden_size, large.vocab_size) == (24, 1024, 30522)
    with pytest.raises(ConfigError, match="bert-L4-H256"):
        preset("bert-L4-H255")


def test_config_files_round_trip(tmp_path):
    config = preset("bert-L2-H128", hidden_dropout_prob=0.2)
    google = tmp_path / "bert_config.json"
    google.write_text(json.dumps(to_google_dict(config)))
    assert read_config_file(google) == config
    hf = tmp_path / "config.json"
    hf.write_text(json.dumps(to_hf_dict(config)))
    assert read_config_file(hf) == config
    ours = tmp_path / "ours.json"
    ours.write_text(json.dumps(config.replace(dtype="bfloat16", scan_layers=True).to_dict()))
    assert read_config_file(ours) == config.replace(dtype="bfloat16", scan_layers=True)


@pytest.mark.parametrize("change, message", [
    ({"hidden_size": "768"}, "hidden_size"),
    ({"num_attention_heads": 5}, "multiple of num_attention_heads"),
    ({"hidden_act": "mish"}, "hidden_act"),
    ({"vocab_size": None}, "vocab_size"),
])
def test_malformed_config_names_the_field(tmp_path, change, message):
    values = {**to_hf_dict(preset("bert-base")), **change}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(values))
    with pytest.raises(ConfigError, match=message):
        read_config_file(path)


def test_missing_field_and_bad_json(tmp_path):
    values = to_google_dict(preset("bert-base"))
    del values["intermediate_size"]
    path = tmp_path / "bert_config.json"
    path.write_text(json.dumps(values))
    with pytest.raises(ConfigError, match="intermediate_size"):
        read_config_file(path)
    path.write_text("{not json")
    with pytest.raises(ConfigError, match="not valid JSON"):
        read_config_file(path)
