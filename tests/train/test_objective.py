"""The objective protocol (`train.objective.Objective`): a stand-in objective drives the
shared train step, evaluation and the job skeleton (`lifecycle.Job`: its extra step
input, its save step beside each checkpoint) without any of them asking which objective
it runs; every implementation's terms are (sum, weight) pairs that its coefficients
name, and no code asks an objective's type."""

import ast
import collections
import dataclasses
import json
import os
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import pytest

from bert_jax.finetune import tasks
from bert_jax.finetune.objective import TaskObjective
from bert_jax.models import heads
from bert_jax.models.config import BertConfig
from bert_jax.models.electra import ElectraNetworks
from bert_jax.pretrain.distill import MlmDistillation, MlmTeacher
from bert_jax.pretrain.electra import Electra
from bert_jax.pretrain.steps import BertPretraining, dummy_inputs
from bert_jax.train import lifecycle, sharding, train_loop, train_step
from bert_jax.train import objective as objectives
from bert_jax.train.train_state import StatePlan

from helpers import REPO, source
from helpers.finetune import micro_config


@dataclasses.dataclass(frozen=True)
class Regression:
    """A stand-in objective: weighted squared error of x @ w against y + extra (extra: an
    offset given to every step, not trained); a model beside each checkpoint."""

    extra: Any = None
    extra_shardings: Any = None
    coefficients = {"squared_error": 1.0}
    eval_coefficients = {"squared_error": 2.0}

    def loss_terms(self, params, batch, extra, dropout_key):
        error = batch["x"] @ params["w"] - (batch["y"] + extra)
        return {"squared_error": (jnp.sum(batch["weight"] * error ** 2),
                                  jnp.sum(batch["weight"]))}

    def eval_step(self, params, batch):
        error = batch["x"] @ params["w"] - batch["y"]
        weight = jnp.sum(batch["weight"])
        return collections.OrderedDict(
            squared_error=(jnp.sum(batch["weight"] * error ** 2), weight),
            absolute_error=(jnp.sum(batch["weight"] * jnp.abs(error)), weight))

    def models_beside(self, params):
        return {"weights": ("a config", params["w"])}


def regression_batch(seed, rows=4):
    rng = np.random.default_rng(seed)
    return {"x": rng.normal(size=(rows, 3)).astype(np.float32),
            "y": rng.normal(size=(rows,)).astype(np.float32),
            "weight": np.array([1, 1, 1, 0][:rows], np.float32)}


@pytest.fixture()
def regression():
    partitioner = sharding.Partitioner(sharding.make_mesh({"data": 1},
                                                          devices=jax.devices()[:1]))
    tx = optax.sgd(0.1)
    plan = StatePlan.build(lambda key: {"w": jax.random.normal(key, (3,))}, tx, partitioner)
    objective = Regression(extra=jnp.float32(0.5), extra_shardings=partitioner.replicated)
    return objective, tx, plan, partitioner


def test_the_shared_skeleton_trains_a_stand_in_objective(regression, tmp_path):
    """Its extra input reaches every step, its loss is its terms' means weighed by its
    coefficients, and its save step runs at each checkpoint."""
    objective, tx, plan, partitioner = regression
    state = plan.create(0)
    batch = regression_batch(0)
    expected = objectives_mean(objective.loss_terms(jax.device_get(state.params), batch,
                                                    objective.extra, None)["squared_error"])
    step = train_step.jit_train_step(objective, tx, plan.shardings, partitioner)
    job = lifecycle.Job(str(tmp_path), partitioner, keep=1)
    job.open_metrics(4, None)
    config = ml_collections.ConfigDict({"max_consecutive_nonfinite": 1,
                                        "on_nonfinite": "stop"})
    loop = job.loop(config, state, step, partitioner.global_batch, objective, num_steps=4,
                    log_options=train_loop.LogOptions(1, lambda count: 0.1),
                    warmup_key="warmup_steps")
    assert loop.step_args == (objective.extra,)
    beside = []
    job.train(loop, iter([batch] * 4), checkpointing=lifecycle.Checkpointing(
        2, lambda loop: {"run": "stand-in"},
        beside=(lambda loop: beside.append((loop.step, sorted(
            objective.models_beside(loop.state.params)))),)))
    assert beside == [(2, ["weights"]), (4, ["weights"])]
    with open(tmp_path / "metrics.jsonl") as f:
        records = [json.loads(line) for line in f]
    first = next(r for r in records if r["step"] == 1 and "train/loss" in r)
    assert first["train/loss"] == pytest.approx(expected, rel=1e-6)
    assert first["train/squared_error"] == first["train/loss"]


def objectives_mean(pair):
    return float(pair[0]) / float(pair[1])


