"""The pretraining loop end to end on a small text corpus: metrics, exact resume,
NaN/Inf handling."""

import glob
import json
import os
import shutil
import time

import jax
import numpy as np
import pytest

from bert_jax.errors import NonFiniteError
from bert_jax.pretrain.job import train_and_evaluate

from helpers.pretrain import SMALL_MODEL, final_params, small_config, train_records


@pytest.mark.long
def test_pretraining_writes_metrics_checkpoints_and_resumes_exactly(tmp_path, text_corpus,
                                                                    capsys):
    straight = str(tmp_path / "straight")
    result = train_and_evaluate(small_config(text_corpus, log_every_steps=1), straight)
    assert 0 <= result["eval"]["mlm_accuracy"] <= 1 and np.isfinite(result["train"]["loss"])
    records = [json.loads(line) for line in open(os.path.join(straight, "metrics.jsonl"))]
    assert {"train/loss", "train/mlm_accuracy", "train/nsp_accuracy", "train/learning_rate",
            "train/grad_norm", "train/tokens_per_second", "train/mfu"} <= set(records[0])
    assert [r["step"] for r in train_records(straight)] == [1, 2, 3, 4]
    assert any("eval/mlm_accuracy" in r for r in records)
    assert glob.glob(os.path.join(straight, "tensorboard", "train", "events.out.tfevents.*"))
    assert sorted(os.listdir(os.path.join(straight, "checkpoints"))) == ["2", "4"]

    # An interrupted run (a copy of that one: the same run, without training it twice):
    # its last checkpoint is gone, so it resumes at step 2: it runs steps 3 and 4 only (a
    # rerun from scratch would log 1..4) and ends where the uninterrupted run ends.
    resumed = str(tmp_path / "resumed")
    shutil.copytree(straight, resumed)
    shutil.rmtree(os.path.join(resumed, "checkpoints", "4"))
    capsys.readouterr()
    started = time.time()
    train_and_evaluate(small_config(text_corpus, log_every_steps=1), resumed)
    assert "resumed from step 2 of" in capsys.readouterr().err
    assert [r["step"] for r in train_records(resumed, since=started)] == [3, 4]
    jax.tree.map(np.testing.assert_array_equal, final_params(resumed), final_params(straight))


NO_DROPOUT_MODEL = SMALL_MODEL[:-1] + (", 'hidden_dropout_prob': 0.0, "
                                       "'attention_probs_dropout_prob': 0.0}")


@pytest.mark.long
def test_grad_accumulation_in_the_step_equals_the_whole_batch(tmp_path, text_corpus):
    """grad_accum_steps=2 (two micro-batches of 8 scanned inside the step) ends with the
    parameters and logs the loss and gradient norm of grad_accum_steps=1 on the same
    global batches of 16. Dropout is off: its keys differ per micro-batch. Averaging the
    micro-batches' mean losses (each over its own masked tokens) fails: ~7e-5 apart."""
    whole, micro = str(tmp_path / "whole"), str(tmp_path / "micro")
    settings = dict(model=NO_DROPOUT_MODEL, global_batch_size=16, num_train_steps=2,
                    log_every_steps=1, eval_every_steps=0, checkpoint_every_steps=2)
    train_and_evaluate(small_config(text_corpus, **settings), whole)
    records = os.path.join(whole, "data", "*.tfrecord*")  # converted once, reused
    train_and_evaluate(small_config(records, grad_accum_steps=2, **settings), micro)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6),
                 final_params(micro), final_params(whole))
    for a, b in zip(train_records(micro), train_records(whole)):
        for key in ("train/loss", "train/mlm_loss", "train/nsp_loss", "train/grad_norm"):
            assert a[key] == pytest.approx(b[key], rel=1e-5), key


@pytest.mark.slow
def test_nonfinite_steps_are_skipped_or_stop_the_run(tmp_path, text_corpus):
    # A huge learning rate makes the parameters overflow, then every loss is NaN.
    explode = dict(learning_rate=1e30, warmup_steps=0, max_grad_norm=0.0, eval_every_steps=0)
    with pytest.raises(NonFiniteError, match="^step 2: "):
        train_and_evaluate(small_config(text_corpus, on_nonfinite="stop", **explode),
                           str(tmp_path / "stop"))
    assert not os.listdir(tmp_path / "stop" / "checkpoints")

    result = train_and_evaluate(small_config(text_corpus, **explode), str(tmp_path / "skip"))
    assert result["train"]["nonfinite_steps"] >= 2
    params = final_params(str(tmp_path / "skip"))
    assert all(np.isfinite(x).all() for x in jax.tree.leaves(params))
