"""Pretraining helpers: the small model's configs, its results read back, and the
distillation student."""

import json
import os

import flax.linen as nn
import jax
import numpy as np

from bert_jax import cli
from bert_jax.models import heads
from bert_jax.train.config_loader import load_config
from bert_jax.weights import pretrained

from helpers import REPO

SMALL_MODEL = ("{'preset': 'tiny', 'num_hidden_layers': 1, 'hidden_size': 32, "
               "'num_attention_heads': 2, 'intermediate_size': 64, "
               "'max_position_embeddings': 64}")


def small_config(input_files, **overrides):
    values = dict(model=SMALL_MODEL, input_files=repr(input_files), max_seq_length=32,
                  max_predictions_per_seq=5, global_batch_size=8, num_train_steps=4,
                  warmup_steps=1, log_every_steps=2, eval_every_steps=4, eval_steps=2,
                  checkpoint_every_steps=2, eval_fraction=0.1)
    values.update(overrides)
    return load_config(os.path.join(REPO, "configs", "pretrain.py") + ":tiny",
                       [f"{k}={v}" for k, v in values.items()])


def final_params(workdir):
    return pretrained.load_pretrained_from_workdir(workdir).params


def train_records(workdir, since=0.0):
    """metrics.jsonl's train records written after time `since`."""
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
        records = [json.loads(line) for line in f]
    return [r for r in records if "train/loss" in r and r["time"] > since]


STUDENT_MODEL = ("{'preset': 'tiny', 'num_hidden_layers': 1, 'hidden_size': 16, "
                 "'num_attention_heads': 2, 'intermediate_size': 32, "
                 "'max_position_embeddings': 64}")


def init(config, seed, nsp=True):
    ids = np.zeros((1, 8), np.int32)
    model = heads.BertForPreTraining(config, nsp)
    return model, jax.device_get(nn.unbox(model.init(jax.random.key(seed), ids, ids, ids,
                                                     ids[:, :2])["params"]))


def distill_config(corpus, teacher, **overrides):
    values = dict(model=STUDENT_MODEL, teacher=repr(teacher), log_every_steps=1,
                  eval_every_steps=4)
    values.update(overrides)
    return small_config(corpus, **values)


def run_cli(corpus, workdir, *overrides):
    config = distill_config(corpus, "")
    args = ["pretrain", "--config", os.path.join(REPO, "configs", "pretrain.py") + ":tiny",
            "--workdir", workdir] + [f"--config.{k}={v}" for k, v in config.items()
                                     if k in ("input_files", "max_seq_length",
                                              "max_predictions_per_seq", "global_batch_size")]
    return cli.main(args + [f"--config.model={STUDENT_MODEL}", *overrides])


def losses(metrics_jsonl: str) -> dict:
    """{step: train loss} of a metrics.jsonl's content."""
    records = [json.loads(line) for line in metrics_jsonl.splitlines()]
    return {r["step"]: r["train/loss"] for r in records if "train/loss" in r}


