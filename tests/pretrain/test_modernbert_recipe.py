"""configs/pretrain.py:modernbert_tiny: MLM only at 30% masking on packed rows with the
warmup-stable-decay schedule; it trains, checkpoints and resumes."""

import json
import os

import numpy as np
import pytest

from bert_jax.pretrain.job import train_and_evaluate
from bert_jax.train import optim
from bert_jax.train.config_loader import load_config
from bert_jax.weights import pretrained

from helpers import REPO


def modern_config(input_files, **overrides):
    values = dict(input_files=repr(input_files), max_seq_length=128,
                  max_predictions_per_seq=40, global_batch_size=8, num_train_steps=2,
                  warmup_steps=1, log_every_steps=1, eval_every_steps=2, eval_steps=1,
                  checkpoint_every_steps=2, eval_fraction=0.1)
    values.update(overrides)
    return load_config(os.path.join(REPO, "configs", "pretrain.py") + ":modernbert_tiny",
                       [f"{k}={v}" for k, v in values.items()])


def test_the_recipe_is_modernberts():
    c = load_config(os.path.join(REPO, "configs", "pretrain.py") + ":modernbert_base", [])
    assert (c.model, c.masked_lm_prob, c.next_sentence_prediction, c.packing,
            c.lr_schedule, c.learning_rate, c.weight_decay) == (
        "modernbert-base", 0.3, False, True, "wsd", 8e-4, 1e-5)
    assert c.max_predictions_per_seq >= c.masked_lm_prob * c.max_seq_length


def test_wsd_is_a_trapezoid():
    rate = optim.bert_schedule(1.0, 100, 10, "wsd")
    got = [float(rate(s)) for s in (0, 5, 10, 50, 90, 95, 100)]
    np.testing.assert_allclose(got, [0, 0.5, 1, 1, 1, 0.5, 0], atol=1e-6)


@pytest.mark.slow  # about 90 s: two runs, each compiling its steps
def test_modernbert_tiny_trains_and_resumes(tmp_path, text_corpus):
    workdir = str(tmp_path / "mt")
    first = train_and_evaluate(modern_config(text_corpus), workdir)
    assert np.isfinite(first["eval"]["mlm_loss"]) and "nsp_loss" not in first["eval"]
    with open(os.path.join(workdir, "data", "options.json")) as f:
        assert json.load(f)["masked_lm_prob"] == 0.3
    resumed = train_and_evaluate(modern_config(text_corpus, num_train_steps=4), workdir)
    assert np.isfinite(resumed["eval"]["mlm_loss"])
    assert sorted(os.listdir(os.path.join(workdir, "checkpoints"))) == ["2", "4"]
    model = pretrained.load(workdir)
    assert model.config.model_type == "modernbert" and model.config.local_attention == 64
