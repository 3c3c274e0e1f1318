"""What releases 0.1.0 and 0.2.0 wrote still loads, predicts and resumes.

0.1.0 (commit b9dafdd, before the package's modules moved into folders): a pretraining
workdir (two checkpoints), a fine-tuning workdir and its kept model directory. 0.2.0
(commit d025047): create-data output with static masks, a pretraining workdir trained on
it, an ELECTRA workdir with its generator and a fine-tuning workdir. Each release's
`tests/fixtures/release_VERSION/make_fixtures.py` wrote them, run from that folder with
the release's checkout first on PYTHONPATH. Their saved configs hold paths relative to
that folder (`corpus/*.txt`, `vocab`, `spam/train.tsv`), so each test runs in a copy of it.
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
from bert_jax.host import folders
from bert_jax.pretrain.job import train_and_evaluate
from bert_jax.train import checkpoint
from bert_jax.train.config_loader import load_config
from bert_jax.weights import pretrained

from helpers import REPO

FIXTURES = os.path.join(REPO, "tests", "fixtures")
# The pretraining runs as each make_fixtures.py started them.
PRETRAIN_OVERRIDES = [
    "model={'preset': 'tiny', 'num_hidden_layers': 1, 'hidden_size': 16, "
    "'num_attention_heads': 2, 'intermediate_size': 32, 'max_position_embeddings': 32}",
    "input_files=corpus/*.txt", "tokenizer=vocab", "max_seq_length=32",
    "max_predictions_per_seq=5", "global_batch_size=8", "num_train_steps=4", "warmup_steps=1",
    "log_every_steps=2", "eval_every_steps=4", "eval_steps=1", "checkpoint_every_steps=2",
    "eval_fraction=0.1"]


SCHEDULE_0_2 = ["max_seq_length=32", "max_predictions_per_seq=5", "global_batch_size=8",
                "num_train_steps=4", "warmup_steps=1", "log_every_steps=2",
                "eval_every_steps=4", "eval_steps=1", "checkpoint_every_steps=2",
                "eval_fraction=0.1", "tokenizer=vocab"]
RUNS_0_2 = {
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


def copy_release(version, tmp_path, monkeypatch):
    """A copy of release VERSION's fixtures, made the working directory."""
    copy = tmp_path / f"release_{version}"
    shutil.copytree(os.path.join(FIXTURES, f"release_{version}"), copy)
    monkeypatch.chdir(copy)
    return copy


@pytest.fixture
def release(tmp_path, monkeypatch):
    return copy_release("0.1.0", tmp_path, monkeypatch)


@pytest.fixture
def release_0_2(tmp_path, monkeypatch):
    return copy_release("0.2.0", tmp_path, monkeypatch)


def assert_trees_equal(got, want, atol=0.0):
    assert jax.tree.structure(got) == jax.tree.structure(want)
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=0, atol=atol)


def test_every_kind_of_folder_opens_as_a_model(release):
    workdir = pretrained.open_model("pretrain")
    assert workdir.kind == folders.PRETRAINING
    assert workdir.config.hidden_size == 16 and workdir.task is None
    assert_trees_equal(workdir.load().params,
                       checkpoint.read_params(os.path.abspath("pretrain/checkpoints/4")))
    finetuned = pretrained.open_model("finetune")
    assert finetuned.kind == folders.FINETUNING
    assert finetuned.directory == os.path.abspath("finetune/best")
    assert finetuned.task["name"] == "csv"
    assert_trees_equal(finetuned.load().params, pretrained.load("finetune/best").params)


@pytest.mark.long
def test_a_pretraining_run_resumes_exactly_where_it_stopped(release, capsys, caplog):
    """The run lost its last checkpoint: this release resumes 0.1.0's step 2 and reaches
    the step-4 parameters 0.1.0 saved (to float rounding: 0.1.0 ran on one device, the
    tests on eight, which sum gradients in another order)."""
    want = checkpoint.read_params(os.path.abspath("pretrain/checkpoints/4"))
    shutil.rmtree("pretrain/checkpoints/4")
    train_and_evaluate(load_config("pretrain.py:tiny", PRETRAIN_OVERRIDES), "pretrain")
    err = capsys.readouterr().err
    assert "resumed from step 2 of" in err  # not trained afresh
    # through tf.data, as the run began (the default is Grain now)
    assert "as it was run: input_pipeline 'tf.data'" in caplog.text
    assert sorted(os.listdir("pretrain/checkpoints")) == ["2", "4"]
    got = checkpoint.read_params(os.path.abspath("pretrain/checkpoints/4"))
    assert_trees_equal(got, want, atol=1e-7)


@pytest.mark.parametrize("version", ["0.1.0", "0.2.0"])
def test_a_finetuned_workdir_predicts_what_it_predicted(version, tmp_path, monkeypatch):
    copy_release(version, tmp_path, monkeypatch)
    with open("spam/dev.tsv", encoding="utf-8", newline="") as f:
        texts = [row["text"] for row in csv.DictReader(f, delimiter="\t")]
    with open("finetune/predictions/test.jsonl", encoding="utf-8") as f:
        saved = [json.loads(line) for line in f]
    got = inference.load_finetuned("finetune").predict(texts)
    assert [r["label"] for r in got] == [r["label"] for r in saved]
    for mine, theirs in zip(got, saved):
        for label, p in theirs["probabilities"].items():
            assert mine["probabilities"][label] == pytest.approx(p, abs=2e-6)


def test_every_kind_of_folder_of_0_2_opens_as_a_model(release_0_2):
    workdir = pretrained.open_model("pretrain")
    assert workdir.kind == folders.PRETRAINING and workdir.task is None
    assert_trees_equal(workdir.load().params,
                       checkpoint.read_params(os.path.abspath("pretrain/checkpoints/4")))
    electra = pretrained.open_model("electra")  # the discriminator
    assert electra.config.model_type == "electra" and electra.config.hidden_size == 32
    assert "discriminator" in electra.load().params
    generator = pretrained.load("electra/generator")
    assert generator.config.hidden_size == 8 and "mlm" in generator.params
    finetuned = pretrained.open_model("finetune")
    assert finetuned.kind == folders.FINETUNING
    assert finetuned.directory == os.path.abspath("finetune/best")
    assert finetuned.task["name"] == "csv"


@pytest.mark.long
@pytest.mark.parametrize("run", sorted(RUNS_0_2))
def test_a_0_2_pretraining_run_resumes_exactly_where_it_stopped(release_0_2, run, capsys):
    """As for 0.1.0: this release resumes 0.2.0's step 2 and reaches its step-4 parameters.

    `pretrain` reads 0.2.0's create-data output, static masks and records included;
    `electra` its converted text, and trains both networks."""
    want = checkpoint.read_params(os.path.abspath(f"{run}/checkpoints/4"))
    shutil.rmtree(f"{run}/checkpoints/4")
    config, overrides = RUNS_0_2[run]
    train_and_evaluate(load_config(config, overrides + SCHEDULE_0_2), run)
    assert "resumed from step 2 of" in capsys.readouterr().err  # not trained afresh
    got = checkpoint.read_params(os.path.abspath(f"{run}/checkpoints/4"))
    assert_trees_equal(got, want, atol=1e-6)
