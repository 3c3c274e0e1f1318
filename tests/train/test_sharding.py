"""Sharding: data-parallel, FSDP, tensor-parallel and mixed meshes on 8 fake CPU devices
train exactly like one device."""

import jax
import numpy as np
import pytest

from bert_jax.models.heads import BertForPreTraining
from bert_jax.models.presets import preset
from bert_jax.pretrain.steps import BertPretraining, dummy_inputs, jit_steps
from bert_jax.train import sharding
from bert_jax.train.optim import make_optimizer
from bert_jax.train.train_state import StatePlan

from helpers.states import BATCH, CONFIG, LENGTH, PREDICTIONS


def synthetic_batches(count, seed=0, batch=BATCH):
    rng = np.random.default_rng(seed)
    for _ in range(count):
        lengths = rng.integers(LENGTH // 2, LENGTH + 1, batch)
        mask = (np.arange(LENGTH)[None] < lengths[:, None]).astype(np.int32)
        yield {
            "input_ids": (rng.integers(5, CONFIG.vocab_size, (batch, LENGTH)) * mask).astype(
                np.int32),
            "input_mask": mask,
            "segment_ids": (np.arange(LENGTH)[None] >= lengths[:, None] // 2).astype(
                np.int32) * mask,
            "masked_lm_positions": rng.integers(
                1, LENGTH // 2, (batch, PREDICTIONS)).astype(np.int32),
            "masked_lm_ids": rng.integers(
                5, CONFIG.vocab_size, (batch, PREDICTIONS)).astype(np.int32),
            "masked_lm_weights": (rng.random((batch, PREDICTIONS)) < 0.8).astype(np.float32),
            "next_sentence_labels": rng.integers(0, 2, batch).astype(np.int32),
        }


def run(mesh_shape, steps=3, devices=None, config=CONFIG, grad_accum_steps=1):
    partitioner = sharding.Partitioner(sharding.make_mesh(mesh_shape, devices=devices))
    model = BertForPreTraining(config)
    tx, _ = make_optimizer(learning_rate=1e-3, num_train_steps=10, warmup_steps=1)
    init_fn = lambda key: model.init(key, *dummy_inputs(2, LENGTH, PREDICTIONS))["params"]
    plan = StatePlan.build(init_fn, tx, partitioner)
    state = plan.create(0)
    train, _ = jit_steps(BertPretraining(model, partitioner.rules), tx, partitioner,
                         plan.shardings, grad_accum_steps)
    losses = []
    with jax.set_mesh(partitioner.mesh):
        for batch in synthetic_batches(steps):
            state, metrics = train(state, partitioner.global_batch(batch))
            losses.append(float(metrics["loss"]))
    return losses, jax.device_get(state.params), state


@pytest.fixture(scope="module")
def single_device():
    return run({"data": 1}, devices=jax.devices()[:1])


@pytest.mark.long
@pytest.mark.parametrize("mesh_shape", [
    pytest.param({"data": 8}, marks=pytest.mark.slow),
    pytest.param({"fsdp": 8}, marks=pytest.mark.slow),
    pytest.param({"tensor": 8}, marks=pytest.mark.slow),
    {"data": 2, "fsdp": 2, "tensor": 2}],
    ids=["data", "fsdp", "tensor", "mixed"])
def test_meshes_match_single_device(mesh_shape, single_device):
    losses, params, _ = run(mesh_shape)
    ref_losses, ref_params, _ = single_device
    np.testing.assert_allclose(losses, ref_losses, atol=1e-5, rtol=1e-5)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-5, rtol=1e-5),
                 params, ref_params)


def test_parameters_are_sharded_as_the_rules_say():
    _, _, state = run({"data": 2, "fsdp": 2, "tensor": 2}, steps=0)
    embedding = state.params["bert"]["embeddings"]["word_embeddings"]["embedding"]
    assert embedding.sharding.spec == jax.sharding.PartitionSpec("tensor", "fsdp")
    mu = state.opt_state[1][0].mu["bert"]["embeddings"]["word_embeddings"]["embedding"]
    assert mu.sharding.spec == embedding.sharding.spec
    # FSDP: each device holds 1/4 of the table (split over fsdp x tensor).
    assert embedding.addressable_shards[0].data.shape == (64, 16)


