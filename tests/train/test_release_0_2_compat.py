"""What release 0.2.0 wrote still loads, predicts and resumes: create-data output with
static masks, a pretraining workdir trained on it, an ELECTRA workdir with its generator
and a fine-tuning workdir, written by bert_jax 0.2.0 (commit d025047) and kept in
tests/fixtures/release_0.2.0/ (`make_fixtures.py` there wrote them). Their saved configs
hold paths relative to that folder, so each test runs in a copy of it.
"""

from __future__ import annotations

import csv
import json
import os
import shutil

import jax
import numpy as np
import pytest

from bert_jax.finetune import inference
from bert_jax.pretrain.job import train_and_evaluate
from bert_jax.train import checkpoint
from bert_jax.train.config_loader import load_config
from bert_jax.weights import pretrained

from helpers import REPO

FIXTURES = os.path.join(REPO, "tests", "fixtures", "release_0.2.0")
SCHEDULE = ["max_seq_length=32", "max_predictions_per_seq=5", "global_batch_size=8",
            "num_train_steps=4", "warmup_steps=1", "log_every_steps=2", "eval_every_steps=4",
            "eval_steps=1", "checkpoint_every_steps=2", "eval_fraction=0.1", "tokenizer=vocab"]
# The runs as make_fixtures.py started them.
RUNS = {
    "pretrain": ("pretrain.py:tiny", [
        "model={'preset': 'tiny', 'num_hidden_layers': 1, 'hidden_size': 16, "
        "'num_attention_heads': 2, 'intermediate_size': 32, 'max_position_embeddings': 32}",
        "input_files=records/*.tfrecord"]),
    "electra": ("pretrain.py:electra_small,tiny", [
        "model={'preset': 'tiny', 'model_type': 'electra', 'num_hidden_layers': 1, "
        "'hidden_size': 32, 'embedding_size': 16, 'num_attention_heads': 2, "
        "'intermediate_size': 64, 'max_position_embeddings': 32, 'pooler_act': 'gelu'}",
        "input_files=corpus/*.txt"]),
}


@pytest.fixture
def release(tmp_path, monkeypatch):
    copy = tmp_path / "release_0.2.0"
    shutil.copytree(FIXTURES, copy)
    monkeypatch.chdir(copy)
    return copy


def assert_trees_equal(got, want, atol=0.0):
    assert jax.tree.structure(got) == jax.tree.structure(want)
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=0, atol=atol)


def test_every_kind_of_folder_opens_as_a_model(release):
    workdir = pretrained.open_model("pretrain")
    assert workdir.task is None
    assert_trees_equal(workdir.load().params,
                       checkpoint.read_params(os.path.abspath("pretrain/checkpoints/4")))
    electra = pretrained.open_model("electra")  # the discriminator
    assert electra.config.model_type == "electra" and electra.config.hidden_size == 32
    assert "discriminator" in electra.load().params
    generator = pretrained.load("electra/generator")
    assert generator.config.hidden_size == 8 and "mlm" in generator.params
    finetuned = pretrained.open_model("finetune")
    assert finetuned.directory == os.path.abspath("finetune/best")
    assert finetuned.task["name"] == "csv"


@pytest.mark.parametrize("run", sorted(RUNS))
def test_a_pretraining_run_resumes_exactly_where_it_stopped(release, run, capsys):
    """The run lost its last checkpoint: this release resumes 0.2.0's step 2 and reaches
    the step-4 parameters 0.2.0 saved (to float rounding: 0.2.0 ran on one device, the
    tests on eight). `pretrain` reads 0.2.0's create-data output, static masks and all;
    `electra` its converted text and trains both networks."""
    want = checkpoint.read_params(os.path.abspath(f"{run}/checkpoints/4"))
    shutil.rmtree(f"{run}/checkpoints/4")
    config, overrides = RUNS[run]
    train_and_evaluate(load_config(config, overrides + SCHEDULE), run)
    assert "resumed from step 2 of" in capsys.readouterr().err  # not trained afresh
    got = checkpoint.read_params(os.path.abspath(f"{run}/checkpoints/4"))
    assert_trees_equal(got, want, atol=1e-6)


def test_a_finetuned_workdir_predicts_what_it_predicted(release):
    with open("spam/dev.tsv", encoding="utf-8", newline="") as f:
        texts = [row["text"] for row in csv.DictReader(f, delimiter="\t")]
    with open("finetune/predictions/test.jsonl", encoding="utf-8") as f:
        saved = [json.loads(line) for line in f]
    got = inference.load_finetuned("finetune").predict(texts)
    assert [r["label"] for r in got] == [r["label"] for r in saved]
    for mine, theirs in zip(got, saved):
        for label, p in theirs["probabilities"].items():
            assert mine["probabilities"][label] == pytest.approx(p, abs=2e-6)