def test_evaluate_divides_each_sum_once_and_weighs_the_loss(regression):
    objective, _, plan, partitioner = regression
    params = plan.create(0).params
    eval_fn = objectives.jit_eval_step(objective, plan.shardings.params, partitioner)
    batches = [regression_batch(seed) for seed in range(3)]
    out = objectives.evaluate(objective, eval_fn, params, iter(batches),
                              partitioner.global_batch, max_steps=2)
    sums = [jax.device_get(objective.eval_step(jax.device_get(params), b)) for b in batches[:2]]
    error = sum(float(s["squared_error"][0]) for s in sums)
    weight = sum(float(s["squared_error"][1]) for s in sums)
    assert list(out) == ["squared_error", "absolute_error", "loss"]  # the reported order
    assert out["squared_error"] == pytest.approx(error / weight, rel=1e-6)
    assert out["loss"] == 2.0 * out["squared_error"]
    assert objectives.evaluate(objective, eval_fn, params, iter([]),
                               partitioner.global_batch, 2) == {}


CONFIG = BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                    intermediate_size=32, max_position_embeddings=32)


def pretraining_batch():
    rng = np.random.default_rng(0)
    ids = rng.integers(5, 64, (2, 12)).astype(np.int32)
    return {"input_ids": ids, "input_mask": np.ones_like(ids), "segment_ids": np.zeros_like(ids),
            "masked_lm_positions": np.array([[1, 4, 0], [2, 3, 7]], np.int32),
            "masked_lm_ids": rng.integers(5, 64, (2, 3)).astype(np.int32),
            "masked_lm_weights": np.array([[1, 1, 0], [1, 1, 1]], np.float32),
            "next_sentence_labels": np.array([0, 1], np.int32)}


def init(module, *inputs):
    return jax.device_get(nn.unbox(module.init(jax.random.key(0), *inputs)["params"]))


def bert(nsp=True):
    model = heads.BertForPreTraining(CONFIG, nsp)
    return BertPretraining(model), init(model, *dummy_inputs(1, 12, 3)), None


def distillation():
    """MLM distillation with TinyBERT's hidden-state and attention matching."""
    student, params, _ = bert()
    teacher = heads.BertForPreTraining(CONFIG.replace(num_hidden_layers=2), False)
    objective = MlmDistillation(student, MlmTeacher(teacher, 2.0, 0.5, hidden_weight=1.0,
                                                    attention_weight=1.0), None, None)
    return objective, params, init(teacher, *dummy_inputs(1, 12, 3))


def electra():
    networks = ElectraNetworks.build(CONFIG.replace(model_type="electra"), 0.5)
    return Electra(networks, 50.0), init(networks, *dummy_inputs(1, 12, 3)), None


def fine_tuning():
    task = tasks.get_task(micro_config("csv"))
    task.label_names = ["a", "b", "c"]
    model = heads.BertForSequenceClassification(CONFIG, 3)
    ids = jnp.asarray(pretraining_batch()["input_ids"])
    batch = {"input_ids": ids, "input_mask": jnp.ones_like(ids),
             "segment_ids": jnp.zeros_like(ids), "label": jnp.array([1, 2]),
             "example_weights": jnp.array([1.0, 1.0])}
    return TaskObjective().bound(model, task, ()), init(model, ids), None, batch


@pytest.mark.long
@pytest.mark.parametrize("build, models_beside", [
    (bert, []), (lambda: bert(nsp=False), []), (distillation, []), (electra, ["generator"]),
    (fine_tuning, [])], ids=["mlm_nsp", "mlm_only", "mlm_distillation", "electra", "task"])
def test_every_objective_gives_sum_and_weight_terms_its_coefficients_name(build,
                                                                         models_beside):
    objective, params, extra, *batch = build()
    batch = batch[0] if batch else pretraining_batch()
    terms = objective.loss_terms(params, batch, extra, jax.random.key(1))
    for name, pair in terms.items():
        assert isinstance(pair, tuple) and len(pair) == 2, name
        assert all(jnp.shape(x) == () for x in pair), name
        assert float(pair[1]) > 0, name
    assert set(objective.coefficients) <= set(terms)
    loss, means = train_step.combine(terms, objective.coefficients)
    assert np.isfinite(float(loss)) and set(means) == set(terms)
    sums = objective.eval_step(params, batch)
    assert set(objective.eval_coefficients) <= set(sums)
    assert list(objective.models_beside(params)) == models_beside


def test_no_code_asks_which_objective_it_runs():
    """A new objective is a new implementation: no isinstance over objective types."""
    names = {"BertPretraining", "MlmDistillation", "MlmTeacher", "Electra", "ElectraNetworks",
             "TaskObjective", "Objective"}
    found = []
    for dirpath, _, filenames in os.walk(os.path.join(REPO, "bert_jax")):
        for filename in filenames:
            if filename.endswith(".py"):
                path = os.path.join(dirpath, filename)
                for node in ast.walk(source.parse(path)):
                    if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "isinstance":
                        types = ast.unparse(node.args[1])
                        if any(name in types for name in names):
                            found.append(f"{os.path.relpath(path, REPO)}: {types}")
    assert found == []