def test_make_mesh_fills_the_rest_and_validates():
    mesh = sharding.make_mesh({"data": -1, "tensor": 2})
    assert dict(mesh.shape) == {"data": 4, "fsdp": 1, "tensor": 2}
    assert mesh.axis_types == (jax.sharding.AxisType.Auto,) * 3
    with pytest.raises(ValueError, match="needs 6 devices"):
        sharding.make_mesh({"data": 3, "tensor": 2})
    with pytest.raises(ValueError, match="unknown axes"):
        sharding.make_mesh({"model": 8})


def test_indivisible_sharding_names_the_parameter():
    config = preset("tiny", vocab_size=250)  # 250 rows cannot split over tensor=4
    model = BertForPreTraining(config)
    tx, _ = make_optimizer(learning_rate=1e-3, num_train_steps=10, warmup_steps=1)
    init_fn = lambda key: model.init(key, *dummy_inputs(2, LENGTH, PREDICTIONS))["params"]
    with pytest.raises(ValueError, match="word_embeddings.*250"):
        StatePlan.build(init_fn, tx,
                        sharding.Partitioner(sharding.make_mesh({"tensor": 4, "data": 2})))


def test_global_batch_is_split_over_data_and_fsdp():
    partitioner = sharding.Partitioner(sharding.make_mesh({"data": 2, "fsdp": 2, "tensor": 2}))
    batch = partitioner.global_batch({"x": np.arange(16).reshape(8, 2)})
    assert batch["x"].shape == (8, 2)
    assert batch["x"].addressable_shards[0].data.shape == (2, 2)
    assert partitioner.batch_shards == 4


ALBERT = CONFIG.replace(model_type="albert", embedding_size=16, num_hidden_layers=2,
                        scan_layers=True)


@pytest.mark.slow
def test_albert_shares_its_layer_and_trains_on_a_mixed_mesh_like_one_device():
    """ALBERT's factorized embeddings and one shared layer, scanned, under the default rules:
    the E-wide tables are split over the vocabulary only, the projection over fsdp."""
    ref_losses, ref_params, _ = run({"data": 1}, devices=jax.devices()[:1], config=ALBERT)
    losses, params, state = run({"data": 2, "fsdp": 2, "tensor": 2}, config=ALBERT)
    np.testing.assert_allclose(losses, ref_losses, atol=1e-5, rtol=1e-5)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-5, rtol=1e-5),
                 params, ref_params)
    embeddings = state.params["bert"]["embeddings"]
    P = jax.sharding.PartitionSpec
    assert embeddings["word_embeddings"]["embedding"].sharding.spec == P("tensor", None)
    assert embeddings["projection"]["kernel"].sharding.spec == P(None, "fsdp")
    query = state.params["bert"]["encoder"]["group_0"]["layer_0"]["attention"]["query"]
    assert query["kernel"].shape == (32, 8, 4)  # one layer, no stacked `layers` axis


def test_every_job_builds_its_mesh_from_mesh_shape_and_dcn_mesh_shape():
    """Fine-tuning configs carry dcn_mesh_shape as pretraining ones do, and both reach
    `make_mesh` through `Partitioner.from_config` (here: one slice, so 2 slices cannot be had)."""
    from bert_jax.train.config_loader import load_config
    for recipe in ("pretrain.py:tiny", "finetune.py:sst2,tiny"):
        config = load_config(recipe, ["dcn_mesh_shape.data=2"])
        with pytest.raises(ValueError, match="dcn_mesh_shape .* needs 2 devices"):
            sharding.Partitioner.from_config(config, devices=jax.devices()[:1])
