"""A fine-tune resumed with a changed key of `checkpoint.CHANGEABLE_KEYS` trains with the
new value from the checkpoint on, as its warning and its log say. Fine-tuning keeps its
learning rate and schedule in the optimizer state (`optim.make_optimizer(injected=True)`):
a resume once went on with the saved rate while it logged the new one."""

import json
import os
import shutil

import jax
import numpy as np
import pytest

from bert_jax.finetune import job
from bert_jax.host import folders
from bert_jax.train import checkpoint, preemption
from bert_jax.weights import pretrained

from helpers.finetune import NEGATIVE, POSITIVE, micro_config, shared_compilation_cache, write_tsv

STOP_AT = 4  # of 12 steps: 30 rows in batches of 8, 3 epochs


class StopAt(preemption.Watcher):
    """A preemption notice at step `STOP_AT` (the run checkpoints there and stops)."""

    def __init__(self):
        super().__init__(handle_sigterm=False)

    def reached(self, step: int) -> bool:
        return step == STOP_AT


@pytest.fixture(scope="module")
def stopped(tmp_path_factory):
    """(settings, workdir of a fine-tune stopped with a checkpoint at step STOP_AT)."""
    root = tmp_path_factory.mktemp("resume_changes")
    rows = [(t, "pos") for t in POSITIVE] + [(t, "neg") for t in NEGATIVE]
    train = write_tsv(root / "train.tsv", rows * 3)
    settings = [f"train_file={train}", f"validation_file={train}", "text_column=sentence",
                "label_column=sentiment", "num_train_epochs=3", "checkpoint_every_steps=2",
                "keep_checkpoint=last", "log_every_steps=1", "learning_rate=5e-3"]
    workdir = str(root / "stopped")
    with shared_compilation_cache(str(root / "cache")), StopAt(), \
            pytest.raises(preemption.Preempted):
        job.finetune(micro_config("csv", *settings), workdir)
    return settings, workdir, str(root / "cache")


def resume(stopped, name, *changes):
    """The stopped run resumed in a copy of its workdir with `changes`: (final params,
    {step: logged learning rate})."""
    settings, workdir, cache = stopped
    copy = os.path.join(os.path.dirname(workdir), name)
    shutil.copytree(workdir, copy)
    with shared_compilation_cache(cache):
        job.finetune(micro_config("csv", *settings, *changes), copy)
    assert not os.path.exists(os.path.join(copy, "previous")), "started over"
    with open(os.path.join(copy, "metrics.jsonl")) as f:
        rates = {r["step"]: r["train/learning_rate"] for r in map(json.loads, f)
                 if "train/learning_rate" in r}
    return pretrained.load(os.path.join(copy, folders.FINETUNING_WORKDIR.best)).params, rates


def largest_change(a, b) -> float:
    return max(jax.tree.leaves(jax.tree.map(lambda x, y: float(np.abs(x - y).max()), a, b)))


@pytest.mark.long
def test_a_learning_rate_changed_on_resume_is_the_one_applied_and_logged(stopped):
    saved = checkpoint.read_params(os.path.join(stopped[1], "checkpoints", str(STOP_AT)))
    params, rates = resume(stopped, "tiny_rate", "learning_rate=1e-9")
    assert 0 < rates[STOP_AT + 1] < 1e-9
    # Eight Adam updates at a rate under 1e-9 move no parameter by 1e-7; at the saved
    # rate (5e-3) they move them by about 1e-2.
    assert largest_change(params, saved) < 1e-7


# Keys that change each update; the others (logging, checkpointing, numerics, layout) may
# change it only by rounding.
UPDATE_KEYS = {"weight_decay": "0.5", "max_grad_norm": "1e-4", "hidden_dropout_prob": "0.0",
               "attention_probs_dropout_prob": "0.0", "global_batch_size": "16"}


@pytest.fixture(scope="module")
def unchanged(stopped):
    return resume(stopped, "unchanged")


@pytest.mark.slow
@pytest.mark.parametrize("key", sorted(UPDATE_KEYS))
def test_each_changeable_update_key_changed_on_resume_is_applied(stopped, unchanged, key):
    assert key in checkpoint.CHANGEABLE_KEYS
    params, rates = resume(stopped, f"changed_{key}", f"{key}={UPDATE_KEYS[key]}")
    assert largest_change(params, unchanged[0]) > 1e-6
    if key == "global_batch_size":  # 2 steps per epoch: the schedule ends at step 6
        assert sorted(rates) == list(range(1, 7))
        assert rates[6] == pytest.approx(5e-3 * (1 - 5 / 6), rel=1e-5)
