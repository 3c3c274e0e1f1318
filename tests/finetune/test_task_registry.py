"""What a task is, in one place: each fine-tuning family records its head with the saved
model (`Task.head`, `bert_jax.models.task_heads`); export, conversion and the NNX bridge read
that record, and records written before it (0.1, 0.2) resolve to the same head in the one
reader of old records (`pretrained.task_head`). A task family of its own, with a head kind
of its own, is registered here and exports, predicts and distils with no edit elsewhere."""

from __future__ import annotations

import json
import os

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from bert_jax.errors import UserError
from bert_jax.finetune import distill, inference, tasks
from bert_jax.finetune.tasks import base
from bert_jax.models import heads, task_heads
from bert_jax.models.config import BertConfig
from bert_jax.serve import export
from bert_jax.tokenization import WordPieceTokenizer
from bert_jax.tokenization.text_io import encode_pair
from bert_jax.weights import convert, pretrained
from bert_jax.weights import nnx as bert_nnx

from helpers import REPO
from helpers.finetune import micro_config

CONFIG = BertConfig(vocab_size=32, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                    intermediate_size=64, max_position_embeddings=40)
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "on", "mat",
         "dog", "ran", "a", "##s", "big", "red", "hat", "and", "old", "man", "saw", "it",
         ".", ",", "!", "new", "day", "good", "bad", "film", "was", "very"]
IDS = np.zeros((1, 8), np.int32)


def random_params(module, seed=0):
    shapes = nn.unbox(jax.eval_shape(module.init, jax.random.key(0), IDS, np.ones_like(IDS)))
    rng = np.random.default_rng(seed)
    return jax.tree.map(lambda s: 0.1 * rng.standard_normal(s.shape, np.float32),
                        shapes["params"])


def _task(name, *overrides, spec=None):
    task = tasks.get_task(micro_config(name, *overrides))
    if spec is not None:
        task.restore_spec(spec)
    return task


TAGS = {"label_names": ["O", "B-LOC", "I-LOC"], "tag_scheme": "IOB2"}
FAMILIES = {  # task -> the head its saved model records
    "sst2": (lambda: _task("sst2"), task_heads.Head("classification", 2, "pooler")),
    "sst2_mean": (lambda: _task("sst2", "pooling=mean"),
                  task_heads.Head("classification", 2, "mean")),
    "stsb": (lambda: _task("stsb"), task_heads.Head("regression", 1, "pooler")),
    "conll": (lambda: _task("conll", spec=TAGS), task_heads.Head("tagging", 3)),
    "conll_crf": (lambda: _task("conll", "crf=True", spec={**TAGS, "crf": True}),
                  task_heads.Head("crf_tagging", 3)),
    "squad": (lambda: _task("squad"), task_heads.Head("span", 2)),
    "multiple_choice": (lambda: _task("multiple_choice"),
                        task_heads.Head("multiple_choice", 1)),
}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_the_saved_spec_records_the_kind_and_the_head(family):
    make, head = FAMILIES[family]
    spec = make().spec()
    assert spec["kind"] == head.kind
    assert task_heads.Head.from_record(spec) == head
    assert json.loads(json.dumps(spec)) == spec  # as bert_jax.json stores it


def _old_record(task) -> dict:
    """The task's record as 0.1 and 0.2 wrote it: no head; multiple choice alone named its
    kind; a sequence classifier's pooling only in its saved config."""
    spec = task.spec()
    old = {k: v for k, v in spec.items() if k not in ("kind", "head")}
    if spec["kind"] == "multiple_choice":
        old["kind"] = "multiple_choice"
    return {**old, "config": task.config.to_dict()}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_an_old_record_resolves_to_the_same_head(family):
    make, head = FAMILIES[family]
    task = make()
    params = random_params(task.model(CONFIG))
    assert pretrained.task_head(task.spec(), params) == head
    assert pretrained.task_head(_old_record(task), params) == head


def test_a_record_without_a_task_and_the_release_fixture_resolve_from_the_parameters():
    encoder = random_params(heads.BertForPreTraining(CONFIG))
    assert pretrained.task_head(None, encoder) == task_heads.Head(task_heads.ENCODER)
    tagger = random_params(heads.BertForTokenClassification(CONFIG, 5))
    assert pretrained.task_head(None, tagger) == task_heads.Head("tagging", 5)
    release = pretrained.load(os.path.join(REPO, "tests", "fixtures", "release_0.1.0",
                                           "finetune", "best"))
    assert "head" not in release.task
    assert release.head == task_heads.Head("classification", 2, "pooler")


def test_an_unknown_head_kind_is_named():
    with pytest.raises(UserError, match="head is of kind 'ranking', which this bert_jax"):
        pretrained.task_head({"kind": "ranking", "head": {}}, {}).entry


def test_no_task_is_told_apart_by_its_class_outside_the_tasks():
    root = os.path.join(REPO, "bert_jax")
    found = []
    for directory, _, names in os.walk(root):
        if os.path.relpath(directory, root).startswith(os.path.join("finetune", "tasks")):
            continue
        for name in (n for n in names if n.endswith(".py")):
            with open(os.path.join(directory, name)) as f:
                found += [f"{name}:{i}" for i, line in enumerate(f, 1)
                          if "isinstance(task" in line or "task._" in line]
    assert found == []


# --- a task family of its own -----------------------------------------------------------

