"""Fine-tuning accumulates: grad_accum_steps=2 (two micro-batches scanned inside the step)
ends with the parameters and logs the losses of one batch of the same rows. Token
tagging weighs each micro-batch by its labeled words, which differ between them:
averaging the micro-batches' own means would not give the whole batch's."""

import json
import os

import jax
import numpy as np
import pytest

from bert_jax.finetune import job, schedule
from bert_jax.weights import pretrained

from helpers.finetune import SENTENCES, micro_config, shared_compilation_cache, write_conll

# Sentences of 2 to 11 labeled words, so micro-batches hold different word counts.
UNEVEN = SENTENCES + [("Paris .", "B-LOC O"),
                      ("The old man from Rome met John Smith in Berlin today .",
                       "O O O O B-LOC O B-PER I-PER O B-LOC O O")]


def train_losses(workdir):
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
        return [(r["step"], r["train/loss"], r["train/token_accuracy"])
                for r in map(json.loads, f) if "train/loss" in r]


@pytest.mark.long
def test_grad_accumulation_equals_the_whole_batch_for_token_tagging(tmp_path):
    train = write_conll(tmp_path / "train.conll", UNEVEN, repeat=3)
    dev = write_conll(tmp_path / "dev.conll", SENTENCES)
    settings = [f"train_file={train}", f"validation_file={dev}", "num_train_epochs=1",
                "global_batch_size=16",
                "hidden_dropout_prob=0.0", "attention_probs_dropout_prob=0.0",
                "keep_checkpoint=last", "log_every_steps=1"]
    whole, micro = str(tmp_path / "whole"), str(tmp_path / "micro")
    with shared_compilation_cache(str(tmp_path.parent / "finetune_jax_cache")):
        job.finetune(micro_config("conll", *settings), whole)
        job.finetune(micro_config("conll", *settings, "grad_accum_steps=2"), micro)
    params = [pretrained.load(os.path.join(w, "best")).params for w in (micro, whole)]
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6), *params)
    (micro_losses, whole_losses) = train_losses(micro), train_losses(whole)
    # 18 sentences in batches of 16 (the second mostly filler), micro-batches of 8.
    assert len(micro_losses) == len(whole_losses) == 2
    for a, b in zip(micro_losses, whole_losses):
        assert a == pytest.approx(b, rel=1e-5)


def test_grad_accum_steps_must_divide_the_batch():
    with pytest.raises(job.UserError, match="not a multiple of grad_accum_steps 3"):
        schedule.check_finetuning_config(micro_config("conll", "grad_accum_steps=3"))
