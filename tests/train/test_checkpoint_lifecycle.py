"""The checkpoint options end to end through `bert-jax pretrain` (in process) on a tiny
model: keep_checkpoints, init_from, resume_from and partial_restore each restore what
they claim."""

import json
import os

import jax
import numpy as np
import pytest

from bert_jax import cli
from bert_jax.host import folders
from bert_jax.train import checkpoint

from helpers import REPO
from helpers.pretrain import SMALL_MODEL

TWO_LAYERS = SMALL_MODEL.replace("'num_hidden_layers': 1", "'num_hidden_layers': 2")


def pretrain(workdir, input_files, *overrides):
    """`bert-jax pretrain` on the tiny model; returns its exit status."""
    return cli.main([
        "pretrain", "--config", os.path.join(REPO, "configs", "pretrain.py") + ":tiny",
        "--workdir", str(workdir), f"--config.model={SMALL_MODEL}",
        f"--config.input_files={input_files}", "--config.max_seq_length=32",
        "--config.max_predictions_per_seq=5", "--config.global_batch_size=8",
        "--config.num_train_steps=3", "--config.warmup_steps=1", "--config.log_every_steps=1",
        "--config.eval_every_steps=0", "--config.checkpoint_every_steps=1",
        "--config.eval_fraction=0.1", *overrides])


def params_at(workdir, step=None):
    step = step if step is not None else checkpoint.steps(str(workdir))[-1]
    return checkpoint.read_params(os.path.join(workdir, folders.TRAINING_WORKDIR.checkpoints,
                                               str(step)))


def logged_steps(workdir):
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
        return [r["step"] for r in map(json.loads, f) if "train/loss" in r]


def assert_trees_equal(a, b):
    jax.tree.map(np.testing.assert_array_equal, a, b)


@pytest.fixture(scope="module")
def source(tmp_path_factory, text_corpus):  # noqa: F811
    """A 3-step run saving every step and keeping 2: (workdir, its converted TFRecords,
    which the other runs read so they see the same data without converting again)."""
    workdir = tmp_path_factory.mktemp("lifecycle") / "source"
    assert pretrain(workdir, text_corpus, "--config.keep_checkpoints=2") == 0
    return str(workdir), os.path.join(str(workdir), "data", "*.tfrecord*")


@pytest.mark.long
def test_keep_checkpoints_keeps_the_last_n(source):
    workdir, _ = source
    assert sorted(os.listdir(os.path.join(workdir, "checkpoints"))) == ["2", "3"]
    assert logged_steps(workdir) == [1, 2, 3]


@pytest.mark.long
def test_resume_from_continues_another_runs_checkpoint(source, tmp_path, capsys):
    """resume_from=SOURCE/checkpoints/2 in a fresh workdir: full state (step, optimizer,
    data position) comes back, so only step 3 runs and it ends on the source's step-3
    parameters exactly. Ignoring resume_from would run steps 1-3 from a fresh init."""
    workdir, records = source
    resumed = tmp_path / "resumed"
    capsys.readouterr()
    assert pretrain(resumed, records, "--config.keep_checkpoints=2",
                    f"--config.resume_from={workdir}/checkpoints/2") == 0
    assert f"resumed from step 2 of {workdir}/checkpoints/2" in capsys.readouterr().err
    assert logged_steps(resumed) == [3]
    assert sorted(os.listdir(resumed / "checkpoints")) == ["3"]
    assert_trees_equal(params_at(str(resumed)), params_at(workdir, 3))


@pytest.mark.long
def test_init_from_loads_weights_only(source, tmp_path, capsys):
    """init_from=SOURCE (a workdir as model directory): the weights are the source's last
    ones, the step count starts at 0 (steps 1 and 2 run). With learning rate 0 the
    parameters stay exactly the source's."""
    workdir, records = source
    target = tmp_path / "init"
    capsys.readouterr()
    assert pretrain(target, records, "--config.num_train_steps=2",
                    "--config.learning_rate=0.0", "--config.allow_zero_learning_rate=True",
                    f"--config.init_from={workdir}") == 0
    assert f"initialised weights from {workdir}" in capsys.readouterr().err
    assert logged_steps(str(target)) == [1, 2]
    assert_trees_equal(params_at(str(target)), params_at(workdir, 3))


@pytest.mark.long
def test_partial_restore_fills_missing_parts_and_is_needed_for_them(source, tmp_path, capsys):
    """A 2-layer model initialised from the 1-layer source: without partial_restore the run
    stops naming the missing layer; with it, every parameter the source has is the
    source's and layer_1 keeps its fresh initialisation (learning rate 0)."""
    workdir, records = source
    refused = tmp_path / "refused"
    assert pretrain(refused, records, f"--config.model={TWO_LAYERS}",
                    f"--config.init_from={workdir}") == 2  # bad input
    assert "missing: bert/encoder/layer_1/" in capsys.readouterr().err
    target = tmp_path / "partial"
    assert pretrain(target, records, f"--config.model={TWO_LAYERS}", "--config.num_train_steps=1",
                    "--config.learning_rate=0.0", "--config.allow_zero_learning_rate=True",
                    f"--config.init_from={workdir}",
                    "--config.partial_restore=True") == 0
    got, want = params_at(str(target)), params_at(workdir, 3)
    fresh = got["bert"]["encoder"].pop("layer_1")
    assert_trees_equal(got, want)
    copied = want["bert"]["encoder"]["layer_0"]
    assert jax.tree.structure(fresh) == jax.tree.structure(copied)
    kernel = fresh["intermediate"]["kernel"]  # BERT's init: truncated normal, std 0.02
    assert not np.array_equal(kernel, copied["intermediate"]["kernel"])
    assert 0.01 < kernel.std() < 0.03 and not fresh["intermediate"]["bias"].any()


@pytest.mark.long
def test_init_from_keeps_the_models_vocabulary(text_corpus, tmp_path, capsys):  # noqa: F811
    """Continued pretraining reads text with init_from's vocabulary, not the bundled one:
    here one of the same size (two tokens swapped), where the bundled vocabulary would run
    without an error and feed each embedding the other token's text. Naming another
    vocabulary is refused."""
    from bert_jax.tokenization import DEFAULT_VOCAB
    with open(os.path.join(DEFAULT_VOCAB, "vocab.txt"), encoding="utf-8") as f:
        tokens = f.read().splitlines()
    the, of = tokens.index("the"), tokens.index("of")
    tokens[the], tokens[of] = "of", "the"
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("".join(t + "\n" for t in tokens), encoding="utf-8")
    source = tmp_path / "source"
    assert pretrain(source, text_corpus, f"--config.tokenizer={vocab}",
                    "--config.num_train_steps=1") == 0
    continued = tmp_path / "continued"
    assert pretrain(continued, text_corpus, "--config.num_train_steps=1",
                    f"--config.init_from={source}") == 0
    assert (continued / "model" / "vocab.txt").read_text(encoding="utf-8").splitlines() == tokens
    capsys.readouterr()
    assert pretrain(tmp_path / "refused", text_corpus, f"--config.init_from={source}",
                    f"--config.tokenizer={DEFAULT_VOCAB}") == 2
    assert f"is not the vocabulary of init_from {source}" in capsys.readouterr().err
    assert not (tmp_path / "refused").exists()  # refused before anything is written