# Multi-label classification: a head kind the project does not have (independent sigmoids).
MULTI_LABEL = task_heads.HeadKind(
    "multi_label", "classifier", keeps_pooler=True, hf_class="BertForSequenceClassification",
    module=lambda config, head: heads.BertForSequenceClassification(config, head.num_labels),
    outputs={"scores": "float32 [B, C]"}, serve=lambda raw, _: {"scores": jax.nn.sigmoid(raw)},
    classifies_sequences=True, hf_labels=True, hf_problem_type="multi_label_classification")
TOPICS = ["animals", "clothes", "weather"]


class MultiLabelTask(base.Task):
    """Which of TOPICS a text is about, any number of them."""

    name = "toy_topics"

    def head(self):
        return task_heads.Head("multi_label", len(TOPICS))

    def spec(self):
        return {**super().spec(), "label_names": TOPICS}

    def examples_from_inputs(self, inputs):
        return [{"text": text, "labels": None} for text in inputs]

    def featurize(self, examples, tokenizer, max_seq_length, *, training):
        features = []
        for i, ex in enumerate(examples):
            ids, segments = encode_pair(tokenizer, ex["text"], None, max_seq_length, "head")
            features.append({"input_ids": ids, "segment_ids": segments, "feature_index": i})
        return features

    def loss(self, outputs, batch):
        return {"loss": (jnp.sum(outputs), jnp.float32(outputs.size))}

    def soft_loss(self, student, teacher, batch, temperature):
        squares = (jax.nn.sigmoid(student) - jax.nn.sigmoid(teacher)) ** 2  # [B, C]
        weights = jnp.broadcast_to(batch["example_weights"][:, None], squares.shape)
        return jnp.sum(squares * weights), jnp.sum(weights)

    def eval_outputs(self, outputs, batch):
        return {"scores": jax.nn.sigmoid(outputs.astype(jnp.float32))}

    def predict(self, examples, features, outputs):
        return [{"text": ex["text"], "topics": [t for t, s in zip(TOPICS, out["scores"])
                                                if s > 0.5],
                 "scores": [float(s) for s in out["scores"]]}
                for ex, out in zip(examples, outputs)]


@pytest.fixture
def topics_model(tmp_path, monkeypatch):
    """A model directory of the toy family, as fine-tuning saves one (its task record with
    the run's config), its family and head kind registered for the test."""
    monkeypatch.setitem(task_heads.HEADS, MULTI_LABEL.name, MULTI_LABEL)
    monkeypatch.setitem(base.REGISTRY, MultiLabelTask.name, MultiLabelTask)
    config = micro_config(MultiLabelTask.name)
    task = tasks.get_task(config)
    params = random_params(task.model(CONFIG), seed=3)
    record = {**task.spec(), "config": config.to_dict(), "max_seq_length": 16}
    pretrained.save(tmp_path / "model", CONFIG, params, tokenizer=WordPieceTokenizer(VOCAB),
                    task=record)
    return str(tmp_path / "model")


TEXTS = ["the cat sat on the mat", "a red hat and a big dog !"]


def test_a_registered_family_predicts_and_exports_with_no_edit_elsewhere(topics_model,
                                                                         tmp_path):
    records = inference.load_finetuned(topics_model).predict(TEXTS)
    assert [len(r["scores"]) for r in records] == [3, 3]
    spec = export.export(topics_model, str(tmp_path / "served"), formats=("jax",),
                         platforms=("cpu",))
    assert spec["kind"] == "multi_label" and spec["outputs"] == {"scores": "float32 [B, C]"}
    served = export.ServedModel(str(tmp_path / "served")).predict_texts(TEXTS)
    np.testing.assert_allclose(served["scores"], [r["scores"] for r in records], atol=1e-5)


def test_a_registered_head_kind_names_its_hf_class_and_the_nnx_bridge_keeps_it(topics_model):
    model = pretrained.load(topics_model)
    assert convert.hf_architecture(model.params, model.task) == (
        "BertForSequenceClassification", True)
    module = bert_nnx.nnx_module(model, num_labels=len(TOPICS))
    kept = nnx.state(module, nnx.Param).to_pure_dict()["classifier"]
    np.testing.assert_array_equal(kept["kernel"], model.params["classifier"]["kernel"])


def test_distillation_asks_the_task_for_its_soft_loss(topics_model):
    """`distill_loss` takes the soft loss from the task (`Task.soft_loss`): the toy family's
    MSE between sigmoids, zero for a student that is its teacher."""
    task = tasks.get_task(micro_config(MultiLabelTask.name))
    model = task.model(CONFIG)
    params = pretrained.load(topics_model).params
    batch = {"input_ids": np.full((2, 8), 5, np.int32), "input_mask": np.ones((2, 8), np.int32),
             "segment_ids": np.zeros((2, 8), np.int32),
             "example_weights": np.ones(2, np.float32)}
    settings = {"temperature": 2.0, "alpha": 0.5, "hidden_weight": 0.0, "attention_weight": 0.0}
    terms = distill.distill_loss(params, batch, params, jax.random.key(0), model=model.clone(
        config=CONFIG.replace(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)),
        task=task, rules=(), teacher_model=model, settings=settings)
    total, weight = terms["soft_loss"]
    assert float(weight) == 2 * len(TOPICS) and float(total) == pytest.approx(0.0, abs=1e-10)


def test_a_task_without_a_soft_loss_cannot_be_distilled():
    class Untaught(MultiLabelTask):
        soft_loss = base.Task.soft_loss

    with pytest.raises(UserError, match="task 'toy_topics' cannot be distilled"):
        Untaught(None).soft_loss(None, None, {}, 1.0)
